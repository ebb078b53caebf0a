// The row kernels of the plain CUDA attention (attention.h): masked softmax,
// dropout of the probabilities and the softmax backward, each row of the
// (B, NH, T, T) probabilities one thread block with a fixed reduction order.
// Launchers only enqueue; attention.cpp checks and orders them.
#include "core/cuda/attention.h"
#include "core/kernels/math.h"

namespace lattice::cuda {

namespace {

constexpr int kRowThreads = 256;  // one block per row of P; a multiple of the warp size

// The sum (or max) of `v` over the block, returned to every thread. Fixed
// order: warp shuffles, then warp 0 over the per-warp results.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float part[kRowThreads / 32];
  __shared__ float total;
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kRowThreads / 32 ? part[lane] : (kMax ? -INFINITY : 0.0f);
    for (int off = 16; off > 0; off >>= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = kMax ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) total = v;
  }
  __syncthreads();
  const float out = total;
  __syncthreads();  // `total` and `part` are reused by the next reduction
  return out;
}

// Where row `row` of the (B, NH, T, T) probabilities lives.
struct RowPos {
  int64_t b, h, i;
};
__device__ RowPos row_pos(int64_t row, int64_t NH, int64_t T) { return {row / (NH * T), (row / T) % NH, row % T}; }

__device__ bool allowed(const AttentionArgs& a, int64_t b, int64_t i, int64_t j) {
  if (a.causal) return j <= i;
  return a.key_mask == nullptr || a.key_mask[b * a.T + j] != 0;
}

// Dropout coordinates of element (i, j) of head h: as the CPU kernels.
__device__ uint64_t drop_element(const AttentionArgs& a, int64_t h, int64_t i, int64_t j) {
  return (uint64_t(a.head_offset + h) * uint64_t(a.T) + uint64_t(i)) * uint64_t(a.T) + uint64_t(j);
}

// s (one row per block): scores in, probabilities out; disallowed keys 0.
__global__ void __launch_bounds__(kRowThreads) masked_softmax_rows(float* s, AttentionArgs a) {
  const int64_t row = blockIdx.x;
  const RowPos p = row_pos(row, a.NH, a.T);
  float* r = s + row * a.T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads)
    if (allowed(a, p.b, p.i, j)) mx = fmaxf(mx, r[j]);
  mx = block_reduce<true>(mx);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    const float e = allowed(a, p.b, p.i, j) ? expf(r[j] - mx) : 0.0f;
    r[j] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no allowed key: the row stays 0
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) r[j] *= inv;
}

// dropped = dropout(P), every row of (B, NH, T, T).
__global__ void __launch_bounds__(kRowThreads) dropout_rows(float* dropped, const float* P, AttentionArgs a) {
  const int64_t row = blockIdx.x;
  const RowPos p = row_pos(row, a.NH, a.T);
  const float scale = 1.0f / (1.0f - a.p);
  const uint64_t sample = uint64_t(a.sample0 + p.b);
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    const bool keep = rng_keep(a.key, sample, drop_element(a, p.h, p.i, j), a.p);
    dropped[row * a.T + j] = keep ? P[row * a.T + j] * scale : 0.0f;
  }
}

// ds (one row per block): dPd in, dS = P (dP - rowsum(P dP)) out, where dP
// is dPd through the dropout mask (p > 0).
__global__ void __launch_bounds__(kRowThreads) softmax_backward_rows(float* ds, const float* P, AttentionArgs a) {
  const int64_t row = blockIdx.x;
  const RowPos p = row_pos(row, a.NH, a.T);
  const float scale = a.p > 0.0f ? 1.0f / (1.0f - a.p) : 1.0f;
  const uint64_t sample = uint64_t(a.sample0 + p.b);
  float* r = ds + row * a.T;
  const float* pr = P + row * a.T;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    float d = r[j];
    if (a.p > 0.0f) d = rng_keep(a.key, sample, drop_element(a, p.h, p.i, j), a.p) ? d * scale : 0.0f;
    r[j] = d;
    dot += pr[j] * d;
  }
  dot = block_reduce<false>(dot);
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) r[j] = math::softmax_grad(pr[j], r[j], dot);
}

}  // namespace

void launch_masked_softmax_rows(cudaStream_t stream, float* s, const AttentionArgs& a) {
  masked_softmax_rows<<<unsigned(a.B * a.NH * a.T), kRowThreads, 0, stream>>>(s, a);
}

void launch_dropout_rows(cudaStream_t stream, float* dropped, const float* P, const AttentionArgs& a) {
  dropout_rows<<<unsigned(a.B * a.NH * a.T), kRowThreads, 0, stream>>>(dropped, P, a);
}

void launch_softmax_backward_rows(cudaStream_t stream, float* ds, const float* P, const AttentionArgs& a) {
  softmax_backward_rows<<<unsigned(a.B * a.NH * a.T), kRowThreads, 0, stream>>>(ds, P, a);
}

}  // namespace lattice::cuda
