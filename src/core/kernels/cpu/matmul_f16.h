// fp16 matrix multiplication with fp32 accumulation on the CPU, for
// runtime.precision: fp16 on cpu: an emulation, not a fast path.
//
// No CPU Lattice runs on multiplies fp16 natively (AVX512-FP16 is absent on
// Zen 4 and most Xeons), so both operands are rounded to the nearest IEEE fp16
// value (round to nearest even; beyond 65504 they become inf, which is how an
// fp16 overflow shows; subnormals kept) and held in fp32, and OpenBLAS sgemm
// multiplies them. A product of two fp16 values is exact in fp32 (11 + 11
// significand bits), so this is fp16 operands with fp32 accumulation, the
// numerics of a GPU fp16 tensor-core gemm (cublasGemmEx, CUBLAS_COMPUTE_32F),
// up to the order of the sums. It costs a rounding pass on top of sgemm: fp16
// on the CPU reproduces GPU fp16 runs and exercises loss scaling; it is never
// faster than fp32.
//
// What fp16 means otherwise is what bf16 means (matmul_bf16.h): parameters,
// gradients, optimizer state and activations stay fp32; norms, softmax, losses
// and the optimizer run in fp32.
#pragma once

#include <cstdint>

namespace lattice::cpu {

// dst (rows, cols), packed, = src (rows, cols) with row stride ld, each value
// rounded to fp16 and back (dtype.h's f16_to_f32(f32_to_f16(x)), NaN stays
// NaN). Vectorised (AVX-512F or F16C conversions) where the build has them.
void round_to_f16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

// c (m, n) = alpha * op(a) op(b) + beta * c as cpu::gemm (row-major, strides
// lda/ldb/ldc), with a and b rounded to fp16 and fp32 accumulation.
void gemm_f16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace lattice::cpu
