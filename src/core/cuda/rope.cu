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
//
// Templated on the activation storage S (float, Bf16, F16): loads widened,
// the rotation in double rounded to float (as for f32) and then to S, group
// sums in float, one rounding on store.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

namespace {

template <typename S>
__global__ void rope_kernel(S* out, const S* inp, cpu::RopeDims d, double sign) {
  const int64_t H = d.HS / 2;
  for (int64_t k = first_index(); k < d.B * d.T * H; k += grid_stride()) {
    const int64_t row = k / H, i = k % H, t = row % d.T;
    const double a = math::rope_angle(d.pos0 + t, i, d.HS, d.theta);
    const double cs = cos(a), sn = sign * sin(a);
    const S* x = inp + row * d.W;
    S* y = out + row * d.W;
    for (int64_t h = 0; h < d.n_rot; ++h) {
      const int64_t j = h * d.HS + i;
      float a, b;
      math::rope_rotate(a, b, widen(x[j]), widen(x[j + H]), cs, sn);
      y[j] = narrow<S>(a);
      y[j + H] = narrow<S>(b);
    }
  }
}

// Columns [rot, W) of every row: copied unchanged.
template <typename S>
__global__ void copy_tail_kernel(S* out, const S* inp, int64_t rows, int64_t W, int64_t rot) {
  const int64_t tail = W - rot;
  for (int64_t k = first_index(); k < rows * tail; k += grid_stride()) {
    const int64_t j = (k / tail) * W + rot + k % tail;
    out[j] = inp[j];
  }
}

// out (N, 3C) = [q | k' | v'] from inp (N, W) = [q | k | v].
template <typename S>
__global__ void repeat_kv_forward_kernel(S* out, const S* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS;
  for (int64_t i = first_index(); i < N * 3 * C; i += grid_stride()) {
    const int64_t n = i / (3 * C), j = i % (3 * C), part = j / C, h = (j % C) / HS, e = j % HS;
    const int64_t src = part == 0 ? j : math::repeat_kv_src_col(part - 1, h, NH, KV, HS) + e;
    out[i] = inp[n * W + src];
  }
}

// dinp (N, W): dq copied, each k/v element the sum over its group's heads.
template <typename S>
__global__ void repeat_kv_backward_kernel(S* dinp, const S* dout, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS, group = NH / KV;
  for (int64_t i = first_index(); i < N * W; i += grid_stride()) {
    const int64_t n = i / W, j = i % W;
    const S* dy = dout + n * 3 * C;
    if (j < C) {
      dinp[i] = dy[j];
      continue;
    }
    const int64_t part = (j - C) / (KV * HS), kvh = ((j - C) / HS) % KV, e = j % HS;
    float s = 0.0f;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) s += widen(dy[(1 + part) * C + h * HS + e]);
    dinp[i] = narrow<S>(s);
  }
}

}  // namespace

template <typename S>
void launch_repeat_kv_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t NH, int64_t KV,
                              int64_t HS) {
  const int64_t n = N * 3 * NH * HS;
  if (n > 0) repeat_kv_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, N, NH, KV, HS);
}

template <typename S>
void launch_repeat_kv_backward(cudaStream_t stream, S* dinp, const S* dout, int64_t N, int64_t NH, int64_t KV,
                               int64_t HS) {
  const int64_t n = N * (NH + 2 * KV) * HS;
  if (n > 0) repeat_kv_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, N, NH, KV, HS);
}

template <typename S>
void launch_rope(cudaStream_t stream, S* out, const S* inp, const cpu::RopeDims& d, double sign) {
  const int64_t rows = d.B * d.T, pairs = rows * (d.HS / 2), rot = d.n_rot * d.HS;
  if (pairs > 0 && d.n_rot > 0) rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(out, inp, d, sign);
  if (out != inp && rows * (d.W - rot) > 0)
    copy_tail_kernel<<<blocks_for(rows * (d.W - rot)), kThreads, 0, stream>>>(out, inp, rows, d.W, rot);
}

#define LATTICE_INSTANTIATE(S)                                                                               \
  template void launch_rope<S>(cudaStream_t, S*, const S*, const cpu::RopeDims&, double);                    \
  template void launch_repeat_kv_forward<S>(cudaStream_t, S*, const S*, int64_t, int64_t, int64_t, int64_t); \
  template void launch_repeat_kv_backward<S>(cudaStream_t, S*, const S*, int64_t, int64_t, int64_t, int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
