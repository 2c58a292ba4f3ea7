// gemm_splitk_atomic: C += alpha * A * B, row-major, split-K: grid.z = SPLITS blocks share each
// 16 x 16 tile of C, each summing its own slice of K and adding it into C with atomicAdd. The
// result is correct, but its last bits depend on the order the slices land in: two runs of the
// same case may differ bit for bit. Its manifest declares c order_dependent, so it is judged by
// the tolerance and never compared bitwise between runs.
#include "cudafuzz.cuh"

#ifndef SPLITS
#error "gemm_splitk_atomic needs SPLITS ([params])"
#endif

extern "C" __global__ void gemm_splitk_atomic(int m, int n, int k, float alpha, const float* __restrict__ a, long long lda, const float* __restrict__ b,
                                              long long ldb, float* c, long long ldc) {
    const int col = blockIdx.x * 16 + threadIdx.x;
    const int row = blockIdx.y * 16 + threadIdx.y;
    if (row >= m || col >= n) return;
    const int per = (k + SPLITS - 1) / SPLITS;
    const int k0 = blockIdx.z * per;
    const int k1 = min(k, k0 + per);
    if (k0 >= k1) return;
    float acc = 0.0f;
    for (int p = k0; p < k1; ++p) acc += a[(long long)row * lda + p] * b[(long long)p * ldb + col];
    atomicAdd(&c[(long long)row * ldc + col], alpha * acc);
}
