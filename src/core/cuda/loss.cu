// CUDA softmax cross-entropy (declared in kernels.h): the full-vocabulary
// forward and the vocab-parallel pieces of core/kernels/cpu/loss_shard.h,
// whose backward also serves the full vocabulary (col_start 0, n_valid K).
// One block of kRowThreads per row; row maxima and sums are block reductions
// in a fixed tree (row_max and row_sum_exp of launch.cuh); the per-row and
// per-element formulas are core/kernels/math.h, as on the CPU. Padding
// columns (j >= n_valid) never enter a max or a sum and get zero gradient.
// Templated on the storage S of logits / dlogits (float, Bf16, F16): loads
// widened, fp32 math, losses, lse, row max and sums fp32, dlogits rounded once.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

namespace {

template <typename S>
__global__ void cross_entropy_forward_kernel(float* losses, float* lse, const S* logits, const int32_t* targets,
                                             int ignore_index, int64_t V) {
  const int64_t n = blockIdx.x;
  const S* x = logits + n * V;
  const float mx = row_max(x, V);
  const float l = math::logsumexp_of(mx, row_sum_exp(x, V, mx));
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    const bool ignored = t == ignore_index;
    lse[n] = l;
    // A target outside [0, V) reads nothing and makes the loss NaN, which the
    // trainer's non-finite check turns into a skipped step (ops checks CPU targets).
    const bool valid = t >= 0 && t < V;
    losses[n] = ignored ? math::xent_loss(l, 0.0f, true) : valid ? math::xent_loss(l, widen(x[t]), false) : NAN;
  }
}

template <typename S>
__global__ void shard_row_max_kernel(float* out, const S* logits, int64_t kv, int64_t K) {
  const float mx = row_max(logits + int64_t(blockIdx.x) * K, kv);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

template <typename S>
__global__ void shard_softmax_partials_kernel(float* sums, const S* logits, const float* row_max,
                                              const int32_t* targets, int64_t col_start, int64_t kv, int64_t N,
                                              int64_t K) {
  const int64_t n = blockIdx.x;
  const S* x = logits + n * K;
  const float mx = row_max[n];
  // A shard whose valid columns are all -inf (or none) adds 0, never NaN.
  const float s = isfinite(mx) ? row_sum_exp(x, kv, mx) : 0.0f;
  if (threadIdx.x == 0) {
    const int64_t t = int64_t(targets[n]) - col_start;
    sums[n] = s;
    sums[N + n] = (t >= 0 && t < kv) ? widen(x[t]) : 0.0f;
  }
}

__global__ void cross_entropy_from_partials_kernel(float* losses, float* lse, const float* row_max, const float* sums,
                                                   const int32_t* targets, int ignore_index, int64_t N) {
  for (int64_t n = first_index(); n < N; n += grid_stride()) {
    const float l = math::logsumexp_of(row_max[n], sums[n]);
    lse[n] = l;
    losses[n] = math::xent_loss(l, sums[N + n], targets[n] == ignore_index);
  }
}

// Each element is read before it is written by the same thread, so dlogits
// may be logits.
template <typename S>
__global__ void shard_cross_entropy_backward_kernel(S* dlogits, const S* logits, const float* lse,
                                                    const int32_t* targets, float dloss, int64_t col_start, int64_t kv,
                                                    int ignore_index, int64_t K) {
  const int64_t n = blockIdx.x;
  const S* x = logits + n * K;
  S* dx = dlogits + n * K;
  const bool ignored = targets[n] == ignore_index;
  const int64_t t = int64_t(targets[n]) - col_start;
  const float l = lse[n];
  for (int64_t j = threadIdx.x; j < K; j += blockDim.x)
    dx[j] = narrow<S>((ignored || j >= kv) ? 0.0f : math::xent_grad(widen(x[j]), l, dloss, j == t));
}

int64_t clamp_valid(int64_t n_valid, int64_t K) { return n_valid < 0 ? 0 : (n_valid > K ? K : n_valid); }

}  // namespace

template <typename S>
void launch_cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, const S* logits,
                                  const int32_t* targets, int ignore_index, int64_t N, int64_t V) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(losses, lse, logits, targets, ignore_index, V);
}

template <typename S>
void launch_shard_row_max(cudaStream_t stream, float* row_max, const S* logits, int64_t n_valid, int64_t N, int64_t K) {
  if (N == 0) return;
  shard_row_max_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(row_max, logits, clamp_valid(n_valid, K), K);
}

template <typename S>
void launch_shard_softmax_partials(cudaStream_t stream, float* sums, const S* logits, const float* row_max,
                                   const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N, int64_t K) {
  if (N == 0) return;
  shard_softmax_partials_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(sums, logits, row_max, targets, col_start,
                                                                         clamp_valid(n_valid, K), N, K);
}

void launch_cross_entropy_from_partials(cudaStream_t stream, float* losses, float* lse, const float* row_max,
                                        const float* sums, const int32_t* targets, int ignore_index, int64_t N) {
  if (N == 0) return;
  cross_entropy_from_partials_kernel<<<blocks_for(N), kThreads, 0, stream>>>(losses, lse, row_max, sums, targets,
                                                                             ignore_index, N);
}

template <typename S>
void launch_shard_cross_entropy_backward(cudaStream_t stream, S* dlogits, const S* logits, const float* lse,
                                         const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                         int ignore_index, int64_t N, int64_t K) {
  if (N == 0) return;
  shard_cross_entropy_backward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(
      dlogits, logits, lse, targets, dloss, col_start, clamp_valid(n_valid, K), ignore_index, K);
}

#define LATTICE_INSTANTIATE(S)                                                                                        \
  template void launch_cross_entropy_forward<S>(cudaStream_t, float*, float*, const S*, const int32_t*, int, int64_t, \
                                                int64_t);                                                             \
  template void launch_shard_row_max<S>(cudaStream_t, float*, const S*, int64_t, int64_t, int64_t);                   \
  template void launch_shard_softmax_partials<S>(cudaStream_t, float*, const S*, const float*, const int32_t*,        \
                                                 int64_t, int64_t, int64_t, int64_t);                                 \
  template void launch_shard_cross_entropy_backward<S>(cudaStream_t, S*, const S*, const float*, const int32_t*,      \
                                                       float, int64_t, int64_t, int, int64_t, int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
