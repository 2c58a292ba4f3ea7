// Row dot products in double precision: y[r] = sum_j a[r, j] * b[r, j]. One block per row,
// each thread a strided partial sum, then a shared-memory tree: a summation order unlike the
// reference's sequential one. Every tensor is f64, so the manifest has no `dtypes`, and the
// tolerance is an f64 one (a billionth of the output's magnitude): a float accumulator fails it.
#include "cudafuzz.cuh"

extern "C" __global__ void row_dot_f64(double* __restrict__ y, const double* __restrict__ a, const double* __restrict__ b, int n,
                                       long long a_row, long long b_row) {
    __shared__ double part[THREADS];
    const long long r = blockIdx.x;
#ifdef MUTANT_FLOAT_ACCUMULATOR
    float s = 0.0f;  // a precision bug: the partial sums lose 29 bits
#else
    double s = 0.0;
#endif
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += a[r * a_row + j] * b[r * b_row + j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[r] = part[0];
}
