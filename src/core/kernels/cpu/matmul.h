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
// products): f32 (the default, OpenBLAS sgemm), bf16 (matmul_bf16.h, oneDNN)
// or f16 (matmul_f16.h, an emulation on sgemm). The mode is process-wide, set
// by the plugin from the config before training; f64 gemms never change, so
// the finite-difference tests still check the math in f64.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lattice::cpu {

// f32, bf16 or f16; anything else throws, and so does bf16 where
// bf16_matmul_available() (matmul_bf16.h) is false.
void set_matmul_dtype(DType operands);
DType matmul_dtype();

// c (m, n) = alpha * op(a) @ op(b) + beta * c; op(a) is (m, k), op(b) is (k, n).
// a is stored (m, k) or, when trans_a, (k, m), with row stride lda; likewise b.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

// The same on packed (contiguous) matrices.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b, T beta, T* c);

// out (N, OC) += bias (OC) broadcast over rows.
template <typename T>
void add_bias(T* out, const T* bias, int64_t N, int64_t OC);

// dbias (OC) += column sums of dout (N, OC). Deterministic for any thread count.
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t OC);

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

}  // namespace lattice::cpu
