#include "core/kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/kernels/cpu/bias.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/kernels/cpu/matmul_half.h"

namespace lattice::cpu {

namespace {

DType g_matmul_dtype = DType::f32;

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha, const float* a,
               blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, double alpha, const double* a,
               blasint lda, const double* b, blasint ldb, double beta, double* c, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void set_matmul_dtype(DType operands) {
  LATTICE_CHECK(operands == DType::f32 || operands == DType::bf16 || operands == DType::f16,
                "cpu matmul operands must be f32, bf16 or f16, not {}", dtype_name(operands));
  std::string why;
  LATTICE_CHECK(operands != DType::bf16 || bf16_matmul_available(&why), "bf16 matmuls on the CPU are not available: {}",
                why);
  g_matmul_dtype = operands;
}

DType matmul_dtype() { return g_matmul_dtype; }

namespace {

// Handles the products that need no multiply: an empty c, or k == 0 (then
// c = beta * c). True when it did.
template <typename T>
bool empty_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  return true;
}

void check_blas_range(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  LATTICE_CHECK(std::max({m, n, k, lda, ldb, ldc}) <= INT_MAX, "gemm: dims ({}, {}, {}) exceed the BLAS int range", m,
                n, k);
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    // runtime.precision bf16 or fp16: every float matmul with 16-bit operands,
    // attention's per-head products inside its parallel region included.
    if (g_matmul_dtype != DType::f32)
      return gemm(trans_a, trans_b, m, n, k, alpha, MatmulOperand(a), lda, MatmulOperand(b), ldb, beta, c, ldc);
  }
  if (m != 0 && n != 0) check_blas_range(m, n, k, lda, ldb, ldc);
  if (empty_product(m, n, k, beta, c, ldc)) return;
  blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m), blasint(n),
            blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a, int64_t lda,
          MatmulOperand b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_matmul_operand("gemm", "a", a, g_matmul_dtype);
  check_matmul_operand("gemm", "b", b, g_matmul_dtype);
  if (g_matmul_dtype == DType::f32)
    return gemm<float>(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a.data), lda,
                       static_cast<const float*>(b.data), ldb, beta, c, ldc);
  if (m != 0 && n != 0) check_blas_range(m, n, k, lda, ldb, ldc);
  if (empty_product(m, n, k, beta, c, ldc)) return;
  gemm_half(g_matmul_dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b, T beta, T* c) {
  int64_t lda = std::max<int64_t>(1, trans_a ? m : k);
  int64_t ldb = std::max<int64_t>(1, trans_b ? k : n);
  gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, std::max<int64_t>(1, n));
}

void linear_forward(float* out, MatmulOperand inp, MatmulOperand weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  gemm(false, true, N, OC, C, 1.0f, inp, std::max<int64_t>(1, C), weight, std::max<int64_t>(1, C), 0.0f, out,
       std::max<int64_t>(1, OC));
  if (bias) add_bias(out, bias, N, OC);
}

void linear_backward_products(float* dinp, float* dweight, MatmulOperand dout, MatmulOperand inp, MatmulOperand weight,
                              int64_t N, int64_t C, int64_t OC) {
  check_matmul_operand("linear_backward", "weight", weight, g_matmul_dtype);
  if (g_matmul_dtype != DType::f32 && N > 0 && C > 0 && OC > 0 && (dinp || dweight)) {
    linear_backward_half(g_matmul_dtype, dinp, dweight, dout, inp, weight, N, C, OC);  // dout rounded once
    return;
  }
  // fp32 matmuls, or an empty product (which reads no operand)
  const int64_t ldc = std::max<int64_t>(1, C), ldo = std::max<int64_t>(1, OC);
  if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, ldo, weight, ldc, 0.0f, dinp, ldc);    // (N, OC) @ (OC, C)
  if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, ldo, inp, ldc, 1.0f, dweight, ldc);  // (N, OC)^T @ (N, C)
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     MatmulOperand weight, int64_t N, int64_t C, int64_t OC) {
  linear_backward_products(dinp, dweight, dout, inp, weight, N, C, OC);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) return linear_forward(out, inp, MatmulOperand(weight), bias, N, C, OC);
  gemm<T>(false, true, N, OC, C, T(1), inp, weight, T(0), out);
  if (bias) add_bias(out, bias, N, OC);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC) {
  if constexpr (std::is_same_v<T, float>)
    return linear_backward(dinp, dweight, dbias, dout, inp, MatmulOperand(weight), N, C, OC);
  if (dinp) gemm<T>(false, false, N, C, OC, T(1), dout, weight, T(0), dinp);    // (N, OC) @ (OC, C)
  if (dweight) gemm<T>(true, false, OC, C, N, T(1), dout, inp, T(1), dweight);  // (N, OC)^T @ (N, C)
  if (dbias) bias_backward(dbias, dout, N, OC);
}

#define LATTICE_INSTANTIATE(T)                                                                                 \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*, \
                        int64_t);                                                                              \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, const T*, T, T*);                  \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);                \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
