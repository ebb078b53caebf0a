// bf16 matrix multiplication with fp32 accumulation on the CPU (oneDNN's
// AVX512-BF16 kernels), for runtime.precision: bf16 on cpu: the conversion and
// the multiply its matmuls use (the driver that feeds them is matmul_half.h).
//
// What bf16 means on the CPU: gradients and optimizer state stay fp32, and
// so do the parameter values, which are the master copy (the activations,
// their gradients and the pipeline's buffers are stored in bf16: design.md); the
// parameters also have a bf16 shadow, their values rounded once per update
// (core/param.h). The matmuls (every cpu::gemm<float>: each linear layer
// forward and backward, the LM head, and attention's per-head products q k^T,
// P v and their backward, called single-threaded inside attention's parallel
// region) take bf16 inputs with fp32 accumulation, as PyTorch's autocast does
// on CPUs (its bmm included): an fp32 input is rounded to bf16 (round to
// nearest even) on the call, a weight is read from the shadow. Norms, softmax,
// losses and the optimizer stay fp32.
//
// The mode is process-wide: cpu::set_matmul_dtype (matmul.h).
#pragma once

#include <cstdint>
#include <string>

namespace lattice::cpu {

// True when this build has oneDNN and this CPU has AVX512-BF16; otherwise
// false with the reason in `why` (for a one-line error).
bool bf16_matmul_available(std::string* why = nullptr);

// dst (n) = the bf16 bits of src (n), round to nearest even (dtype.h's
// f32_to_bf16). Single-threaded.
void f32_to_bf16_n(uint16_t* dst, const float* src, int64_t n);

// c (m, n) = alpha * op(a) op(b) + beta * c from bf16 inputs packed in their
// stored layout ((m, k) or (k, m) for a; (k, n) or (n, k) for b, rows
// contiguous), fp32 accumulation, c with row stride ldc: one oneDNN matmul.
void gemm_bf16_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      const uint16_t* b, float beta, float* c, int64_t ldc);

// c (m, n), bf16 bits with row stride ldc, = bf16(alpha * op(a) op(b) + bias)
// from bf16 inputs packed as gemm_bf16_packed's: fp32 accumulation, the fp32
// bias (n, or null) added, then one rounding to nearest even by oneDNN (its
// bf16 destination). These are the bits of gemm_bf16_packed into fp32, the
// bias added and f32_to_bf16 (test_ops_matmul16 checks it), except where
// adding the bias makes a sum subnormal (below 2^-126): oneDNN flushes it to
// zero (its products flush subnormals either way, fp32 output or bf16).
void gemm_bf16_packed_out(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                          const uint16_t* b, const float* bias, uint16_t* c, int64_t ldc);

// c (m, n) = alpha * op(a) op(b) + beta * c as cpu::gemm (row-major, strides
// lda/ldb/ldc), with a and b rounded to bf16 and fp32 accumulation
// (gemm_half with two fp32 operands).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace lattice::cpu
