// The reference for silu_and_mul: one thread per output element, no vector loads, no
// assumptions about layout. cudafuzz compiles it twice over the same roster: with every
// floating tensor double (the gold: `cf_acc` is double) and at the case's precision (the
// baseline: `cf_acc` is float), and judges the kernel against the gold with a bound set by the
// baseline's own error.
#include "cudafuzz.cuh"

__device__ __forceinline__ double ref_exp(double a) { return exp(a); }
__device__ __forceinline__ float ref_exp(float a) { return expf(a); }

extern "C" __global__ void silu_and_mul_ref(CF_T_out* out, const CF_T_x* x, int tokens, int d, long long x_row_stride,
                                            long long out_row_stride) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * d) return;
    const long long t = i / d, c = i % d;
    const cf_acc a = (cf_acc)cf_d(x[t * x_row_stride + c]);
    const cf_acc b = (cf_acc)cf_d(x[t * x_row_stride + d + c]);
    cf_store(&out[t * out_row_stride + c], (double)(a / ((cf_acc)1 + ref_exp(-a)) * b));
}
