// The reference for row_sum_two_pass: one thread per row, a sequential sum in cf_acc.
#include "cudafuzz.cuh"

extern "C" __global__ void row_sum_ref(CF_T_y* y, const CF_T_x* x, int rows, int n, long long x_row) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    cf_acc s = 0;
    for (int j = 0; j < n; j++) s += cf_d(x[r * x_row + j]);
    cf_store(&y[r], s);
}
