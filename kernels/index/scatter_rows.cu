// Scatter token rows into a cache by a slot mapping, as a paged KV cache's write does:
// cache[slots[t], :] = x[t, :]. The caller's slots are distinct (each token owns its slot), so
// no two blocks write one row; the manifest says so (`distinct = true`), and cudafuzz never
// draws a mapping with duplicates, which would make a correct kernel race with itself.
// One block per token; any row pitch for x and the cache.
#include "cudafuzz.cuh"

extern "C" __global__ void scatter_rows(CF_T_cache* __restrict__ cache, const CF_T_x* __restrict__ x,
                                        const CF_T_slots* __restrict__ slots, int d, long long x_row_stride,
                                        long long cache_row_stride) {
    const long long t = blockIdx.x;
    const long long slot = slots[t];
#ifdef MUTANT_DENSE_CACHE_ROWS
    const long long row = slot * d;  // assumes the cache's rows are packed
#else
    const long long row = slot * cache_row_stride;
#endif
    for (int j = threadIdx.x; j < d; j += blockDim.x) cache[row + j] = x[t * x_row_stride + j];
}
