// cudafuzz.cuh: the define contract between the cudafuzz harness and its kernels, and the few
// device helpers every kernel needs to read and write the element type.
//
// Kernels are compiled at run time by NVRTC, so this header (and every kernel) must compile with
// no C/C++ standard library: no <cstdio>, <cstdint>, <cmath>, STL or host code. Use `int`,
// `long long`, `unsigned int`; the only system headers are <cuda_fp16.h> and <cuda_bf16.h>.
// Every entry point is `extern "C" __global__` so its name is not mangled.
//
// Defines the harness passes (NVRTC -D options):
//   CUDAFUZZ=1                  always.
//   CUDAFUZZ_DTYPE_F16=1   |
//   CUDAFUZZ_DTYPE_BF16=1  |    exactly one: the case's element type (tensors declared
//   CUDAFUZZ_DTYPE_F32=1   |    dtype = "case"); F64 for a user reference kernel's gold run.
//   CUDAFUZZ_DTYPE_F64=1   |
//   CF_T_<tensor>=<C type>      every tensor's element type (`const CF_T_x* x`): the case's
//                               type or the tensor's fixed one; in a reference kernel's gold run
//                               every floating tensor is double.
//   NAME=VALUE                  every tunable of the manifest's [params] (one value per build) and
//                               every fixed define of its [defines] (e.g. BUG_VEC_LOAD_Q=1).
//   CUDAFUZZ_REFERENCE=1        in both builds of a user reference kernel.
//
// What the harness guarantees (the manifest's [[tensors]] roster, kernels/README.md):
//   every tensor is a base pointer plus the element strides the manifest passes; a tensor whose
//   layout is not `fixed` may be permuted, padded (row gaps), broadcast (stride 0) where allowed,
//   and offset by any byte count its `align` allows, so a kernel that assumes alignment or
//   contiguity must say so in its manifest, and the harness tests whether it was right.
//   Outputs start as the manifest's `init` says (a NaN sentinel by default).
// Conventions of the attention kernels in kernels/attention and kernels/testing:
//   q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], o [B, Hq, Sq, D]; GQA: the kv head of query head h
//   is h / (Hq / Hkv); causal masking is bottom-right aligned: query i attends key j iff
//   j <= i + Sk - Sq, and a query row with no allowed key outputs 0 (its log-sum-exp is -inf).
#pragma once

#if !defined(CUDAFUZZ)
#error "cudafuzz kernels are compiled by the harness, which defines CUDAFUZZ=1"
#endif

#if (defined(CUDAFUZZ_DTYPE_F16) + defined(CUDAFUZZ_DTYPE_BF16) + defined(CUDAFUZZ_DTYPE_F32) + defined(CUDAFUZZ_DTYPE_F64)) != 1
#error "define exactly one of CUDAFUZZ_DTYPE_F16, CUDAFUZZ_DTYPE_BF16, CUDAFUZZ_DTYPE_F32, CUDAFUZZ_DTYPE_F64"
#endif

// Both 16-bit types are always available: fixed-type tensors may use either.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#if defined(CUDAFUZZ_DTYPE_F16)
#include <cuda_fp16.h>
typedef __half cf_elem;
__device__ __forceinline__ float cf_to_float(cf_elem x) { return __half2float(x); }
__device__ __forceinline__ cf_elem cf_from_float(float x) { return __float2half_rn(x); }
#elif defined(CUDAFUZZ_DTYPE_BF16)
#include <cuda_bf16.h>
typedef __nv_bfloat16 cf_elem;
__device__ __forceinline__ float cf_to_float(cf_elem x) { return __bfloat162float(x); }
__device__ __forceinline__ cf_elem cf_from_float(float x) { return __float2bfloat16_rn(x); }
#elif defined(CUDAFUZZ_DTYPE_F64)
typedef double cf_elem;
__device__ __forceinline__ float cf_to_float(cf_elem x) { return (float)x; }
__device__ __forceinline__ cf_elem cf_from_float(float x) { return (double)x; }
#else
typedef float cf_elem;
__device__ __forceinline__ float cf_to_float(cf_elem x) { return x; }
__device__ __forceinline__ cf_elem cf_from_float(float x) { return x; }
#endif

// Every element type converts to double exactly.
#if defined(CUDAFUZZ_DTYPE_F64)
__device__ __forceinline__ double cf_to_double(cf_elem x) { return x; }
#else
__device__ __forceinline__ double cf_to_double(cf_elem x) { return (double)cf_to_float(x); }
#endif

// Any element type to double and back, by overload: what a reference kernel over `CF_T_x*`
// pointers reads and writes with. `cf_acc` is the accumulator a reference computes in: double in
// the gold run, float in the same-precision baseline.
__device__ __forceinline__ double cf_d(double x) { return x; }
__device__ __forceinline__ double cf_d(float x) { return (double)x; }
__device__ __forceinline__ double cf_d(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double cf_d(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
__device__ __forceinline__ double cf_d(int x) { return (double)x; }
__device__ __forceinline__ double cf_d(long long x) { return (double)x; }
__device__ __forceinline__ void cf_store(double* p, double x) { *p = x; }
__device__ __forceinline__ void cf_store(float* p, double x) { *p = (float)x; }
__device__ __forceinline__ void cf_store(__half* p, double x) { *p = __double2half(x); }
__device__ __forceinline__ void cf_store(__nv_bfloat16* p, double x) { *p = __double2bfloat16(x); }
#if defined(CUDAFUZZ_DTYPE_F64)
typedef double cf_acc;
#else
typedef float cf_acc;
#endif

// Round a float to the nearest-even cf_elem and back: the identity for f32.
__device__ __forceinline__ float cf_round(float x) { return cf_to_float(cf_from_float(x)); }

// Infinities without <cmath> (NVRTC has no INFINITY macro).
#define CF_INF_F (__int_as_float(0x7f800000))
#define CF_NEG_INF_F (__int_as_float((int)0xff800000u))
#define CF_NEG_INF_D (__longlong_as_double((long long)0xfff0000000000000ull))

// Warp-wide reductions over all 32 lanes (every lane gets the result).
__device__ __forceinline__ float cf_warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

__device__ __forceinline__ float cf_warp_sum(float x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// Kernel-path coverage points (CF_COVER(id)), active only in coverage builds.
#include "cf_coverage.cuh"
