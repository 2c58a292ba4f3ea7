// Marker kernels: the persistent worker launches one before each case it runs under
// compute-sanitizer racecheck or initcheck. Each is built to produce exactly one
// record of that tool, in a function whose name says it is a marker, so the records of a
// process's XML (written only when the process exits) split cleanly into per-case groups.
// memcheck needs no kernel: it reports API errors, and the worker makes a deliberate one.

// racecheck (64 threads): each thread writes its word and reads its mirror's, written by a thread
// of the other warp, with no barrier between. (A single write by one thread and a read by another
// was not reported by racecheck 2025.3: the race has to be one racecheck analyses.)
extern "C" __global__ void cudafuzz_marker_racecheck(int* out) {
  __shared__ int tile[64];
  tile[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = tile[63 - threadIdx.x];
}

// initcheck: one thread reads one word of a buffer that was allocated and never written. The
// worker moves 256 bytes on every time: initcheck reports a region once (markers 32 words apart
// were merged into one report).
extern "C" __global__ void cudafuzz_marker_initcheck(const int* never_written, long long word, int* out) {
  out[0] = never_written[word];
}

// synccheck has no marker: its errors abort the kernel (CUDA error 719), so the process ends with
// the case that caused them, and its records belong to the last case the process ran.
