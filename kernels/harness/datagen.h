// cudafuzz data scheme v2: the value of every element of a drawn tensor as a pure function of
// (case seed, tensor, element index), so the host and the GPU make the same bits, element by
// element, in any order (issue 30).
//
// One source, two compilers: the host's C compiler builds it into the cudafuzz binary
// (datagen_host.c, with -ffp-contract=off) and NVRTC builds it for the GPU (datagen.cu, with
// --fmad=false). The same bits on both sides follow from using only integer operations and
// correctly rounded + - * / and sqrt, in a fixed order, with no contraction into fused
// multiply-adds and no platform library: the logarithm of the normal class is computed here
// (an atanh series on the mantissa), and rounding into f16/bf16 is an exact add-and-subtract.
//
// Random bits: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC11), keyed by the case seed, counter (element index, tensor, block number). Value classes
// are the v1 classes (engine/data): normal, uniform, large (8 normal), tiny (around the type's
// smallest normal), huge (2^6..2^14), zero (signed), constant_rows (one of seven values per
// innermost row), nan, inf; integers uniform in a range or zero. Normals come from the inverse
// normal CDF (Acklam's rational approximation), so they reach about 8.3 standard deviations.
#ifndef CF_DATAGEN_H
#define CF_DATAGEN_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CF_DG __host__ __device__ inline
#else
#define CF_DG static inline
#endif

typedef unsigned int cf_dg_u32;
typedef unsigned long long cf_dg_u64;

// Value classes, as bits of a mask (the order of engine/data's ValueClass).
enum {
    CF_DG_NORMAL = 0,
    CF_DG_UNIFORM = 1,
    CF_DG_LARGE = 2,
    CF_DG_TINY = 3,
    CF_DG_HUGE = 4,
    CF_DG_ZERO = 5,
    CF_DG_CONSTANT_ROWS = 6,
    CF_DG_NAN = 7,
    CF_DG_INF = 8,
    CF_DG_N_CLASSES = 9
};

// Element types, as engine/data rounds into them.
enum { CF_DG_F16 = 0, CF_DG_BF16 = 1, CF_DG_F32 = 2, CF_DG_F64 = 3 };

// What one tensor's generation needs; plain data, the same layout on both sides.
typedef struct {
    cf_dg_u64 seed;       // the case's data seed
    cf_dg_u32 tensor;     // roster position
    cf_dg_u32 dtype;      // CF_DG_F16 .. CF_DG_F64 (floating tensors)
    cf_dg_u32 classes;    // mask of CF_DG_* classes; 0 means normal
    cf_dg_u32 has_range;  // lo/hi hold a value range (floats) or an integer range
    double lo, hi;        // floats: the value range (when has_range)
    cf_dg_u64 row;        // innermost stored extent (constant_rows: one value per row); >= 1
    long long ilo, ihi;   // integers: the inclusive range, exactly
} cf_dg_tensor;

// --- Philox4x32-10 ---------------------------------------------------------------------------

CF_DG void cf_dg_philox(cf_dg_u32 ctr[4], cf_dg_u32 k0, cf_dg_u32 k1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        cf_dg_u64 p0 = (cf_dg_u64)0xD2511F53u * ctr[0];
        cf_dg_u64 p1 = (cf_dg_u64)0xCD9E8D57u * ctr[2];
        cf_dg_u32 hi0 = (cf_dg_u32)(p0 >> 32), lo0 = (cf_dg_u32)p0;
        cf_dg_u32 hi1 = (cf_dg_u32)(p1 >> 32), lo1 = (cf_dg_u32)p1;
        cf_dg_u32 n0 = hi1 ^ ctr[1] ^ k0, n2 = hi0 ^ ctr[3] ^ k1;
        ctr[0] = n0;
        ctr[1] = lo1;
        ctr[2] = n2;
        ctr[3] = lo0;
    }
}

// Four random words for (element, tensor, block) under the case's seed.
CF_DG void cf_dg_block(const cf_dg_tensor* t, cf_dg_u64 element, cf_dg_u32 block, cf_dg_u32 out[4]) {
    out[0] = (cf_dg_u32)element;
    out[1] = (cf_dg_u32)(element >> 32);
    out[2] = t->tensor;
    out[3] = block;
    cf_dg_philox(out, (cf_dg_u32)t->seed, (cf_dg_u32)(t->seed >> 32));
}

// --- exact helpers ----------------------------------------------------------------------------

CF_DG double cf_dg_from_bits(cf_dg_u64 b) {
    union { cf_dg_u64 u; double d; } v;
    v.u = b;
    return v.d;
}

CF_DG cf_dg_u64 cf_dg_to_bits(double d) {
    union { cf_dg_u64 u; double d; } v;
    v.d = d;
    return v.u;
}

// 2^k for k in the normal range.
CF_DG double cf_dg_pow2(int k) { return cf_dg_from_bits((cf_dg_u64)(k + 1023) << 52); }

// A uniform draw on (0, 1): 53 random bits, centred in their cell, so never 0 or 1.
CF_DG double cf_dg_open_unit(cf_dg_u32 a, cf_dg_u32 b) {
    cf_dg_u64 k = (((cf_dg_u64)a << 32) | b) >> 11;
    return ((double)k + 0.5) * (1.0 / 9007199254740992.0);
}

// A uniform draw on [0, 1) with 53 random bits.
CF_DG double cf_dg_unit(cf_dg_u32 a, cf_dg_u32 b) {
    cf_dg_u64 k = (((cf_dg_u64)a << 32) | b) >> 11;
    return (double)k * (1.0 / 9007199254740992.0);
}

// A multiply-shift pick of 0..n-1 from one word.
CF_DG cf_dg_u32 cf_dg_pick(cf_dg_u32 w, cf_dg_u32 n) { return (cf_dg_u32)(((cf_dg_u64)w * n) >> 32); }

// ln(x) for finite x > 0, from + - * / only: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, summed to s^25 (error far below the
// f64 rounding of the result). Not correctly rounded, but the same bits everywhere.
CF_DG double cf_dg_log(double x) {
    cf_dg_u64 bits = cf_dg_to_bits(x);
    int e = (int)((bits >> 52) & 0x7ff);
    if (e == 0) {  // subnormal: scale into the normal range first
        x = x * 18014398509481984.0;  // 2^54
        bits = cf_dg_to_bits(x);
        e = (int)((bits >> 52) & 0x7ff) - 54;
    }
    e -= 1023;
    double m = cf_dg_from_bits((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double term = s, sum = s;
    for (int k = 3; k <= 25; k += 2) {
        term = term * s2;
        sum = sum + term / (double)k;
    }
    return (double)e * 0.6931471805599453 + 2.0 * sum;
}

// The standard normal quantile of p in (0, 1): Acklam's rational approximation (relative
// error below 1.2e-9, ample for test data), its tails through cf_dg_log and sqrt.
CF_DG double cf_dg_normal_quantile(double p) {
    const double a1 = -3.969683028665376e+01, a2 = 2.209460984245205e+02, a3 = -2.759285104469687e+02;
    const double a4 = 1.383577518672690e+02, a5 = -3.066479806614716e+01, a6 = 2.506628277459239e+00;
    const double b1 = -5.447609879822406e+01, b2 = 1.615858368580409e+02, b3 = -1.556989798598866e+02;
    const double b4 = 6.680131188771972e+01, b5 = -1.328068155288572e+01;
    const double c1 = -7.784894002430293e-03, c2 = -3.223964580411365e-01, c3 = -2.400758277161838e+00;
    const double c4 = -2.549732539343734e+00, c5 = 4.374664141464968e+00, c6 = 2.938163982698783e+00;
    const double d1 = 7.784695709041462e-03, d2 = 3.224671290700398e-01, d3 = 2.445134137142996e+00;
    const double d4 = 3.754408661907416e+00;
    const double low = 0.02425;
    if (p < low) {
        double q = sqrt(-2.0 * cf_dg_log(p));
        return (((((c1 * q + c2) * q + c3) * q + c4) * q + c5) * q + c6) / ((((d1 * q + d2) * q + d3) * q + d4) * q + 1.0);
    }
    if (p > 1.0 - low) {
        double q = sqrt(-2.0 * cf_dg_log(1.0 - p));
        return -(((((c1 * q + c2) * q + c3) * q + c4) * q + c5) * q + c6) / ((((d1 * q + d2) * q + d3) * q + d4) * q + 1.0);
    }
    double q = p - 0.5, r = q * q;
    return (((((a1 * r + a2) * r + a3) * r + a4) * r + a5) * r + a6) * q / (((((b1 * r + b2) * r + b3) * r + b4) * r + b5) * r + 1.0);
}

// --- rounding into the element type (engine/data::round_to) ----------------------------------

CF_DG double cf_dg_abs(double x) { return x < 0.0 ? -x : x; }

CF_DG double cf_dg_copysign(double magnitude, double sign) {
    cf_dg_u64 m = cf_dg_to_bits(magnitude) & 0x7FFFFFFFFFFFFFFFull;
    return cf_dg_from_bits(m | (cf_dg_to_bits(sign) & 0x8000000000000000ull));
}

// Round to nearest even into a binary format with `frac_bits` fraction bits and minimum normal
// exponent `emin`; past `max` gives an infinity. The quantum is a power of two, so the scaling
// is exact, and (y + 2^52) - 2^52 rounds y to an integer, ties to even.
CF_DG double cf_dg_round_binary(double x, int frac_bits, int emin, double max) {
    if (x != x || x == 0.0 || cf_dg_abs(x) > 1.7976931348623157e308) return x;
    int e = (int)((cf_dg_to_bits(x) >> 52) & 0x7ff) - 1023;
    if (e < emin) e = emin;
    double quantum = cf_dg_pow2(e - frac_bits);
    double y = cf_dg_abs(x) / quantum;
    double r = cf_dg_copysign((y + 4503599627370496.0) - 4503599627370496.0, x) * quantum;
    if (cf_dg_abs(r) > max) return cf_dg_copysign(cf_dg_from_bits(0x7FF0000000000000ull), x);
    return r;
}

CF_DG double cf_dg_max_finite(cf_dg_u32 dtype) {
    switch (dtype) {
    case CF_DG_F16: return 65504.0;
    case CF_DG_BF16: return 3.3895313892515355e38;
    case CF_DG_F64: return 1.7976931348623157e308;
    default: return 3.4028234663852886e38;
    }
}

CF_DG double cf_dg_min_normal(cf_dg_u32 dtype) {
    switch (dtype) {
    case CF_DG_F16: return cf_dg_pow2(-14);
    case CF_DG_F64: return 2.2250738585072014e-308;
    default: return cf_dg_pow2(-126);
    }
}

CF_DG double cf_dg_round_to(double x, cf_dg_u32 dtype) {
    switch (dtype) {
    case CF_DG_F16: return cf_dg_round_binary(x, 10, -14, 65504.0);
    case CF_DG_BF16: return cf_dg_round_binary(x, 7, -126, 3.3895313892515355e38);
    case CF_DG_F32: return (double)(float)x;
    default: return x;
    }
}

// --- one element --------------------------------------------------------------------------------

// The class of element `i`: the only one, or one of the mask's picked by a word.
CF_DG int cf_dg_class(const cf_dg_tensor* t, cf_dg_u32 word) {
    cf_dg_u32 mask = t->classes ? t->classes : (1u << CF_DG_NORMAL);
    cf_dg_u32 n = 0;
    for (int c = 0; c < CF_DG_N_CLASSES; c++) n += (mask >> c) & 1u;
    cf_dg_u32 k = cf_dg_pick(word, n);
    for (int c = 0; c < CF_DG_N_CLASSES; c++) {
        if (!((mask >> c) & 1u)) continue;
        if (k == 0) return c;
        k--;
    }
    return CF_DG_NORMAL;
}

// Element `i` (a stored element, row-major over the stored extents) of a floating tensor,
// already rounded into its type.
CF_DG double cf_dg_float(const cf_dg_tensor* t, cf_dg_u64 i) {
    cf_dg_u32 w[4];
    cf_dg_block(t, i, 0, w);
    int c = cf_dg_class(t, w[0]);
    // Constant rows only when they are the tensor's one class; in a mix they draw as normal.
    if (c == CF_DG_CONSTANT_ROWS && t->classes != (1u << CF_DG_CONSTANT_ROWS)) c = CF_DG_NORMAL;
    double x;
    switch (c) {
    case CF_DG_UNIFORM:
        x = t->has_range ? t->lo + (t->hi - t->lo) * cf_dg_unit(w[1], w[2]) : 2.0 * cf_dg_unit(w[1], w[2]) - 1.0;
        break;
    case CF_DG_LARGE: x = 8.0 * cf_dg_normal_quantile(cf_dg_open_unit(w[1], w[2])); break;
    case CF_DG_TINY: {
        int e = (int)cf_dg_pick(w[3], 12) - 10;
        double sign = (w[1] & 1u) ? -1.0 : 1.0;
        cf_dg_u32 v[4];
        cf_dg_block(t, i, 1, v);
        x = sign * (1.0 + cf_dg_unit(v[0], v[1])) * cf_dg_min_normal(t->dtype) * cf_dg_pow2(e);
        break;
    }
    case CF_DG_HUGE: {
        int e = 6 + (int)cf_dg_pick(w[3], 9);
        double sign = (w[1] & 1u) ? -1.0 : 1.0;
        cf_dg_u32 v[4];
        cf_dg_block(t, i, 1, v);
        double fraction = (w[1] & 6u) == 0 ? 0.0 : cf_dg_unit(v[0], v[1]);
        x = sign * (1.0 + fraction) * cf_dg_pow2(e);
        break;
    }
    case CF_DG_ZERO: x = (w[1] & 1u) ? -0.0 : 0.0; break;
    case CF_DG_CONSTANT_ROWS: {
        // One of seven values per innermost row: keyed by the row, not the element.
        const double values[7] = {-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0};
        cf_dg_u32 v[4];
        cf_dg_block(t, i / (t->row ? t->row : 1), 2, v);
        x = values[cf_dg_pick(v[0], 7)];
        break;
    }
    case CF_DG_NAN: return cf_dg_from_bits(0x7FF8000000000000ull);
    case CF_DG_INF: return (w[1] & 1u) ? cf_dg_from_bits(0xFFF0000000000000ull) : cf_dg_from_bits(0x7FF0000000000000ull);
    default: x = cf_dg_normal_quantile(cf_dg_open_unit(w[1], w[2])); break;
    }
    if (t->has_range) {
        // Fold into a one-signed range, then clamp (engine/data's generate_float).
        if (t->lo >= 0.0) x = cf_dg_abs(x);
        else if (t->hi <= 0.0) x = -cf_dg_abs(x);
        if (x < t->lo) x = t->lo;
        if (x > t->hi) x = t->hi;
    }
    double m = cf_dg_max_finite(t->dtype);
    if (x > m) x = m;
    if (x < -m) x = -m;
    return cf_dg_round_to(x, t->dtype);
}

// Element `i` of an integer tensor: uniform in [lo, hi], or 0 (clamped into the range) when
// the tensor's classes include zero and it is picked.
CF_DG double cf_dg_int(const cf_dg_tensor* t, cf_dg_u64 i) {
    cf_dg_u32 w[4];
    cf_dg_block(t, i, 0, w);
    long long lo = t->ilo, hi = t->ihi;
    if (cf_dg_class(t, w[0]) == CF_DG_ZERO) return (double)(0 < lo ? lo : (0 > hi ? hi : 0));
    cf_dg_u64 span = (cf_dg_u64)(hi - lo) + 1;
    cf_dg_u64 r = ((cf_dg_u64)w[1] << 32) | w[2];
    return (double)(lo + (long long)(span ? r % span : r));
}

#endif
