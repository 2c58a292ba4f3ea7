// fa_s512.cu: a reconstruction of the seed's broken attention kernel -- the one this project was
// born from. Do not fix it: it is a test subject. Its bugs are deliberate and marked "BUG".
//
// What it is: a FlashAttention-1-style forward "specialised for seq 512" and head_dim 64 (the
// BERT-style shape its authors cared about). One block per (BLOCK_M query rows, head, batch):
// grid (cdiv(seq_q, BLOCK_M), heads_q, batch), NUM_WARPS * 32 threads. The block keeps its Q tile
// in shared memory, walks the K/V tiles of BLOCK_N keys (at most MAX_SEQ / BLOCK_N of them), and
// keeps an online softmax (running max m and sum l per row, in shared memory, fp32) with an fp32
// output accumulator in registers. All math is scalar fp32 FMA, no tensor cores:
//   - loads: every Q/K/V global access is a 16-byte vector load (`*(const uint4*)`), written
//     warp-centric for K and V (warp w loads keys [w*KPW, w*KPW + KPW) of the tile). Q and K are
//     stored *transposed* in shared memory (sQt[d][m], sKt[d][n]) for the outer-product Q*K^T;
//     K goes through an 8x8 register transpose so that it is stored with 16-byte vectors too.
//   - Q*K^T as register outer products (SGEMM style): warp w owns query rows [w*RPW, w*RPW + RPW),
//     lane l owns keys l, l + 32, ... (CPL = BLOCK_N / 32 of them).
//   - P is rounded to the element type (as FlashAttention does before P*V) and stored per warp,
//     key-major (sPt[n][r], column pitch RPW), each lane writing its columns as 16-byte vectors.
//   - P*V: the warp's lanes are split 2 x 16: each half-warp owns 8 rows, lane (l % 16) owns 4
//     features; per key, a half-warp reads its 8 probabilities as one 16-byte vector.
//   - O is normalised by 1/l, staged in shared memory (reusing the Q tile) and stored with
//     16-byte vector stores.
//   stride_d is ignored (assumed 1) and nothing checks that a base pointer or a stride is a
//   multiple of 16 bytes -- the authors believed "any offset" was fine (contract min_align = 2).
//   A row with no allowed key writes 0. GQA: kv head = h / (heads_q / heads_kv). Causal is
//   bottom-right aligned: query i attends key j iff j <= i + seq_k - seq_q.
//
// The failure matrix it reproduces (kernels/README.md, "fa_s512", has the table):
//   64/64/4 (the baseline): correct whenever every base pointer and every stepped stride of q, k,
//     v and o is a multiple of 16 bytes; CUDA error 716 (misaligned address) exactly when one is
//     not, at that tensor's 16-byte global access (the lines marked "ALIGN-ASSUMPTION").
//   The other four tile configurations fail on every case, aligned or not, each through its own
//   bug, each a misaligned 16-byte shared-memory access at its own source line:
//     80/64/8   BUG E  float4 init of the warp's slice of the row statistics   (prologue)
//     128/32/8  BUG B  16-byte store of an 8-key block of K^T at key 4*warp     (K/V tile load)
//     80/64/4   BUG A  16-byte store of a P column, column pitch RPW = 20       (softmax)
//     64/64/8   BUG C  16-byte read of a half-warp's P vector at row RPW/2 = 4  (P*V)
//   Every bug site is a *whole* 16-byte value (a vector stored whole, or a vector load all of
//   whose 8 elements are used): NVVM shrinks or splits vector loads whose elements are partly
//   dead, which would silently "fix" a misaligned one. Barriers order the bugs: a configuration
//   that also carries a later bug (80/64/8 carries A and C, 80/64/4 carries C) faults at the
//   earliest one, because no warp passes the __syncthreads() after a phase in which another warp
//   of its block faulted.
//
// Shared memory (dynamic, SMEM_BYTES; the manifests' shared_bytes is the same formula), in order:
//   cf_elem sQt[D][BLOCK_M]                Q tile transposed; after the K/V loop, O [BLOCK_M][D]
//   cf_elem sKt[D][BLOCK_N]                K tile transposed
//   cf_elem sV[BLOCK_N][D]                 V tile
//   cf_elem sPt[NUM_WARPS][BLOCK_N][RPW]   P, per warp, key-major
//   float   sRow[3][BLOCK_M]               alpha, m, l per query row (alpha first: see BUG C)
// = 140*BLOCK_M + 256*BLOCK_N + 2*BLOCK_M*BLOCK_N bytes; every region starts 16-byte aligned in
//   all five configurations (64/64: 33536 B, 80/64: 37824 B, 128/32: 34304 B).
//
// head_dim must be 64 (the original's host wrapper checked it; here the kernel returns without
// writing anything when head_dim != 64). Keys past MAX_SEQ = 512 are ignored.
#include "cudafuzz.cuh"

#if defined(CUDAFUZZ_DTYPE_F32)
#error "fa_s512 is f16/bf16 only: its 16-byte vectors hold 8 elements"
#endif
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(NUM_WARPS)
#error "BLOCK_M, BLOCK_N and NUM_WARPS must be defined (manifest [defines])"
#endif

#define HEAD_DIM 64
#define MAX_SEQ 512
#define NUM_THREADS (NUM_WARPS * 32)

constexpr int D = HEAD_DIM;
constexpr int EB = (int)sizeof(cf_elem);  // 2
constexpr int VEC = 16 / EB;              // elements per 16-byte vector: 8
constexpr int CHUNKS = D / VEC;           // 16-byte chunks per row: 8
constexpr int RPW = BLOCK_M / NUM_WARPS;  // query rows per warp (16 in the tuned 64/64/4)
constexpr int CPL = BLOCK_N / 32;         // keys per lane in Q*K^T (2 in 64/64/4)
constexpr int KPW = BLOCK_N / NUM_WARPS;  // keys per warp in the K/V tile loads (16 in 64/64/4)
constexpr int PV_ROWS = 8;                // rows per half-warp in P*V: one 16-byte vector of P

// What the authors asserted. Not asserted, and relied on by the 16-byte shared-memory accesses
// below: RPW % 4 == 0 (E), KPW % 8 == 0 (B), RPW % 8 == 0 (A) and RPW == 2 * PV_ROWS (C). The
// tuned 64/64/4 satisfies all four.
static_assert(EB == 2, "16-bit elements only");
static_assert(BLOCK_M % NUM_WARPS == 0, "each warp owns BLOCK_M / NUM_WARPS query rows");
static_assert(BLOCK_N % NUM_WARPS == 0, "each warp loads BLOCK_N / NUM_WARPS keys");
static_assert(BLOCK_N % 32 == 0, "each lane owns BLOCK_N / 32 keys");
static_assert(MAX_SEQ % BLOCK_N == 0, "whole K/V tiles up to seq 512");
static_assert(D == 4 * 16, "16 lanes x 4 features cover head_dim in P*V");

constexpr int SQT_OFF = 0;
constexpr int SKT_OFF = SQT_OFF + EB * D * BLOCK_M;
constexpr int SV_OFF = SKT_OFF + EB * D * BLOCK_N;
constexpr int SPT_OFF = SV_OFF + EB * BLOCK_N * D;
constexpr int SROW_OFF = SPT_OFF + EB * BLOCK_N * BLOCK_M;
constexpr int SMEM_BYTES = SROW_OFF + 3 * 4 * BLOCK_M;
static_assert(SMEM_BYTES == 140 * BLOCK_M + 256 * BLOCK_N + 2 * BLOCK_M * BLOCK_N,
              "keep the manifests' shared_bytes in step with this layout");

__device__ __forceinline__ uint4 zero_u4() {
    uint4 z;
    z.x = 0u; z.y = 0u; z.z = 0u; z.w = 0u;
    return z;
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 2)
fa_s512_fwd(const cf_elem* __restrict__ q, const cf_elem* __restrict__ k,
            const cf_elem* __restrict__ v, cf_elem* __restrict__ o,
            int batch, int heads_q, int heads_kv, int seq_q, int seq_k, int head_dim,
            int causal, float scale,
            long long q_sb, long long q_sh, long long q_ss, long long q_sd,
            long long k_sb, long long k_sh, long long k_ss, long long k_sd,
            long long v_sb, long long v_sh, long long v_ss, long long v_sd,
            long long o_sb, long long o_sh, long long o_ss, long long o_sd) {
    extern __shared__ __align__(16) unsigned char smem[];
    cf_elem* sQt = reinterpret_cast<cf_elem*>(smem + SQT_OFF);
    cf_elem* sKt = reinterpret_cast<cf_elem*>(smem + SKT_OFF);
    cf_elem* sV = reinterpret_cast<cf_elem*>(smem + SV_OFF);
    cf_elem* sPt = reinterpret_cast<cf_elem*>(smem + SPT_OFF);
    float* sRow = reinterpret_cast<float*>(smem + SROW_OFF);
    float* sAlpha = sRow;                // exp(m_old - m_new) of the current tile, per row
    float* sM = sRow + BLOCK_M;          // running max per query row
    float* sL = sRow + 2 * BLOCK_M;      // running sum of exp per query row
    (void)batch;
    (void)q_sd; (void)k_sd; (void)v_sd; (void)o_sd;  // assumed 1 ("inner_contiguous")
    if (head_dim != D) return;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m0 = blockIdx.x * BLOCK_M, h = blockIdx.y, b = blockIdx.z;
    const int hkv = h / (heads_q / heads_kv);
    const cf_elem* qb = q + (long long)b * q_sb + (long long)h * q_sh;
    const cf_elem* kb = k + (long long)b * k_sb + (long long)hkv * k_sh;
    const cf_elem* vb = v + (long long)b * v_sb + (long long)hkv * v_sh;
    cf_elem* ob = o + (long long)b * o_sb + (long long)h * o_sh;

    // ---- 1. Row statistics: m = -inf, l = 0 for this warp's rows, "vectorised".
    if (lane < RPW / 4) {
#pragma unroll
        for (int st = 0; st < 2; ++st) {
            const float fill = st == 0 ? CF_NEG_INF_F : 0.0f;
            float4 f4;
            f4.x = fill; f4.y = fill; f4.z = fill; f4.w = fill;
            // BUG E (80/64/8): the warp's slice of sM / sL is written as float4 at
            // sRow + (1+st)*BLOCK_M + warp*RPW + 4*lane; it starts warp*RPW*4 bytes in, a multiple
            // of 16 only when RPW % 4 == 0. RPW = 10: warp 1 writes at byte 40 -> misaligned. (The
            // last RPW % 4 rows of each warp would also stay uninitialised.)
            *reinterpret_cast<float4*>(sRow + (1 + st) * BLOCK_M + warp * RPW + 4 * lane) = f4;
        }
    }

    // ---- 2. Q tile -> sQt (transposed), 16-byte global loads; rows past seq_q are zero.
    for (int i = tid; i < BLOCK_M * CHUNKS; i += NUM_THREADS) {
        const int r = i / CHUNKS, c = i % CHUNKS;
        uint4 raw = zero_u4();
        if (m0 + r < seq_q)
            // ALIGN-ASSUMPTION (q): needs q and q.stride_b/h/s * 2 bytes multiples of 16.
            raw = *reinterpret_cast<const uint4*>(qb + (long long)(m0 + r) * q_ss + c * VEC);
        const cf_elem* e = reinterpret_cast<const cf_elem*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) sQt[(c * VEC + j) * BLOCK_M + r] = e[j];
    }
    __syncthreads();

    // Keys this block can need: row i attends j <= i + seq_k - seq_q (causal), at most MAX_SEQ.
    int n_end = seq_k;
    if (causal) n_end = min(seq_k, max(0, m0 + BLOCK_M + seq_k - seq_q));
    n_end = min(n_end, MAX_SEQ);

    const int half = lane >> 4, dq = lane & 15;
    const int prow0 = half * (RPW / 2);          // this half-warp's first row in the warp
    cf_elem* pw = sPt + warp * (BLOCK_N * RPW);  // this warp's P, [BLOCK_N][RPW]
    float acc[PV_ROWS][4];
#pragma unroll
    for (int i = 0; i < PV_ROWS; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

#pragma unroll 1
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        // ---- 3a. K tile -> sKt[d][n]. Warp w owns keys [w*KPW, w*KPW + KPW) of the tile, in
        // blocks of 8 keys; a lane takes one 8-key x 8-feature block: 8 16-byte loads (one per
        // key), an 8x8 transpose in registers, 8 16-byte stores (one per feature).
        for (int item = lane; item < (KPW + 7) / 8 * CHUNKS; item += 32) {
            const int c = item % CHUNKS;
            const int nb = warp * KPW + (item / CHUNKS) * 8;  // first key of the block
            uint4 rows[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                rows[j] = zero_u4();
                if (n0 + nb + j < seq_k)
                    // ALIGN-ASSUMPTION (k): needs k and k.stride_b/h/s * 2 bytes multiples of 16.
                    rows[j] = *reinterpret_cast<const uint4*>(kb + (long long)(n0 + nb + j) * k_ss + c * VEC);
            }
#pragma unroll
            for (int f = 0; f < VEC; ++f) {
                uint4 col;
                cf_elem* ce = reinterpret_cast<cf_elem*>(&col);
#pragma unroll
                for (int j = 0; j < 8; ++j) ce[j] = reinterpret_cast<const cf_elem*>(&rows[j])[f];
                // BUG B (128/32/8): the 8-key block starts at key warp*KPW, assumed a multiple of
                // 8, and (KPW + 7) / 8 rounds a short warp share up to a whole block. With
                // BLOCK_N = 32 and 8 warps, KPW = 4: odd warps store at byte 8 of a 16-byte
                // unit -> misaligned (and warps overlap; warp 7 runs 4 keys past the tile).
                *reinterpret_cast<uint4*>(sKt + (c * VEC + f) * BLOCK_N + nb) = col;
            }
        }
        // ---- 3b. V tile -> sV[n][d], same warp-centric rows, 16-byte copies.
        for (int i = lane; i < KPW * CHUNKS; i += 32) {
            const int r = warp * KPW + i / CHUNKS, c = i % CHUNKS;
            uint4 raw = zero_u4();
            if (n0 + r < seq_k)
                // ALIGN-ASSUMPTION (v): needs v and v.stride_b/h/s * 2 bytes multiples of 16.
                raw = *reinterpret_cast<const uint4*>(vb + (long long)(n0 + r) * v_ss + c * VEC);
            *reinterpret_cast<uint4*>(sV + r * D + c * VEC) = raw;
        }
        __syncthreads();

        // ---- 4. S = Q K^T for this warp's RPW rows x this lane's CPL keys, outer products over
        // d (element reads: the compiler vectorises what it can prove aligned).
        float s[RPW][CPL];
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int c = 0; c < CPL; ++c) s[r][c] = 0.0f;
        const cf_elem* qcol = sQt + warp * RPW;
        const cf_elem* kcol = sKt + lane;
#pragma unroll 2
        for (int d = 0; d < D; ++d) {
            float qf[RPW], kf[CPL];
#pragma unroll
            for (int r = 0; r < RPW; ++r) qf[r] = cf_to_float(qcol[d * BLOCK_M + r]);
#pragma unroll
            for (int c = 0; c < CPL; ++c) kf[c] = cf_to_float(kcol[d * BLOCK_N + 32 * c]);
#pragma unroll
            for (int r = 0; r < RPW; ++r)
#pragma unroll
                for (int c = 0; c < CPL; ++c) s[r][c] = fmaf(qf[r], kf[c], s[r][c]);
        }

        // ---- 5. Scale, mask, online softmax (s becomes p), then P (rounded to cf_elem) -> sPt.
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            const int row = warp * RPW + r;
            const int lim = causal ? m0 + row + seq_k - seq_q : seq_k - 1;
            float mx = CF_NEG_INF_F;
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int kj = n0 + lane + 32 * c;
                s[r][c] = (kj < seq_k && kj <= lim) ? s[r][c] * scale : CF_NEG_INF_F;
                mx = fmaxf(mx, s[r][c]);
            }
            mx = cf_warp_max(mx);
            const float m_old = sM[row];
            const float m_new = fmaxf(m_old, mx);
            const float m_use = m_new == CF_NEG_INF_F ? 0.0f : m_new;  // no (-inf) - (-inf)
            float rs = 0.0f;
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                s[r][c] = expf(s[r][c] - m_use);
                rs += s[r][c];
            }
            rs = cf_warp_sum(rs);
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(m_old - m_use);
                sM[row] = m_new;
                sL[row] = sL[row] * alpha + rs;
                sAlpha[row] = alpha;
            }
        }
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            cf_elem* pcol = pw + (lane + 32 * c) * RPW;  // column of key lane + 32*c
#pragma unroll
            for (int i = 0; i < RPW; i += VEC) {
                uint4 pk;
                cf_elem* pe = reinterpret_cast<cf_elem*>(&pk);
#pragma unroll
                for (int j = 0; j < VEC; ++j) pe[j] = cf_from_float(i + j < RPW ? s[i + j][c] : 0.0f);
                // BUG A (80/64/4; also in 80/64/8, masked by E): P columns are RPW elements apart
                // and written as 16-byte vectors at pw + n*RPW + i, aligned only when RPW % 8 == 0.
                // RPW = 20: the column of every odd key n starts at byte 40*n -> misaligned
                // (odd lanes; rows past RPW are zero-padded into the next column, a latent race).
                *reinterpret_cast<uint4*>(pcol + i) = pk;
            }
        }
        __syncthreads();

        // ---- 6. acc = alpha * acc + P V: half-warp `half` owns PV_ROWS rows from prow0, lane dq
        // owns features 4*dq .. 4*dq+3.
#pragma unroll
        for (int i = 0; i < PV_ROWS; ++i) {
            const float a = sAlpha[warp * RPW + prow0 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] *= a;
        }
#pragma unroll 4
        for (int n = 0; n < BLOCK_N; ++n) {
            const uint2 vraw = *reinterpret_cast<const uint2*>(sV + n * D + 4 * dq);
            const cf_elem* ve = reinterpret_cast<const cf_elem*>(&vraw);
            float vf[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) vf[j] = cf_to_float(ve[j]);
            // BUG C (64/64/8; also in 80/64/x, masked by A / E): the P*V register tile is fixed at
            // PV_ROWS = 8 rows per half-warp (one 16-byte vector of P per key) but the upper
            // half-warp starts at row prow0 = RPW / 2. With RPW = 8 that is row 4: the vector at
            // pw + n*RPW + 4 sits at byte 8 of a 16-byte unit -> misaligned (it would also cover
            // rows 4..11, four of them the next warp's; warp 7's run past the tile, which is why
            // sAlpha, read for those rows above, comes first in sRow: the overrun stays in bounds).
            const uint4 praw = *reinterpret_cast<const uint4*>(pw + n * RPW + prow0);
            const cf_elem* pe = reinterpret_cast<const cf_elem*>(&praw);
#pragma unroll
            for (int i = 0; i < PV_ROWS; ++i) {
                const float p = cf_to_float(pe[i]);
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(p, vf[j], acc[i][j]);
            }
        }
        __syncthreads();  // before the next tile overwrites sKt, sV and sPt
    }

    // ---- 7. O = acc / l (0 for a row with no allowed key), staged in sQt's space as [BLOCK_M][D].
    cf_elem* sO = sQt;
#pragma unroll
    for (int i = 0; i < PV_ROWS; ++i) {
        const int row = warp * RPW + prow0 + i;
        const float l = sL[row];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        uint2 packed;
        cf_elem* pe = reinterpret_cast<cf_elem*>(&packed);
#pragma unroll
        for (int j = 0; j < 4; ++j) pe[j] = cf_from_float(acc[i][j] * inv);
        *reinterpret_cast<uint2*>(sO + row * D + 4 * dq) = packed;
    }
    __syncthreads();

    // ---- 8. O tile -> global, 16-byte stores; rows past seq_q are not written.
    for (int i = tid; i < BLOCK_M * CHUNKS; i += NUM_THREADS) {
        const int r = i / CHUNKS, c = i % CHUNKS;
        if (m0 + r < seq_q)
            // ALIGN-ASSUMPTION (o): needs o and o.stride_b/h/s * 2 bytes multiples of 16.
            *reinterpret_cast<uint4*>(ob + (long long)(m0 + r) * o_ss + c * VEC) = *reinterpret_cast<const uint4*>(sO + r * D + c * VEC);
    }
}
