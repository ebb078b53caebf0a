#include "core/kernels/cpu/gelu_erf.h"

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;
}  // namespace

template <typename T>
void gelu_erf_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = math::gelu_erf(inp[i]);
}

template <typename T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = math::gelu_erf_grad(inp[i]) * dout[i];
}

template void gelu_erf_forward<float>(float*, const float*, int64_t);
template void gelu_erf_forward<double>(double*, const double*, int64_t);
template void gelu_erf_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_erf_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace lattice::cpu
