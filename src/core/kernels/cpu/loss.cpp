#include "core/kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/math.h"

namespace lattice::cpu {

template <typename T>
void cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, int ignore_index, int64_t N,
                           int64_t V) {
#pragma omp parallel for schedule(static) if (N * V > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T mx = -INFINITY;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    T sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
    const bool ignored = targets[n] == ignore_index;
    const T l = math::logsumexp_of(mx, sum);
    lse[n] = l;
    losses[n] = math::xent_loss(l, ignored ? T(0) : x[targets[n]], ignored);
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets, T dloss,
                            int ignore_index, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;  // may be the same memory as dx: each j reads x[j] before writing dx[j]
    T* dx = dlogits + n * V;
    if (targets[n] == ignore_index) {
      std::fill(dx, dx + V, T(0));
      continue;
    }
    const T l = lse[n];
    const int64_t t = targets[n];
    for (int64_t j = 0; j < V; ++j) dx[j] = math::xent_grad(x[j], l, dloss, j == t);
  }
}

#define LATTICE_INSTANTIATE(T)                                                                     \
  template void cross_entropy_forward<T>(T*, T*, const T*, const int32_t*, int, int64_t, int64_t); \
  template void cross_entropy_backward<T>(T*, const T*, const T*, const int32_t*, T, int, int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
