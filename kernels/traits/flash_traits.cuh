// flash_traits.cuh: the tile shape of attention/flash_fwd and everything derived from it, with
// the divisibility rules as static_asserts (FlashAttention's kernel_traits.h, without CuTe).
// The kernel body (attention/flash_fwd_kernel.cuh) reads only these constants and its params.
//
// Template parameters (the manifests' HEAD_DIM_MAX, BLOCK_M, BLOCK_N, NUM_WARPS):
//   kHeadDimMax  compile-time upper bound of head_dim (the real head_dim is a runtime argument,
//                1..kHeadDimMax); sizes the shared-memory rows and the output accumulators.
//   kBlockM      query rows per CTA.
//   kBlockN      keys per key tile (one iteration of the main loop).
//   kNWarps      warps per CTA.
//
// Warp mapping: warp w owns the kWarpRows = kBlockM / kNWarps consecutive query rows
// [w * kWarpRows, (w + 1) * kWarpRows) of the CTA's tile, as kMTiles = kWarpRows / 16 m16 tiles
// (m-tile mt = rows w * kWarpRows + 16 * mt .. + 15). A warp computes S = Q Kᵀ and O += P V for
// its rows only, over the whole key tile and the whole head dim, so the softmax statistics of a
// row never leave the four lanes (one quad) that hold it. kMTiles = 1 (kBlockM = 16 * kNWarps)
// or 2 (FlashAttention-2's 128-row, 4-warp tiles); more would only add registers.
//
// Shared memory (dynamic, 16-byte aligned base), three row-major tiles of 16-bit elements:
//   sQ [kBlockM][kPitch]  the CTA's query rows; at the end each warp stages its output rows here
//   sK [kBlockN][kPitch]  the current key tile
//   sV [kBlockN][kPitch]  the current value tile
// kPitch = kHeadDimMax + 8 elements: rows stay 16-byte aligned (kPitch * 2 is a multiple of 16,
// as ldmatrix and cp.async need), and the 16-byte pad shifts consecutive rows by 4 banks, so the 8
// row addresses of one ldmatrix matrix (and the 8 rows a quad-group writes in the epilogue) fall
// in 8 distinct 4-bank groups: no bank conflicts for kHeadDimMax a multiple of 64.
// Total: kSmemBytes = (kBlockM + 2 * kBlockN) * kPitch * 2, the manifests' shared_bytes
// expression "(BLOCK_M + 2 * BLOCK_N) * (HEAD_DIM_MAX + 8) * 2".
#pragma once

template <int kHeadDimMax_, int kBlockM_, int kBlockN_, int kNWarps_>
struct Flash_fwd_traits {
    static constexpr int kHeadDimMax = kHeadDimMax_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kNWarps = kNWarps_;
    static constexpr int kNThreads = kNWarps * 32;

    // Rows per warp and m16 tiles per warp.
    static constexpr int kWarpRows = kBlockM / kNWarps;
    static constexpr int kMTiles = kWarpRows / 16;

    // S = Q Kᵀ per m-tile: kBlockN / 8 n8 tiles, kHeadDimMax / 16 k-steps (the loop stops at
    // the first k-step at or past the runtime head_dim).
    static constexpr int kNTilesS = kBlockN / 8;
    static constexpr int kKStepsQK = kHeadDimMax / 16;
    // O += P V per m-tile: kBlockN / 16 k-steps over keys, kHeadDimMax / 8 n8 tiles of output
    // columns (again only those below the runtime head_dim are computed).
    static constexpr int kKStepsPV = kBlockN / 16;
    static constexpr int kNTilesO = kHeadDimMax / 8;

    // Shared-memory row pitch in elements and tile sizes in elements.
    static constexpr int kPitch = kHeadDimMax + 8;
    static constexpr int kSmemQElems = kBlockM * kPitch;
    static constexpr int kSmemKElems = kBlockN * kPitch;
    static constexpr int kSmemVElems = kBlockN * kPitch;
    static constexpr int kSmemBytes = (kSmemQElems + kSmemKElems + kSmemVElems) * 2;

    // 16-byte chunks (8 elements) per shared-memory row that can hold data.
    static constexpr int kChunksPerRow = kHeadDimMax / 8;

    static_assert(kNWarps >= 1 && kNWarps <= 16, "NUM_WARPS must be 1..16 (at most 512 threads)");
    static_assert(kBlockM % (16 * kNWarps) == 0,
                  "BLOCK_M must be a multiple of 16 * NUM_WARPS: each warp owns whole m16 tiles");
    static_assert(kMTiles == 1 || kMTiles == 2,
                  "each warp owns 16 or 32 query rows (BLOCK_M = 16 or 32 * NUM_WARPS)");
    static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 128,
                  "BLOCK_N must be a multiple of 16 in 16..128 (P V k-steps of 16 keys; ldmatrix "
                  "loads K for two n8 tiles at once)");
    static_assert(kHeadDimMax % 64 == 0 && kHeadDimMax >= 64 && kHeadDimMax <= 256,
                  "HEAD_DIM_MAX must be 64, 128, 192 or 256 (multiple of 64: 16-element k-steps, "
                  "pairs of n8 output tiles, conflict-free padded rows)");
    static_assert((kPitch * 2) % 16 == 0, "shared rows must be 16-byte aligned (ldmatrix, cp.async)");
    static_assert(kKStepsQK * 16 == kHeadDimMax && kNTilesO % 2 == 0, "head-dim tiling");
    static_assert(kNTilesS % 2 == 0, "K is loaded by ldmatrix.x4 for pairs of n8 tiles");
    static_assert(kNThreads % kChunksPerRow == 0,
                  "the 16-byte loader gives each thread a fixed chunk column: threads must cover "
                  "whole rows");
    static_assert(kSmemBytes <= 227 * 1024,
                  "the tiles exceed the largest shared memory a CTA can have (227 KB on sm_90)");
    // Register budget of the fp32 accumulators per thread (S and O): past ~200 of 255 registers
    // the compiler spills.
    static_assert(kMTiles * (kNTilesS + kNTilesO) * 4 <= 192,
                  "too many accumulator registers per thread: lower BLOCK_N, HEAD_DIM_MAX or the "
                  "rows per warp");
};
