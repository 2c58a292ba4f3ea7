// layernorm.cu: LayerNorm over the last axis, y = (x - mean) * rsqrt(var + eps) * weight + bias
// with the biased variance, one block of BLOCK threads per row, three passes (sum, sum of squared
// deviations, write), f32 math. x and y rows may be padded or reordered (any row strides), bases
// offset by any element count; the 16-byte path is taken only when n % VEC == 0 and both rows are
// 16-byte aligned (weight and bias are read element-wise).
//
// Planted bugs (kernels/mutants/layernorm_*.toml): those of row_common.cuh, and
//   MUTANT_X_CONTIG       x's row stride taken as n (a dense x assumed).
#include "row_common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
layernorm_fwd(cf_elem* __restrict__ y, const cf_elem* __restrict__ x, const cf_elem* __restrict__ weight,
              const cf_elem* __restrict__ bias, int n, float eps, long long x_row_stride, long long y_row_stride) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
#ifdef MUTANT_X_CONTIG
    const cf_elem* xr = row_ptr(x, row, (long long)n);
#else
    const cf_elem* xr = row_ptr(x, row, x_row_stride);
#endif
    cf_elem* yr = row_ptr(y, row, y_row_stride);
    const bool vec = vector_rows(n, aligned16(xr) && aligned16(yr));
    float s = 0.0f;
    for_row(xr, n, vec, [&](int, float v) { s += v; });
    const float mean = block_reduce<false>(s, sh) / n;
    float q = 0.0f;
    for_row(xr, n, vec, [&](int, float v) { q += (v - mean) * (v - mean); });
    const float rstd = rsqrtf(block_reduce<false>(q, sh) / n + eps);
    map_row(yr, xr, n, vec, [&](int j, float v) { return (v - mean) * rstd * cf_to_float(weight[j]) + cf_to_float(bias[j]); });
}
