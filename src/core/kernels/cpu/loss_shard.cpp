#include "core/kernels/cpu/loss_shard.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
int64_t clamp_valid(int64_t n_valid, int64_t K) { return std::clamp<int64_t>(n_valid, 0, K); }
}  // namespace

template <typename T>
void shard_row_max(T* row_max, const T* logits, int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    T mx = -INFINITY;
    for (int64_t j = 0; j < kv; ++j) mx = std::max(mx, x[j]);
    row_max[n] = mx;
  }
}

template <typename T>
void shard_softmax_partials(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t col_start,
                            int64_t n_valid, int64_t N, int64_t K) {
  const int64_t kv = clamp_valid(n_valid, K);
#pragma omp parallel for schedule(static) if (N * K > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;
    const T mx = row_max[n];
    T s = 0;
    // A shard whose valid columns are all -inf (or none) adds 0, never NaN.
    if (std::isfinite(mx))
      for (int64_t j = 0; j < kv; ++j) s += std::exp(x[j] - mx);
    sums[n] = s;
    const int64_t t = int64_t(targets[n]) - col_start;
    sums[N + n] = (t >= 0 && t < kv) ? x[t] : T(0);
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
#pragma omp parallel for schedule(static) if (N * K > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * K;  // may be the same memory as dx: each j reads x[j] before writing dx[j]
    T* dx = dlogits + n * K;
    if (targets[n] == ignore_index) {
      std::fill(dx, dx + K, T(0));
      continue;
    }
    const T l = lse[n];
    const int64_t t = int64_t(targets[n]) - col_start;
    for (int64_t j = 0; j < kv; ++j) dx[j] = math::xent_grad(x[j], l, dloss, j == t);
    std::fill(dx + kv, dx + K, T(0));
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                         \
  template void shard_row_max<T>(T*, const T*, int64_t, int64_t, int64_t);                                             \
  template void shard_softmax_partials<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t); \
  template void cross_entropy_from_partials<T>(T*, T*, const T*, const T*, const int32_t*, int, int64_t);              \
  template void shard_cross_entropy_backward<T>(T*, const T*, const T*, const int32_t*, T, int64_t, int64_t, int,      \
                                                int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
