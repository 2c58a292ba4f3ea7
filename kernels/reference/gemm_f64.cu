// gemm_f64: the GPU reference of the built-in op `gemm` (src/reference/gemm.rs states the
// semantics; this kernel computes the same three arrays). One thread per element of C:
//   ref_c[i, j]      = alpha * sum_k op(a)[i, k] * op(b)[k, j] + beta * c[i, j]   in double;
//   ref_c_lowp[i, j] = the same in float, products and sums sequential in k (no FMA: built with
//                      --fmad=false), rounded to the case's element type;
//   ref_c_cond[i, j] = |alpha| sum_k |op(a)[i, k] op(b)[k, j]| + |beta c[i, j]|, the condition
//                      the tolerance scales with.
// beta == 0 never reads c. a, b and c are read where the case put them (any element strides);
// c holds C's initial contents: the caller passes a copy taken before the kernel under test ran.
#include "cudafuzz.cuh"

extern "C" __global__ void gemm_f64_ref(const cf_elem* a, const cf_elem* b, const cf_elem* c, double* ref_c, double* ref_c_lowp, double* ref_c_cond,
                                        int m, int n, int k, float alpha, float beta, int trans_a, int trans_b, long long a_s0, long long a_s1,
                                        long long b_s0, long long b_s1, long long c_s0, long long c_s1) {
    const long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (o >= (long long)m * n) return;
    const long long i = o / n, j = o % n;
    double acc = 0.0, cond = 0.0;
    float acc32 = 0.0f;
    for (long long kk = 0; kk < k; ++kk) {
        const cf_elem av = trans_a ? a[kk * a_s0 + i * a_s1] : a[i * a_s0 + kk * a_s1];
        const cf_elem bv = trans_b ? b[j * b_s0 + kk * b_s1] : b[kk * b_s0 + j * b_s1];
        const double p = cf_to_double(av) * cf_to_double(bv);
        acc += p;
        cond += fabs(p);
        acc32 = __fadd_rn(acc32, __fmul_rn(cf_to_float(av), cf_to_float(bv)));
    }
    double gold = (double)alpha * acc;
    float low = __fmul_rn(alpha, acc32);
    cond *= fabs((double)alpha);
    if (beta != 0.0f) {
        const cf_elem cv = c[i * c_s0 + j * c_s1];
        gold += (double)beta * cf_to_double(cv);
        low = __fadd_rn(low, __fmul_rn(beta, cf_to_float(cv)));
        cond += fabs((double)beta * cf_to_double(cv));
    }
    ref_c[o] = gold;
    ref_c_lowp[o] = (double)cf_round(low);
    ref_c_cond[o] = cond;
}
