// softmax.cu: softmax over the last axis, y[r, j] = exp(x[r, j] - m_r) / Σ_j exp(x[r, j] - m_r),
// one block of BLOCK threads per row, three passes over the row (max, sum, write), f32 math.
// x and y rows may be padded or reordered (any row strides), bases offset by any element count;
// the 16-byte path is taken only when n % VEC == 0 and both rows are 16-byte aligned.
//
// Planted bugs (kernels/mutants/softmax_*.toml): those of row_common.cuh, and
//   MUTANT_UNCHECKED_VEC  the vector path checks n only, not the row addresses;
//   MUTANT_Y_CONTIG       y's row stride taken as n (a dense y assumed);
//   MUTANT_NO_MAX         the row maximum is not subtracted: expf overflows past 88.7.
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
#if defined(MUTANT_UNCHECKED_VEC)
    const bool vec = vector_rows(n, true);
#elif defined(HOST_ALIGNED_BASE)
    // The caller's allocator aligns x and y to 16 bytes (softmax_base16.toml: base_align = 16),
    // so only the row pitches are checked.
    const bool vec = vector_rows(n, (x_row_stride * (long long)sizeof(cf_elem)) % 16 == 0 &&
                                        (y_row_stride * (long long)sizeof(cf_elem)) % 16 == 0);
#else
    const bool vec = vector_rows(n, aligned16(xr) && aligned16(yr));
#endif
    float m = CF_NEG_INF_F;
    for_row(xr, n, vec, [&](int, float v) { m = fmaxf(m, v); });
    m = block_reduce<true>(m, sh);
#ifdef MUTANT_NO_MAX
    // The max pass still runs (a NaN or -inf row keeps its pattern); only its use is dropped.
    m = isfinite(m) ? 0.0f : m;
#endif
    float l = 0.0f;
    for_row(xr, n, vec, [&](int, float v) { l += expf(v - m); });
    l = block_reduce<false>(l, sh);
    map_row(yr, xr, n, vec, [&](int, float v) { return expf(v - m) / l; });
}
