// silu_and_mul: the fused gated activation of LLaMA-style MLPs (vLLM's `silu_and_mul`):
// x is [tokens, 2 * d], its first half the gate and its second half the up projection, and
// out[t, i] = silu(x[t, i]) * x[t, d + i] with silu(a) = a / (1 + exp(-a)), computed in fp32.
//
// One block per token. Rows may be padded (any row stride) and bases offset by any element
// count: the 16-byte vector path is taken only when d is a multiple of the vector width and the
// gate, the up half and the output row all start on 16-byte boundaries; otherwise each thread
// handles single elements.
//
// Planted bugs (one define each, see kernels/mutants/silu_mul_*.toml):
//   MUTANT_UNCHECKED_VEC  the vector path checks only d, not the addresses (misaligned loads
//                         whenever a base or row stride is not 16-byte aligned);
//   MUTANT_INT32_ROW      the row offset is computed in 32-bit ints (wrong rows, or an illegal
//                         address, once a tensor spans 2^31 elements).
#include "cudafuzz.cuh"

#define VEC (16 / (int)sizeof(cf_elem))

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }

__device__ __forceinline__ cf_elem silu_mul(cf_elem gate, cf_elem up) {
    const float a = cf_to_float(gate);
    return cf_from_float(a / (1.0f + expf(-a)) * cf_to_float(up));
}

extern "C" __global__ void silu_and_mul(CF_T_out* __restrict__ out, const CF_T_x* __restrict__ x, int d, long long x_row_stride,
                                        long long out_row_stride) {
#ifdef MUTANT_INT32_ROW
    const int row = blockIdx.x;
    const CF_T_x* gate = x + (int)(row * x_row_stride);
    CF_T_out* o = out + (int)(row * out_row_stride);
#else
    const long long row = blockIdx.x;
    const CF_T_x* gate = x + row * x_row_stride;
    CF_T_out* o = out + row * out_row_stride;
#endif
    const CF_T_x* up = gate + d;
#ifdef MUTANT_UNCHECKED_VEC
    const bool vector = d % VEC == 0;
#else
    const bool vector = d % VEC == 0 && aligned16(gate) && aligned16(up) && aligned16(o);
#endif
    if (vector) {
        for (int i = threadIdx.x; i < d / VEC; i += blockDim.x) {
            const uint4 g = reinterpret_cast<const uint4*>(gate)[i];
            const uint4 u = reinterpret_cast<const uint4*>(up)[i];
            uint4 r;
            const cf_elem* ge = reinterpret_cast<const cf_elem*>(&g);
            const cf_elem* ue = reinterpret_cast<const cf_elem*>(&u);
            cf_elem* re = reinterpret_cast<cf_elem*>(&r);
            for (int e = 0; e < VEC; ++e) re[e] = silu_mul(ge[e], ue[e]);
            reinterpret_cast<uint4*>(o)[i] = r;
        }
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = silu_mul(gate[i], up[i]);
    }
}
