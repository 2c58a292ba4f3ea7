// A 3-tap box filter along the rows of an image: out[y, x] = (in[y, x-1] + in[y, x] +
// in[y, x+1]) / 3, clamped at the row ends. Each block computes TILE consecutive pixels of the
// packed image and stores the whole tile, past the image's last pixel too: the host allocates
// `out` rounded up to whole tiles (`capacity` in the manifest), so those stores land in its
// don't-care tail. Reads stay inside the image.
#include "cudafuzz.cuh"

extern "C" __global__ void box3_tiles(CF_T_out* __restrict__ out, const CF_T_img* __restrict__ img, int h, int w) {
    const long long i = (long long)blockIdx.x * TILE + threadIdx.x;
    const long long pixels = (long long)h * w;
    float v = 0.0f;
    if (i < pixels) {
        const long long x = i % w;
        const float l = cf_to_float(img[x > 0 ? i - 1 : i]);
        const float r = cf_to_float(img[x + 1 < w ? i + 1 : i]);
        v = (l + cf_to_float(img[i]) + r) * (1.0f / 3.0f);
    }
    out[i] = cf_from_float(v);  // the whole tile: the buffer holds cdiv(h * w, TILE) tiles
}
