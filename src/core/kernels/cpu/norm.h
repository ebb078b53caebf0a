// CPU LayerNorm and RMSNorm over the last dim (float and double).
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

namespace lattice::cpu {

template <typename T>
void layernorm_forward(T* out,           // (N, C)
                       T* mean,          // (N) saved
                       T* rstd,          // (N) saved, 1 / sqrt(var + eps)
                       const T* inp,     // (N, C)
                       const T* weight,  // (C)
                       const T* bias,    // (C)
                       T eps, int64_t N, int64_t C);

template <typename T>
void layernorm_backward(T* dinp,          // (N, C) overwrite
                        T* dweight,       // (C) +=
                        T* dbias,         // (C) +=
                        const T* dout,    // (N, C)
                        const T* inp,     // (N, C)
                        const T* weight,  // (C)
                        const T* mean,    // (N)
                        const T* rstd,    // (N)
                        int64_t N, int64_t C);

template <typename T>
void rmsnorm_forward(T* out,           // (N, C)
                     T* rstd,          // (N) saved, 1 / sqrt(mean(inp^2) + eps)
                     const T* inp,     // (N, C)
                     const T* weight,  // (C)
                     T eps, int64_t N, int64_t C);

template <typename T>
void rmsnorm_backward(T* dinp,          // (N, C) overwrite
                      T* dweight,       // (C) +=
                      const T* dout,    // (N, C)
                      const T* inp,     // (N, C)
                      const T* weight,  // (C)
                      const T* rstd,    // (N)
                      int64_t N, int64_t C);

}  // namespace lattice::cpu
