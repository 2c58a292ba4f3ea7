// rotary_f64: the GPU reference of the built-in op `rotary` (src/reference/rotary.rs states the
// semantics; this kernel computes the same three arrays). One thread per element of y (x's
// shape, dense): for a rotated element with pair partner, cosine c and sine s at the token's
// position,
//   ref_y      = x1 * c - x2 * s  (first of the pair) or x2 * c + x1 * s (second), in double;
//   ref_y_lowp = the same in float (two products and a sum, no FMA: --fmad=false), rounded to
//                the case's element type;
//   ref_y_cond = |x1 c| + |x2 s| (resp. |x2 c| + |x1 s|); elements past rot_dim are copied
//                (condition 0). Pairs are (2i, 2i + 1) when interleaved, else (i, i + rot_dim/2).
// x, cos, sin and positions are read where the case put them; for an in-place kernel x is a copy
// of its initial contents taken before the kernel under test ran. A position outside
// 0..max_pos writes NaN (the op is undefined there).
#include "cudafuzz.cuh"

extern "C" __global__ void rotary_f64_ref(const cf_elem* x, const CF_T_cos* cos_c, const CF_T_sin* sin_c, const int* positions, double* ref_y,
                                          double* ref_y_lowp, double* ref_y_cond, int tokens, int heads, int head_dim, int rot_half,
                                          int max_pos, int interleaved, long long x_s0, long long x_s1, long long x_s2, long long cos_s0,
                                          long long cos_s1, long long sin_s0, long long sin_s1, long long pos_s0) {
    const long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o >= (long long)tokens * heads * head_dim) return;
    const long long d = o % head_dim, h = (o / head_dim) % heads, t = o / ((long long)head_dim * heads);
    const cf_elem* xh = x + t * x_s0 + h * x_s1;
    const double xv = cf_to_double(xh[d * x_s2]);
    if (d >= 2 * rot_half) {
        ref_y[o] = xv;
        ref_y_lowp[o] = xv;
        ref_y_cond[o] = 0.0;
        return;
    }
    const int p = positions[t * pos_s0];
    if (p < 0 || p >= max_pos) {
        const double nan = __longlong_as_double(0x7ff8000000000000ll);
        ref_y[o] = nan;
        ref_y_lowp[o] = nan;
        ref_y_cond[o] = nan;
        return;
    }
    const bool first = interleaved ? d % 2 == 0 : d < rot_half;
    const long long i = interleaved ? d / 2 : (first ? d : d - rot_half);
    const long long partner = interleaved ? (first ? d + 1 : d - 1) : (first ? d + rot_half : d - rot_half);
    const double pv = cf_to_double(xh[partner * x_s2]);
    const double c = cf_d(cos_c[p * cos_s0 + i * cos_s1]), s = cf_d(sin_c[p * sin_s0 + i * sin_s1]);
    const float x32 = (float)xv, p32 = (float)pv, c32 = (float)c, s32 = (float)s;
    if (first) {
        ref_y[o] = xv * c - pv * s;
        ref_y_lowp[o] = (double)cf_round(__fsub_rn(__fmul_rn(x32, c32), __fmul_rn(p32, s32)));
        ref_y_cond[o] = fabs(xv * c) + fabs(pv * s);
    } else {
        ref_y[o] = xv * c + pv * s;
        ref_y_lowp[o] = (double)cf_round(__fadd_rn(__fmul_rn(x32, c32), __fmul_rn(p32, s32)));
        ref_y_cond[o] = fabs(xv * c) + fabs(pv * s);
    }
}
