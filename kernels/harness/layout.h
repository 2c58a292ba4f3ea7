// Where a tensor's elements sit in its data span, for the harness's own kernels: datagen.cu
// (which writes a case's initial contents) and judge.cu (which checks a run's results). The
// Rust side of the struct is engine/data/device.rs's DgLayout.
#ifndef CF_LAYOUT_H
#define CF_LAYOUT_H

#include "datagen.h"

// Extents and byte strides of a tensor's elements: its stored elements (a broadcast dimension
// counts once) for datagen.cu, its logical elements for judge.cu.
#define CF_DG_MAX_RANK 8
typedef struct {
    cf_dg_u64 extent[CF_DG_MAX_RANK];  // extents (stored: 1 along a broadcast dimension)
    cf_dg_u64 stride[CF_DG_MAX_RANK];  // byte strides
    cf_dg_u64 n;                       // elements: the product of the extents
    cf_dg_u32 rank;
    cf_dg_u32 elem;                    // engine/data's Dtype order: f16 bf16 f32 f64 i8 u8 i32 u32 i64
    cf_dg_u32 elem_bytes;
    cf_dg_u32 unused;
} cf_dg_layout;

// The byte offset of element k, row-major over the extents (the last dimension fastest).
__device__ cf_dg_u64 cf_dg_offset(const cf_dg_layout* l, cf_dg_u64 k) {
    cf_dg_u64 off = 0;
    for (int d = (int)l->rank - 1; d >= 0; d--) {
        cf_dg_u64 n = l->extent[d];
        off += (k % n) * l->stride[d];
        k /= n;
    }
    return off;
}

#endif
