// CPU matmuls on 16-bit activations (bf16 / f16 storage, core/kernels/storage.h)
// under runtime.precision bf16|fp16: the products of matmul.h with 16-bit
// outputs.
//
// S is Bf16 or F16 and must be the type the matmuls run in
// (cpu::matmul_dtype(); core/ops.h checks it). Activation operands are read
// as they are (no rounding: they already are S); a weight is the fp32 master
// (rounded on the call) or its 16-bit shadow of type S, which give the same
// bits. All arithmetic accumulates in fp32, and each 16-bit output is
// rounded ONCE to nearest even, after the bias: out = narrow<S>(fp32 product
// + bias). bf16 outputs are written so by oneDNN itself (its bf16
// destination with the fp32 bias, gemm_half_out); f16 ones (sgemm
// emulation) go through a per-thread fp32 scratch (grow-only) in blocks of
// rows, so it stays at most 64 MiB a thread for outputs past 2^24 elements.
// These are the bits of the f32 ops under the same 16-bit matmuls on the
// widened inputs, rounded once (test_ops_matmul16), except where adding the
// bias makes a sum subnormal (below 2^-126): oneDNN flushes it to zero.
//
// Activation gradients OVERWRITE; dweight and dbias ACCUMULATE (+=), fp32.
#pragma once

#include <cstdint>

#include "core/kernels/matmul_operand.h"
#include "core/kernels/storage.h"

namespace lattice::cpu {

// c (m, n), packed, = narrow<S>(alpha * op(a) @ op(b) + beta * widen(c));
// a stored (m, k) or (k, m) when trans_a, b (k, n) or (n, k) when trans_b,
// packed; each fp32 or S.
template <typename S>
void gemm16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a, MatmulOperand b,
            float beta, S* c);

template <typename S>
void linear_forward16(S* out,                // (N, OC) = narrow(inp @ weight^T + bias)
                      const S* inp,          // (N, C)
                      MatmulOperand weight,  // (OC, C), fp32 or S
                      const float* bias,     // (OC) or null
                      int64_t N, int64_t C, int64_t OC);

// D, dinp's storage: S, or float for a tensor-parallel partial sum that is
// all-reduced in fp32 before it is rounded.
template <typename S, typename D>
void linear_backward16(D* dinp,               // (N, C) overwrite, or null
                       float* dweight,        // (OC, C) +=, or null
                       float* dbias,          // (OC) +=, or null
                       const S* dout,         // (N, OC)
                       const S* inp,          // (N, C)
                       MatmulOperand weight,  // (OC, C), fp32 or S
                       int64_t N, int64_t C, int64_t OC);

}  // namespace lattice::cpu
