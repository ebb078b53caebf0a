// CUDA_CHECK, CUBLAS_CHECK and CUDNN_CHECK: turn a failed CUDA runtime, cuBLAS
// or cuDNN call into
// a lattice::Error carrying the expression, file:line and the library's own
// message (error name and description); host and rank are added by
// Error::describe() where the error is reported.
//
// Invariant: these throw through lattice::throw_error, which the CUDA backend
// library compiles in itself (core/error.cpp, hidden visibility) because it
// does not link lattice_core. GCC compares the typeinfo of non-local types by
// name, so the test binary still catches the Error as lattice::Error
// (tests/core/cuda/test_cuda_backend.cpp checks this across the dlopen
// boundary).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include "core/error.h"

namespace lattice::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so later calls do not report it again
  throw_error(fmt::format("CUDA error {}: {}", cudaGetErrorName(e), cudaGetErrorString(e)), expr, file, line);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw_error(fmt::format("cuBLAS error {}: {}", cublasGetStatusName(s), cublasGetStatusString(s)), expr, file, line);
}

// cuDNN's last error text says which attribute or engine refused, where the
// status name alone does not.
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t s, const char* expr, const char* file, int line) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw_error(fmt::format("cuDNN error {}{}{}", cudnnGetErrorString(s), detail[0] ? ": " : "", detail), expr, file,
              line);
}

}  // namespace lattice::cuda

#define CUDA_CHECK(expr)                                                               \
  do {                                                                                 \
    cudaError_t lattice_cuda_err_ = (expr);                                            \
    if (lattice_cuda_err_ != cudaSuccess) [[unlikely]]                                 \
      ::lattice::cuda::throw_cuda_error(lattice_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                \
  do {                                                                                    \
    cublasStatus_t lattice_cublas_st_ = (expr);                                           \
    if (lattice_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                         \
      ::lattice::cuda::throw_cublas_error(lattice_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(expr)                                                               \
  do {                                                                                  \
    cudnnStatus_t lattice_cudnn_st_ = (expr);                                           \
    if (lattice_cudnn_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                         \
      ::lattice::cuda::throw_cudnn_error(lattice_cudnn_st_, #expr, __FILE__, __LINE__); \
  } while (0)
