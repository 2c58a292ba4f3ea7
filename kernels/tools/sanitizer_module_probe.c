/* sanitizer_module_probe: loads a cubin with the driver API (cuModuleLoadData, as the harness's
 * worker does) and launches one marker kernel of kernels/harness/sanitizer_markers.cu, to check
 * which compute-sanitizer tools see kernels loaded this way.
 *   nvcc -o modprobe kernels/tools/sanitizer_module_probe.c -lcuda
 *   compute-sanitizer --tool racecheck ./modprobe markers.cubin cudafuzz_marker_racecheck 64 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("%s -> %d\n", #x, (int)r_); return 1; } } while (0)

int main(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: modprobe CUBIN ENTRY BLOCK\n"); return 2; }
  FILE* f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 2; }
  fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  char* image = (char*)malloc(n); fread(image, 1, n, f); fclose(f);
  CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&mod, image)); CK(cuModuleGetFunction(&fn, mod, argv[2]));
  CUdeviceptr never_written, out; long long word = 0;
  CK(cuMemAlloc(&never_written, 4096)); CK(cuMemAlloc(&out, 4096));
  void* init_args[] = {&never_written, &word, &out};
  void* out_args[] = {&out};
  int init = argv[2][16] == 'i';  /* cudafuzz_marker_initcheck */
  for (int i = 0; i < 3; ++i) {
    word = i;
    CK(cuLaunchKernel(fn, 1, 1, 1, atoi(argv[3]), 1, 1, 0, NULL, init ? init_args : out_args, NULL));
    CK(cuCtxSynchronize());
  }
  printf("%s: 3 launches done\n", argv[2]);
  return 0;
}
