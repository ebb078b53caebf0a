#include "core/kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernels/cpu/vec_math.h"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;

// GELU (tanh form) and its derivative, the formulas of math::gelu and
// math::gelu_grad (sigmoids of 2u, so neither tail cancels); float takes the
// vectorisable exp, double (the gradient checks) and the CUDA kernels math.h's.
inline math::GeluSigmoids<float> gelu_sigmoids_f32(float x) {
  return math::gelu_sigmoids(x, [](float v) { return exp_f32(v); });
}
inline float gelu_val(float x) { return x * gelu_sigmoids_f32(x).s; }
inline double gelu_val(double x) { return math::gelu(x); }
inline float gelu_grad_val(float x) {
  const math::GeluSigmoids<float> g = gelu_sigmoids_f32(x);
  return g.s + 2.0f * x * g.s * g.s_neg * g.du_dx;
}
inline double gelu_grad_val(double x) { return math::gelu_grad(x); }

// SwiGLU, the formulas of math::swiglu and math::swiglu_grad with the
// vectorisable sigmoid for float.
inline float swiglu_val(float gate, float up) { return gate * sigmoid_f32(gate) * up; }
inline double swiglu_val(double gate, double up) { return math::swiglu(gate, up); }
inline void swiglu_grad_val(float dy, float gate, float up, float& dgate, float& dup) {
  const float s = sigmoid_f32(gate);
  dgate = dy * up * (s * (1.0f + gate * (1.0f - s)));
  dup = dy * gate * s;
}
inline void swiglu_grad_val(double dy, double gate, double up, double& dgate, double& dup) {
  math::swiglu_grad(dy, gate, up, dgate, dup);
}
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(gelu_val(widen(inp[i])));
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = narrow<T>(gelu_grad_val(widen(inp[i])) * widen(dout[i]));
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    T* y = out + r * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) y[f] = narrow<T>(swiglu_val(widen(gate[f]), widen(up[f])));
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + r * F;
    T* dgate = dinp + r * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      compute_t<T> dg, du;
      swiglu_grad_val(widen(dy[f]), widen(gate[f]), widen(up[f]), dg, du);
      dgate[f] = narrow<T>(dg);
      dup[f] = narrow<T>(du);
    }
  }
}

// float/double keep the exps in out and scale them; 16-bit storage cannot
// hold them unrounded, so its pass sums the exps, and a second pass computes
// each again (the same exp_of value) and rounds it once, scaled.
template <typename T>
void softmax_forward(T* out, const T* inp, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * K;
    T* y = out + r * K;
    if constexpr (std::is_same_v<T, compute_t<T>>) {
      const T inv = T(1) / exp_minus(y, x, K, max_of(x, K));
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) y[k] *= inv;
    } else {
      const float mx = max_of(x, K), inv = 1.0f / sum_exp_minus(x, K, mx);
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) y[k] = narrow<T>(exp_of(widen(x[k]) - mx) * inv);
    }
  }
}

template <typename T>
void softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t r = 0; r < N; ++r) softmax_row_backward(dinp + r * K, dout + r * K, out + r * K, K);
}

#define LATTICE_INSTANTIATE(T)                                                \
  template void gelu_forward<T>(T*, const T*, int64_t);                       \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);            \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);           \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
