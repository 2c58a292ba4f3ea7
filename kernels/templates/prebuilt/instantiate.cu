// Every instantiation of ../rms_norm_vec.cu a host can launch, for a prebuilt module: what a
// library's own build ships. build.sh compiles it with nvcc into rms_norm_vec.sm_XY.cubin.
#include "../rms_norm_vec.cu"

#define CFX_INSTANTIATE(VEC_, T_, BLOCK_)                                                                   \
    template __global__ void cfx::rms_norm<VEC_, T_, BLOCK_>(T_*, const T_*, const T_*, int, float, long long, \
                                                             long long);
#define CFX_BLOCKS(VEC_, T_) CFX_INSTANTIATE(VEC_, T_, 256) CFX_INSTANTIATE(VEC_, T_, 128)
#define CFX_WIDTHS(T_) CFX_BLOCKS(1, T_) CFX_BLOCKS(2, T_) CFX_BLOCKS(4, T_) CFX_BLOCKS(8, T_)

CFX_WIDTHS(__half)
CFX_WIDTHS(__nv_bfloat16)
CFX_WIDTHS(float)
