// flash_fwd.cu: a FlashAttention-2 forward kernel (tensor-core m16n8k16 MMA through inline PTX,
// fp32 accumulation, online softmax), fp16 and bf16, for any layout and base alignment the
// element size allows. The body is attention/flash_fwd_kernel.cuh (algorithm, pipeline, fragment
// layouts and the mutant list are documented there); the tile shape is traits/flash_traits.cuh.
//
// One CTA per (BLOCK_M query rows, query head, batch): grid (cdiv(seq_q, BLOCK_M), heads_q,
// batch), block (NUM_WARPS * 32), dynamic shared memory (BLOCK_M + 2 * BLOCK_N) *
// (HEAD_DIM_MAX + 8) * 2 bytes (the harness raises the opt-in limit past 48 KB).
//
// Defines (the harness passes them as -D; see include/cudafuzz.cuh):
//   CUDAFUZZ_DTYPE_F16 or CUDAFUZZ_DTYPE_BF16   the element type (f32 is not supported)
//   HEAD_DIM_MAX   64, 128, 192 or 256: compile-time bound; the runtime head_dim is 1..HEAD_DIM_MAX
//   BLOCK_M        query rows per CTA (16 or 32 rows per warp)
//   BLOCK_N        keys per tile (multiple of 16, 16..128)
//   NUM_WARPS      warps per CTA; optional, default BLOCK_M / 16 (each warp owns 16 rows)
//   MUTANT_<NAME>  optional, at most one: a planted bug (kernels/mutants/README.md)
//
// Launch limits the contract cannot express: heads_q <= 65535 and batch <= 65535 (grid y, z);
// the shared memory must fit the GPU (sm_80: 163 KB, sm_86/89: 99 KB, sm_90: 227 KB per CTA):
// HEAD_DIM_MAX 256 with BLOCK_M 128 and BLOCK_N 64 needs 132 KB, so that configuration is
// refused at launch (LaunchRejected) on sm_86/sm_89.
#include "cudafuzz.cuh"
#include "cf_ptx.cuh"
#include "../traits/flash_traits.cuh"
#include "../attention/flash_fwd_kernel.cuh"

#if defined(CUDAFUZZ_DTYPE_F32)
#error "flash_fwd supports f16 and bf16 only (tensor-core m16n8k16 with 16-bit operands)"
#endif
#ifndef HEAD_DIM_MAX
#error "HEAD_DIM_MAX must be defined (manifest [defines] or [params])"
#endif
#ifndef BLOCK_M
#error "BLOCK_M must be defined (manifest [params])"
#endif
#ifndef BLOCK_N
#error "BLOCK_N must be defined (manifest [params])"
#endif
#ifndef NUM_WARPS
#define NUM_WARPS (BLOCK_M / 16)
#endif

typedef Flash_fwd_traits<HEAD_DIM_MAX, BLOCK_M, BLOCK_N, NUM_WARPS> Flash_kernel_traits;

// Arguments, in the manifests' order. Tensors are [B, H, S, D] with element strides (any
// values, stride_d != 1 included) and any 2-byte-aligned base pointer; k and v have heads_kv
// heads (heads_q a multiple of heads_kv; query head h reads kv head h / (heads_q / heads_kv)).
//   q, k, v, o   the tensors (o is written at rows < seq_q, columns < head_dim only)
//   lse          dense [batch, heads_q, seq_q] f32 log-sum-exp (ln Σ_j exp(scale q·k_j) over the
//                allowed keys; -inf for a row with none), or null to skip it
//   batch, heads_q, heads_kv, seq_q, seq_k (>= 1), head_dim (1..HEAD_DIM_MAX)
//   causal       0 or 1; bottom-right aligned: query i attends key j iff j <= i + seq_k - seq_q
//   scale        softmax scale (> 0)
//   {q,k,v,o}_s{b,h,s,d}   element strides
extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32)
flash_fwd(const cf_elem* __restrict__ q, const cf_elem* __restrict__ k, const cf_elem* __restrict__ v,
          cf_elem* __restrict__ o, float* __restrict__ lse,
          int batch, int heads_q, int heads_kv, int seq_q, int seq_k, int head_dim,
          int causal, float scale,
          long long q_sb, long long q_sh, long long q_ss, long long q_sd,
          long long k_sb, long long k_sh, long long k_ss, long long k_sd,
          long long v_sb, long long v_sh, long long v_ss, long long v_sd,
          long long o_sb, long long o_sh, long long o_ss, long long o_sd) {
    Flash_fwd_params p;
    p.q = reinterpret_cast<const unsigned short*>(q);
    p.k = reinterpret_cast<const unsigned short*>(k);
    p.v = reinterpret_cast<const unsigned short*>(v);
    p.o = reinterpret_cast<unsigned short*>(o);
    p.lse = lse;
    p.batch = batch;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.seq_q = seq_q;
    p.seq_k = seq_k;
    p.head_dim = head_dim;
    p.causal = causal != 0;
    p.scale = scale;
    p.q_sb = q_sb; p.q_sh = q_sh; p.q_ss = q_ss; p.q_sd = q_sd;
    p.k_sb = k_sb; p.k_sh = k_sh; p.k_ss = k_ss; p.k_sd = k_sd;
    p.v_sb = v_sb; p.v_sh = v_sh; p.v_ss = v_ss; p.v_sd = v_sd;
    p.o_sb = o_sb; p.o_sh = o_sh; p.o_ss = o_ss; p.o_sd = o_sd;
    flash_fwd_block<Flash_kernel_traits>(p);
}
