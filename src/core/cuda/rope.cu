// CUDA rotary position embeddings and the repeat of grouped k/v heads
// (declared in kernels.h), same conventions as core/kernels/cpu/rope.h.
//
// RoPE: one thread per (row, pair i): it computes the angle's cos and sin
// once, in double as the CPU tables do, and rotates pair i of every rotated
// head with math::rope_rotate; a second kernel copies the columns after the
// rotated heads when out is not inp.
//
// repeat_kv: one thread per output element. Forward copies; backward adds
// the group's NH / KV gradients of a k/v element in head order starting from
// 0, the CPU kernel's order, so both are bitwise equal. The head map is
// math::repeat_kv_src_col on both backends.
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

// out (N, 3C) = [q | k' | v'] from inp (N, W) = [q | k | v].
__global__ void repeat_kv_forward_kernel(float* out, const float* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS;
  for (int64_t i = first_index(); i < N * 3 * C; i += grid_stride()) {
    const int64_t n = i / (3 * C), j = i % (3 * C), part = j / C, h = (j % C) / HS, e = j % HS;
    const int64_t src = part == 0 ? j : math::repeat_kv_src_col(part - 1, h, NH, KV, HS) + e;
    out[i] = inp[n * W + src];
  }
}

// dinp (N, W): dq copied, each k/v element the sum over its group's heads.
__global__ void repeat_kv_backward_kernel(float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                                          int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS, group = NH / KV;
  for (int64_t i = first_index(); i < N * W; i += grid_stride()) {
    const int64_t n = i / W, j = i % W;
    const float* dy = dout + n * 3 * C;
    if (j < C) {
      dinp[i] = dy[j];
      continue;
    }
    const int64_t part = (j - C) / (KV * HS), kvh = ((j - C) / HS) % KV, e = j % HS;
    float s = 0.0f;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) s += dy[(1 + part) * C + h * HS + e];
    dinp[i] = s;
  }
}

}  // namespace

void launch_repeat_kv_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int64_t NH, int64_t KV,
                              int64_t HS) {
  const int64_t n = N * 3 * NH * HS;
  if (n > 0) repeat_kv_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, N, NH, KV, HS);
}

void launch_repeat_kv_backward(cudaStream_t stream, float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                               int64_t HS) {
  const int64_t n = N * (NH + 2 * KV) * HS;
  if (n > 0) repeat_kv_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, N, NH, KV, HS);
}

void launch_rope(cudaStream_t stream, float* out, const float* inp, const cpu::RopeDims& d, double sign) {
  const int64_t rows = d.B * d.T, pairs = rows * (d.HS / 2), rot = d.n_rot * d.HS;
  if (pairs > 0 && d.n_rot > 0) rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(out, inp, d, sign);
  if (out != inp && rows * (d.W - rot) > 0)
    copy_tail_kernel<<<blocks_for(rows * (d.W - rot)), kThreads, 0, stream>>>(out, inp, rows, d.W, rot);
}

}  // namespace lattice::cuda
