// cf_coverage.cuh: kernel-path coverage for the cudafuzz harness (included by cudafuzz.cuh).
//
// Put CF_COVER(ID) on a kernel's interesting branches (tail tile vs full tile, vector vs scalar
// path, causal block skipped, GQA mapping). Without CUDAFUZZ_COVERAGE it compiles to nothing, so
// shipped kernels pay nothing. With -DCUDAFUZZ_COVERAGE=1 (the harness adds it for coverage runs)
// each point counts, per launch, the warps that reached it, in the device array
// `cf_coverage_hits`, and records its source line in `cf_coverage_lines`; the harness zeroes
// both before the launch and reads them after it, and the cargo-fuzz target copies the counts
// into libFuzzer's extra counters, so the fuzzer is steered by the kernel paths a case reached.
//
// ID is a literal in 0 .. CF_COVERAGE_SLOTS - 1, unique within the kernel (NVRTC has no
// __COUNTER__, and __LINE__ would collide when two points share a line).
#pragma once

#define CF_COVERAGE_SLOTS 256

#if defined(CUDAFUZZ_COVERAGE) && CUDAFUZZ_COVERAGE
// extern "C": unmangled names the harness looks up with cuModuleGetGlobal.
extern "C" {
__device__ unsigned int cf_coverage_hits[CF_COVERAGE_SLOTS];
__device__ unsigned int cf_coverage_lines[CF_COVERAGE_SLOTS];
}

// One atomic per warp that reaches the point (its lowest active lane), not one per thread:
// cheap enough to leave on every branch of a tile loop.
__device__ __forceinline__ void cf_cover(unsigned int slot, unsigned int line) {
    unsigned int active = __activemask();
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    if (lane == (unsigned int)(__ffs(active) - 1)) {
        atomicAdd(&cf_coverage_hits[slot], 1u);
        cf_coverage_lines[slot] = line;
    }
}
#define CF_COVER(id) cf_cover((id) % CF_COVERAGE_SLOTS, __LINE__)
#else
#define CF_COVER(id) ((void)0)
#endif
