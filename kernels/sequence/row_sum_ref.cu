// The reference for row_sum_two_pass: one thread per row, summing in cf_acc in the kernel's own
// order (per chunk, THREADS strided partial sums and their tree, then the chunks in turn). The
// gold build (double) barely depends on the order; the same-precision build (float) then rounds
// exactly as a correct kernel does, so the rule `2 x baseline error + floor` judges the kernel
// against its own order's error. A sequential float sum instead can be luckily exact on a row
// whose sum cancels, where the kernel's order is off by a few ulps of its terms (a false alarm).
#include "cudafuzz.cuh"

extern "C" __global__ void row_sum_ref(CF_T_y* y, const CF_T_x* x, int rows, int n, long long x_row) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    cf_acc total = 0;
    for (int c = 0; c * CHUNK < n; c++) {
        const int end = min(n, (c + 1) * CHUNK);
        cf_acc part[THREADS];
        for (int t = 0; t < THREADS; t++) {
            cf_acc s = 0;
            for (int j = c * CHUNK + t; j < end; j += THREADS) s += cf_d(x[r * x_row + j]);
            part[t] = s;
        }
        for (int w = THREADS / 2; w > 0; w >>= 1)
            for (int t = 0; t < w; t++) part[t] += part[t + w];
        total += part[0];
    }
    cf_store(&y[r], total);
}
