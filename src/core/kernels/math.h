// Element-wise math written once for both backends (LATTICE_HD: plain inline
// on the CPU, __host__ __device__ under nvcc). The CPU kernels and the CUDA
// kernels call these, so the CPU tests exercise the math the GPU runs.
// Templated on the scalar so the f64 gradient checks run the same formulas.
#pragma once

#include <cmath>

#include "core/hd.h"

namespace lattice::math {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Unqualified tanh/exp/sqrt after `using std::...` pick the float overloads
// for float on the host (tanhf, not the double tanh) and under nvcc alike.
template <typename T>
LATTICE_HD T gelu(T x) {
  using std::tanh;
  const T k = T(0.7978845608028654);  // sqrt(2 / pi)
  T cube = T(0.044715) * x * x * x;
  return T(0.5) * x * (T(1) + tanh(k * (x + cube)));
}

// d gelu(x) / dx.
template <typename T>
LATTICE_HD T gelu_grad(T x) {
  using std::tanh;
  const T k = T(0.7978845608028654);
  T cube = T(0.044715) * x * x * x;
  T u = k * (x + cube);
  T th = tanh(u);
  T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * k * (T(1) + T(3) * T(0.044715) * x * x);
}

template <typename T>
LATTICE_HD T sigmoid(T x) {
  using std::exp;
  return T(1) / (T(1) + exp(-x));
}

// SiLU (swish) and its derivative.
template <typename T>
LATTICE_HD T silu(T x) {
  return x * sigmoid(x);
}
template <typename T>
LATTICE_HD T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// One AdamW element update (decoupled weight decay, bias-corrected moments).
// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. Returns the new parameter.
template <typename T>
LATTICE_HD T adamw_step(T p, T g, T& m, T& v, T lr, T beta1, T beta2, T eps, T wd, T bc1, T bc2) {
  using std::sqrt;
  m = beta1 * m + (T(1) - beta1) * g;
  v = beta2 * v + (T(1) - beta2) * g * g;
  T mhat = m / bc1;
  T vhat = v / bc2;
  return p - lr * (wd * p + mhat / (sqrt(vhat) + eps));
}

}  // namespace lattice::math
