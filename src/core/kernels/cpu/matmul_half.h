// 16-bit matrix multiplication with fp32 accumulation on the CPU: what every
// float matmul runs under runtime.precision bf16 or fp16 (cpu::gemm<float>
// and the linear layer, matmul.h). One driver for both types: each operand
// is brought to the form the type's multiply reads, then multiplied:
//   bf16  bf16 bits, oneDNN's AVX512-BF16 matmul (matmul_bf16.h);
//   f16   fp16 values held in fp32, OpenBLAS sgemm (matmul_f16.h, an
//         emulation: a product of two fp16 values is exact in fp32).
// An fp32 operand is rounded on the call (round to nearest even) into a
// per-thread scratch buffer; a 16-bit operand (a parameter's shadow,
// core/param.h) is read where it is when the multiply takes it as stored
// (bf16, packed) and copied or widened otherwise. Either way the multiply
// sees the same values, so a 16-bit weight gives the bits its fp32 master
// gives when rounded per call.
//
// Scratch buffers are thread-local, so attention may call these from inside
// its OpenMP loop (the conversions then run on that one thread).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kernels/cpu/matmul.h"

namespace lattice::cpu {

// c (m, n) = alpha * op(a) op(b) + beta * c as cpu::gemm (row-major, strides
// lda/ldb/ldc) with operands of type `dtype` (bf16 or f16): a and b are each
// fp32 (rounded here) or already `dtype`. m, n, k > 0.
void gemm_half(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
               int64_t lda, MatmulOperand b, int64_t ldb, float beta, float* c, int64_t ldc);

// cpu::linear_backward's two products in `dtype` (dinp = dout @ weight,
// dweight += dout^T @ inp; either may be null) with an fp32 dout rounded once
// for both: the bits of two gemm_half calls, one pass over dout less (for the
// LM head, dout is the (N, V) dlogits). Each operand is fp32 or already
// `dtype` (16-bit activations; a parameter's shadow). N, C, OC > 0.
void linear_backward_half(DType dtype, float* dinp,  // (N, C) overwrite
                          float* dweight,            // (OC, C) accumulate
                          MatmulOperand dout,        // (N, OC)
                          MatmulOperand inp,         // (N, C)
                          MatmulOperand weight,      // (OC, C)
                          int64_t N, int64_t C, int64_t OC);

// Whether gemm_half_out writes 16-bit outputs of `dtype` itself: bf16 (oneDNN
// writes a bf16 destination); not f16, whose sgemm emulation writes fp32.
inline bool half_out_direct(DType dtype) { return dtype == DType::bf16; }

// c (m, n), bf16 bits with row stride ldc, = bf16(alpha * op(a) op(b) + bias),
// bias (n) fp32 or null, rounded once (gemm_bf16_packed_out): the bits of
// gemm_half into fp32, the bias added and rounded, without the fp32 output.
// Operands as gemm_half's. half_out_direct(dtype); m, n, k > 0.
void gemm_half_out(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   MatmulOperand a, int64_t lda, MatmulOperand b, int64_t ldb, const float* bias, uint16_t* c,
                   int64_t ldc);

// dst (n) = src (n) rounded to `dtype` (bf16 or f16) as raw bits, the rounding
// the matmuls apply to an fp32 operand; parallel over blocks (a shadow's refresh).
void round_to_half(DType dtype, uint16_t* dst, const float* src, int64_t n);

}  // namespace lattice::cpu
