// RMSNorm whose row reduction is CUB's block primitive (cub::BlockReduce), as production kernels
// write it: cudafuzz puts the CCCL headers (the toolkit's, or the nvidia-cuda-cccl wheel's) on
// NVRTC's include path. One block of BLOCK threads per row, scalar loads, any row pitch.
#include <cub/block/block_reduce.cuh>

#include "cudafuzz.cuh"

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_cub(cf_elem* __restrict__ y, const cf_elem* __restrict__ x, const cf_elem* __restrict__ weight, int n, float eps,
            long long x_row_stride, long long y_row_stride) {
    using Reduce = cub::BlockReduce<float, BLOCK>;
    __shared__ typename Reduce::TempStorage scratch;
    __shared__ float inv_rms;
    const cf_elem* xr = x + blockIdx.x * x_row_stride;
    cf_elem* yr = y + blockIdx.x * y_row_stride;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < n; j += BLOCK) {
        const float v = cf_to_float(xr[j]);
        ss += v * v;
    }
    const float total = Reduce(scratch).Sum(ss);  // valid in thread 0 only
    if (threadIdx.x == 0) inv_rms = rsqrtf(total / n + eps);
    __syncthreads();
    const float r = inv_rms;
    for (int j = threadIdx.x; j < n; j += BLOCK) yr[j] = cf_from_float(cf_to_float(xr[j]) * r * cf_to_float(weight[j]));
}
