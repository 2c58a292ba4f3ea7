// simple_attn.cu: a simple, obviously correct attention forward, and the planted-bug mutants
// that test the harness's oracles.
//
// One block per query row: grid (seq_q, heads_q, batch), BLOCK_THREADS threads. The block loads
// its q row into shared memory as float, computes the scores of every allowed key into dynamic
// shared memory, takes the row max and the sum of exponentials with block reductions, stages the
// output row (Σ_j p_j v_jd, one feature per thread) in shared memory and stores it. All arithmetic
// is float; every global access uses the caller's element strides, so any layout works as long
// as every base pointer is aligned to the element size. A row with no allowed key writes 0.
//
// Dynamic shared memory: (round_up(head_dim, 4) + seq_k) * 4 + 16 bytes: float row[head_dim] (q
// row, later the staged output row), then float p[seq_k] (scores, later unnormalised
// probabilities), then slack for the compiler's vector over-reads (see `p` below).
//
// Launch limits (not expressible in the contract): heads_q <= 65535 and batch <= 65535 (grid
// y and z), and (head_dim + seq_k) * 4 bytes of dynamic shared memory (the harness raises the
// limit past 48 KB).
//
// Planted bugs, each a tiny diff from the correct code, selected by a fixed define:
//   BUG_VEC_LOAD_Q     q row read with 16-byte vector loads, no alignment check and stride_d
//                      assumed 1: faults with 716 (misaligned address) when the q base or row
//                      pitch is not a multiple of 16 bytes.
//   BUG_OOB_WRITE      the store loop runs d <= head_dim: one element past each o row is written
//                      (past the tensor's end for its last row).
//   BUG_SKIP_LAST_ROW  the block of the last query row (s == seq_q - 1) returns without writing.
//   BUG_HANG           the block of (row 0, head 0, batch 0) spins forever.
// Bugs for the sanitizer tools (each only where `planted` holds: head_dim == BUG_HEAD_DIM when
// that is defined, else everywhere), so one batch can mix clean and buggy cases:
//   BUG_OOB_READ_K     the score loop also reads key n_keys: one K row past the last allowed
//                      key, past k's end for its last slice (memcheck with --padding).
//   BUG_RACE           no barrier between staging the q row and reading it (racecheck).
//   BUG_UNINIT_READ    reads a scratch buffer nobody wrote (initcheck); the kernel takes one
//                      more argument, `const float* scratch`.
//   BUG_BAD_SYNCWARP   lane 1 calls __syncwarp with a mask that leaves it out (synccheck).
#include "cudafuzz.cuh"

#ifndef BLOCK_THREADS
#error "BLOCK_THREADS must be defined (manifest [params])"
#endif
static_assert(BLOCK_THREADS % 32 == 0 && BLOCK_THREADS >= 32 && BLOCK_THREADS <= 1024,
              "BLOCK_THREADS must be a multiple of 32 in 32..1024");

// Block-wide max / sum; every thread gets the result. `red` holds one float per warp.
__device__ float block_max(float x, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    x = cf_warp_max(x);
    __syncthreads();  // `red` may still be read by a previous reduction
    if (lane == 0) red[warp] = x;
    __syncthreads();
    return cf_warp_max(lane < nwarps ? red[lane] : CF_NEG_INF_F);
}

__device__ float block_sum(float x, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    x = cf_warp_sum(x);
    __syncthreads();
    if (lane == 0) red[warp] = x;
    __syncthreads();
    return cf_warp_sum(lane < nwarps ? red[lane] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
simple_attn_fwd(const cf_elem* q, const cf_elem* k, const cf_elem* v, cf_elem* o,
                int batch, int heads_q, int heads_kv, int seq_q, int seq_k, int head_dim,
                int causal, float scale,
                long long q_sb, long long q_sh, long long q_ss, long long q_sd,
                long long k_sb, long long k_sh, long long k_ss, long long k_sd,
                long long v_sb, long long v_sh, long long v_ss, long long v_sd,
                long long o_sb, long long o_sh, long long o_ss, long long o_sd
#if BUG_UNINIT_READ
                , const float* scratch
#endif
                ) {
    extern __shared__ float smem[];
    // p starts at a multiple of 4 floats: NVRTC reads `row` with vector loads of up to 12 bytes
    // in the score loop's remainder, past row[head_dim - 1]; with p right behind row that read
    // raced with other threads' p[j] stores (found by cudafuzz under racecheck and memcheck).
    float* row = smem;                           // [head_dim]: the q row, later the output row
    float* p = smem + ((head_dim + 3) & ~3);     // [seq_k]: scores, later exp(score - max)
    __shared__ float red[32];

    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int hkv = h / (heads_q / heads_kv);
    const int tid = threadIdx.x, nthreads = blockDim.x;
    (void)batch;
#ifdef BUG_HEAD_DIM
    const bool planted = head_dim == BUG_HEAD_DIM;
#else
    const bool planted = true;
#endif
    (void)planted;

#if BUG_SKIP_LAST_ROW
    if (s == seq_q - 1) return;  // planted: the last query row is never written
#endif
#if BUG_HANG
    if (s == 0 && h == 0 && b == 0) {
        __shared__ volatile int never_set;  // planted: nobody ever sets it
        if (tid == 0) never_set = 0;
        __syncthreads();
        while (never_set == 0) {
        }
    }
#endif

    const cf_elem* qrow = q + (long long)b * q_sb + (long long)h * q_sh + (long long)s * q_ss;
    const cf_elem* kbase = k + (long long)b * k_sb + (long long)hkv * k_sh;
    const cf_elem* vbase = v + (long long)b * v_sb + (long long)hkv * v_sh;
    cf_elem* orow = o + (long long)b * o_sb + (long long)h * o_sh + (long long)s * o_ss;

    // Keys 0..n_keys-1 are allowed (causal: j <= s + seq_k - seq_q).
    int n_keys = seq_k;
    if (causal) n_keys = min(seq_k, max(0, s + seq_k - seq_q + 1));

    // 1. q row -> shared memory, as float.
#if BUG_VEC_LOAD_Q
    {
        // planted: "fast path" assuming a contiguous, 16-byte-aligned q row
        const int per_vec = 16 / (int)sizeof(cf_elem);
        const int n_vec = head_dim * (int)sizeof(cf_elem) / 16;
        for (int i = tid; i < n_vec; i += nthreads) {
            const float4 raw = reinterpret_cast<const float4*>(qrow)[i];
            const cf_elem* e = reinterpret_cast<const cf_elem*>(&raw);
            for (int j = 0; j < per_vec; ++j) row[i * per_vec + j] = cf_to_float(e[j]);
        }
        for (int d = n_vec * per_vec + tid; d < head_dim; d += nthreads) row[d] = cf_to_float(qrow[d]);
    }
#else
    for (int d = tid; d < head_dim; d += nthreads) row[d] = cf_to_float(qrow[(long long)d * q_sd]);
#endif
#if BUG_UNINIT_READ
    if (planted && tid == 0 && scratch[s] == 12345.0f) row[0] += 1.0f;  // planted: never written
#endif
#if BUG_BAD_SYNCWARP
    if (planted && tid == 1) __syncwarp(0x1u);  // planted: lane 1 is not in the mask
#endif
#if BUG_RACE
    if (!planted)  // planted: others' q elements are read before they are surely written
#endif
    __syncthreads();

    // 2. Scores of the allowed keys, and the row max.
    float local_max = CF_NEG_INF_F;
#if BUG_OOB_READ_K
    const int n_read = planted ? n_keys + 1 : n_keys;  // planted: one key row too many
    for (int j = tid; j < n_read; j += nthreads) {
        if (j == n_keys) {
            const cf_elem* krow = kbase + (long long)j * k_ss;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += cf_to_float(krow[(long long)d * k_sd]);
            if (dot == 12345.0f) local_max = fmaxf(local_max, 0.0f);  // keeps the read alive
            continue;
        }
#else
    for (int j = tid; j < n_keys; j += nthreads) {
#endif
        const cf_elem* krow = kbase + (long long)j * k_ss;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += row[d] * cf_to_float(krow[(long long)d * k_sd]);
        p[j] = dot * scale;
        local_max = fmaxf(local_max, p[j]);
    }
    const float m = block_max(local_max, red);  // also the barrier after the last read of q

    // 3. Unnormalised probabilities and their sum.
    float local_sum = 0.0f;
    for (int j = tid; j < n_keys; j += nthreads) {
        p[j] = expf(p[j] - m);
        local_sum += p[j];
    }
    const float l = block_sum(local_sum, red);  // also the barrier before p is read by all

    // 4. Output row, staged in shared memory; a row with no allowed key is 0.
    for (int d = tid; d < head_dim; d += nthreads) {
        float acc = 0.0f;
        for (int j = 0; j < n_keys; ++j)
            acc += p[j] * cf_to_float(vbase[(long long)j * v_ss + (long long)d * v_sd]);
        row[d] = n_keys > 0 ? acc / l : 0.0f;
    }
    __syncthreads();

    // 5. Store.
#if BUG_OOB_WRITE
    for (int d = tid; d <= head_dim; d += nthreads)  // planted: off by one
#else
    for (int d = tid; d < head_dim; d += nthreads)
#endif
        orow[(long long)d * o_sd] = cf_from_float(row[d]);
}
