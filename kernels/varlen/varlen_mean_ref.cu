// The reference for varlen_mean: one thread per output element, the sequence's mean in cf_acc.
#include "cudafuzz.cuh"

extern "C" __global__ void varlen_mean_ref(CF_T_y* y, const CF_T_x* x, const CF_T_cu_seqlens* cu_seqlens, int batch, int d, long long x_stride,
                                           long long y_stride) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)batch * d) return;
    const long long b = i / d, j = i % d;
    const long long start = cu_seqlens[b], n = cu_seqlens[b + 1] - start;
    cf_acc sum = 0;
    for (long long t = 0; t < n; t++) sum += cf_d(x[(start + t) * x_stride + j]);
    cf_store(&y[b * y_stride + j], n > 0 ? sum / (cf_acc)n : (cf_acc)0);
}
