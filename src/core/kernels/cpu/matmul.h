// CPU matrix multiplication (OpenBLAS) and the linear layer built on it.
//
// Row-major throughout. `gemm` is a thin wrapper over cblas_sgemm/cblas_dgemm
// with explicit leading dimensions, so callers can multiply strided blocks
// (attention uses it on q/k/v inside the fused qkv buffer). Called inside an
// OpenMP parallel region, the OpenMP build of OpenBLAS runs single-threaded
// (it checks omp_in_parallel), so per-block gemms can be spread over threads.
//
// Linear layer: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC).
// Backward overwrites dinp and accumulates into dweight and dbias.
//
// runtime.precision picks the operand type of every float matmul (each
// linear layer forward and backward, the LM head, attention's per-head
// products): f32 (the default, OpenBLAS sgemm), bf16 (oneDNN) or f16 (an
// emulation on sgemm), both through matmul_half.h. The mode is process-wide,
// set by the plugin from the config before training; f64 gemms never change,
// so the finite-difference tests still check the math in f64.
//
// Under bf16 or f16 an operand may also come already in that type (a
// MatmulOperand of dtype bf16/f16: a parameter's 16-bit shadow, core/param.h),
// which the product reads as it is instead of rounding an fp32 copy. Both
// give the same bits: rounding the same fp32 value is deterministic.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/kernels/matmul_operand.h"

namespace lattice::cpu {

// f32, bf16 or f16; anything else throws, and so does bf16 where
// bf16_matmul_available() (matmul_bf16.h) is false.
void set_matmul_dtype(DType operands);
DType matmul_dtype();

// Throws unless `x` is fp32, or 16-bit of the type the matmuls run in
// (`matmuls`), naming `op` and which operand it is. (Inline: the CUDA
// backend, which does not link lattice_core, checks its operands with it.)
inline void check_matmul_operand(const char* op, const char* name, const MatmulOperand& x, DType matmuls) {
  if (x.dtype == DType::f32) return;
  LATTICE_CHECK(x.dtype == DType::bf16 || x.dtype == DType::f16,
                "{}: operand {} is {}; a float matmul takes f32, bf16 or f16 operands", op, name, dtype_name(x.dtype));
  LATTICE_CHECK(x.dtype == matmuls,
                "{}: operand {} is {} (a 16-bit parameter copy) but the matmuls run in {}: a {} operand needs "
                "runtime.precision {}",
                op, name, dtype_name(x.dtype), dtype_name(matmuls), dtype_name(x.dtype),
                x.dtype == DType::bf16 ? "bf16" : "fp16");
}

// c (m, n) = alpha * op(a) @ op(b) + beta * c; op(a) is (m, k), op(b) is (k, n).
// a is stored (m, k) or, when trans_a, (k, m), with row stride lda; likewise b.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

// The same on packed (contiguous) matrices.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b, T beta, T* c);

// gemm<float> whose operands may be 16-bit (MatmulOperand).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a, int64_t lda,
          MatmulOperand b, int64_t ldb, float beta, float* c, int64_t ldc);

template <typename T>
void linear_forward(T* out,           // (N, OC)
                    const T* inp,     // (N, C)
                    const T* weight,  // (OC, C)
                    const T* bias,    // (OC) or null
                    int64_t N, int64_t C, int64_t OC);

template <typename T>
void linear_backward(T* dinp,          // (N, C) overwrite, or null
                     T* dweight,       // (OC, C) +=, or null
                     T* dbias,         // (OC) +=, or null
                     const T* dout,    // (N, OC)
                     const T* inp,     // (N, C)
                     const T* weight,  // (OC, C)
                     int64_t N, int64_t C, int64_t OC);

// The float layer with the weight (OC, C), packed, as a MatmulOperand (fp32,
// or the 16-bit shadow under bf16/f16 matmuls); the template above is these
// with an fp32 weight. Forward's inp may be 16-bit activations of the matmul
// type (fp32 out: a tp partial sum). Under bf16/f16, backward rounds dout once
// for its two products.
void linear_forward(float* out, MatmulOperand inp, MatmulOperand weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     MatmulOperand weight, int64_t N, int64_t C, int64_t OC);
// linear_backward's two products without dbias, every operand fp32 or of the
// matmul type: dinp (N, C) = dout @ weight (overwrite), dweight (OC, C) +=
// dout^T @ inp; either may be null.
void linear_backward_products(float* dinp, float* dweight, MatmulOperand dout, MatmulOperand inp, MatmulOperand weight,
                              int64_t N, int64_t C, int64_t OC);

}  // namespace lattice::cpu
