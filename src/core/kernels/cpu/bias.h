// CPU bias kernels on 16-bit activations (bf16 / f16 storage, fp32 bias).
//
// The f32/f64 bias kernels are cpu::add_bias and cpu::bias_backward in
// matmul.h, next to the linear layer that calls them; these are their
// counterparts for S = Bf16 or F16 (core/kernels/storage.h): the bias and its
// gradient stay fp32, each output is one fp32 add rounded once, and the
// gradient sums each column over the rows in row order in fp32, as
// cpu::bias_backward does, so both agree bitwise with the f32 kernels on the
// widened values. dbias ACCUMULATES (+=).
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

template <typename S>
void add_bias16(S* out,             // (N, OC) +=, rounded
                const float* bias,  // (OC)
                int64_t N, int64_t OC);

template <typename S>
void bias_backward16(float* dbias,   // (OC) +=
                     const S* dout,  // (N, OC)
                     int64_t N, int64_t OC);

}  // namespace lattice::cpu
