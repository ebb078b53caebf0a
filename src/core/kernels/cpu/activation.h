// CPU activations: GELU (tanh approximation), SwiGLU, row softmax.
//
// The element-wise formulas come from core/kernels/math.h, shared with the
// CUDA kernels. Input gradients OVERWRITE.
//
// Shapes: GELU on n elements of any shape; SwiGLU on N rows of [gate | up]
// (2F columns) giving F columns; softmax on N rows of K columns.
#pragma once

#include <cstdint>

namespace lattice::cpu {

template <typename T>
void gelu_forward(T* out,        // (n)
                  const T* inp,  // (n)
                  int64_t n);

template <typename T>
void gelu_backward(T* dinp,        // (n) overwrite
                   const T* dout,  // (n)
                   const T* inp,   // (n)
                   int64_t n);

template <typename T>
void swiglu_forward(T* out,        // (N, F) = silu(gate) * up
                    const T* inp,  // (N, 2F) = [gate | up]
                    int64_t N, int64_t F);

template <typename T>
void swiglu_backward(T* dinp,        // (N, 2F) overwrite
                     const T* dout,  // (N, F)
                     const T* inp,   // (N, 2F)
                     int64_t N, int64_t F);

template <typename T>
void softmax_forward(T* out,        // (N, K)
                     const T* inp,  // (N, K)
                     int64_t N, int64_t K);

// dinp = out * (dout - sum(dout * out)) per row; dinp may alias dout.
template <typename T>
void softmax_backward(T* dinp,        // (N, K) overwrite
                      const T* dout,  // (N, K)
                      const T* out,   // (N, K) the forward output
                      int64_t N, int64_t K);

}  // namespace lattice::cpu
