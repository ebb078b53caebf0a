#include "core/kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = math::gelu(inp[i]);
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = math::gelu_grad(inp[i]) * dout[i];
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    T* y = out + r * F;
    for (int64_t f = 0; f < F; ++f) y[f] = math::swiglu(gate[f], up[f]);
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
    for (int64_t f = 0; f < F; ++f) math::swiglu_grad(dy[f], gate[f], up[f], dgate[f], dup[f]);
  }
}

template <typename T>
void softmax_forward(T* out, const T* inp, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * K;
    T* y = out + r * K;
    T mx = -INFINITY;
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, x[k]);
    T sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      y[k] = std::exp(x[k] - mx);
      sum += y[k];
    }
    T inv = T(1) / sum;
#pragma omp simd
    for (int64_t k = 0; k < K; ++k) y[k] *= inv;
  }
}

template <typename T>
void softmax_backward(T* dinp, const T* dout, const T* out, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* dy = dout + r * K;
    const T* y = out + r * K;
    T* dx = dinp + r * K;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t k = 0; k < K; ++k) dot += dy[k] * y[k];
#pragma omp simd
    for (int64_t k = 0; k < K; ++k) dx[k] = y[k] * (dy[k] - dot);
  }
}

#define LATTICE_INSTANTIATE(T)                                                \
  template void gelu_forward<T>(T*, const T*, int64_t);                       \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);            \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);            \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t); \
  template void softmax_forward<T>(T*, const T*, int64_t, int64_t);           \
  template void softmax_backward<T>(T*, const T*, const T*, int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
