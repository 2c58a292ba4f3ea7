// flash_fwd_kernel.cuh: the body of flash_fwd (FlashAttention-2 forward) and its planted-bug
// mutants. The entry point, the define checks and the instantiation are in flash_fwd.cu; the
// tile shape and its rules are in traits/flash_traits.cuh. This file reads only `Tr::` constants
// and the Flash_fwd_params of one launch (FlashAttention's flash_fwd_kernel.h split).
//
// ------------------------------------------------------------------------------------------------
// Algorithm (one CTA = BLOCK_M query rows of one (batch b, query head h)):
//   hkv = h / (heads_q / heads_kv)                                  (GQA / MQA)
//   load Q rows [m_start, m_start + BLOCK_M) into sQ (rows >= seq_q and columns >= head_dim: 0)
//   for each key tile [n0, n0 + BLOCK_N) that holds at least one allowed key:
//       load K and V rows of the tile into sK, sV (rows >= seq_k and columns >= head_dim: 0)
//       S = Q Kᵀ                     (tensor cores, fp32 accumulators, in registers)
//       mask: key >= seq_k, or causal and key > query + seq_k - seq_q      ->  S = -inf
//       online softmax per row: m_new = max(m, max_j S); alpha = 2^((m - m_new) * scale*log2 e)
//                               P = 2^(S * scale*log2 e - m_new * scale*log2 e)
//                               l = alpha * l + Σ_j P;  O = alpha * O
//       O += P V                     (P rounded to f16/bf16, as FlashAttention does)
//   O /= l (a row with no allowed key has l = 0 and writes 0); lse = m * scale + ln l (or -inf)
//   each warp stages its output rows in its own sQ rows, then stores them.
// The scale is positive (the harness guarantees scale > 0), so the row max of the raw scores is
// the row max of the scaled scores; masking writes -inf after the product, never multiplies it.
//
// Pipeline (cp.async, FlashAttention-2's order; only the 16-byte path is asynchronous, the
// scalar path stores synchronously at the same points, which the same barriers order):
//   prologue: Q, K(0) -> commit
//   loop nb:  wait; __syncthreads (A)   [sK(nb), sQ landed; everyone done reading sV(nb-1)]
//             V(nb) -> commit           [overlaps S = Q Kᵀ]
//             S, mask, softmax
//             wait; __syncthreads (B)   [sV(nb) landed; everyone done reading sK(nb)]
//             K(nb+1) -> commit         [overlaps O += P V]
//             O += P V
//
// Global memory access, decided per tensor for the (b, head) slice a CTA touches: the 16-byte
// path (cp.async for q/k/v, st.global.v4 for o) when the slice's base address is 16-byte aligned,
// stride_s is a multiple of 8 elements (16 bytes), stride_d == 1 and head_dim % 8 == 0 (so every
// row is whole 16-byte chunks at 16-byte-aligned addresses); otherwise a scalar 2-byte path that
// honours every stride and never touches an element outside [0, seq) x [0, head_dim). One odd
// tensor does not slow the others, and the decision is uniform inside a CTA. All element offsets
// are 64-bit (flash_index_t), so tensors past 2^31 elements work.
//
// ------------------------------------------------------------------------------------------------
// Tensor-core fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16", f16/bf16 A and B, f32 C).
// In a warp, lane L has g = L >> 2 (groupID, 0..7) and t = L & 3 (threadID_in_group, 0..3).
//   A (16 x 16, "row"), 4 b32 registers a[0..3], two 16-bit elements each (low half first):
//       a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
//       a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]
//   B (16 x 8, "col", element B[k][n]), 2 b32 registers:
//       b[0] = B[2t, 2t+1][g]          b[1] = B[2t+8, 2t+9][g]
//   C / D (16 x 8, f32), 4 floats:
//       c[0] = C[g][2t]  c[1] = C[g][2t+1]  c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
//
// S = Q Kᵀ, per m-tile mt (rows r0 = warp_row0 + 16 mt of the CTA tile), n8 tile nt (keys
// n0 + 8 nt ..), k-step ks (head-dim columns 16 ks ..):
//   A = Q[r0 .. r0+15][16ks .. 16ks+15]: a[0] = sQ[r0+g][16ks+2t..], a[1] = sQ[r0+g+8][16ks+2t..],
//       a[2] = sQ[r0+g][16ks+8+2t..], a[3] = sQ[r0+g+8][16ks+8+2t..]
//     ldmatrix.x4 (no trans) with lane L pointing at row r0 + (L & 7) + 8 ((L >> 3) & 1), column
//     16 ks + 8 (L >> 4): matrix 0 = rows 0-7 / cols 0-7 -> a[0]; matrix 1 = rows 8-15 / cols 0-7
//     -> a[1]; matrix 2 = rows 0-7 / cols 8-15 -> a[2]; matrix 3 = rows 8-15 / cols 8-15 -> a[3].
//     (ldmatrix gives lane L row L/4 = g, elements 2(L%4) = 2t and 2t+1 of each matrix: exactly
//     the A layout above.)
//   B[k = d][n = key] = K[key][d]: b[0] = sK[n0' + g][16ks + 2t, +1], b[1] = sK[n0' + g][16ks+8+2t, +1]
//     where n0' = 8 nt: two consecutive 16-bit elements of one sK row, i.e. a non-transposed
//     ldmatrix of the 8 x 8 block (rows = keys, cols = d). One ldmatrix.x4 loads the n8 tiles
//     2np and 2np+1: lane L points at key 16 np + (L & 7) + 8 (L >> 4), column 16 ks + 8 ((L >> 3)
//     & 1): matrix 0 = keys 0-7 / d 0-7 -> b[2np][0]; matrix 1 = keys 0-7 / d 8-15 -> b[2np][1];
//     matrix 2 = keys 8-15 / d 0-7 -> b[2np+1][0]; matrix 3 = keys 8-15 / d 8-15 -> b[2np+1][1].
//   C: s[mt][nt][e] is S[row = r0 + g + 8 (e >> 1)][key = n0 + 8 nt + 2t + (e & 1)].
//
// O += P V, per m-tile mt, k-step kk (keys n0 + 16 kk ..), n8 tile ot (output columns 8 ot ..):
//   A = P[rows][keys 16kk .. 16kk+15], taken from the S accumulators without moving data
//   between lanes (the C layout of two n8 tiles is the A layout of one k16 step):
//       a[0] = (s[mt][2kk  ][0], s[mt][2kk  ][1])   row g,     keys 16kk + 2t, +1
//       a[1] = (s[mt][2kk  ][2], s[mt][2kk  ][3])   row g + 8, keys 16kk + 2t, +1
//       a[2] = (s[mt][2kk+1][0], s[mt][2kk+1][1])   row g,     keys 16kk + 8 + 2t, +1
//       a[3] = (s[mt][2kk+1][2], s[mt][2kk+1][3])   row g + 8, keys 16kk + 8 + 2t, +1
//   B[k = key][n = d] = V[key][d]: b[0] = (sV[16kk + 2t][8ot + g], sV[16kk + 2t + 1][8ot + g]),
//     b[1] = the same for keys 16kk + 8 + 2t, +1: elements of one column of sV, i.e. the
//     transposed ldmatrix of the 8 x 8 block (rows = keys, cols = d): with .trans lane L gets rows
//     2(L%4), 2(L%4)+1 of column L/4. One ldmatrix.x4.trans loads the n8 tiles 2dp and 2dp+1: lane
//     L points at key 16 kk + (L & 7) + 8 ((L >> 3) & 1), column 16 dp + 8 (L >> 4): matrix 0 =
//     keys 0-7 / d 0-7 -> b[2dp][0]; matrix 1 = keys 8-15 / d 0-7 -> b[2dp][1]; matrix 2 = keys
//     0-7 / d 8-15 -> b[2dp+1][0]; matrix 3 = keys 8-15 / d 8-15 -> b[2dp+1][1].
//   C: acc_o[mt][ot][e] is O[row = r0 + g + 8 (e >> 1)][col = 8 ot + 2t + (e & 1)].
//
// Row statistics: the row r0 + g + 8 hh (hh = 0, 1) of m-tile mt lives in s[mt][*][2hh], [2hh+1]
// of the four lanes 4g .. 4g+3 (one quad); row max and row sum are reduced with __shfl_xor 1 and 2,
// which stay inside the quad. row_max[mt][hh] is the same in the four lanes; row_sum[mt][hh] is
// each lane's partial sum (its own columns), rescaled by the same alpha in every lane, and
// reduced over the quad once at the end (as FlashAttention-2 does).
//
// ------------------------------------------------------------------------------------------------
// Planted bugs (the mutant zoo, kernels/mutants/): each MUTANT_<NAME>=1 define flips one tiny
// `#if` below, marked "planted". At most one may be set.
//   MUTANT_UNCHECKED_VEC       16-byte path chosen without checking base / stride alignment
//   MUTANT_NO_SYNC             no __syncthreads (B) between filling sV and reading it
//   MUTANT_SEQK_TAIL           the last key tile loads rows past seq_k (no row mask on K/V loads)
//   MUTANT_SEQQ_TAIL           the store writes rows past seq_q
//   MUTANT_CAUSAL_OFF_BY_ONE   causal mask lets key query + seq_k - seq_q + 1 through
//   MUTANT_HDIM_VEC_TAIL       16-byte path accepted for head_dim % 8 != 0 (rows read/written in
//                              whole chunks, past head_dim)
//   MUTANT_CONTIG_ROWS         row stride assumed to be head_dim (contiguous rows)
//   MUTANT_GQA_DIVISOR         kv head = h / heads_kv instead of h / (heads_q / heads_kv)
//   MUTANT_SMEM_DEFAULT_TILE   sK placed after 64 rows of sQ (the default BLOCK_M) whatever BLOCK_M
//   MUTANT_INT32_OFFSET        element offsets computed in 32-bit int
//   MUTANT_READ_O              the epilogue reads o before writing it (o = 0 * o_old + out)
#pragma once

#include "cudafuzz.cuh"
#include "cf_ptx.cuh"
#include "../traits/flash_traits.cuh"

#ifndef MUTANT_UNCHECKED_VEC
#define MUTANT_UNCHECKED_VEC 0
#endif
#ifndef MUTANT_NO_SYNC
#define MUTANT_NO_SYNC 0
#endif
#ifndef MUTANT_SEQK_TAIL
#define MUTANT_SEQK_TAIL 0
#endif
#ifndef MUTANT_SEQQ_TAIL
#define MUTANT_SEQQ_TAIL 0
#endif
#ifndef MUTANT_CAUSAL_OFF_BY_ONE
#define MUTANT_CAUSAL_OFF_BY_ONE 0
#endif
#ifndef MUTANT_HDIM_VEC_TAIL
#define MUTANT_HDIM_VEC_TAIL 0
#endif
#ifndef MUTANT_CONTIG_ROWS
#define MUTANT_CONTIG_ROWS 0
#endif
#ifndef MUTANT_GQA_DIVISOR
#define MUTANT_GQA_DIVISOR 0
#endif
#ifndef MUTANT_SMEM_DEFAULT_TILE
#define MUTANT_SMEM_DEFAULT_TILE 0
#endif
#ifndef MUTANT_INT32_OFFSET
#define MUTANT_INT32_OFFSET 0
#endif
#ifndef MUTANT_READ_O
#define MUTANT_READ_O 0
#endif
#if (MUTANT_UNCHECKED_VEC + MUTANT_NO_SYNC + MUTANT_SEQK_TAIL + MUTANT_SEQQ_TAIL +                \
     MUTANT_CAUSAL_OFF_BY_ONE + MUTANT_HDIM_VEC_TAIL + MUTANT_CONTIG_ROWS + MUTANT_GQA_DIVISOR + \
     MUTANT_SMEM_DEFAULT_TILE + MUTANT_INT32_OFFSET + MUTANT_READ_O) > 1
#error "set at most one MUTANT_* define: each mutant plants exactly one bug"
#endif

// Element offsets into q, k, v, o: flash_off(i, stride) = i * stride, added to a pointer one
// product at a time (no sums of offsets), 64-bit.
#if MUTANT_INT32_OFFSET
typedef int flash_index_t;
// planted: 32-bit element offsets, wrapping once a product reaches 2^31. Computed in unsigned so
// the wrap is certain: a signed int overflow would be undefined behaviour that the optimiser may
// widen to 64 bits, silently fixing the bug.
__device__ __forceinline__ flash_index_t flash_off(long long i, long long stride) {
    return (int)((unsigned)i * (unsigned)stride);
}
#else
typedef long long flash_index_t;
__device__ __forceinline__ flash_index_t flash_off(long long i, long long stride) { return i * stride; }
#endif

// One launch's arguments (FlashAttention's Flash_fwd_params, flattened). Elements are handled
// as raw 16-bit patterns (f16 or bf16) until they reach the tensor cores.
struct Flash_fwd_params {
    const unsigned short* q;  // [batch, heads_q, seq_q, head_dim] at q_s* strides (elements)
    const unsigned short* k;  // [batch, heads_kv, seq_k, head_dim] at k_s*
    const unsigned short* v;  // [batch, heads_kv, seq_k, head_dim] at v_s*
    unsigned short* o;        // [batch, heads_q, seq_q, head_dim] at o_s*
    float* lse;               // dense [batch, heads_q, seq_q] log-sum-exp (natural log), or null
    int batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
    int causal;   // 0 or 1; bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q
    float scale;  // softmax scale (> 0) applied to q·k
    long long q_sb, q_sh, q_ss, q_sd;
    long long k_sb, k_sh, k_ss, k_sd;
    long long v_sb, v_sh, v_ss, v_sd;
    long long o_sb, o_sh, o_ss, o_sd;
};

// Whether the 16-byte path may serve the rows of one (b, head) slice starting at `bh`: every
// row start bh + s * ss must be 16-byte aligned and every row whole 16-byte chunks.
__device__ __forceinline__ bool flash_use_vec(const unsigned short* bh, long long ss, long long sd,
                                              int head_dim) {
    const bool base_ok = (reinterpret_cast<unsigned long long>(bh) & 15ull) == 0;
    const bool pitch_ok = (ss & 7) == 0;  // 8 elements = 16 bytes
#if MUTANT_UNCHECKED_VEC
    (void)base_ok;
    (void)pitch_ok;
    return sd == 1 && head_dim % 8 == 0;  // planted: alignment of base and row pitch not checked
#elif MUTANT_HDIM_VEC_TAIL
    return base_ok && pitch_ok && sd == 1;  // planted: head_dim % 8 != 0 accepted
#else
    return base_ok && pitch_ok && sd == 1 && head_dim % 8 == 0;
#endif
}

// The end (exclusive) of the key rows that a K/V tile starting at key n0 may load.
template <class Tr>
__device__ __forceinline__ int flash_kv_row_end(int n0, int seq_k) {
#if MUTANT_SEQK_TAIL
    (void)seq_k;
    return n0 + Tr::kBlockN;  // planted: the tail tile reads rows past seq_k
#else
    (void)n0;
    return seq_k;
#endif
}

// Whether output row `row` may be stored.
__device__ __forceinline__ bool flash_store_row(int row, int seq_q) {
#if MUTANT_SEQQ_TAIL
    (void)row;
    (void)seq_q;
    return true;  // planted: rows past seq_q (the padding of the last query tile) are stored
#else
    return row < seq_q;
#endif
}

// Fills kRows rows of a shared tile (pitch Tr::kPitch) from global rows row0 .. row0 + kRows - 1
// of one (b, head) slice `bh` (row stride ss, column stride sd, elements). Rows at or past
// row_end and columns in [head_dim, d_pad) are written as 0; columns at or past d_pad (head_dim
// rounded up to 16, the last column any k-step reads) are left alone. `vec`: the 16-byte cp.async
// path (the caller commits the group); else scalar loads and shared stores. Global memory is
// read only at rows < row_end and columns < head_dim (unless a mutant says otherwise).
template <class Tr, int kRows>
__device__ __forceinline__ void flash_load_tile(unsigned short* sm, const unsigned short* bh, long long ss,
                                                long long sd, int row0, int row_end, int head_dim,
                                                int d_pad, bool vec, int tid) {
    if (vec) { CF_COVER(0);  // 16-byte path
        // Thread tid always moves the same 8-element chunk of its rows: columns col .. col + 7
        // with col = 8 (tid % kChunksPerRow), rows tid / kChunksPerRow + i * kRowsPerIter.
        constexpr int kRowsPerIter = Tr::kNThreads / Tr::kChunksPerRow;
        const int col = (tid % Tr::kChunksPerRow) * 8;
        if (col < d_pad) {
            const bool col_in = col < head_dim;
#pragma unroll
            for (int i = 0; i < (kRows + kRowsPerIter - 1) / kRowsPerIter; ++i) {
                const int r = tid / Tr::kChunksPerRow + i * kRowsPerIter;
                if (kRows % kRowsPerIter != 0 && r >= kRows) break;
                unsigned short* dst = sm + r * Tr::kPitch + col;
                const int grow = row0 + r;
                if (grow < row_end && col_in) {
                    cf_cp_async_16(cf_smem_addr(dst), bh + flash_off(grow, ss) + col); CF_COVER(1);
                } else {
                    *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u); CF_COVER(2);  // tail row or pad column
                }
            }
        }
    } else {
        // One warp per row, lanes across the columns (coalesced when sd == 1).
        const int warp = tid >> 5, lane = tid & 31; CF_COVER(3);  // scalar path
        for (int r = warp; r < kRows; r += Tr::kNWarps) {
            const int grow = row0 + r;
            unsigned short* dst = sm + r * Tr::kPitch;
            if (grow < row_end) {
                const unsigned short* src = bh + flash_off(grow, ss);
                for (int col = lane; col < d_pad; col += 32) {
                    unsigned short x = 0;
                    if (col < head_dim) x = src[flash_off(col, sd)]; else CF_COVER(4);
                    dst[col] = x;
                }
            } else {
                for (int col = lane; col < d_pad; col += 32) dst[col] = 0; CF_COVER(5);  // tail row
            }
        }
    }
}

template <class Tr>
__device__ __forceinline__ void flash_fwd_block(const Flash_fwd_params& p) {
    constexpr int kBlockM = Tr::kBlockM;
    constexpr int kBlockN = Tr::kBlockN;
    constexpr int kPitch = Tr::kPitch;
    constexpr int kMTiles = Tr::kMTiles;
    constexpr int kNTilesS = Tr::kNTilesS;
    constexpr int kNTilesO = Tr::kNTilesO;
    constexpr float kLog2e = 1.4426950408889634f;

    extern __shared__ __align__(16) unsigned char flash_smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(flash_smem);
#if MUTANT_SMEM_DEFAULT_TILE
    unsigned short* sK = sQ + 64 * kPitch;  // planted: carve-up written for the default BLOCK_M = 64
#else
    unsigned short* sK = sQ + Tr::kSmemQElems;
#endif
    unsigned short* sV = sK + Tr::kSmemKElems;

    const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2;  // groupID
    const int t = lane & 3;   // threadID_in_group
    const int warp_row0 = warp * Tr::kWarpRows;  // first CTA-tile row of this warp

    const int head_dim = p.head_dim;
    // Outside the contract (the manifest's head_dim range): fail loudly rather than compute
    // something plausible.
    if (head_dim < 1 || head_dim > Tr::kHeadDimMax) __trap();
    const int d_pad = (head_dim + 15) & ~15;  // columns that k-steps read
    if (d_pad != head_dim) CF_COVER(6);  // padded columns

#if MUTANT_GQA_DIVISOR
    const int hkv = h / p.heads_kv;  // planted: wrong divisor (heads_kv instead of the group size)
#else
    const int hkv = h / (p.heads_q / p.heads_kv); if (p.heads_q != p.heads_kv) CF_COVER(7); if (hkv != 0) CF_COVER(8);
#endif

    long long q_ss = p.q_ss, k_ss = p.k_ss, v_ss = p.v_ss, o_ss = p.o_ss;
#if MUTANT_CONTIG_ROWS
    q_ss = k_ss = v_ss = o_ss = head_dim;  // planted: rows assumed contiguous (stride_s = head_dim)
#endif

    const unsigned short* q_bh = p.q + flash_off(b, p.q_sb) + flash_off(h, p.q_sh);
    const unsigned short* k_bh = p.k + flash_off(b, p.k_sb) + flash_off(hkv, p.k_sh);
    const unsigned short* v_bh = p.v + flash_off(b, p.v_sb) + flash_off(hkv, p.v_sh);
    unsigned short* o_bh = p.o + flash_off(b, p.o_sb) + flash_off(h, p.o_sh);
    const bool q_vec = flash_use_vec(q_bh, q_ss, p.q_sd, head_dim);
    const bool k_vec = flash_use_vec(k_bh, k_ss, p.k_sd, head_dim);
    const bool v_vec = flash_use_vec(v_bh, v_ss, p.v_sd, head_dim);
    const bool o_vec = flash_use_vec(o_bh, o_ss, p.o_sd, head_dim); if (q_vec) CF_COVER(9); else CF_COVER(10); if (k_vec) CF_COVER(11); else CF_COVER(12); if (v_vec) CF_COVER(13); else CF_COVER(14); if (o_vec) CF_COVER(15); else CF_COVER(16);

    const int m_start = m_block * kBlockM;
    const int m_end = min(m_start + kBlockM, p.seq_q);  // valid rows of this CTA: [m_start, m_end)
    if (m_end - m_start < kBlockM) CF_COVER(17);  // tail query tile
    const int diag = p.seq_k - p.seq_q;                 // causal: key j allowed for row i iff j <= i + diag
    // Keys [0, n_key_end) hold every key an allowed row of this CTA can see; causal: the last
    // valid row m_end - 1 sees keys <= m_end - 1 + diag. n_key_end <= 0: no row has any key.
    const int n_key_end = p.causal ? min(p.seq_k, m_end + diag) : p.seq_k;
    const int n_blocks = n_key_end > 0 ? (n_key_end + kBlockN - 1) / kBlockN : 0; if (n_blocks == 0) CF_COVER(18); else if (n_key_end < p.seq_k) CF_COVER(19);

    // ldmatrix lane addresses (bytes, shared window); see the fragment notes at the top.
    const int lrow = lane & 7, lsel1 = (lane >> 3) & 1, lsel2 = lane >> 4;
    const unsigned q_lane = cf_smem_addr(sQ) + ((warp_row0 + lrow + 8 * lsel1) * kPitch + 8 * lsel2) * 2;
    const unsigned k_lane = cf_smem_addr(sK) + ((lrow + 8 * lsel2) * kPitch + 8 * lsel1) * 2;
    const unsigned v_lane = cf_smem_addr(sV) + ((lrow + 8 * lsel1) * kPitch + 8 * lsel2) * 2;

    float acc_o[kMTiles][kNTilesO][4];
    float row_max[kMTiles][2];  // running max of the raw scores q·k (same in the quad)
    float row_sum[kMTiles][2];  // this lane's part of the running Σ 2^(...) (reduced at the end)
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int ot = 0; ot < kNTilesO; ++ot) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mt][ot][e] = 0.0f;
        }
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            row_max[mt][hh] = CF_NEG_INF_F;
            row_sum[mt][hh] = 0.0f;
        }
    }
    const float scale_log2 = p.scale * kLog2e;

    // Prologue: Q and the first K tile.
    if (n_blocks > 0) {
        flash_load_tile<Tr, kBlockM>(sQ, q_bh, q_ss, p.q_sd, m_start, p.seq_q, head_dim, d_pad, q_vec, tid);
        flash_load_tile<Tr, kBlockN>(sK, k_bh, k_ss, p.k_sd, 0, flash_kv_row_end<Tr>(0, p.seq_k), head_dim,
                                     d_pad, k_vec, tid);
        cf_cp_async_commit();
    }

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int n0 = nb * kBlockN;
        cf_cp_async_wait_all();
        __syncthreads();  // (A): sK(nb) and sQ filled by every thread; sV free (PV of nb-1 done)
        flash_load_tile<Tr, kBlockN>(sV, v_bh, v_ss, p.v_sd, n0, flash_kv_row_end<Tr>(n0, p.seq_k), head_dim,
                                     d_pad, v_vec, tid);
        cf_cp_async_commit();

        // ---- S = Q Kᵀ ---------------------------------------------------------------------
        float s[kMTiles][kNTilesS][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
            }
        }
#pragma unroll
        for (int ks = 0; ks < Tr::kKStepsQK; ++ks) {
            if (ks * 16 < head_dim) {  // columns past d_pad are never read (and never filled)
                unsigned a[kMTiles][4];
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt)
                    cf_ldmatrix_x4(a[mt], q_lane + (16 * mt * kPitch + 16 * ks) * 2);
#pragma unroll
                for (int np = 0; np < kNTilesS / 2; ++np) {
                    unsigned bk[4];
                    cf_ldmatrix_x4(bk, k_lane + (16 * np * kPitch + 16 * ks) * 2);
#pragma unroll
                    for (int mt = 0; mt < kMTiles; ++mt) {
                        cf_mma_m16n8k16(s[mt][2 * np], a[mt], bk[0], bk[1]);
                        cf_mma_m16n8k16(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
                    }
                }
            }
        }

        // ---- masks: keys past seq_k (tail tile) and the causal diagonal ---------------------
        // A tile needs no mask when all its keys are < seq_k and, causal, its last key is
        // allowed for the CTA's first row (then for every row below it too).
        const bool need_mask = (n0 + kBlockN > p.seq_k) || (p.causal && n0 + kBlockN - 1 > m_start + diag); if (n0 + kBlockN > p.seq_k) CF_COVER(20); if (p.causal && n0 + kBlockN - 1 > m_start + diag) CF_COVER(21);
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
                for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int row = m_start + warp_row0 + 16 * mt + g + 8 * (e >> 1);
                        const int col = n0 + 8 * nt + 2 * t + (e & 1);
                        bool masked = col >= p.seq_k;
#if MUTANT_CAUSAL_OFF_BY_ONE
                        if (p.causal && col > row + diag + 1) masked = true;  // planted: off by one
#else
                        if (p.causal && col > row + diag) masked = true;
#endif
                        if (masked) s[mt][nt][e] = CF_NEG_INF_F;
                    }
                }
            }
        }

        // ---- online softmax ----------------------------------------------------------------
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                float mx = row_max[mt][hh];
#pragma unroll
                for (int nt = 0; nt < kNTilesS; ++nt)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row with no allowed key so far keeps max -inf: use 0 as the offset so that
                // exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
                const float m_scaled = (mx == CF_NEG_INF_F) ? 0.0f : mx * scale_log2;
                // alpha rescales what was accumulated under the old max; old max -inf -> 0.
                const float alpha = cf_exp2(row_max[mt][hh] * scale_log2 - m_scaled);
                row_max[mt][hh] = mx;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
                    for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
                        const float pe = cf_exp2(fmaf(s[mt][nt][e], scale_log2, -m_scaled));
                        s[mt][nt][e] = pe;
                        sum += pe;
                    }
                }
                row_sum[mt][hh] = row_sum[mt][hh] * alpha + sum;
#pragma unroll
                for (int ot = 0; ot < kNTilesO; ++ot) {
                    acc_o[mt][ot][2 * hh] *= alpha;
                    acc_o[mt][ot][2 * hh + 1] *= alpha;
                }
            }
        }

        cf_cp_async_wait_all();
#if !MUTANT_NO_SYNC
        __syncthreads();  // (B): sV(nb) filled by every thread; sK free (S of nb done everywhere)
#endif
        if (nb + 1 < n_blocks) {
            flash_load_tile<Tr, kBlockN>(sK, k_bh, k_ss, p.k_sd, n0 + kBlockN,
                                         flash_kv_row_end<Tr>(n0 + kBlockN, p.seq_k), head_dim, d_pad, k_vec, tid);
        }
        cf_cp_async_commit();

        // ---- O += P V ----------------------------------------------------------------------
        // P rounded to cf_elem and packed as A fragments, all at once (half the registers of
        // the fp32 scores, which die here).
        unsigned pa[kMTiles][Tr::kKStepsPV][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
                pa[mt][kk][0] = cf_pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][kk][1] = cf_pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][kk][2] = cf_pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][kk][3] = cf_pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < Tr::kKStepsPV; ++kk) {
#pragma unroll
            for (int dp = 0; dp < kNTilesO / 2; ++dp) {
                if (dp * 16 < head_dim) {
                    unsigned bv[4];
                    cf_ldmatrix_x4_trans(bv, v_lane + (16 * kk * kPitch + 16 * dp) * 2);
#pragma unroll
                    for (int mt = 0; mt < kMTiles; ++mt) {
                        cf_mma_m16n8k16(acc_o[mt][2 * dp], pa[mt][kk], bv[0], bv[1]);
                        cf_mma_m16n8k16(acc_o[mt][2 * dp + 1], pa[mt][kk], bv[2], bv[3]);
                    }
                }
            }
        }
    }

    // ---- epilogue: normalise, lse, stage in sQ, store ----------------------------------------
    cf_cp_async_wait_all();  // nothing may still land in sQ (already true: the loop waited)
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float l = row_sum[mt][hh];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            // l == 0 exactly when the row has no allowed key (otherwise its max term is 2^0 = 1).
            const float inv = (l == 0.0f) ? 0.0f : 1.0f / l;
#pragma unroll
            for (int ot = 0; ot < kNTilesO; ++ot) {
                acc_o[mt][ot][2 * hh] *= inv;
                acc_o[mt][ot][2 * hh + 1] *= inv;
            }
            const int row = m_start + warp_row0 + 16 * mt + g + 8 * hh;
            if (p.lse != nullptr && t == 0 && row < p.seq_q) { CF_COVER(22);
                const long long li = ((long long)b * p.heads_q + h) * (long long)p.seq_q + row;
                p.lse[li] = (l == 0.0f) ? CF_NEG_INF_F : row_max[mt][hh] * p.scale + logf(l);
            }
        }
    }

    // Stage this warp's rows (its own sQ rows: no other warp reads them) as cf_elem.
    __syncwarp();  // every lane's last ldmatrix of these rows is done
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int ot = 0; ot < kNTilesO; ++ot) {
            if (ot * 8 < head_dim) {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int r = warp_row0 + 16 * mt + g + 8 * hh;
                    const int col = 8 * ot + 2 * t;
                    float x0 = acc_o[mt][ot][2 * hh], x1 = acc_o[mt][ot][2 * hh + 1];
#if MUTANT_READ_O
                    {  // planted: "o = beta * o + out" with beta = 0 reads o before it is written
                        const int grow = m_start + r;
                        if (grow < p.seq_q) {
                            const unsigned short* orow = o_bh + flash_off(grow, o_ss);
                            unsigned short old0 = orow[flash_off(col, p.o_sd)];
                            x0 += 0.0f * cf_to_float(*reinterpret_cast<const cf_elem*>(&old0));
                            if (col + 1 < head_dim) {
                                unsigned short old1 = orow[flash_off(col + 1, p.o_sd)];
                                x1 += 0.0f * cf_to_float(*reinterpret_cast<const cf_elem*>(&old1));
                            }
                        }
                    }
#endif
                    *reinterpret_cast<unsigned*>(sQ + r * kPitch + col) = cf_pack2(x0, x1);
                }
            }
        }
    }
    __syncwarp();  // staged rows visible to every lane of the warp

    if (o_vec) { CF_COVER(23);
        constexpr int kChunks = Tr::kWarpRows * Tr::kChunksPerRow;
#pragma unroll
        for (int i = 0; i < (kChunks + 31) / 32; ++i) {
            const int idx = lane + 32 * i;
            if (kChunks % 32 != 0 && idx >= kChunks) break;
            const int r = warp_row0 + idx / Tr::kChunksPerRow;
            const int col = (idx % Tr::kChunksPerRow) * 8;
            const int row = m_start + r;
            if (col < head_dim && flash_store_row(row, p.seq_q)) { CF_COVER(24);
                *reinterpret_cast<uint4*>(o_bh + flash_off(row, o_ss) + col) =
                    *reinterpret_cast<const uint4*>(sQ + r * kPitch + col);
            }
        }
    } else {
        for (int rr = 0; rr < Tr::kWarpRows; ++rr) {
            const int r = warp_row0 + rr;
            const int row = m_start + r;
            if (flash_store_row(row, p.seq_q)) { CF_COVER(25);
                unsigned short* orow = o_bh + flash_off(row, o_ss);
                for (int col = lane; col < head_dim; col += 32)
                    orow[flash_off(col, p.o_sd)] = sQ[r * kPitch + col];
            }
        }
    }
}
