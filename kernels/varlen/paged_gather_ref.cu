// The reference for paged_gather: one thread per element of the packed output; the sequence of
// a token found by a linear scan of cu_seqlens.
#include "cudafuzz.cuh"

extern "C" __global__ void paged_gather_ref(CF_T_out* out, const CF_T_k_cache* k_cache, const CF_T_block_table* block_table,
                                            const CF_T_cu_seqlens* cu_seqlens, int batch, int d, int page_size, long long page_stride,
                                            long long slot_stride, long long table_stride, long long out_stride) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)cu_seqlens[batch] * d) return;
    const long long tok = i / d, j = i % d;
    int b = 0;
    while (cu_seqlens[b + 1] <= tok) b++;
    const long long pos = tok - cu_seqlens[b];
    const long long page = block_table[b * table_stride + pos / page_size];
    cf_store(&out[tok * out_stride + j], cf_d(k_cache[page * page_stride + (pos % page_size) * slot_stride + j]));
}
