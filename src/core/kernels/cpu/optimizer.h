// CPU optimizer updates on one tensor (usually a view into a flat buffer).
//
// AdamW (decoupled weight decay), exactly math::adamw_step per element:
//   g = grad * grad_scale
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr * (wd * p + (m / bc1) / (sqrt(v / bc2) + eps)),  bc_i = 1 - b_i^step
// PyTorch's AdamW first scales p by (1 - lr * wd) and then takes the Adam step
// on the scaled p; the two agree to first order in lr (they differ by
// lr^2 * wd * step terms) and are identical when wd = 0.
//
// SGD with momentum, PyTorch semantics (dampening 0, no Nesterov):
//   g = grad * grad_scale + wd * p,  buf = mu * buf + g,  p -= lr * buf
// (PyTorch's first step sets buf = g, the same as a zero-initialised buf.)
// With mu == 0 momentum may be null and p -= lr * g.
#pragma once

#include <cstdint>

namespace lattice::cpu {

template <typename T>
void adamw_update(T* param,       // (n)
                  const T* grad,  // (n)
                  T* m, T* v,     // (n) first and second moments
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  float grad_scale);

template <typename T>
void sgd_update(T* param,       // (n)
                const T* grad,  // (n)
                T* momentum,    // (n), or null when mu == 0
                int64_t n, float lr, float mu, float weight_decay, float grad_scale);

}  // namespace lattice::cpu
