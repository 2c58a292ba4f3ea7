"""Row softmax as a CuPy RawKernel, called the way CuPy users call their kernels: a Python
function that picks the grid and block, passes the arrays and their row strides, and launches.

``softmax`` is correct for any row stride and base offset. ``softmax_unmasked_tail`` is the same
kernel with a planted bug users really write: the loads are unrolled by four and the row's last
partial group is read unmasked (past the row's end: the next row's elements, or past the
allocation on the last row).
"""

import cupy

_SOURCE = r"""
extern "C" __global__ void softmax_rows(const float* x, float* y, int n, long long x_row, long long y_row, int unmasked_tail) {
    extern __shared__ float scratch[];
    const float* xr = x + blockIdx.x * x_row;
    float* yr = y + blockIdx.x * y_row;
    // The bug: a bound rounded up to the unroll width.
    int bound = unmasked_tail ? ((n + 3) / 4) * 4 : n;
    float m = __int_as_float(0xff800000);  // -inf
    for (int i = threadIdx.x; i < bound; i += blockDim.x) m = fmaxf(m, xr[i]);
    scratch[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    m = scratch[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.x; i < bound; i += blockDim.x) sum += expf(xr[i] - m);
    scratch[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    sum = scratch[0];
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(xr[i] - m) / sum;
}
"""

_BLOCK = 256
_kernel = None


def _softmax_rows():
    global _kernel
    if _kernel is None:
        _kernel = cupy.RawKernel(_SOURCE, "softmax_rows")
    return _kernel


def _launch(x, y, unmasked_tail):
    rows, n = x.shape
    if x.dtype != cupy.float32 or y.dtype != cupy.float32:
        raise TypeError("softmax takes float32 arrays")
    if x.strides[1] != x.itemsize or y.strides[1] != y.itemsize:
        raise ValueError("the elements of a row must be contiguous")
    args = (x, y, cupy.int32(n), cupy.int64(x.strides[0] // x.itemsize), cupy.int64(y.strides[0] // y.itemsize), cupy.int32(unmasked_tail))
    _softmax_rows()((rows,), (_BLOCK,), args, shared_mem=_BLOCK * 4)


def softmax(x, y):
    """y = softmax(x) over the last axis, row by row."""
    _launch(x, y, 0)


def softmax_unmasked_tail(x, y):
    """softmax with the planted bug (see the module docs)."""
    _launch(x, y, 1)


def warm():
    """Setup: compiles the kernel once, before any case is timed."""
    _softmax_rows().compile()
