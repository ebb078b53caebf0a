// fp16 on the CPU, for runtime.precision: fp16 on cpu: the conversions its
// matmuls (matmul_half.h) and the parameters' fp16 shadow (core/param.h)
// use. The matmul is an emulation, not a fast path.
//
// No CPU Lattice runs on multiplies fp16 natively (AVX512-FP16 is absent on
// Zen 4 and most Xeons), so both operands are rounded to the nearest IEEE fp16
// value (round to nearest even; beyond 65504 they become inf, which is how an
// fp16 overflow shows; subnormals kept) and held in fp32, and OpenBLAS sgemm
// multiplies them. A product of two fp16 values is exact in fp32 (11 + 11
// significand bits), so this is fp16 operands with fp32 accumulation, the
// numerics of a GPU fp16 tensor-core gemm (cublasGemmEx, CUBLAS_COMPUTE_32F),
// up to the order of the sums. It costs a rounding pass on top of sgemm (a
// widening pass for an operand that is already fp16): fp16 on the CPU
// reproduces GPU fp16 runs and exercises loss scaling; it is never faster
// than fp32.
//
// What fp16 means otherwise is what bf16 means (matmul_bf16.h): gradients
// and optimizer state stay fp32 (activations are stored in fp16), the fp32
// parameter values are the master copy; norms, softmax, losses and the optimizer run in fp32.
//
// Every conversion rounds as dtype.h's f32_to_f16 does (the hardware
// conversions where the build has AVX-512F or F16C; test_ops_matmul_f16
// checks them against it) and widens exactly (f16_to_f32).
#pragma once

#include <cstdint>

namespace lattice::cpu {

// dst (rows, cols), packed, = src (rows, cols) with row stride ld, each value
// rounded to fp16 and back (dtype.h's f16_to_f32(f32_to_f16(x)), NaN stays
// NaN). Vectorised (AVX-512F or F16C conversions) where the build has them.
void round_to_f16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

// One run of n values: fp32 -> fp16 bits (rounded), fp16 bits -> fp32 (exact),
// fp32 -> fp16 -> fp32 (rounded, kept in fp32). Single-threaded.
void f32_to_f16_n(uint16_t* dst, const float* src, int64_t n);
void f16_to_f32_n(float* dst, const uint16_t* src, int64_t n);
void round_to_f16_n(float* dst, const float* src, int64_t n);

// c (m, n) = alpha * op(a) op(b) + beta * c as cpu::gemm (row-major, strides
// lda/ldb/ldc), with a and b rounded to fp16 and fp32 accumulation
// (gemm_half with two fp32 operands).
void gemm_f16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace lattice::cpu
