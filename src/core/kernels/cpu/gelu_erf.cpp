#include "core/kernels/cpu/gelu_erf.h"

#include <cmath>

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
}  // namespace

template <typename T>
void gelu_erf_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
  }
}

template <typename T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T x = inp[i];
    T cdf = T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2)));
    T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    dinp[i] = (cdf + x * pdf) * dout[i];
  }
}

template void gelu_erf_forward<float>(float*, const float*, int64_t);
template void gelu_erf_forward<double>(double*, const double*, int64_t);
template void gelu_erf_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_erf_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace lattice::cpu
