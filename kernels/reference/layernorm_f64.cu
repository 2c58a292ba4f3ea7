// layernorm_f64.cu: the built-in op `layernorm` on the GPU, for the numerical oracle
// (src/reference/layernorm.rs states the same formulas; both are computed here), two passes:
//   ref_y      [rows, n]  gold, f64: mean = (Σ_j x_j) / n; d_j = x_j - mean;
//                         var = (Σ_j d_j·d_j) / n (biased); rstd = 1 / sqrt(var + eps);
//                         y_j = (d_j · rstd) · w_j + b_j; sums sequential.
//   ref_y_lowp [rows, n]  same-precision baseline: the same in f32, each operation correctly
//                         rounded, y_j = round_T((d_j · rstd) · w_j + b_j).
// x, weight and bias are read through their strides. One thread per row: deterministic.
#include "cudafuzz.cuh"

extern "C" __global__ void layernorm_f64_ref(const cf_elem* x, const cf_elem* weight, const cf_elem* bias, double* ref_y,
                                             double* ref_y_lowp, long long rows, int n, float eps, long long x_sr,
                                             long long x_sc, long long w_s, long long b_s) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const cf_elem* xr = x + r * x_sr;
    double s = 0.0;
    float s32 = 0.0f;
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        s = __dadd_rn(s, v);
        s32 = __fadd_rn(s32, (float)v);
    }
    const double mean = __ddiv_rn(s, (double)n);
    const float mean32 = __fdiv_rn(s32, (float)n);
    double q = 0.0;
    float q32 = 0.0f;
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        const double d = __dsub_rn(v, mean);
        const float d32 = __fsub_rn((float)v, mean32);
        q = __dadd_rn(q, __dmul_rn(d, d));
        q32 = __fadd_rn(q32, __fmul_rn(d32, d32));
    }
    const double rstd = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(q, (double)n), (double)eps)));
    const float rstd32 = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(q32, (float)n), eps)));
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        const double w = cf_to_double(weight[j * w_s]);
        const double b = cf_to_double(bias[j * b_s]);
        ref_y[r * n + j] = __dadd_rn(__dmul_rn(__dmul_rn(__dsub_rn(v, mean), rstd), w), b);
        const float d32 = __fsub_rn((float)v, mean32);
        ref_y_lowp[r * n + j] = (double)cf_round(__fadd_rn(__fmul_rn(__fmul_rn(d32, rstd32), (float)w), (float)b));
    }
}
