// fa_accum: a small FlashAttention-style forward written the way many hand-rolled kernels are,
// with a caller contract that the attention-only harness could not describe:
//
//   * q and k share one sequence length (the host code only ever passes one `seq`);
//   * m and l are fp32 side buffers [batch, heads, seq] that the kernel updates in place: the
//     running row maximum and row sum of the online softmax, which the caller initialises to
//     -inf and 0 (so a second pass over more keys could continue from them);
//   * o is zero-filled by the caller and the kernel accumulates into it (o += softmax(qk) v).
//
// One warp per query row, BLOCK_M rows per block; K and V tiles of BLOCK_N keys are staged in
// shared memory as fp32. Lanes own head-dim columns d = lane, lane + 32, ... (head_dim <= 128).
//
// Planted bug (MUTANT_UNMASKED_TAIL): the last key tile is treated as full. Its loads and its
// scores ignore `seq`, so keys past the end of k and v (the next head's rows, or whatever lies
// past the tensor) enter the softmax. Only visible when seq % BLOCK_N != 0 and not causal.
#include "cudafuzz.cuh"

#ifndef BLOCK_M
#error "BLOCK_M (query rows per block, one warp each) is a manifest param"
#endif
#ifndef BLOCK_N
#error "BLOCK_N (keys per shared-memory tile) is a manifest param"
#endif

#define HEAD_DIM_MAX 128
#define COLS_PER_LANE (HEAD_DIM_MAX / 32)

extern "C" __global__ void fa_accum_fwd(const CF_T_q* __restrict__ q, const CF_T_k* __restrict__ k, const CF_T_v* __restrict__ v,
                                        CF_T_o* __restrict__ o, float* __restrict__ m_buf, float* __restrict__ l_buf, int heads, int seq,
                                        int head_dim, int causal, float scale, long long q_sb, long long q_sh, long long q_ss,
                                        long long q_sd, long long k_sb, long long k_sh, long long k_ss, long long k_sd, long long v_sb,
                                        long long v_sh, long long v_ss, long long v_sd, long long o_sb, long long o_sh, long long o_ss,
                                        long long o_sd) {
    extern __shared__ float smem[];
    float* sk = smem;                          // [BLOCK_N][head_dim]
    float* sv = smem + BLOCK_N * head_dim;     // [BLOCK_N][head_dim]

    const int b = blockIdx.z, h = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * BLOCK_M + warp;
    const bool live = row < seq;

    const CF_T_q* qb = q + b * q_sb + h * q_sh;
    const CF_T_k* kb = k + b * k_sb + h * k_sh;
    const CF_T_v* vb = v + b * v_sb + h * v_sh;

    float qr[COLS_PER_LANE], acc[COLS_PER_LANE];
    for (int c = 0; c < COLS_PER_LANE; ++c) {
        const int d = lane + 32 * c;
        qr[c] = (live && d < head_dim) ? cf_d(qb[row * q_ss + d * q_sd]) : 0.0f;
        acc[c] = 0.0f;
    }
    const long long stat = ((long long)b * heads + h) * seq + row;
    // The online-softmax state starts from the caller's buffers (-inf and 0 by contract).
    float m = live ? m_buf[stat] : CF_NEG_INF_F;
    float l = live ? l_buf[stat] : 0.0f;

    for (int n0 = 0; n0 < seq; n0 += BLOCK_N) {
#ifdef MUTANT_UNMASKED_TAIL
        const int tile = BLOCK_N;
#else
        const int tile = min(BLOCK_N, seq - n0);
#endif
        for (int i = threadIdx.x; i < BLOCK_N * head_dim; i += blockDim.x) {
            const int j = i / head_dim, d = i % head_dim;
            const bool in = j < tile;
            sk[i] = in ? (float)cf_d(kb[(n0 + j) * k_ss + d * k_sd]) : 0.0f;
            sv[i] = in ? (float)cf_d(vb[(n0 + j) * v_ss + d * v_sd]) : 0.0f;
        }
        __syncthreads();
        if (live) {
            for (int j = 0; j < tile; ++j) {
                const int key = n0 + j;
                if (causal && key > row) break;
                float s = 0.0f;
                for (int c = 0; c < COLS_PER_LANE; ++c) {
                    const int d = lane + 32 * c;
                    if (d < head_dim) s += qr[c] * sk[j * head_dim + d];
                }
                s = cf_warp_sum(s) * scale;
                const float m_new = fmaxf(m, s);
                const float corr = expf(m - m_new);
                const float p = expf(s - m_new);
                l = l * corr + p;
                for (int c = 0; c < COLS_PER_LANE; ++c) {
                    const int d = lane + 32 * c;
                    if (d < head_dim) acc[c] = acc[c] * corr + p * sv[j * head_dim + d];
                }
                m = m_new;
            }
        }
        __syncthreads();
    }

    if (!live) return;
    CF_T_o* orow = o + b * o_sb + h * o_sh + row * o_ss;
    for (int c = 0; c < COLS_PER_LANE; ++c) {
        const int d = lane + 32 * c;
        if (d >= head_dim) continue;
        const float out = l > 0.0f ? acc[c] / l : 0.0f;
        // Accumulate into the caller's buffer: correct only because the caller zero-filled it.
        cf_store(&orow[d * o_sd], (double)((float)cf_d(orow[d * o_sd]) + out));
    }
    if (lane == 0) {
        m_buf[stat] = m;
        l_buf[stat] = l;
    }
}
