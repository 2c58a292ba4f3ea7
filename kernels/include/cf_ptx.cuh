// cf_ptx.cuh: thin inline-PTX wrappers for tensor-core kernels (sm_80+): warp-level MMA
// m16n8k16 with fp32 accumulation, ldmatrix, cp.async and a fast exp2. NVRTC has no CUTLASS or
// CuTe, so kernels here issue these instructions themselves.
//
// Include after cudafuzz.cuh. Like it, this header uses no standard library (NVRTC). Every
// wrapper names its PTX instruction; the fragment layouts (which lane holds which element) are
// documented where a kernel uses them, e.g. attention/flash_fwd_kernel.cuh.
//
// Memory clobbers: every wrapper that reads or writes shared memory (ldmatrix, cp.async, the
// cp.async waits) is `asm volatile` with a "memory" clobber, so the compiler neither moves plain
// C++ shared-memory stores across it nor caches shared values in registers across it.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "cf_ptx.cuh needs sm_80 or newer (mma.sync m16n8k16 bf16, cp.async)"
#endif

// 32-bit shared-memory address of a generic pointer into shared memory (what ldmatrix and
// cp.async take).
__device__ __forceinline__ unsigned cf_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#if defined(CUDAFUZZ_DTYPE_F16) || defined(CUDAFUZZ_DTYPE_BF16)
// (cf_mma_m16n8k16 and cf_pack2 exist only for 16-bit element types.)

// D = A * B + C for one m16n8k16 tile: A 16x16 (row-major fragment, 4 x b32 each holding two
// 16-bit elements), B 16x8 (column-major fragment, 2 x b32), C and D 16x8 fp32 (4 floats).
// The element type of A and B is the kernel's cf_elem (f16 or bf16); accumulation is fp32.
__device__ __forceinline__ void cf_mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                unsigned b1) {
#if defined(CUDAFUZZ_DTYPE_F16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(CUDAFUZZ_DTYPE_BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats rounded (nearest-even) into one b32 of two cf_elem: `lo` in bits 0..15 (the
// element with the smaller column/k index), `hi` in bits 16..31, as mma fragments expect.
__device__ __forceinline__ unsigned cf_pack2(float lo, float hi) {
#if defined(CUDAFUZZ_DTYPE_F16)
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
#elif defined(CUDAFUZZ_DTYPE_BF16)
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
#endif
}

#endif  // CUDAFUZZ_DTYPE_F16 || CUDAFUZZ_DTYPE_BF16

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices of 16-bit elements. Lanes 8i..8i+7
// give the addresses of rows 0..7 of matrix i (each row 16 contiguous bytes, 16-byte aligned);
// r[i] receives matrix i's fragment: lane L holds row L/4, elements 2*(L%4) (low half) and
// 2*(L%4)+1 (high half).
__device__ __forceinline__ void cf_ldmatrix_x4(unsigned (&r)[4], unsigned smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr)
                 : "memory");
}

// The same with .trans: r[i] receives matrix i transposed: lane L holds the elements in rows
// 2*(L%4) (low half) and 2*(L%4)+1 (high half) of column L/4 of the stored matrix.
__device__ __forceinline__ void cf_ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr)
                 : "memory");
}

// cp.async.cg.shared.global, 16 bytes: both addresses must be 16-byte aligned (a misaligned
// global address faults with 716, like a vector load).
__device__ __forceinline__ void cf_cp_async_16(unsigned smem_addr, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem) : "memory");
}

// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cf_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until every cp.async group of this thread has landed. Other threads' copies are only
// visible after a barrier (__syncthreads) that follows their own wait.
__device__ __forceinline__ void cf_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// 2^x with the SFU (ex2.approx.ftz.f32: relative error ~2^-22, exp2(-inf) = +0, denormal
// results flushed to 0).
__device__ __forceinline__ float cf_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
