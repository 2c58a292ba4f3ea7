// Marker kernels: the persistent worker launches one before each case it runs under
// compute-sanitizer racecheck, initcheck or synccheck. Each is built to produce exactly one
// record of that tool, in a function whose name says it is a marker, so the records of a
// process's XML (written only when the process exits) split cleanly into per-case groups.
// memcheck needs no kernel: it reports API errors, and the worker makes a deliberate one.

// racecheck: thread 0 writes a shared word that thread 32 (another warp) reads with no barrier.
extern "C" __global__ void cudafuzz_marker_racecheck(int* out) {
  __shared__ int word;
  if (threadIdx.x == 0) word = 1;
  if (threadIdx.x == 32) out[0] = word;
}

// initcheck: one thread reads one word of a buffer that was allocated and never written. The
// worker moves to the next word every time, in case the tool reports an address only once.
extern "C" __global__ void cudafuzz_marker_initcheck(const int* never_written, long long word, int* out) {
  out[0] = never_written[word];
}

// synccheck: lane 1 calls __syncwarp with a mask that leaves it out (an invalid argument).
extern "C" __global__ void cudafuzz_marker_synccheck(int* out) {
  if (threadIdx.x == 1) __syncwarp(0x1u);
  out[threadIdx.x] = 1;
}
