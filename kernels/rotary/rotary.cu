// rotary: rotary position embedding in place, as vLLM's `rotary_embedding` does to query and key.
// x is [tokens, heads, head_dim] (token stride x_st, head stride x_sh, elements contiguous);
// cos and sin are [max_pos, rot_dim / 2] (row strides cos_st, sin_st; case dtype); positions [tokens] are
// int32. Token t at position p rotates the first rot_dim elements of every head pairwise:
//   y[i1] = x[i1] * cos[p, i] - x[i2] * sin[p, i],  y[i2] = x[i2] * cos[p, i] + x[i1] * sin[p, i]
// with pairs (2i, 2i + 1) when INTERLEAVED (GPT-J) and (i, i + rot_dim / 2) otherwise (GPT-NeoX),
// in fp32, rounded to the element type. Elements past rot_dim are left as they are.
//
// One block per token; its threads stride over (head, pair). The 16-byte vector path handles VEC
// pairs (half-split: VEC elements from each half, VEC cosines and sines) or VEC / 2 pairs
// (interleaved: VEC consecutive elements) per step, taken only when every address it touches
// is 16-byte aligned and the rotated width is a multiple of the vector; otherwise pair by pair.
//
// Planted bugs (one define each, see kernels/mutants/rotary_*.toml):
//   MUTANT_UNCHECKED_VEC  the vector path checks the width but not the addresses (716);
//   MUTANT_INT32_ROW      the token offset is computed in 32-bit ints (past 2^31 elements);
//   MUTANT_ROW_STRIDE     tokens assumed packed: token offset t * heads * x_sh instead of x_st;
//   MUTANT_TAIL           the scalar loop runs one pair too far (i <= rot_dim / 2): reads one
//                         cosine and sine past the row and writes past the rotated part.
#include "cudafuzz.cuh"

#if !defined(THREADS)
#error "rotary needs THREADS ([params])"
#endif

#define VEC (16 / (int)sizeof(cf_elem))

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }

__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
    const float a2 = a * c - b * s;
    const float b2 = b * c + a * s;
    a = a2;
    b = b2;
}

extern "C" __global__ void __launch_bounds__(THREADS) rotary(CF_T_x* x, const CF_T_cos* __restrict__ cos_cache, const CF_T_sin* __restrict__ sin_cache,
                                                          const int* __restrict__ positions, int heads, int head_dim, int rot_dim, int interleaved,
                                                          long long x_st, long long x_sh, long long cos_st, long long sin_st) {
    const int half = rot_dim / 2;
#ifdef MUTANT_INT32_ROW
    const int t = blockIdx.x;
    CF_T_x* xt = x + (int)(t * x_st);
#elif defined(MUTANT_ROW_STRIDE)
    const long long t = blockIdx.x;
    CF_T_x* xt = x + t * heads * x_sh;
#else
    const long long t = blockIdx.x;
    CF_T_x* xt = x + t * x_st;
#endif
    const long long p = positions[t];
    const CF_T_cos* cr = cos_cache + p * cos_st;
    const CF_T_sin* sr = sin_cache + p * sin_st;

    // Vector path: the same decision for every head needs the head stride aligned too.
    const int width = interleaved ? rot_dim : half;
#ifdef MUTANT_UNCHECKED_VEC
    const bool vector = width % VEC == 0 && width > 0;
#else
    const bool vector = width % VEC == 0 && width > 0 && aligned16(xt) && ((x_sh * (long long)sizeof(cf_elem)) & 15ll) == 0 &&
                        (interleaved || (aligned16(xt + half) && aligned16(cr) && aligned16(sr)));
#endif
    if (vector) {
        const int per_head = width / VEC;
        for (int w = threadIdx.x; w < heads * per_head; w += THREADS) {
            const int h = w / per_head, v = (w % per_head) * VEC;
            CF_T_x* xh = xt + h * x_sh;
            if (interleaved) {
                uint4 raw = *reinterpret_cast<const uint4*>(xh + v);
                cf_elem* e = reinterpret_cast<cf_elem*>(&raw);
#pragma unroll
                for (int j = 0; j < VEC; j += 2) {
                    float a = cf_to_float(e[j]), b = cf_to_float(e[j + 1]);
                    rotate(a, b, cf_to_float(cr[(v + j) / 2]), cf_to_float(sr[(v + j) / 2]));
                    e[j] = cf_from_float(a);
                    e[j + 1] = cf_from_float(b);
                }
                *reinterpret_cast<uint4*>(xh + v) = raw;
            } else {
                uint4 ra = *reinterpret_cast<const uint4*>(xh + v);
                uint4 rb = *reinterpret_cast<const uint4*>(xh + half + v);
                const uint4 rc = *reinterpret_cast<const uint4*>(cr + v);
                const uint4 rs = *reinterpret_cast<const uint4*>(sr + v);
                cf_elem* ea = reinterpret_cast<cf_elem*>(&ra);
                cf_elem* eb = reinterpret_cast<cf_elem*>(&rb);
                const cf_elem* ec = reinterpret_cast<const cf_elem*>(&rc);
                const cf_elem* es = reinterpret_cast<const cf_elem*>(&rs);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    float a = cf_to_float(ea[j]), b = cf_to_float(eb[j]);
                    rotate(a, b, cf_to_float(ec[j]), cf_to_float(es[j]));
                    ea[j] = cf_from_float(a);
                    eb[j] = cf_from_float(b);
                }
                *reinterpret_cast<uint4*>(xh + v) = ra;
                *reinterpret_cast<uint4*>(xh + half + v) = rb;
            }
        }
    } else {
#ifdef MUTANT_TAIL
        const int pairs = half + 1;
#else
        const int pairs = half;
#endif
        for (int w = threadIdx.x; w < heads * pairs; w += THREADS) {
            const int h = w / pairs, i = w % pairs;
            CF_T_x* xh = xt + h * x_sh;
            const int i1 = interleaved ? 2 * i : i;
            const int i2 = interleaved ? 2 * i + 1 : i + half;
            float a = cf_to_float(xh[i1]), b = cf_to_float(xh[i2]);
            rotate(a, b, cf_to_float(cr[i]), cf_to_float(sr[i]));
            xh[i1] = cf_from_float(a);
            xh[i2] = cf_from_float(b);
        }
    }
}
