// bf16 matrix multiplication with fp32 accumulation on the CPU (oneDNN's
// AVX512-BF16 kernels), for runtime.precision: bf16 on cpu.
//
// What bf16 means on the CPU: parameters, gradients, optimizer state and
// activations stay fp32 (the fp32 "master" copy is the only copy); the
// matmuls (every cpu::gemm<float>: each linear layer forward and backward, the
// LM head, and attention's per-head products q k^T, P v and their backward,
// called single-threaded inside attention's parallel region) round their two
// inputs to bf16 (round to nearest even) and accumulate in fp32, as PyTorch's
// autocast does on CPUs (its bmm included). Norms, softmax, losses and the
// optimizer stay fp32.
//
// The mode is process-wide: cpu::set_matmul_dtype (matmul.h).
#pragma once

#include <cstdint>
#include <string>

namespace lattice::cpu {

// True when this build has oneDNN and this CPU has AVX512-BF16; otherwise
// false with the reason in `why` (for a one-line error).
bool bf16_matmul_available(std::string* why = nullptr);

// c (m, n) = alpha * op(a) op(b) + beta * c as cpu::gemm (row-major, strides
// lda/ldb/ldc), with a and b rounded to bf16 and fp32 accumulation.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// cpu::linear_backward's two products (dinp = dout @ weight, dweight +=
// dout^T @ inp; either may be null) with dout rounded to bf16 once for both:
// the same results as two gemm_bf16 calls, one pass over dout less (for the
// LM head, dout is the (N, V) dlogits).
void linear_backward_bf16(float* dinp,          // (N, C) overwrite
                          float* dweight,       // (OC, C) accumulate
                          const float* dout,    // (N, OC)
                          const float* inp,     // (N, C)
                          const float* weight,  // (OC, C)
                          int64_t N, int64_t C, int64_t OC);

}  // namespace lattice::cpu
