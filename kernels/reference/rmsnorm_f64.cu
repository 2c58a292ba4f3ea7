// rmsnorm_f64.cu: the built-in op `rmsnorm` on the GPU, for the numerical oracle
// (src/reference/rmsnorm.rs states the same formulas; both are computed here):
//   ref_y      [rows, n]  gold, f64: ms = (Σ_j x_j·x_j) / n sequential; r = 1 / sqrt(ms + eps);
//                         y_j = (x_j · r) · w_j.
//   ref_y_lowp [rows, n]  same-precision baseline: the same in f32, each operation correctly
//                         rounded, y_j = round_T((x_j · r) · w_j).
// x and weight are read through their strides. One thread per row: deterministic.
#include "cudafuzz.cuh"

extern "C" __global__ void rmsnorm_f64_ref(const cf_elem* x, const cf_elem* weight, double* ref_y, double* ref_y_lowp,
                                           long long rows, int n, float eps, long long x_sr, long long x_sc,
                                           long long w_s) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const cf_elem* xr = x + r * x_sr;
    double ss = 0.0;
    float ss32 = 0.0f;
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        ss = __dadd_rn(ss, __dmul_rn(v, v));
        ss32 = __fadd_rn(ss32, __fmul_rn((float)v, (float)v));
    }
    const double rs = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)n), (double)eps)));
    const float rs32 = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss32, (float)n), eps)));
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        const double w = cf_to_double(weight[j * w_s]);
        ref_y[r * n + j] = __dmul_rn(__dmul_rn(v, rs), w);
        ref_y_lowp[r * n + j] = (double)cf_round(__fmul_rn(__fmul_rn((float)v, rs32), (float)w));
    }
}
