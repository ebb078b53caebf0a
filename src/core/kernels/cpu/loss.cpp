#include "core/kernels/cpu/loss.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/loss_shard.h"
#include "core/kernels/cpu/vec_math.h"
#include "core/kernels/math.h"

namespace lattice::cpu {

template <typename T>
void cross_entropy_forward(compute_t<T>* losses, compute_t<T>* lse, const T* logits, const int32_t* targets,
                           int ignore_index, int64_t N, int64_t V) {
  using F = compute_t<T>;
#pragma omp parallel for schedule(static) if (N * V > (1 << 14))
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    const MaxSumExp<F> r = max_sum_exp(x, V);
    const bool ignored = targets[n] == ignore_index;
    const F l = math::logsumexp_of(r.max, r.sum);
    lse[n] = l;
    losses[n] = math::xent_loss(l, ignored ? F(0) : widen(x[targets[n]]), ignored);
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const compute_t<T>* lse, const int32_t* targets,
                            compute_t<T> dloss, int ignore_index, int64_t N, int64_t V) {
  // The whole row is one shard with no padding.
  shard_cross_entropy_backward(dlogits, logits, lse, targets, dloss, 0, V, ignore_index, N, V);
}

#define LATTICE_INSTANTIATE(T)                                                                                  \
  template void cross_entropy_forward<T>(compute_t<T>*, compute_t<T>*, const T*, const int32_t*, int, int64_t,  \
                                         int64_t);                                                              \
  template void cross_entropy_backward<T>(T*, const T*, const compute_t<T>*, const int32_t*, compute_t<T>, int, \
                                          int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
