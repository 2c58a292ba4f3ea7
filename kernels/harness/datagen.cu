// The GPU build of data scheme v2 (datagen.h), compiled by NVRTC with --fmad=false: one thread
// per stored element writes the same f64 the host's datagen_host.c computes. The bit-for-bit
// cross-check is tests/gpu_datagen.rs; filling the case's arena from it is the device-side data
// path's next step (issue 30).
#include "datagen.h"

extern "C" __global__ void cf_dg_fill(cf_dg_tensor t, cf_dg_u64 first, cf_dg_u64 n, int integer, double* out) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (cf_dg_u64)gridDim.x * blockDim.x)
        out[k] = integer ? cf_dg_int(&t, first + k) : cf_dg_float(&t, first + k);
}
