#include "core/kernels/cpu/loss_shard.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/kernels/cpu/vec_math.h"
#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;
int64_t clamp_valid(int64_t n_valid, int64_t K) { return std::clamp<int64_t>(n_valid, 0, K); }
// The logit of global column `target` when this shard holds it among its valid columns, else 0.
template <typename T>
compute_t<T> target_logit(const T* x, int32_t target, int64_t col_start, int64_t kv) {
  const int64_t t = int64_t(target) - col_start;
  return (t >= 0 && t < kv) ? widen(x[t]) : compute_t<T>(0);
}
}  // namespace

template <typename T>
void shard_row_max(compute_t<T>* row_max, const T* logits, int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) row_max[n] = max_of(logits + n * K, kv);
}

template <typename T>
void shard_softmax_partials(compute_t<T>* sums, const T* logits, const compute_t<T>* row_max, const int32_t* targets,
                            int64_t col_start, int64_t n_valid, int64_t N, int64_t K) {
  using F = compute_t<T>;
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    const F mx = row_max[n];
    // A shard whose valid columns are all -inf (or none) adds 0, never NaN.
    sums[n] = std::isfinite(mx) ? sum_exp_minus(x, kv, mx) : F(0);
    sums[N + n] = target_logit(x, targets[n], col_start, kv);
  }
}

template <typename T>
void shard_softmax_stats(compute_t<T>* row_max, compute_t<T>* sums, const T* logits, const int32_t* targets,
                         int64_t col_start, int64_t n_valid, int64_t N, int64_t K) {
  using F = compute_t<T>;
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    const MaxSumExp<F> r = max_sum_exp(x, kv);
    row_max[n] = r.max;
    sums[n] = std::isfinite(r.max) ? r.sum : F(0);  // as shard_softmax_partials
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
void shard_cross_entropy_backward(T* dlogits, const T* logits, const compute_t<T>* lse, const int32_t* targets,
                                  compute_t<T> dloss, int64_t col_start, int64_t n_valid, int ignore_index, int64_t N,
                                  int64_t K) {
  using F = compute_t<T>;
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;  // may be the same memory as dx: each j reads x[j] before writing dx[j]
    T* dx = dlogits + n * K;
    if (targets[n] == ignore_index) {
      std::fill(dx, dx + K, narrow<T>(0));
      continue;
    }
    // math::xent_grad, split in two: the softmax part vectorises, the target's -dloss follows.
    const F l = lse[n];
    const int64_t t = int64_t(targets[n]) - col_start;
    const bool here = t >= 0 && t < kv;
    if constexpr (std::is_same_v<T, F>) {
#pragma omp simd
      for (int64_t j = 0; j < kv; ++j) dx[j] = exp_of(x[j] - l) * dloss;
      if (here) dx[t] -= dloss;
    } else {                                   // the target's two terms combined in fp32 before its one rounding
      const F xt = here ? widen(x[t]) : F(0);  // read before dx (maybe x) is written
#pragma omp simd
      for (int64_t j = 0; j < kv; ++j) dx[j] = narrow<T>(exp_of(widen(x[j]) - l) * dloss);
      if (here) {
        F g = exp_of(xt - l) * dloss;
        g -= dloss;
        dx[t] = narrow<T>(g);
      }
    }
    std::fill(dx + kv, dx + K, narrow<T>(0));
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                   \
  template void shard_row_max<T>(compute_t<T>*, const T*, int64_t, int64_t, int64_t);                            \
  template void shard_softmax_partials<T>(compute_t<T>*, const T*, const compute_t<T>*, const int32_t*, int64_t, \
                                          int64_t, int64_t, int64_t);                                            \
  template void shard_softmax_stats<T>(compute_t<T>*, compute_t<T>*, const T*, const int32_t*, int64_t, int64_t, \
                                       int64_t, int64_t);                                                        \
  template void shard_cross_entropy_backward<T>(T*, const T*, const compute_t<T>*, const int32_t*, compute_t<T>, \
                                                int64_t, int64_t, int, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

// Statistics only, no logits: float and double.
template void cross_entropy_from_partials<float>(float*, float*, const float*, const float*, const int32_t*, int,
                                                 int64_t);
template void cross_entropy_from_partials<double>(double*, double*, const double*, const double*, const int32_t*, int,
                                                  int64_t);

}  // namespace lattice::cpu
