// CPU GELU with the exact error function (BERT, PyTorch's default GELU):
//   gelu(x)  = 0.5 x (1 + erf(x / sqrt 2))
//   gelu'(x) = 0.5 (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi)
// (the tanh approximation GPT-2 uses is in activation.h). Input gradients
// OVERWRITE. Shapes: n elements of any shape.
#pragma once

#include <cstdint>

namespace lattice::cpu {

template <typename T>
void gelu_erf_forward(T* out,        // (n)
                      const T* inp,  // (n)
                      int64_t n);

template <typename T>
void gelu_erf_backward(T* dinp,        // (n) overwrite
                       const T* dout,  // (n)
                       const T* inp,   // (n)
                       int64_t n);

}  // namespace lattice::cpu
