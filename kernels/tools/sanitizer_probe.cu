// sanitizer_probe: one planted bug per compute-sanitizer tool, between API-error markers, to see
// what each tool's XML holds and in which order records and markers appear (the basis of the
// harness's per-case attribution in a persistent worker). Plain CUDA runtime, builds with nvcc:
//   nvcc -lineinfo -arch=sm_90 -o probe kernels/tools/sanitizer_probe.cu -lcuda
//   compute-sanitizer --tool racecheck --xml --save race.xml ./probe race race.xml
// MODE: oob | race | uninit | sync | misaligned | clean. The second argument is the XML path whose
// size is printed at each marker (does the tool write records as they happen, or at exit?).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void oob_read(const float* a, float* out, int n) {
  int i = threadIdx.x;
  out[i] = a[n + i];  // planted: reads up to 32 elements past a's end
}

__global__ void shared_race(float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = threadIdx.x;
  // planted: no __syncthreads() between the write and another thread's read
  out[threadIdx.x] = tile[63 - threadIdx.x];
}

__global__ void uninit_read(const float* never_written, float* out) {
  out[threadIdx.x] = never_written[threadIdx.x];  // planted: cudaMalloc'd, never written
}

__global__ void bad_syncwarp(float* out) {
  // planted: lanes 16..31 call __syncwarp with a mask that excludes them
  if (threadIdx.x % 32 >= 16) __syncwarp(0x0000ffffu);
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 32) __syncthreads();  // planted: barrier in divergent code
  out[threadIdx.x] = 2.0f;
}

__global__ void misaligned_v4(const float* a, float* out) {
  const float4* p = reinterpret_cast<const float4*>(a + 1);  // planted: 4 bytes past 16
  float4 v = p[threadIdx.x];
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

__global__ void clean(const float* a, float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[63 - threadIdx.x];
}

static const char* xml_path = "";

static void marker(const char* what) {
  // A deliberate API error: the tools record it, so it splits the record stream.
  cudaError_t e = cudaFree(reinterpret_cast<void*>(0x10));
  cudaGetLastError();
  // The same through the driver API, as the harness's worker (cudarc) would call it.
  CUresult d = cuMemFree(static_cast<CUdeviceptr>(0x20));
  struct stat st;
  long size = stat(xml_path, &st) == 0 ? static_cast<long>(st.st_size) : -1;
  printf("marker %-24s cudaFree(0x10) -> %d (%s); cuMemFree(0x20) -> %d; xml size now %ld\n", what, e, cudaGetErrorName(e), d, size);
  fflush(stdout);
}

static void sync(const char* what) {
  cudaError_t e = cudaDeviceSynchronize();
  printf("kernel %-24s -> %d (%s)\n", what, e, cudaGetErrorName(e));
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: probe MODE [XML]\n"); return 2; }
  const char* mode = argv[1];
  if (argc > 2) xml_path = argv[2];
  float *a, *b, *c, *out;
  cudaMalloc(&a, 256 * sizeof(float));
  cudaMalloc(&b, 256 * sizeof(float));
  cudaMalloc(&c, 256 * sizeof(float));
  cudaMalloc(&out, 256 * sizeof(float));
  cudaMemset(a, 0, 256 * sizeof(float));
  cudaMemset(b, 0, 256 * sizeof(float));
  cudaMemset(out, 0, 256 * sizeof(float));
  printf("a=%p b=%p c=%p out=%p\n", (void*)a, (void*)b, (void*)c, (void*)out);
  marker("start");
  clean<<<1, 64>>>(a, out); sync("clean#1");
  marker("after clean#1");
  if (!strcmp(mode, "oob")) { oob_read<<<1, 32>>>(a, out, 256); sync("oob_read"); }
  else if (!strcmp(mode, "race")) { shared_race<<<1, 64>>>(out); sync("shared_race"); }
  else if (!strcmp(mode, "uninit")) { uninit_read<<<1, 64>>>(c, out); sync("uninit_read"); }
  else if (!strcmp(mode, "sync")) {
    bad_syncwarp<<<1, 64>>>(out); sync("bad_syncwarp");
    marker("after bad_syncwarp");
    divergent_barrier<<<1, 64>>>(out); sync("divergent_barrier");
  }
  else if (!strcmp(mode, "misaligned")) { misaligned_v4<<<1, 32>>>(a, out); sync("misaligned_v4"); }
  marker("after planted");
  clean<<<1, 64>>>(a, out); sync("clean#2");
  marker("end");
  return 0;
}
