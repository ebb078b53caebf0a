#include "core/kernels/cpu/loss_shard.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/vec_math.h"
#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;
int64_t clamp_valid(int64_t n_valid, int64_t K) { return std::clamp<int64_t>(n_valid, 0, K); }
// The logit of global column `target` when this shard holds it among its valid columns, else 0.
template <typename T>
T target_logit(const T* x, int32_t target, int64_t col_start, int64_t kv) {
  const int64_t t = int64_t(target) - col_start;
  return (t >= 0 && t < kv) ? x[t] : T(0);
}
}  // namespace

template <typename T>
void shard_row_max(T* row_max, const T* logits, int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) row_max[n] = max_of(logits + n * K, kv);
}

template <typename T>
void shard_softmax_partials(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t col_start,
                            int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    const T mx = row_max[n];
    // A shard whose valid columns are all -inf (or none) adds 0, never NaN.
    sums[n] = std::isfinite(mx) ? sum_exp_minus(x, kv, mx) : T(0);
    sums[N + n] = target_logit(x, targets[n], col_start, kv);
  }
}

template <typename T>
void shard_softmax_stats(T* row_max, T* sums, const T* logits, const int32_t* targets, int64_t col_start,
                         int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    const MaxSumExp<T> r = max_sum_exp(x, kv);
    row_max[n] = r.max;
    sums[n] = std::isfinite(r.max) ? r.sum : T(0);  // as shard_softmax_partials
    sums[N + n] = target_logit(x, targets[n], col_start, kv);
  }
}

template <typename T>
void cross_entropy_from_partials(T* losses, T* lse, const T* row_max, const T* sums, const int32_t* targets,
                                 int ignore_index, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    const T l = math::logsumexp_of(row_max[n], sums[n]);
    lse[n] = l;
    losses[n] = math::xent_loss(l, sums[N + n], targets[n] == ignore_index);
  }
}

template <typename T>
void shard_cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets, T dloss,
                                  int64_t col_start, int64_t n_valid, int ignore_index, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;  // may be the same memory as dx: each j reads x[j] before writing dx[j]
    T* dx = dlogits + n * K;
    if (targets[n] == ignore_index) {
      std::fill(dx, dx + K, T(0));
      continue;
    }
    // math::xent_grad, split in two: the softmax part vectorises, the target's -dloss follows.
    const T l = lse[n];
#pragma omp simd
    for (int64_t j = 0; j < kv; ++j) dx[j] = exp_of(x[j] - l) * dloss;
    const int64_t t = int64_t(targets[n]) - col_start;
    if (t >= 0 && t < kv) dx[t] -= dloss;
    std::fill(dx + kv, dx + K, T(0));
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                         \
  template void shard_row_max<T>(T*, const T*, int64_t, int64_t, int64_t);                                             \
  template void shard_softmax_partials<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t); \
  template void shard_softmax_stats<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);          \
  template void cross_entropy_from_partials<T>(T*, T*, const T*, const T*, const int32_t*, int, int64_t);              \
  template void shard_cross_entropy_backward<T>(T*, const T*, const T*, const int32_t*, T, int64_t, int64_t, int,      \
                                                int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
