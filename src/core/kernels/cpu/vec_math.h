// Float math that `omp simd` loops vectorise, and the softmax row pieces the
// CPU kernels share (activations, attention, cross-entropy).
//
// A libm expf call per element keeps a loop scalar; exp_f32 is plain
// arithmetic, so the loops around it run 16 floats per AVX-512 instruction.
// (GCC also needs -fno-math-errno -fno-trapping-math for the clamp and the
// rounding to vectorise: core/CMakeLists.txt sets them for the CPU kernels.)
// The double overloads call libm, so the f64 gradient checks of the templated
// kernels keep exact math.
//
// Accuracy, checked against f64 in tests/core/test_vec_math.cpp: exp_f32 is
// within 1.1 ulp of exp over [-87.3, 88]; it returns 0 below -87.3 (where
// expf is 1e-38 and below), e^88 above 88 (expf overflows to inf at 88.73),
// and NaN for NaN. Each row is reduced by one thread in a fixed order (simd
// lanes, then the lanes summed), so results do not depend on the thread count.
//
// Shapes: every row helper takes one contiguous row of n elements.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

// x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact product;
// n rounded to nearest by the 1.5 * 2^23 trick, whose sum also holds n in its
// low bits), exp(r) by the classic degree-6 minimax polynomial, 2^n from the
// exponent bits.
inline float exp_f32(float x) {
  constexpr float kLo = -87.3f, kHi = 88.0f, kRound = 12582912.0f;  // 1.5 * 2^23
  // Ternaries, not std::min/max: GCC vectorises these selects, not the reference-returning calls.
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float t = xc * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float scale = std::bit_cast<float>(uint32_t(ni + 127) << 23);
  return x < kLo ? 0.0f : e * scale;
}

// Logistic sigmoid 1 / (1 + e^-x) (SiLU, SwiGLU). Below x = -88 it is e^-88
// times too large at most (true value under 1e-38); above 87.3 it is exactly 1.
inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// erfc(z) for z >= 0, as t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2) and P of
// degree 9: this project's own least-squares fit (reweighted towards the
// largest error) of ln(erfc(z) e^(z^2) / t) over z in [0, 10], fit error
// 5e-8. In float the rounding of z^2 dominates: within 2e-6 relative of erfc
// for z < 4 and 8e-6 up to z = 10 (test_vec_math); 0 from about z = 9.4 on,
// where erfc is below 1e-38.
inline float erfc_pos_f32(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.142271502f;
  p = p * t - 0.6664495f;
  p = p * t + 1.12322761f;
  p = p * t - 0.65223596f;
  p = p * t - 0.116066185f;
  p = p * t + 0.0198644875f;
  p = p * t + 0.0284519833f;
  p = p * t + 0.38788364f;
  p = p * t + 0.998493954f;
  p = p * t - 1.26544149f;
  return t * exp_f32(p - z * z);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, from erfc of |x|
// so that the left tail keeps its relative accuracy (GELU's x Phi(x)): within
// (2e-6 + 1.5e-7 x^2) relative there (rounding x / sqrt 2 to float is the x^2
// part), 2e-6 relative plus 1e-7 elsewhere (test_vec_math).
inline float normal_cdf_f32(float x) {
  const float h = 0.5f * erfc_pos_f32((x < 0.0f ? -x : x) * 0.70710678118654752f);
  return x < 0.0f ? h : 1.0f - h;
}

// The exp the templated kernels call: exp_f32 for float, libm for double.
inline float exp_of(float x) { return exp_f32(x); }
inline double exp_of(double x) { return std::exp(x); }

// The row helpers below read T = float, double, or 16-bit storage (Bf16,
// F16 of core/kernels/storage.h) through widen() and compute in compute_t<T>;
// for float and double widen() is the identity.

// Max of x[0, n); -inf when n <= 0.
template <typename T>
compute_t<T> max_of(const T* x, int64_t n) {
  compute_t<T> m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = widen(x[j]) > m ? widen(x[j]) : m;  // NaNs are skipped, as by std::max
  return m;
}

// y[j] = exp(x[j] - shift) for j < n; returns their sum. y may be x.
template <typename T>
T exp_minus(T* y, const T* x, int64_t n, T shift) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) {
    y[j] = exp_of(x[j] - shift);
    s += y[j];
  }
  return s;
}

// sum of exp(x[j] - shift) for j < n.
template <typename T>
compute_t<T> sum_exp_minus(const T* x, int64_t n, compute_t<T> shift) {
  compute_t<T> s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += exp_of(widen(x[j]) - shift);
  return s;
}

// In place: x[j] = softmax of x[0, n) (max-shifted). n >= 1.
template <typename T>
void softmax_row_inplace(T* x, int64_t n) {
  const T inv = T(1) / exp_minus(x, x, n, max_of(x, n));
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

// Softmax backward of one row: dx[j] = y[j] * (dy[j] - sum(dy * y)), with y
// the forward output. dx may be dy.
template <typename T>
void softmax_row_backward(T* dx, const T* dy, const T* y, int64_t n) {
  compute_t<T> dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += widen(dy[j]) * widen(y[j]);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j] = narrow<T>(widen(y[j]) * (widen(dy[j]) - dot));
}

// max and sum of exp(x - max) over a row.
template <typename T>
struct MaxSumExp {
  T max = -INFINITY, sum = 0;
};

// MaxSumExp of x[0, n) in one pass over memory: per block of kBlock elements
// (L1-resident) the block max, the running sum rescaled when the max grows,
// then the block's exps. Blocks whose max is -inf add nothing (never NaN).
template <typename T>
MaxSumExp<compute_t<T>> max_sum_exp(const T* x, int64_t n) {
  constexpr int64_t kBlock = 2048;
  MaxSumExp<compute_t<T>> r;
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t len = std::min(kBlock, n - j0);
    const compute_t<T> bm = max_of(x + j0, len);
    if (bm == -INFINITY) continue;
    if (bm > r.max) {
      r.sum *= exp_of(r.max - bm);
      r.max = bm;
    }
    r.sum += sum_exp_minus(x + j0, len, r.max);
  }
  return r;
}

}  // namespace lattice::cpu
