// The host build of data scheme v2 (datagen.h), linked into cudafuzz by build.rs with
// -ffp-contract=off: engine/data calls these through its FFI. The GPU build is datagen.cu.
#include <math.h>

#include "datagen.h"

// Stored elements [first, first + n) of a floating tensor into out[0..n).
void cf_dg_fill_float(const cf_dg_tensor* t, cf_dg_u64 first, cf_dg_u64 n, double* out) {
    for (cf_dg_u64 k = 0; k < n; k++) out[k] = cf_dg_float(t, first + k);
}

// Stored elements [first, first + n) of an integer tensor into out[0..n).
void cf_dg_fill_int(const cf_dg_tensor* t, cf_dg_u64 first, cf_dg_u64 n, double* out) {
    for (cf_dg_u64 k = 0; k < n; k++) out[k] = cf_dg_int(t, first + k);
}

// The four words of Philox4x32-10 for a counter and key (the known-answer test's hook).
void cf_dg_philox_words(cf_dg_u32 ctr[4], cf_dg_u32 k0, cf_dg_u32 k1) { cf_dg_philox(ctr, k0, k1); }

// The logarithm and the normal quantile, for host tests against libm.
double cf_dg_log_host(double x) { return cf_dg_log(x); }
double cf_dg_quantile_host(double p) { return cf_dg_normal_quantile(p); }
