// rmsnorm.cu: RMSNorm over the last axis, y = x * rsqrt(mean(x^2) + eps) * weight, one block of
// BLOCK threads per row, two passes (sum of squares, write), f32 math. x and y rows may be padded
// or reordered (any row strides), bases offset by any element count; the 16-byte path is taken
// only when n % VEC == 0 and both rows are 16-byte aligned (weight is read element-wise).
//
// Planted bugs (kernels/mutants/rmsnorm_*.toml): those of row_common.cuh, and
//   MUTANT_UNCHECKED_VEC  the vector path checks n only, not the row addresses;
//   MUTANT_EPS_OUTSIDE    eps added after the square root: x / (rms + eps).
#include "row_common.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_fwd(cf_elem* __restrict__ y, const cf_elem* __restrict__ x, const cf_elem* __restrict__ weight, int n, float eps,
            long long x_row_stride, long long y_row_stride) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const cf_elem* xr = row_ptr(x, row, x_row_stride);
    cf_elem* yr = row_ptr(y, row, y_row_stride);
#ifdef MUTANT_UNCHECKED_VEC
    const bool vec = vector_rows(n, true);
#else
    const bool vec = vector_rows(n, aligned16(xr) && aligned16(yr));
#endif
    float ss = 0.0f;
    for_row(xr, n, vec, [&](int, float v) { ss += v * v; });
    ss = block_reduce<false>(ss, sh);
#ifdef MUTANT_EPS_OUTSIDE
    const float r = 1.0f / (sqrtf(ss / n) + eps);
#else
    const float r = rsqrtf(ss / n + eps);
#endif
    map_row(yr, xr, n, vec, [&](int j, float v) { return v * r * cf_to_float(weight[j]); });
}
