// The reference for row_dot_f64: one thread per row, a sequential sum in double (not `cf_acc`:
// every tensor is f64, so the gold and the baseline are both double precision).
#include "cudafuzz.cuh"

extern "C" __global__ void row_dot_f64_ref(double* y, const double* a, const double* b, int rows, int n, long long a_row, long long b_row) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double s = 0.0;
    for (int j = 0; j < n; j++) s += a[r * a_row + j] * b[r * b_row + j];
    y[r] = s;
}
