// softmax_f64.cu: the built-in op `softmax` on the GPU, for the numerical oracle
// (src/reference/softmax.rs states the same formulas; both are computed here):
//   ref_y      [rows, n]  gold, f64: m = max_j x_j (NaN never wins); e_j = exp(x_j - m);
//                         l = Σ_j e_j sequential; y_j = e_j / l.
//   ref_y_lowp [rows, n]  same-precision baseline, f32 without FMA: m in f32,
//                         e_j = (float)exp((double)(x_j - m)), l = Σ_j e_j sequential,
//                         y_j = round_T(e_j / l).
// x is read through its strides (the case's own allocation when the case's x is [rows, n],
// else a dense copy). One thread per row, every sum in one fixed order: deterministic.
#include "cudafuzz.cuh"

extern "C" __global__ void softmax_f64_ref(const cf_elem* x, double* ref_y, double* ref_y_lowp, long long rows, int n,
                                           long long x_sr, long long x_sc) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const cf_elem* xr = x + r * x_sr;
    double* y = ref_y + r * n;
    double* yl = ref_y_lowp + r * n;
    double m = CF_NEG_INF_D;
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        if (v > m) m = v;
    }
    const float m32 = (float)m;  // the max of values exact in f32 is exact in f32
    double l = 0.0;
    float l32 = 0.0f;
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        l = __dadd_rn(l, exp(__dsub_rn(v, m)));
        l32 = __fadd_rn(l32, (float)exp((double)__fsub_rn((float)v, m32)));
    }
    for (int j = 0; j < n; ++j) {
        const double v = cf_to_double(xr[j * x_sc]);
        y[j] = __ddiv_rn(exp(__dsub_rn(v, m)), l);
        yl[j] = (double)cf_round(__fdiv_rn((float)exp((double)__fsub_rn((float)v, m32)), l32));
    }
}
