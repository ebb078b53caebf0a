// Element-wise and per-row math written once for both backends (LATTICE_HD:
// plain inline on the CPU, __host__ __device__ under nvcc). The CPU kernels and
// the CUDA kernels call these, so the CPU tests exercise the math the GPU runs;
// only the order of the row reductions that feed them differs (sequential on
// the CPU, a fixed tree on the GPU). Templated on the scalar so the f64
// gradient checks run the same formulas.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace lattice::math {

// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Computed as x sigmoid(2u), since 0.5 (1 + tanh(u)) = sigmoid(2u) and
// 1 - tanh(u)^2 = 4 sigmoid(2u) sigmoid(-2u): 1 + tanh(u) cancels for u << 0
// (in float, x = -4 keeps only a few bits of it), while both sigmoids come
// from exp(-2|u|) <= 1 without cancelling, in either tail.
// Unqualified exp/fabs after `using std::...` pick the float overloads for
// float on the host (expf, not the double exp) and under nvcc alike.
template <typename T>
struct GeluSigmoids {
  T s, s_neg, du_dx;  // sigmoid(2u), sigmoid(-2u) = 1 - sigmoid(2u), du / dx
};
// The exp gelu_sigmoids takes by default (std's: expf for float); the CPU's
// float kernel passes its vectorisable exp_f32 instead.
struct StdExp {
  template <typename T>
  LATTICE_HD T operator()(T v) const {
    using std::exp;
    return exp(v);
  }
};
template <typename T, typename Exp = StdExp>
LATTICE_HD GeluSigmoids<T> gelu_sigmoids(T x, Exp exp_of = {}) {
  using std::fabs;
  const T k = T(0.7978845608028654), c = T(0.044715);  // sqrt(2 / pi)
  const T u = k * (x + c * x * x * x);
  const T a = exp_of(T(-2) * fabs(u));  // in [0, 1]
  const T d = T(1) / (T(1) + a);
  const bool pos = u >= T(0);
  return {pos ? d : a * d, pos ? a * d : d, k * (T(1) + T(3) * c * x * x)};
}

template <typename T>
LATTICE_HD T gelu(T x) {
  return x * gelu_sigmoids(x).s;
}

// d gelu(x) / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx.
template <typename T>
LATTICE_HD T gelu_grad(T x) {
  const GeluSigmoids<T> g = gelu_sigmoids(x);
  return g.s + T(2) * x * g.s * g.s_neg * g.du_dx;
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

// GELU with the exact error function (BERT): x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2))
// written as 0.5 erfc(-x / sqrt 2), which does not cancel in the left tail.
template <typename T>
LATTICE_HD T normal_cdf(T x) {
  using std::erfc;
  return T(0.5) * erfc(x * T(-0.70710678118654752440));
}
template <typename T>
LATTICE_HD T gelu_erf(T x) {
  return x * normal_cdf(x);
}
// d gelu_erf(x) / dx = Phi(x) + x phi(x).
template <typename T>
LATTICE_HD T gelu_erf_grad(T x) {
  using std::exp;
  T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
  return normal_cdf(x) + x * pdf;
}

// SwiGLU on one (gate, up) pair: y = silu(gate) * up, and its two gradients.
template <typename T>
LATTICE_HD T swiglu(T gate, T up) {
  return silu(gate) * up;
}
template <typename T>
LATTICE_HD void swiglu_grad(T dy, T gate, T up, T& dgate, T& dup) {
  dgate = dy * up * silu_grad(gate);
  dup = dy * silu(gate);
}

// ---- normalisation, given the row statistics ----------------------------
// rstd = 1 / sqrt(mean_sq + eps), where mean_sq is the variance (LayerNorm)
// or the mean of squares (RMSNorm).
template <typename T>
LATTICE_HD T rstd_of(T mean_sq, T eps) {
  using std::sqrt;
  return T(1) / sqrt(mean_sq + eps);
}
template <typename T>
LATTICE_HD T layernorm_out(T x, T mean, T rstd, T w, T b) {
  return (x - mean) * rstd * w + b;
}
// dinp = rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = w dy, xhat = (x - mean) rstd.
template <typename T>
LATTICE_HD T layernorm_dinp(T x, T dy, T w, T mean, T rstd, T mean_dn, T mean_dn_xhat) {
  return rstd * (w * dy - mean_dn - (x - mean) * rstd * mean_dn_xhat);
}
template <typename T>
LATTICE_HD T rmsnorm_out(T x, T rstd, T w) {
  return x * rstd * w;
}
// y = x r w with r = (mean(x^2) + eps)^(-1/2), so dr/dx_c = -r^3 x_c / C:
// dinp = r w dy - x k with k = r^3 sum(dy w x) / C (rmsnorm_k).
template <typename T>
LATTICE_HD T rmsnorm_k(T rstd, T dot, T C) {
  return rstd * rstd * rstd * dot / C;
}
template <typename T>
LATTICE_HD T rmsnorm_dinp(T x, T dy, T w, T rstd, T k) {
  return rstd * w * dy - x * k;
}

// ---- rotary embeddings (HF rotate-half), in double ------------------------
// Angle of pair i of a head of size HS at position t: t * theta^(-2i / HS).
LATTICE_HD double rope_angle(int64_t t, int64_t i, int64_t HS, double theta) {
  using std::pow;
  return double(t) * pow(theta, -2.0 * double(i) / double(HS));
}
// (y1, y2) = (x1 cos a - x2 sin a, x2 cos a + x1 sin a); sn carries the sign
// of the rotation (backward rotates by -a). y may alias x.
template <typename T>
LATTICE_HD void rope_rotate(T& y1, T& y2, T x1, T x2, double cs, double sn) {
  const double a = double(x1), b = double(x2);
  y1 = T(a * cs - b * sn);
  y2 = T(b * cs + a * sn);
}

// ---- softmax cross-entropy, given the row statistics ----------------------
// logsumexp from the row max and sum of exp(x - max).
template <typename T>
LATTICE_HD T logsumexp_of(T row_max, T sum_exp) {
  using std::log;
  return row_max + log(sum_exp);
}
// Loss of one row: lse - logit of the target, 0 for an ignored row.
template <typename T>
LATTICE_HD T xent_loss(T lse, T target_logit, bool ignored) {
  return ignored ? T(0) : lse - target_logit;
}
// d loss / d logit = (softmax - onehot) * dloss.
template <typename T>
LATTICE_HD T xent_grad(T x, T lse, T dloss, bool is_target) {
  using std::exp;
  T g = exp(x - lse) * dloss;
  return is_target ? g - dloss : g;
}

// ---- row softmax, given the row statistics ---------------------------------
// Probability of one element from the row max and 1 / sum of exp(x - max).
template <typename T>
LATTICE_HD T softmax_prob(T x, T row_max, T inv_sum) {
  using std::exp;
  return exp(x - row_max) * inv_sum;
}
// dinp of one element: y (dy - dot), dot = sum over the row of dy * y.
template <typename T>
LATTICE_HD T softmax_grad(T y, T dy, T dot) {
  return y * (dy - dot);
}

// ---- grouped k/v heads (repeat_kv) ---------------------------------------
// Column, in a packed row [q | k | v] of (NH + 2 KV) HS columns, where head h
// (< NH) of part `kv` (0: k, 1: v) of the repeated row [q | k' | v'] starts:
// k/v head h / (NH / KV) of that part. C = NH HS is the width of q.
LATTICE_HD int64_t repeat_kv_src_col(int64_t kv, int64_t h, int64_t NH, int64_t KV, int64_t HS) {
  return NH * HS + (kv * KV + h / (NH / KV)) * HS;
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

// One SGD element update (PyTorch semantics, dampening 0) on the scaled
// gradient g: with momentum buf = mu buf + g + wd p and p - lr buf; without a
// buffer p - lr (g + wd p). Returns the new parameter.
template <typename T>
LATTICE_HD T sgd_momentum_step(T p, T g, T& buf, T lr, T mu, T wd) {
  buf = mu * buf + (g + wd * p);
  return p - lr * buf;
}
template <typename T>
LATTICE_HD T sgd_step(T p, T g, T lr, T wd) {
  return p - lr * (g + wd * p);
}

}  // namespace lattice::math
