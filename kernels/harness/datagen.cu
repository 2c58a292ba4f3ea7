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
#include "layout.h"
#include "encode.h"

extern "C" __global__ void cf_dg_fill(cf_dg_tensor t, cf_dg_u64 first, cf_dg_u64 n, int integer, double* out) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (cf_dg_u64)gridDim.x * blockDim.x)
        out[k] = integer ? cf_dg_int(&t, first + k) : cf_dg_float(&t, first + k);
}

extern "C" __global__ void cf_dg_store(cf_dg_tensor t, cf_dg_layout l, int integer, unsigned char* data) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < l.n; k += (cf_dg_u64)gridDim.x * blockDim.x) {
        cf_dg_put(data + cf_dg_offset(&l, k), cf_dg_drawn_bits(&t, integer, k, l.elem), l.elem_bytes);
    }
}

extern "C" __global__ void cf_dg_const(cf_dg_u64 bits, cf_dg_layout l, unsigned char* data) {
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < l.n; k += (cf_dg_u64)gridDim.x * blockDim.x)
        cf_dg_put(data + cf_dg_offset(&l, k), bits, l.elem_bytes);
}
