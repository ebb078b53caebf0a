// CPU bias kernels, one body for every activation storage type S (float,
// double, Bf16, F16; core/kernels/storage.h): the bias and its gradient are
// compute_t<S> (fp32 beside 16-bit activations), each output is one add in
// compute_t<S> rounded once on store, and the gradient sums each column over
// the rows in row order in compute_t<S>, so the result does not depend on the
// thread count and a 16-bit kernel agrees bitwise with the f32 one on the
// widened values. The linear layers (matmul.cpp, matmul16.cpp) and
// ops::add_bias_forward/backward call them. dbias ACCUMULATES (+=).
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

// out (N, OC) += bias (OC) broadcast over rows.
template <typename S>
void add_bias(S* out, const compute_t<S>* bias, int64_t N, int64_t OC);

// dbias (OC) += column sums of dout (N, OC).
template <typename S>
void bias_backward(compute_t<S>* dbias, const S* dout, int64_t N, int64_t OC);

}  // namespace lattice::cpu
