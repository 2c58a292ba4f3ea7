// fa_s512 as its authors shipped it: a PyTorch extension, called from Python as
// fa_s512(Q, K, V, causal, scale). The kernel is kernels/attention/fa_s512.cu, unchanged, at its
// baseline tile (64/64/4, f16); this file is the C++ host code around it, written the way such
// wrappers are: it checks what it knows to check, allocates the output itself, picks the grid,
// the block and the shared memory, and launches on PyTorch's current stream.
//
// fa_s512_smem_from_seq is the same wrapper with a host-code bug planted: it sizes the dynamic
// shared memory from seq_k (room for all of K and V, "for a future version") and never opts in
// above 48 KB, so every call with seq_k above 61 fails at launch (33,536 + 256 * seq_k > 49,152).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

// The kernel's header (cudafuzz.cuh) expects the defines the harness gives an NVRTC build.
#define CUDAFUZZ 1
#define CUDAFUZZ_DTYPE_F16 1
#define BLOCK_M 64
#define BLOCK_N 64
#define NUM_WARPS 4
#include "fa_s512.cu"

namespace {

void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == at::kHalf, name, " must be float16");
    TORCH_CHECK(t.dim() == 4, name, " must be [batch, heads, seq, head_dim]");
    TORCH_CHECK(t.size(3) == HEAD_DIM, name, ": head_dim must be ", HEAD_DIM);
}

torch::Tensor launch(torch::Tensor Q, torch::Tensor K, torch::Tensor V, bool causal, double scale, size_t smem_bytes) {
    check(Q, "Q");
    check(K, "K");
    check(V, "V");
    const int B = Q.size(0), Hq = Q.size(1), Sq = Q.size(2), D = Q.size(3);
    const int Hkv = K.size(1), Sk = K.size(2);
    TORCH_CHECK(Hq % Hkv == 0, "heads_q must be a multiple of heads_kv");
    auto O = torch::empty({B, Hq, Sq, D}, Q.options());
    const int num_blocks_m = (Sq + BLOCK_M - 1) / BLOCK_M;
    // The authors' wrapper folded heads and batch into one grid axis (num_blocks_m,
    // num_blocks_h * B) for their kernel's own decoding of blockIdx.y; the kernel here, as the
    // harness fuzzes it, reads the head from blockIdx.y and the batch from blockIdx.z, so the
    // wrapper launches the grid it reads.
    dim3 grid(num_blocks_m, Hq, B);
    dim3 block(NUM_THREADS);
    auto stream = at::cuda::getCurrentCUDAStream();
    fa_s512_fwd<<<grid, block, smem_bytes, stream>>>(
        reinterpret_cast<const cf_elem*>(Q.data_ptr()), reinterpret_cast<const cf_elem*>(K.data_ptr()),
        reinterpret_cast<const cf_elem*>(V.data_ptr()), reinterpret_cast<cf_elem*>(O.data_ptr()),
        B, Hq, Hkv, Sq, Sk, D, causal ? 1 : 0, static_cast<float>(scale),
        Q.stride(0), Q.stride(1), Q.stride(2), Q.stride(3),
        K.stride(0), K.stride(1), K.stride(2), K.stride(3),
        V.stride(0), V.stride(1), V.stride(2), V.stride(3),
        O.stride(0), O.stride(1), O.stride(2), O.stride(3));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return O;
}

}  // namespace

torch::Tensor fa_s512(torch::Tensor Q, torch::Tensor K, torch::Tensor V, bool causal, double scale) {
    return launch(Q, K, V, causal, scale, SMEM_BYTES);
}

torch::Tensor fa_s512_smem_from_seq(torch::Tensor Q, torch::Tensor K, torch::Tensor V, bool causal, double scale) {
    // BUG (planted, host code): K and V "fully resident", never opted in above 48 KB.
    const size_t kv_bytes = 2 * static_cast<size_t>(K.size(2)) * HEAD_DIM * sizeof(cf_elem);
    return launch(Q, K, V, causal, scale, SMEM_BYTES + kv_bytes);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("fa_s512", &fa_s512, "fa_s512 attention forward (f16, head_dim 64)");
    m.def("fa_s512_smem_from_seq", &fa_s512_smem_from_seq, "fa_s512 with a planted shared-memory sizing bug");
}
