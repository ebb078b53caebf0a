#include "core/kernels/cpu/gelu_erf.h"

#include "core/kernels/cpu/vec_math.h"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;

// x Phi(x) and Phi(x) + x phi(x), the formulas of math::gelu_erf and
// math::gelu_erf_grad; float takes the vectorisable normal_cdf_f32 and exp_f32
// (vec_math.h), double (the gradient checks) and the CUDA kernels math.h's libm.
inline float gelu_erf_val(float x) { return x * normal_cdf_f32(x); }
inline double gelu_erf_val(double x) { return math::gelu_erf(x); }
inline float gelu_erf_grad_val(float x) {
  return normal_cdf_f32(x) + x * 0.39894228040143267794f * exp_f32(-0.5f * x * x);
}
inline double gelu_erf_grad_val(double x) { return math::gelu_erf_grad(x); }
}  // namespace

template <typename T>
void gelu_erf_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(gelu_erf_val(widen(inp[i])));
}

template <typename T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = narrow<T>(gelu_erf_grad_val(widen(inp[i])) * widen(dout[i]));
}

#define LATTICE_INSTANTIATE(T)                              \
  template void gelu_erf_forward<T>(T*, const T*, int64_t); \
  template void gelu_erf_backward<T>(T*, const T*, const T*, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
