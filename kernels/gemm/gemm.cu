// gemm: C = alpha * op(A) * op(B) + beta * C, row-major BLAS-style (as CUTLASS's RowMajor or a
// row-major cuBLAS call): A is stored [M, K] with row stride lda, or [K, M] when trans_a is set;
// B is stored [K, N] with row stride ldb, or [N, K] when trans_b is set; C is [M, N] with row
// stride ldc. fp32 accumulate; beta == 0 never reads C (BLAS semantics: C may hold NaN then).
//
// One block of 16 x 16 threads computes a TILE x TILE tile of C, each thread a (TILE/16)^2
// sub-tile at rows ty + 16 r and columns tx + 16 c. K is walked in steps of BK: both operand
// tiles are staged in shared memory as float, k-major (As[k][m], Bs[k][n]), zero-filled outside
// the matrices, so tail tiles (M, N or K not a multiple of the tile) are masked at the load and
// the store. A tile row along an operand's contiguous dimension is read with 16-byte vector loads
// only when the operand's base and leading dimension are 16-byte aligned (and the whole vector
// lies inside the matrix); otherwise element by element.
//
// Planted bugs (one define each, see kernels/mutants/gemm_*.toml):
//   MUTANT_UNCHECKED_VEC   the vector path skips the alignment check (716 on misaligned bases
//                          or leading dimensions);
//   MUTANT_TAIL_TILE       tail tiles are not masked along an operand's contiguous dimension (k,
//                          or m / n of a transposed operand): reads past each row's end (the next
//                          row, or past the allocation: NaN from the redzone);
//   MUTANT_BETA_READS_C    beta == 0 still reads C (0 * NaN = NaN);
//   MUTANT_LD_ASSUMED      the leading dimensions are assumed dense (lda = stored columns);
//   MUTANT_INT32_OFFSET    element offsets computed in 32-bit ints (wrong rows or an illegal
//                          address past 2^31 elements).
#include "cudafuzz.cuh"

#if !defined(TILE) || !defined(BK)
#error "gemm needs TILE and BK ([params])"
#endif
static_assert(TILE % 16 == 0 && TILE <= 128, "TILE: a multiple of 16 up to 128");
static_assert(BK % 8 == 0 && BK <= 64, "BK: a multiple of 8 up to 64");

#define NT 256
#define TM (TILE / 16)
#define VEC (16 / (int)sizeof(cf_elem))
// One float of padding per shared row: the transposed stores of a k-inner operand do not all
// land in one bank.
#define SPAD 1

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }

// Element (o, i) of a stored matrix with leading dimension ld.
__device__ __forceinline__ long long elem_offset(int o, int i, long long ld) {
#ifdef MUTANT_INT32_OFFSET
    return (long long)(int)(o * (int)ld + i);
#else
    return (long long)o * ld + i;
#endif
}

// Loads the TO x TI tile at (o0, i0) of a stored matrix (o outer, i contiguous; o_lim x i_lim,
// leading dimension ld) into shared memory as float: element (o, i) of the tile goes to
// sm[o * s_o + i * s_i]; elements outside the matrix are 0.
template <int TO, int TI>
__device__ __forceinline__ void load_tile(float* sm, int s_o, int s_i, const cf_elem* __restrict__ g, long long ld, int o0, int i0, int o_lim,
                                          int i_lim, bool vec_ok) {
#ifdef MUTANT_TAIL_TILE
    // The bug: the contiguous limit is taken as the tile's end (reads past each row).
    i_lim = i0 + TI;
#endif
    if (vec_ok) {
        constexpr int VPR = TI / VEC;
        for (int v = threadIdx.x; v < TO * VPR; v += NT) {
            const int o = v / VPR, i = (v % VPR) * VEC;
            const int go = o0 + o, gi = i0 + i;
            float vals[VEC];
            if (go < o_lim && gi + VEC <= i_lim) {
                const uint4 raw = *reinterpret_cast<const uint4*>(g + elem_offset(go, gi, ld));
                const cf_elem* e = reinterpret_cast<const cf_elem*>(&raw);
#pragma unroll
                for (int j = 0; j < VEC; ++j) vals[j] = cf_to_float(e[j]);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) vals[j] = (go < o_lim && gi + j < i_lim) ? cf_to_float(g[elem_offset(go, gi + j, ld)]) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) sm[o * s_o + (i + j) * s_i] = vals[j];
        }
    } else {
        for (int v = threadIdx.x; v < TO * TI; v += NT) {
            const int o = v / TI, i = v % TI;
            const int go = o0 + o, gi = i0 + i;
            sm[o * s_o + i * s_i] = (go < o_lim && gi < i_lim) ? cf_to_float(g[elem_offset(go, gi, ld)]) : 0.0f;
        }
    }
}

// Whether an operand may take the vector path: its base and leading dimension 16-byte aligned.
__device__ __forceinline__ bool vector_ok(const void* base, long long ld) {
#ifdef MUTANT_UNCHECKED_VEC
    return true;
#else
    return aligned16(base) && ((ld * (long long)sizeof(cf_elem)) & 15ll) == 0;
#endif
}

extern "C" __global__ void __launch_bounds__(NT) gemm(int M, int N, int K, float alpha, const CF_T_a* __restrict__ A, long long lda,
                                                      const CF_T_b* __restrict__ B, long long ldb, float beta, CF_T_c* C, long long ldc, int trans_a,
                                                      int trans_b) {
    __shared__ float As[BK][TILE + SPAD];
    __shared__ float Bs[BK][TILE + SPAD];
#ifdef MUTANT_LD_ASSUMED
    lda = trans_a ? M : K;
    ldb = trans_b ? K : N;
#endif
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    const bool vec_a = vector_ok(A, lda), vec_b = vector_ok(B, ldb);
    float acc[TM][TM];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TM; ++c) acc[r][c] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // As[k][m] and Bs[k][n] from whichever dimension of the stored operand is contiguous.
        if (trans_a)
            load_tile<BK, TILE>(&As[0][0], TILE + SPAD, 1, A, lda, k0, m0, K, M, vec_a);
        else
            load_tile<TILE, BK>(&As[0][0], 1, TILE + SPAD, A, lda, m0, k0, M, K, vec_a);
        if (trans_b)
            load_tile<TILE, BK>(&Bs[0][0], 1, TILE + SPAD, B, ldb, n0, k0, N, K, vec_b);
        else
            load_tile<BK, TILE>(&Bs[0][0], TILE + SPAD, 1, B, ldb, k0, n0, K, N, vec_b);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TM];
#pragma unroll
            for (int r = 0; r < TM; ++r) a[r] = As[kk][ty + 16 * r];
#pragma unroll
            for (int c = 0; c < TM; ++c) b[c] = Bs[kk][tx + 16 * c];
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TM; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
        }
        // The next tile's loads overwrite what slower warps may still be reading.
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < TM; ++r) {
        const int m = m0 + ty + 16 * r;
        if (m >= M) continue;
#pragma unroll
        for (int c = 0; c < TM; ++c) {
            const int n = n0 + tx + 16 * c;
            if (n >= N) continue;
            CF_T_c* p = C + elem_offset(m, n, ldc);
            float v = alpha * acc[r][c];
#ifdef MUTANT_BETA_READS_C
            v += beta * cf_to_float(*p);
#else
            if (beta != 0.0f) v += beta * cf_to_float(*p);
#endif
            *p = cf_from_float(v);
        }
    }
}
