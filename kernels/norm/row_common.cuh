// row_common.cuh: what the row kernels in kernels/norm share, written the way production
// softmax / norm kernels are: one block per row, each thread striding over the row, a 16-byte
// vector path (uint4 of VEC elements) taken only when the row length is a multiple of VEC and
// every row pointer it touches is 16-byte aligned, warp-shuffle reductions, then one across
// warps through shared memory.
//
// Planted bugs shared by the kernels (one define each, see kernels/mutants/README.md):
//   MUTANT_NO_BARRIER   the barrier between the warps' partial results landing in shared memory
//                       and warp 0 reading them is missing (a race: stale partials).
//   MUTANT_NO_RESULT_BARRIER  the barrier between warp 0 storing the block's result and every
//                       warp reading it is missing (a second, independent race: a stale result).
//   MUTANT_VEC_TAIL     the vector path ignores n % VEC: the last chunk of a row reads and
//                       writes up to VEC - 1 elements past the row's end.
//   MUTANT_INT32_ROW    row offsets row * stride computed in 32-bit ints.
#pragma once
#include "cudafuzz.cuh"

#ifndef BLOCK
#error "BLOCK (threads per row) must be defined (manifest [params])"
#endif
static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK must be a multiple of 32 in 32..1024");

#define VEC (16 / (int)sizeof(cf_elem))

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }

// Whether a row of n elements takes the vector path, given the rows it touches are aligned.
__device__ __forceinline__ bool vector_rows(int n, bool aligned) {
#ifdef MUTANT_VEC_TAIL
    return aligned && n >= VEC;
#else
    return aligned && n % VEC == 0;
#endif
}

// Number of VEC-element chunks the vector path walks.
__device__ __forceinline__ int vec_chunks(int n) { return (n + VEC - 1) / VEC; }

// The start of row `row` of a tensor with row stride `stride` elements.
template <typename T>
__device__ __forceinline__ T* row_ptr(T* base, long long row, long long stride) {
#ifdef MUTANT_INT32_ROW
    return base + (int)(row * stride);
#else
    return base + row * stride;
#endif
}

// Block-wide sum or max; every thread gets the result. `sh` holds 33 floats.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* sh) {
    v = MAX ? cf_warp_max(v) : cf_warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
#ifndef MUTANT_NO_BARRIER
    __syncthreads();
#endif
    if (warp == 0) {
        v = lane < BLOCK / 32 ? sh[lane] : (MAX ? CF_NEG_INF_F : 0.0f);
        v = MAX ? cf_warp_max(v) : cf_warp_sum(v);
        if (lane == 0) sh[32] = v;
    }
#ifndef MUTANT_NO_RESULT_BARRIER
    __syncthreads();
#endif
    v = sh[32];
    // The next reduction overwrites sh[warp]: everyone has read sh[32] first.
    __syncthreads();
    return v;
}

// Calls f(j, value) for each element of the row x (n elements), vector or scalar.
template <typename F>
__device__ __forceinline__ void for_row(const cf_elem* x, int n, bool vec, F f) {
    if (vec) {
        for (int c = threadIdx.x; c < vec_chunks(n); c += BLOCK) {
            const uint4 u = reinterpret_cast<const uint4*>(x)[c];
            const cf_elem* e = reinterpret_cast<const cf_elem*>(&u);
            for (int k = 0; k < VEC; ++k) f(c * VEC + k, cf_to_float(e[k]));
        }
    } else {
        for (int j = threadIdx.x; j < n; j += BLOCK) f(j, cf_to_float(x[j]));
    }
}

// y[j] = g(j, x[j]) over the row, vector or scalar (the vector path stores whole chunks).
template <typename G>
__device__ __forceinline__ void map_row(cf_elem* y, const cf_elem* x, int n, bool vec, G g) {
    if (vec) {
        for (int c = threadIdx.x; c < vec_chunks(n); c += BLOCK) {
            const uint4 u = reinterpret_cast<const uint4*>(x)[c];
            const cf_elem* e = reinterpret_cast<const cf_elem*>(&u);
            uint4 r;
            cf_elem* o = reinterpret_cast<cf_elem*>(&r);
            for (int k = 0; k < VEC; ++k) o[k] = cf_from_float(g(c * VEC + k, cf_to_float(e[k])));
            reinterpret_cast<uint4*>(y)[c] = r;
        }
    } else {
        for (int j = threadIdx.x; j < n; j += BLOCK) y[j] = cf_from_float(g(j, cf_to_float(x[j])));
    }
}
