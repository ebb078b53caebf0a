// The row kernels of the plain CUDA attention (attention.h): masked softmax,
// dropout of the probabilities and the softmax backward, each row of the
// (B, NH, T, T) probabilities one thread block with a fixed reduction order.
// fp32 math on every storage type: 16-bit values are loaded widened and
// stored rounded to nearest even (core/kernels/storage.h).
// Launchers only enqueue; attention.cpp checks and orders them.
#include <type_traits>

#include "core/cuda/attention.h"
#include "core/cuda/kernels.h"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

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

// Rows row0 + blockIdx.x: s fp32 scores in, probabilities out (disallowed
// keys 0); p the probabilities rounded to S (for float, p is s).
template <typename S>
__global__ void __launch_bounds__(kRowThreads) masked_softmax_rows(float* s, S* out, AttentionArgs a, int64_t row0) {
  const RowPos p = row_pos(row0 + blockIdx.x, a.NH, a.T);
  float* r = s + int64_t(blockIdx.x) * a.T;
  S* o = out + int64_t(blockIdx.x) * a.T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads)
    if (allowed(a, p.b, p.i, j)) mx = fmaxf(mx, r[j]);
  mx = block_reduce<true>(mx);
  // As the CPU's softmax_row: a row whose allowed scores are all -inf (an
  // infinite q or k) attends to nothing, instead of exp(-inf - -inf) = NaN.
  const bool any = mx != -INFINITY;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    const float e = any && allowed(a, p.b, p.i, j) ? expf(r[j] - mx) : 0.0f;
    r[j] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no allowed key: the row stays 0
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    r[j] *= inv;
    if constexpr (!std::is_same_v<S, float>) o[j] = narrow<S>(r[j]);
  }
}

// dropped = dropout(P), rows row0 + blockIdx.x, rounded to D.
template <typename D, typename P>
__global__ void __launch_bounds__(kRowThreads) dropout_rows(D* dropped, const P* probs, AttentionArgs a, int64_t row0) {
  const RowPos p = row_pos(row0 + blockIdx.x, a.NH, a.T);
  const float scale = 1.0f / (1.0f - a.p);
  const uint64_t sample = uint64_t(a.sample0 + p.b);
  const int64_t off = int64_t(blockIdx.x) * a.T;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    const bool keep = rng_keep(a.key, sample, drop_element(a, p.h, p.i, j), a.p);
    dropped[off + j] = narrow<D>(keep ? widen(probs[off + j]) * scale : 0.0f);
  }
}

// ds (rows row0 + blockIdx.x): dPd in, dS = P (dP - rowsum(P dP)) out, fp32,
// where dP is dPd through the dropout mask (p > 0); ds_out: dS rounded to S
// (for float, ds_out is ds).
template <typename S>
__global__ void __launch_bounds__(kRowThreads)
    softmax_backward_rows(float* ds, S* ds_out, const S* P, AttentionArgs a, int64_t row0) {
  const RowPos p = row_pos(row0 + blockIdx.x, a.NH, a.T);
  const float scale = a.p > 0.0f ? 1.0f / (1.0f - a.p) : 1.0f;
  const uint64_t sample = uint64_t(a.sample0 + p.b);
  const int64_t off = int64_t(blockIdx.x) * a.T;
  float* r = ds + off;
  const S* pr = P + off;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    float d = r[j];
    if (a.p > 0.0f) d = rng_keep(a.key, sample, drop_element(a, p.h, p.i, j), a.p) ? d * scale : 0.0f;
    r[j] = d;
    dot += widen(pr[j]) * d;
  }
  dot = block_reduce<false>(dot);
  for (int64_t j = threadIdx.x; j < a.T; j += kRowThreads) {
    r[j] = math::softmax_grad(widen(pr[j]), r[j], dot);
    if constexpr (!std::is_same_v<S, float>) ds_out[off + j] = narrow<S>(r[j]);
  }
}

}  // namespace

template <typename S>
void launch_masked_softmax_rows(cudaStream_t stream, float* s, S* p, const AttentionArgs& a, int64_t row0,
                                int64_t rows) {
  masked_softmax_rows<<<unsigned(rows), kRowThreads, 0, stream>>>(s, p, a, row0);
}

template <typename D, typename P>
void launch_dropout_rows(cudaStream_t stream, D* dropped, const P* probs, const AttentionArgs& a, int64_t row0,
                         int64_t rows) {
  dropout_rows<<<unsigned(rows), kRowThreads, 0, stream>>>(dropped, probs, a, row0);
}

template <typename S>
void launch_softmax_backward_rows(cudaStream_t stream, float* ds, S* ds_out, const S* P, const AttentionArgs& a,
                                  int64_t row0, int64_t rows) {
  softmax_backward_rows<<<unsigned(rows), kRowThreads, 0, stream>>>(ds, ds_out, P, a, row0);
}

// Forward drops the fp32 P (float: att itself), backward the stored P.
#define LATTICE_INSTANTIATE(S)                                                                                         \
  template void launch_masked_softmax_rows<S>(cudaStream_t, float*, S*, const AttentionArgs&, int64_t, int64_t);       \
  template void launch_dropout_rows<S, float>(cudaStream_t, S*, const float*, const AttentionArgs&, int64_t, int64_t); \
  template void launch_softmax_backward_rows<S>(cudaStream_t, float*, S*, const S*, const AttentionArgs&, int64_t,     \
                                                int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE
template void launch_dropout_rows<Bf16, Bf16>(cudaStream_t, Bf16*, const Bf16*, const AttentionArgs&, int64_t, int64_t);
template void launch_dropout_rows<F16, F16>(cudaStream_t, F16*, const F16*, const AttentionArgs&, int64_t, int64_t);

}  // namespace lattice::cuda
