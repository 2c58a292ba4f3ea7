// The device oracles (issue 30, step 2): engine/oracle's checks of one run, as counts the host
// reads back in one small download. Compiled by NVRTC with --fmad=false, so every comparison
// below rounds as the host's does.
//
// The counts decide only whether a run needs judging at all (engine/oracle/device.rs): a run
// with any count that the host oracles would report is judged again on the host from its
// downloaded bytes, so findings and their details are the host's, whichever side looked first.
// Each count is added to its tensor's row of the summary: summary[tensor * CF_J_WORDS + word].
//
// What the arena held before the run is not kept anywhere on the device: every byte of it is a
// function of the case (the canary, a constant, a value drawn by data scheme v2), made again
// here as datagen.cu made it. A copy would sit in memory a kernel reading out of bounds can
// reach, and change what it reads.
#include "datagen.h"
#include "layout.h"
#include "encode.h"

enum {
    CF_J_OUTSIDE = 0,   // bytes changed in the redzones (the don't-care tail excluded)
    CF_J_SPAN = 1,      // bytes of the data span that are not the canary, elements and gaps
    CF_J_ELEMENTS = 2,  // bytes of the stored elements that are not their initial contents
    CF_J_NONCANARY = 3, // bytes of the stored elements that are not the canary
    CF_J_SENTINEL = 4,  // stored elements still holding the sentinel
    CF_J_NONFINITE = 5, // judged elements NaN or infinite where the gold is finite
    CF_J_SPECIAL = 6,   // judged elements that are not the gold's NaN or infinity
    CF_J_OVER = 7,      // judged elements past the rule's limit
    CF_J_WORDS = 8
};

// Adds each thread's count into *at: a warp sums its lanes, one atomic per warp. Every thread
// of the block calls it (blocks are whole warps), after its grid-stride loop.
__device__ void cf_j_add(cf_dg_u64* at, cf_dg_u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && v != 0) atomicAdd(at, v);
}

// The element at `p`, little-endian, as its bit pattern.
__device__ cf_dg_u64 cf_j_bits(const unsigned char* p, cf_dg_u32 bytes) {
    cf_dg_u64 b = 0;
    for (cf_dg_u32 i = 0; i < bytes; i++) b |= (cf_dg_u64)p[i] << (8 * i);
    return b;
}

// engine/data's from_bits: an element's value, exactly.
__device__ double cf_j_value(cf_dg_u64 b, cf_dg_u32 elem) {
    switch (elem) {
    case 0: {
        double sign = (b >> 15) & 1 ? -1.0 : 1.0;
        int e = (int)((b >> 10) & 0x1f);
        double m = (double)(b & 0x3ff);
        if (e == 31) return m != 0.0 ? __longlong_as_double(0x7ff8000000000000ull) : sign * __longlong_as_double(0x7ff0000000000000ull);
        if (e == 0) return sign * m * 5.9604644775390625e-8;  // 2^-24
        return sign * (1024.0 + m) * __longlong_as_double((cf_dg_u64)(e - 25 + 1023) << 52);
    }
    case 1: return (double)__uint_as_float((unsigned int)(b << 16));
    case 2: return (double)__uint_as_float((unsigned int)b);
    case 3: return __longlong_as_double((long long)b);
    case 4: return (double)(signed char)(unsigned char)b;
    case 5: return (double)(unsigned char)b;
    case 6: return (double)(int)(unsigned int)b;
    case 7: return (double)(unsigned int)b;
    default: return (double)(long long)b;
    }
}

__device__ int cf_j_finite(double x) { return x - x == 0.0; }

// One allocation as cf_j_memory checks it: its base after the run, its length and regions
// (data span [data, span_end), redzone after from `after`, the canary everywhere else), and its
// tensor's stored elements at the span's start with their initial contents: drawn by data scheme
// v2 (`params`, `integer`) or one bit pattern (`bits`).
typedef struct {
    const unsigned char* now;
    cf_dg_u64 len, data, span_end, after;
    cf_dg_u64 row;        // the tensor's row of the summary
    cf_dg_u64 bits;       // a constant's bits
    cf_dg_u64 sentinel;   // counted where check_sentinel is set
    cf_dg_u32 canary;
    cf_dg_u32 drawn;      // 1: drawn (params), 0: the constant `bits`
    cf_dg_u32 integer;
    cf_dg_u32 check_sentinel;
    cf_dg_tensor params;
    cf_dg_layout stored;
} cf_j_alloc;

// Bytes of an allocation that are not the canary: in the redzones (before `data`, from `after`
// on) and in the data span. The tail between them is not compared.
__device__ void cf_j_bytes(const cf_j_alloc* a, cf_dg_u64* row) {
    cf_dg_u64 outside = 0, span = 0;
    unsigned char canary = (unsigned char)a->canary;
    for (cf_dg_u64 b = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; b < a->len; b += (cf_dg_u64)gridDim.x * blockDim.x) {
        if (a->now[b] == canary) continue;
        if (b < a->data || b >= a->after) outside++;
        else if (b < a->span_end) span++;
    }
    cf_j_add(row + CF_J_OUTSIDE, outside);
    cf_j_add(row + CF_J_SPAN, span);
}

// Over the stored elements: bytes that are not their initial contents, bytes that are not the
// canary (the span's other such bytes are in its gaps), and elements still holding the sentinel.
__device__ void cf_j_elements(const cf_j_alloc* a, cf_dg_u64* row) {
    const unsigned char* now = a->now + a->data;
    const cf_dg_layout* l = &a->stored;
    unsigned char canary = (unsigned char)a->canary;
    cf_dg_u64 changed = 0, noncanary = 0, left = 0;
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < l->n; k += (cf_dg_u64)gridDim.x * blockDim.x) {
        cf_dg_u64 off = cf_dg_offset(l, k);
        cf_dg_u64 was = a->drawn ? cf_dg_drawn_bits(&a->params, (int)a->integer, k, l->elem) : a->bits;
        for (cf_dg_u32 i = 0; i < l->elem_bytes; i++) {
            unsigned char byte = now[off + i];
            changed += byte != (unsigned char)(was >> (8 * i));
            noncanary += byte != canary;
        }
        left += a->check_sentinel && cf_j_bits(now + off, l->elem_bytes) == a->sentinel;
    }
    cf_j_add(row + CF_J_ELEMENTS, changed);
    cf_j_add(row + CF_J_NONCANARY, noncanary);
    cf_j_add(row + CF_J_SENTINEL, left);
}

// The memory oracles of every allocation of a run in one launch: blockIdx.y is 2 * allocation
// (its bytes) or 2 * allocation + 1 (its elements).
extern "C" __global__ void cf_j_memory(const cf_j_alloc* allocs, cf_dg_u64* summary) {
    const cf_j_alloc* a = &allocs[blockIdx.y / 2];
    cf_dg_u64* row = summary + a->row * CF_J_WORDS;
    if (blockIdx.y % 2 == 0) cf_j_bytes(a, row);
    else cf_j_elements(a, row);
}

// engine/oracle/values.rs over the logical elements of one judged output (`data` at its span's
// start) against its fp64 gold (logical order, n values): a sentinel is skipped; a non-finite
// element where the gold is finite, or a special gold value not matched, is counted; a finite
// one is past the rule's limit when |x - gold| > limit (relative = 0) or
// > limit * max(|gold|, 1) (relative = 1).
extern "C" __global__ void cf_j_values(const unsigned char* data, cf_dg_layout l, const double* gold, cf_dg_u64 n, cf_dg_u64 sentinel,
                                       int check_sentinel, int relative, double limit, cf_dg_u64* row) {
    cf_dg_u64 nonfinite = 0, special = 0, over = 0;
    for (cf_dg_u64 k = (cf_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (cf_dg_u64)gridDim.x * blockDim.x) {
        cf_dg_u64 b = cf_j_bits(data + cf_dg_offset(&l, k), l.elem_bytes);
        if (check_sentinel && b == sentinel) continue;
        double x = cf_j_value(b, l.elem), r = gold[k];
        if (cf_j_finite(r)) {
            if (!cf_j_finite(x)) {
                nonfinite++;
            } else {
                double d = fabs(x - r);
                double m = fabs(r) > 1.0 ? fabs(r) : 1.0;
                over += relative ? d > limit * m : d > limit;
            }
        } else if (!(x == r || (x != x && r != r))) {
            special++;
        }
    }
    cf_j_add(row + CF_J_NONFINITE, nonfinite);
    cf_j_add(row + CF_J_SPECIAL, special);
    cf_j_add(row + CF_J_OVER, over);
}
