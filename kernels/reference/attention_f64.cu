// attention_f64.cu: the reference attention forward on the GPU, for the numerical oracle.
//
// Reads the same strided q, k, v (cf_elem) as the kernels under test and writes three dense
// outputs, each row-major over [b, h, s(, d)]:
//   ref_o      [B, Hq, Sq, D]  exact attention in f64:
//                 s_j = scale * Σ_d q_d k_jd (double, sequential over d), m = max_j s_j,
//                 p_j = exp(s_j - m) / Σ_j exp(s_j - m), o_d = Σ_j p_j v_jd (sequential over j).
//   ref_o_lowp [B, Hq, Sq, D]  the same-precision reference for the dtype T, round_T = round to
//                 nearest even into T and back (identity for f32); float arithmetic, no FMA:
//                 acc = 0; for d in order: acc = acc + q_d * k_jd; s_j = round_T(acc * scale);
//                 m = max_j s_j; e_j = (float)exp((double)(s_j - m)) (exp correctly rounded to
//                 float, barring double-rounding ties); l = Σ_j e_j in order of j;
//                 p_j = round_T(e_j / l); acc = 0; for j in order: acc = acc + p_j * v_jd;
//                 o_d = round_T(acc).
//   ref_lse    [B, Hq, Sq]     m + log(Σ_j exp(s_j - m)) in f64.
// Masked keys (causal: j > i + Sk - Sq) are skipped, which gives the same bits as adding their
// zero terms. A row with no allowed key writes o = 0 (both) and lse = -inf.
//
// Determinism over speed: every sum runs in one fixed order (one thread per sum), so the results
// are bit-for-bit reproducible and match a CPU implementation of the formulas above. Compile
// with --fmad=false; the explicit __f*_rn / __d*_rn intrinsics already prevent contraction.
//
// Work split: one block per (query row, head, batch); grid (seq_q, min(heads_q * batch, 65535)),
// blocks stride over heads_q * batch, so every valid shape launches. Keys are processed in chunks
// of KEY_CHUNK: when seq_k <= KEY_CHUNK the scores are computed once and stay in shared memory;
// otherwise they are recomputed (identically) in each of the three passes (max, sum, output), so
// seq_k is unbounded and shared memory stays small:
//   dynamic shared memory = min(seq_k, KEY_CHUNK) * 12 + head_dim * 16 bytes
//   (double acc64[head_dim], double e64[chunk], float e32[chunk], float q[head_dim],
//    float acc32[head_dim]); with KEY_CHUNK = 2048 and head_dim <= 1024 that is <= 40 KB, under
//   the 48 KB default, so no opt-in attribute is needed on any GPU.
#include "cudafuzz.cuh"

#ifndef REF_THREADS
#error "REF_THREADS must be defined (manifest [defines])"
#endif
#ifndef KEY_CHUNK
#error "KEY_CHUNK must be defined (manifest [defines])"
#endif
static_assert(REF_THREADS % 32 == 0 && REF_THREADS >= 64 && REF_THREADS <= 1024,
              "REF_THREADS must be a multiple of 32 in 64..1024");
static_assert(KEY_CHUNK >= 1, "KEY_CHUNK must be positive");

__device__ __forceinline__ double warp_max_d(double x) {
    for (int off = 16; off > 0; off >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

// Both scores of key row `krow`: f64 (exact products, sequential double sum) and same-precision.
__device__ __forceinline__ void ref_score(const float* qf, const cf_elem* krow, long long k_sd,
                                          int head_dim, double scale64, float scale32,
                                          double* s64, float* s32) {
    double a64 = 0.0;
    float a32 = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
        const float qv = qf[d];
        const float kv = cf_to_float(krow[(long long)d * k_sd]);
        a64 = __dadd_rn(a64, __dmul_rn((double)qv, (double)kv));
        a32 = __fadd_rn(a32, __fmul_rn(qv, kv));
    }
    *s64 = __dmul_rn(scale64, a64);
    *s32 = cf_round(__fmul_rn(a32, scale32));
}

// exp of the max-subtracted scores.
__device__ __forceinline__ double ref_exp64(double s, double m) { return exp(__dsub_rn(s, m)); }
__device__ __forceinline__ float ref_exp32(float s, float m) {
    return (float)exp((double)__fsub_rn(s, m));
}

extern "C" __global__ void __launch_bounds__(REF_THREADS, 2)
attention_f64_ref(const cf_elem* q, const cf_elem* k, const cf_elem* v,
                  double* ref_o, double* ref_o_lowp, double* ref_lse,
                  int batch, int heads_q, int heads_kv, int seq_q, int seq_k, int head_dim,
                  int causal, float scale,
                  long long q_sb, long long q_sh, long long q_ss, long long q_sd,
                  long long k_sb, long long k_sh, long long k_ss, long long k_sd,
                  long long v_sb, long long v_sh, long long v_ss, long long v_sd) {
    const int chunk = min(seq_k, KEY_CHUNK);
    extern __shared__ double smem_d[];
    double* acc64 = smem_d;                        // [head_dim]
    double* e64 = acc64 + head_dim;                // [chunk]: scores, then exp, then p
    float* e32 = (float*)(e64 + chunk);            // [chunk]: likewise, same precision
    float* qf = e32 + chunk;                       // [head_dim]
    float* acc32 = qf + head_dim;                  // [head_dim]
    __shared__ double red64[32];
    __shared__ float red32[32];

    const int tid = threadIdx.x, nthreads = blockDim.x;
    const int lane = tid & 31, warp = tid >> 5, nwarps = nthreads >> 5;
    const int s = blockIdx.x;
    const int group = heads_q / heads_kv;
    const double scale64 = (double)scale;
    const long long n_hb = (long long)heads_q * batch;

    int n_keys = seq_k;  // keys 0..n_keys-1 are allowed
    if (causal) n_keys = min(seq_k, max(0, s + seq_k - seq_q + 1));
    const bool resident = n_keys <= chunk;  // scores computed once and kept

    for (long long hb = blockIdx.y; hb < n_hb; hb += gridDim.y) {
        const int h = (int)(hb % heads_q), b = (int)(hb / heads_q);
        const int hkv = h / group;
        const long long out_row = ((long long)b * heads_q + h) * seq_q + s;
        double* o64 = ref_o + out_row * head_dim;
        double* olow = ref_o_lowp + out_row * head_dim;

        if (n_keys == 0) {
            for (int d = tid; d < head_dim; d += nthreads) {
                o64[d] = 0.0;
                olow[d] = 0.0;
            }
            if (tid == 0) ref_lse[out_row] = CF_NEG_INF_D;
            continue;  // uniform across the block: no barrier is skipped by part of it
        }

        const cf_elem* qrow = q + (long long)b * q_sb + (long long)h * q_sh + (long long)s * q_ss;
        const cf_elem* kbase = k + (long long)b * k_sb + (long long)hkv * k_sh;
        const cf_elem* vbase = v + (long long)b * v_sb + (long long)hkv * v_sh;

        for (int d = tid; d < head_dim; d += nthreads) {
            qf[d] = cf_to_float(qrow[(long long)d * q_sd]);
            acc64[d] = 0.0;
            acc32[d] = 0.0f;
        }
        __syncthreads();

        // Pass 1: scores and the row max (both precisions).
        double m64 = CF_NEG_INF_D;
        float m32 = CF_NEG_INF_F;
        for (int c0 = 0; c0 < n_keys; c0 += chunk) {
            const int len = min(chunk, n_keys - c0);
            for (int i = tid; i < len; i += nthreads) {
                ref_score(qf, kbase + (long long)(c0 + i) * k_ss, k_sd, head_dim, scale64, scale,
                          &e64[i], &e32[i]);
                m64 = fmax(m64, e64[i]);
                m32 = fmaxf(m32, e32[i]);
            }
        }
        m64 = warp_max_d(m64);
        m32 = cf_warp_max(m32);
        if (lane == 0) {
            red64[warp] = m64;
            red32[warp] = m32;
        }
        __syncthreads();
        m64 = warp_max_d(lane < nwarps ? red64[lane] : CF_NEG_INF_D);
        m32 = cf_warp_max(lane < nwarps ? red32[lane] : CF_NEG_INF_F);
        __syncthreads();  // red64/red32 are reused below

        // Pass 2: l = Σ_j exp(s_j - m), one thread per precision, in order of j.
        double l64 = 0.0;
        float l32 = 0.0f;
        for (int c0 = 0; c0 < n_keys; c0 += chunk) {
            const int len = min(chunk, n_keys - c0);
            for (int i = tid; i < len; i += nthreads) {
                if (!resident)
                    ref_score(qf, kbase + (long long)(c0 + i) * k_ss, k_sd, head_dim, scale64,
                              scale, &e64[i], &e32[i]);
                e64[i] = ref_exp64(e64[i], m64);
                e32[i] = ref_exp32(e32[i], m32);
            }
            __syncthreads();
            if (tid == 0)
                for (int i = 0; i < len; ++i) l32 = __fadd_rn(l32, e32[i]);
            if (tid == 32)
                for (int i = 0; i < len; ++i) l64 = __dadd_rn(l64, e64[i]);
            __syncthreads();  // the next chunk overwrites e64/e32
        }
        if (tid == 0) red32[0] = l32;
        if (tid == 32) red64[0] = l64;
        __syncthreads();
        l64 = red64[0];
        l32 = red32[0];

        // Pass 3: p_j and o_d = Σ_j p_j v_jd, one thread per feature, in order of j.
        for (int c0 = 0; c0 < n_keys; c0 += chunk) {
            const int len = min(chunk, n_keys - c0);
            for (int i = tid; i < len; i += nthreads) {
                if (!resident) {
                    ref_score(qf, kbase + (long long)(c0 + i) * k_ss, k_sd, head_dim, scale64,
                              scale, &e64[i], &e32[i]);
                    e64[i] = ref_exp64(e64[i], m64);
                    e32[i] = ref_exp32(e32[i], m32);
                }
                e64[i] = __ddiv_rn(e64[i], l64);
                e32[i] = cf_round(__fdiv_rn(e32[i], l32));
            }
            __syncthreads();
            for (int d = tid; d < head_dim; d += nthreads) {
                double a64 = acc64[d];
                float a32 = acc32[d];
                const cf_elem* vcol = vbase + (long long)c0 * v_ss + (long long)d * v_sd;
                for (int i = 0; i < len; ++i) {
                    const float vv = cf_to_float(vcol[(long long)i * v_ss]);
                    a64 = __dadd_rn(a64, __dmul_rn(e64[i], (double)vv));
                    a32 = __fadd_rn(a32, __fmul_rn(e32[i], vv));
                }
                acc64[d] = a64;
                acc32[d] = a32;
            }
            __syncthreads();  // the next chunk overwrites e64/e32
        }

        for (int d = tid; d < head_dim; d += nthreads) {
            o64[d] = acc64[d];
            olow[d] = (double)cf_round(acc32[d]);
        }
        if (tid == 0) ref_lse[out_row] = __dadd_rn(m64, log(l64));
        __syncthreads();  // the next (head, batch) reuses shared memory
    }
}
