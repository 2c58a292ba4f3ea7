// The reference for scatter_rows: one thread per element of x, the same scatter, no layout
// assumptions (the reference runs see dense tensors holding the case's values).
#include "cudafuzz.cuh"

extern "C" __global__ void scatter_rows_ref(CF_T_cache* cache, const CF_T_x* x, const CF_T_slots* slots, int tokens, int d,
                                            long long x_row_stride, long long cache_row_stride) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * d) return;
    const long long t = i / d, j = i % d;
    cf_store(&cache[slots[t] * cache_row_stride + j], cf_d(x[t * x_row_stride + j]));
}
