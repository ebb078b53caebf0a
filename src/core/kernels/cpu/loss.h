// CPU fused softmax + cross-entropy over logits, with ignored targets.
//
// Forward saves the row logsumexp so backward needs no second reduction pass
// and can write dlogits over logits in place (the (N, V) logits are the
// largest activation of a language model). Rows whose target equals
// ignore_index get loss 0 and gradient 0. Targets must lie in [0, V) or equal
// ignore_index (the dispatch layer checks).
//
// T is the storage type of the logits and dlogits: float, double, or Bf16 /
// F16 (core/kernels/storage.h); losses, lse and dloss are compute_t<T> (fp32
// beside 16-bit logits), all arithmetic and row sums in compute_t<T>.
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

template <typename T>
void cross_entropy_forward(compute_t<T>* losses,    // (N) lse - logits[target], 0 when ignored
                           compute_t<T>* lse,       // (N) saved logsumexp of each row
                           const T* logits,         // (N, V)
                           const int32_t* targets,  // (N)
                           int ignore_index, int64_t N, int64_t V);

// dlogits = (softmax(logits) - onehot(target)) * dloss; dlogits may equal logits.
template <typename T>
void cross_entropy_backward(T* dlogits,               // (N, V) overwrite
                            const T* logits,          // (N, V)
                            const compute_t<T>* lse,  // (N)
                            const int32_t* targets,   // (N)
                            compute_t<T> dloss, int ignore_index, int64_t N, int64_t V);

}  // namespace lattice::cpu
