// Read a paged KV cache back into packed sequences, as a varlen attention's K loader does:
// out[cu_seqlens[b] + t, :] = k_cache[block_table[b, t / PAGE], t % PAGE, :] for t < len_b.
// One block per (sequence, position); positions past a sequence's length return at once. The
// caller's block table holds each sequence's pages (distinct, any order) and junk past them;
// cudafuzz derives both tables from the case's lengths (`derive` in the manifest).
#include "cudafuzz.cuh"

extern "C" __global__ void paged_gather(CF_T_out* __restrict__ out, const CF_T_k_cache* __restrict__ k_cache,
                                        const CF_T_block_table* __restrict__ block_table, const CF_T_cu_seqlens* __restrict__ cu_seqlens,
                                        int d, long long page_stride, long long slot_stride, long long table_stride, long long out_stride) {
    const int b = blockIdx.x, t = blockIdx.y;
    const int start = cu_seqlens[b], len = cu_seqlens[b + 1] - start;
    if (t >= len) return;
#ifdef MUTANT_PACKED_POSITION
    const int pos = start + t;  // the packed token index where the position in the sequence belongs
#else
    const int pos = t;
#endif
    const long long page = block_table[(long long)b * table_stride + pos / PAGE];
    const CF_T_k_cache* src = k_cache + page * page_stride + (long long)(pos % PAGE) * slot_stride;
    CF_T_out* dst = out + (long long)(start + t) * out_stride;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dst[j] = src[j];
}
