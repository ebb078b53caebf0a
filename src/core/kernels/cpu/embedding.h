// CPU token embedding lookup, with vocab-parallel masking.
//
// A rank may hold rows [vocab_start, vocab_start + V) of the full table; ids
// outside that range give zero rows in forward and contribute nothing in
// backward (the tp layer sums the partial rows over ranks). The weight
// gradient ACCUMULATES; it is summed by blocks of columns, each over all
// tokens in order by one thread, so repeated ids need no atomics and the
// result is bitwise reproducible for any thread count.
//
// T is the activation storage type of out / dout: float, double, or Bf16 /
// F16 (core/kernels/storage.h). The table and its gradient are compute_t<T>
// (fp32 beside 16-bit activations): forward rounds the looked-up rows to T,
// backward adds the widened dout rows in fp32.
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

template <typename T>
void embedding_forward(T* out,                      // (N, C)
                       const int32_t* ids,          // (N)
                       const compute_t<T>* weight,  // (V, C)
                       int64_t vocab_start, int64_t N, int64_t V, int64_t C);

template <typename T>
void embedding_backward(compute_t<T>* dweight,  // (V, C) +=
                        const T* dout,          // (N, C)
                        const int32_t* ids,     // (N)
                        int64_t vocab_start, int64_t N, int64_t V, int64_t C);

}  // namespace lattice::cpu
