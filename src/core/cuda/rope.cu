// CUDA rotary position embeddings (declared in kernels.h), same convention as
// core/kernels/cpu/rope.h. One thread per (row, pair i): it computes the
// angle's cos and sin once, in double as the CPU tables do, and rotates pair i
// of every rotated head with math::rope_rotate; a second kernel copies the
// columns after the rotated heads when out is not inp.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"

namespace lattice::cuda {

namespace {

__global__ void rope_kernel(float* out, const float* inp, cpu::RopeDims d, double sign) {
  const int64_t H = d.HS / 2;
  for (int64_t k = first_index(); k < d.B * d.T * H; k += grid_stride()) {
    const int64_t row = k / H, i = k % H, t = row % d.T;
    const double a = math::rope_angle(t, i, d.HS, d.theta);
    const double cs = cos(a), sn = sign * sin(a);
    const float* x = inp + row * d.W;
    float* y = out + row * d.W;
    for (int64_t h = 0; h < d.n_rot; ++h) {
      const int64_t j = h * d.HS + i;
      math::rope_rotate(y[j], y[j + H], x[j], x[j + H], cs, sn);
    }
  }
}

// Columns [rot, W) of every row: copied unchanged.
__global__ void copy_tail_kernel(float* out, const float* inp, int64_t rows, int64_t W, int64_t rot) {
  const int64_t tail = W - rot;
  for (int64_t k = first_index(); k < rows * tail; k += grid_stride()) {
    const int64_t j = (k / tail) * W + rot + k % tail;
    out[j] = inp[j];
  }
}

}  // namespace

void launch_rope(cudaStream_t stream, float* out, const float* inp, const cpu::RopeDims& d, double sign) {
  const int64_t rows = d.B * d.T, pairs = rows * (d.HS / 2), rot = d.n_rot * d.HS;
  if (pairs > 0 && d.n_rot > 0) rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(out, inp, d, sign);
  if (out != inp && rows * (d.W - rot) > 0)
    copy_tail_kernel<<<blocks_for(rows * (d.W - rot)), kThreads, 0, stream>>>(out, inp, rows, d.W, rot);
}

}  // namespace lattice::cuda
