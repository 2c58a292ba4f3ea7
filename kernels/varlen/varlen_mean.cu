// Mean pooling over packed variable-length sequences: y[b, j] = mean of x[t, j] over the tokens
// t of sequence b (cu_seqlens[b] <= t < cu_seqlens[b + 1]); 0 for an empty sequence. A grid of
// (column blocks, sequences); each thread walks its sequence's tokens in order.
#include "cudafuzz.cuh"

extern "C" __global__ void varlen_mean(CF_T_y* __restrict__ y, const CF_T_x* __restrict__ x, const CF_T_cu_seqlens* __restrict__ cu_seqlens,
                                       int d, long long x_stride, long long y_stride) {
    const int b = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    const long long start = cu_seqlens[b], end = cu_seqlens[b + 1];
    float acc = 0.0f;
    for (long long t = start; t < end; t++) acc += cf_to_float(x[t * x_stride + j]);
    y[(long long)b * y_stride + j] = cf_from_float(end > start ? acc / (float)(end - start) : 0.0f);
}
