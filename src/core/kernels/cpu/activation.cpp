#include "core/kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;

// exp for float as plain arithmetic, so `omp simd` loops vectorise it (a libm
// expf/tanhf call per element kept GELU scalar: ~60 ms of the GPT-2 124M
// step per layer on 2 cores). x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in
// two for an exact product), exp(r) by the classic degree-6 minimax
// polynomial, 2^n from the exponent bits. Relative error about 2e-7 over
// [-87, 88]; clamped outside, where float exp under- or overflows anyway.
inline float exp_f32(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return e * scale;
}

// tanh(u) = 1 - 2 / (1 + e^(2u)): exact limits +-1, no cancellation problem
// for GELU, which adds it to 1.
inline float tanh_f32(float u) { return 1.0f - 2.0f / (1.0f + exp_f32(2.0f * u)); }

// GELU (tanh form) and its derivative, the formulas of math::gelu and
// math::gelu_grad; float takes the vectorisable tanh, double (the gradient
// checks) and the CUDA kernels math.h's.
constexpr float kGeluK = 0.7978845608028654f, kGeluC = 0.044715f;
inline float gelu_val(float x) { return 0.5f * x * (1.0f + tanh_f32(kGeluK * (x + kGeluC * x * x * x))); }
inline double gelu_val(double x) { return math::gelu(x); }
inline float gelu_grad_val(float x) {
  const float th = tanh_f32(kGeluK * (x + kGeluC * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
}
inline double gelu_grad_val(double x) { return math::gelu_grad(x); }
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_val(inp[i]);
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dinp[i] = gelu_grad_val(inp[i]) * dout[i];
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
    for (int64_t k = 0; k < K; ++k) sum += std::exp(x[k] - mx);
    // exp is evaluated again rather than stored, as in the CUDA kernel, so
    // both backends run math::softmax_prob.
    const T inv = T(1) / sum;
    for (int64_t k = 0; k < K; ++k) y[k] = math::softmax_prob(x[k], mx, inv);
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
    for (int64_t k = 0; k < K; ++k) dx[k] = math::softmax_grad(y[k], dy[k], dot);
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
