// Row sums in two launches, as a host splits a long reduction: row_sum_partial writes one
// partial sum per (row, chunk of CHUNK elements) into a scratch buffer, then row_sum_finalize
// adds each row's partials. The manifest's [[launch]] runs them in order on one stream.
#include "cudafuzz.cuh"

// Grid (chunks, rows), THREADS threads (a power of two) per chunk.
extern "C" __global__ void row_sum_partial(float* __restrict__ partial, const CF_T_x* __restrict__ x, int n, long long x_row) {
    __shared__ float part[THREADS];
    const long long r = blockIdx.y;
    const int c = blockIdx.x, chunks = gridDim.x;
    const int end = min(n, (c + 1) * CHUNK);
    float s = 0.0f;
    for (int j = c * CHUNK + threadIdx.x; j < end; j += blockDim.x) s += cf_to_float(x[r * x_row + j]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[r * chunks + c] = part[0];
}

// One thread per row: the row's partials, in order.
extern "C" __global__ void row_sum_finalize(CF_T_y* __restrict__ y, const float* __restrict__ partial, int rows, int n) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int chunks = (n + CHUNK - 1) / CHUNK;
#ifdef MUTANT_FLOOR_CHUNKS
    const int used = n / CHUNK;  // the host's chunk count rounded down: a partial last chunk is dropped
#else
    const int used = chunks;
#endif
    float s = 0.0f;
    for (int c = 0; c < used; c++) s += partial[(long long)r * chunks + c];
    y[r] = cf_from_float(s);
}
