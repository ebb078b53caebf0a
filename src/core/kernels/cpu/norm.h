// CPU LayerNorm and RMSNorm over the last dim.
//
// T is the activation storage type (core/kernels/storage.h): float or double,
// or Bf16 / F16 with float math. Weights, their gradients and the saved
// statistics are param_t<T> = compute_t<T> (float beside 16-bit activations), and
// every sum is accumulated in param_t<T>.
//
// Rows are independent: forward and the input gradient run one row per
// iteration of an OpenMP loop. The parameter gradients ACCUMULATE (+=) and
// are summed by blocks of columns, each block over all rows in row order by
// one thread, so they are bitwise reproducible for any thread count; the
// input gradient OVERWRITES.
//
// Shapes: N rows of C channels (N = B * T for activations).
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

template <typename T>
using param_t = compute_t<T>;  // parameters, their gradients, statistics, arithmetic

template <typename T>
void layernorm_forward(T* out,                    // (N, C)
                       param_t<T>* mean,          // (N) saved
                       param_t<T>* rstd,          // (N) saved, 1 / sqrt(var + eps)
                       const T* inp,              // (N, C)
                       const param_t<T>* weight,  // (C)
                       const param_t<T>* bias,    // (C)
                       param_t<T> eps, int64_t N, int64_t C);

template <typename T>
void layernorm_backward(T* dinp,                   // (N, C) overwrite
                        param_t<T>* dweight,       // (C) +=
                        param_t<T>* dbias,         // (C) +=
                        const T* dout,             // (N, C)
                        const T* inp,              // (N, C)
                        const param_t<T>* weight,  // (C)
                        const param_t<T>* mean,    // (N)
                        const param_t<T>* rstd,    // (N)
                        int64_t N, int64_t C);

template <typename T>
void rmsnorm_forward(T* out,                    // (N, C)
                     param_t<T>* rstd,          // (N) saved, 1 / sqrt(mean(inp^2) + eps)
                     const T* inp,              // (N, C)
                     const param_t<T>* weight,  // (C)
                     param_t<T> eps, int64_t N, int64_t C);

template <typename T>
void rmsnorm_backward(T* dinp,                   // (N, C) overwrite
                      param_t<T>* dweight,       // (C) +=
                      const T* dout,             // (N, C)
                      const T* inp,              // (N, C)
                      const param_t<T>* weight,  // (C)
                      const param_t<T>* rstd,    // (N)
                      int64_t N, int64_t C);

}  // namespace lattice::cpu
