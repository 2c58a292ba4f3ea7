// softmax.cu: softmax over the last axis, y[r, j] = exp(x[r, j] - m_r) / Σ_j exp(x[r, j] - m_r),
// one block of BLOCK threads per row, three passes over the row (max, sum, write), f32 math.
// x and y rows may be padded or reordered (any row strides), bases offset by any element count;
// the 16-byte path is taken only when n % VEC == 0 and both rows are 16-byte aligned.
//
// Planted bugs (kernels/mutants/softmax_*.toml): those of row_common.cuh, and
//   MUTANT_UNCHECKED_VEC  the vector path checks n only, not the row addresses;
//   MUTANT_Y_CONTIG       y's row stride taken as n (a dense y assumed).
#include "row_common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_fwd(cf_elem* __restrict__ y, const cf_elem* __restrict__ x, int n, long long x_row_stride,
            long long y_row_stride) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const cf_elem* xr = row_ptr(x, row, x_row_stride);
#ifdef MUTANT_Y_CONTIG
    cf_elem* yr = row_ptr(y, row, (long long)n);
#else
    cf_elem* yr = row_ptr(y, row, y_row_stride);
#endif
#ifdef MUTANT_UNCHECKED_VEC
    const bool vec = vector_rows(n, true);
#else
    const bool vec = vector_rows(n, aligned16(xr) && aligned16(yr));
#endif
    float m = CF_NEG_INF_F;
    for_row(xr, n, vec, [&](int, float v) { m = fmaxf(m, v); });
    m = block_reduce<true>(m, sh);
    float l = 0.0f;
    for_row(xr, n, vec, [&](int, float v) { l += expf(v - m); });
    l = block_reduce<false>(l, sh);
    map_row(yr, xr, n, vec, [&](int, float v) { return expf(v - m) / l; });
}
