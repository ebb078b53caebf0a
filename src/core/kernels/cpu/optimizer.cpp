#include "core/kernels/cpu/optimizer.h"

#include <cmath>

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, float grad_scale) {
  // Bias corrections in double, then rounded once to T.
  const T bc1 = T(1.0 - std::pow(double(beta1), double(step)));
  const T bc2 = T(1.0 - std::pow(double(beta2), double(step)));
  const T tlr = T(lr), b1 = T(beta1), b2 = T(beta2), te = T(eps), wd = T(weight_decay), gs = T(grad_scale);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    param[i] = math::adamw_step<T>(param[i], grad[i] * gs, m[i], v[i], tlr, b1, b2, te, wd, bc1, bc2);
}

template <typename T>
void sgd_update(T* param, const T* grad, T* momentum, int64_t n, float lr, float mu, float weight_decay,
                float grad_scale) {
  const T tlr = T(lr), tmu = T(mu), wd = T(weight_decay), gs = T(grad_scale);
  if (momentum) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i)
      param[i] = math::sgd_momentum_step<T>(param[i], grad[i] * gs, momentum[i], tlr, tmu, wd);
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) param[i] = math::sgd_step<T>(param[i], grad[i] * gs, tlr, wd);
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                     \
  template void adamw_update<T>(T*, const T*, T*, T*, int64_t, float, float, float, float, float, int64_t, float); \
  template void sgd_update<T>(T*, const T*, T*, int64_t, float, float, float, float);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
