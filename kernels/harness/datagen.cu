// The GPU build of data scheme v2 (datagen.h), compiled by NVRTC with --fmad=false.
//
// cf_dg_fill: one thread per stored element writes the same f64 the host's datagen_host.c
// computes (the bit-for-bit cross-check is tests/gpu_datagen.rs).
//
// cf_dg_store and cf_dg_const write a tensor's initial contents in place, into its allocation of
// the case's arena, as engine/arena's HostImage writes them on the host: a drawn element's
// value encoded in the tensor's element type (cf_dg_store), or one bit pattern in every element
// (cf_dg_const: the sentinel, zero, -inf, a constant). Elements are addressed by their stored
// index (row-major over the stored extents: a broadcast dimension counts once) and written
// byte by byte, since a case's offsets leave elements at any alignment.
#include "datagen.h"

extern "C" __global__ void cf_dg_fill(cf_dg_tensor t, cf_dg_u64 first, cf_dg_u64 n, int integer, double* out) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (cf_dg_u64)gridDim.x * blockDim.x)
        out[k] = integer ? cf_dg_int(&t, first + k) : cf_dg_float(&t, first + k);
}

// Where a tensor's stored elements sit in its data span.
#define CF_DG_MAX_RANK 8
typedef struct {
    cf_dg_u64 extent[CF_DG_MAX_RANK];  // stored extents (1 along a broadcast dimension)
    cf_dg_u64 stride[CF_DG_MAX_RANK];  // byte strides
    cf_dg_u64 n;                       // stored elements: the product of the extents
    cf_dg_u32 rank;
    cf_dg_u32 elem;                    // engine/data's Dtype order: f16 bf16 f32 f64 i8 u8 i32 u32 i64
    cf_dg_u32 elem_bytes;
    cf_dg_u32 unused;
} cf_dg_layout;

__device__ cf_dg_u64 cf_dg_offset(const cf_dg_layout* l, cf_dg_u64 k) {
    cf_dg_u64 off = 0;
    for (int d = (int)l->rank - 1; d >= 0; d--) {
        cf_dg_u64 n = l->extent[d];
        off += (k % n) * l->stride[d];
        k /= n;
    }
    return off;
}

__device__ double cf_dg_clamp(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

// engine/data's to_bits of a value already rounded into its type: the type's bit pattern, the
// NaN as Rust and the half crate pack it (quiet, sign kept), integers saturating (NaN to 0).
__device__ cf_dg_u64 cf_dg_encode(double r, cf_dg_u32 elem) {
    cf_dg_u64 b = cf_dg_to_bits(r);
    cf_dg_u64 sign = b >> 63;
    int nan = r != r;
    double a = cf_dg_abs(r);
    int inf = !nan && a > 1.7976931348623157e308;
    switch (elem) {
    case 0: {
        if (nan) return (sign << 15) | 0x7E00u;
        if (inf) return (sign << 15) | 0x7C00u;
        if (a == 0.0) return sign << 15;
        int e = (int)((b >> 52) & 0x7ff) - 1023;
        if (e < -14) return (sign << 15) | (cf_dg_u64)(a * 16777216.0);
        return (sign << 15) | ((cf_dg_u64)(e + 15) << 10) | ((b >> 42) & 0x3ffu);
    }
    case 1:
        if (nan) return (sign << 15) | 0x7FC0u;
        return (cf_dg_u64)(__float_as_uint(__double2float_rn(r)) >> 16);
    case 2:
        if (nan) return (sign << 31) | 0x7FC00000u;
        return (cf_dg_u64)__float_as_uint(__double2float_rn(r));
    case 3: return b;
    }
    if (nan) return 0;
    double x = round(r);
    switch (elem) {
    case 4: return (cf_dg_u64)(unsigned char)(signed char)(long long)cf_dg_clamp(x, -128.0, 127.0);
    case 5: return (cf_dg_u64)(unsigned char)(long long)cf_dg_clamp(x, 0.0, 255.0);
    case 6: return (cf_dg_u64)(unsigned int)(int)(long long)cf_dg_clamp(x, -2147483648.0, 2147483647.0);
    case 7: return (cf_dg_u64)(unsigned int)(long long)cf_dg_clamp(x, 0.0, 4294967295.0);
    default:
        if (x >= 9223372036854775807.0) return 0x7FFFFFFFFFFFFFFFull;
        if (x <= -9223372036854775808.0) return 0x8000000000000000ull;
        return (cf_dg_u64)(long long)x;
    }
}

__device__ void cf_dg_put(unsigned char* p, cf_dg_u64 bits, cf_dg_u32 bytes) {
    for (cf_dg_u32 i = 0; i < bytes; i++) p[i] = (unsigned char)(bits >> (8 * i));
}

extern "C" __global__ void cf_dg_store(cf_dg_tensor t, cf_dg_layout l, int integer, unsigned char* data) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < l.n; k += (cf_dg_u64)gridDim.x * blockDim.x) {
        double v = integer ? cf_dg_int(&t, k) : cf_dg_float(&t, k);
        cf_dg_put(data + cf_dg_offset(&l, k), cf_dg_encode(v, l.elem), l.elem_bytes);
    }
}

extern "C" __global__ void cf_dg_const(cf_dg_u64 bits, cf_dg_layout l, unsigned char* data) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < l.n; k += (cf_dg_u64)gridDim.x * blockDim.x)
        cf_dg_put(data + cf_dg_offset(&l, k), bits, l.elem_bytes);
}
