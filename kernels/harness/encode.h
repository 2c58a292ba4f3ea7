// How the harness's kernels write an element: a value rounded into its type, as engine/data's
// to_bits encodes it, put byte by byte (a case's offsets leave elements at any alignment).
// Shared by datagen.cu (which writes a case's initial contents) and judge.cu (which checks a
// run's arena against them).
#ifndef CF_ENCODE_H
#define CF_ENCODE_H

#include "datagen.h"

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

// The value drawn for stored element k of a tensor, encoded in its element type.
__device__ cf_dg_u64 cf_dg_drawn_bits(const cf_dg_tensor* t, int integer, cf_dg_u64 k, cf_dg_u32 elem) {
    double v = integer ? cf_dg_int(t, k) : cf_dg_float(t, k);
    return cf_dg_encode(v, elem);
}

#endif
