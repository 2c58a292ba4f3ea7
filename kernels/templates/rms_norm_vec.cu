// A C++ template kernel as its host instantiates it, with no `extern "C"` wrapper: the host
// picks the vector width from the row length, VEC = gcd(16 / sizeof(T), n), and launches
// cfx::rms_norm<VEC, T, BLOCK>. The manifest names the kernel the same way
// (`entry = "cfx::rms_norm<{VEC}, {T}, {BLOCK}>"`) and derives VEC as the host does
// (`[params] VEC = { from = "gcd(16 / elem_bytes, n)", values = [1, 2, 4, 8] }`).
//
// Each row is read as VEC-element packs (one 16-byte load at most): correct when the row
// pitch is a multiple of the pack, as the host's dense rows are. The caller guarantees a
// 16-byte base and nothing about the pitch in mutants/rms_norm_vec_pitch.toml, where the same
// kernel faults.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace cfx {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <unsigned kVec, typename T>
struct alignas(kVec * sizeof(T)) Pack {
    T v[kVec];
};

// Sum over the block: warp shuffles, then one partial per warp through shared memory.
template <int kBlock>
__device__ float block_sum(float v) {
    __shared__ float partial[kBlock / 32];
    __shared__ float total;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < kBlock / 32 ? partial[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) total = s;
    }
    __syncthreads();
    return total;
}

// Template parameters are not named after the manifest's params: those are -D defines too.
template <unsigned kVec, typename T, int kBlock>
__global__ void __launch_bounds__(kBlock)
rms_norm(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ weight, int n, float eps, long long x_stride,
         long long y_stride) {
    using P = Pack<kVec, T>;
    const T* xr = x + blockIdx.x * x_stride;
    T* yr = y + blockIdx.x * y_stride;
    const int packs = n / kVec;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < packs; i += kBlock) {
        const P p = reinterpret_cast<const P*>(xr)[i];
#pragma unroll
        for (unsigned k = 0; k < kVec; ++k) {
            const float f = to_float(p.v[k]);
            ss += f * f;
        }
    }
    const float r = rsqrtf(block_sum<kBlock>(ss) / n + eps);
    for (int i = threadIdx.x; i < packs; i += kBlock) {
        const P p = reinterpret_cast<const P*>(xr)[i];
        const P w = reinterpret_cast<const P*>(weight)[i];
        P out;
#pragma unroll
        for (unsigned k = 0; k < kVec; ++k) out.v[k] = from_float<T>(to_float(p.v[k]) * r * to_float(w.v[k]));
        reinterpret_cast<P*>(yr)[i] = out;
    }
}

}  // namespace cfx
