#include "core/kernels/cpu/matmul_half.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/kernels/cpu/matmul_f16.h"

namespace lattice::cpu {

namespace {

// What each type's multiply reads, and how an operand becomes that.
struct Bf16 {
  static constexpr DType kType = DType::bf16;
  using Elem = uint16_t;                    // bf16 bits, as oneDNN reads them
  static constexpr bool kReadsHalf = true;  // so a packed bf16 operand is read in place
  static void from_f32(Elem* d, const float* s, int64_t n) { f32_to_bf16_n(d, s, n); }
  static void from_half(Elem* d, const uint16_t* s, int64_t n) { std::memcpy(d, s, size_t(n) * sizeof(Elem)); }
  static void multiply(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const Elem* a, const Elem* b,
                       float beta, float* c, int64_t ldc) {
    gemm_bf16_packed(ta, tb, m, n, k, alpha, a, b, beta, c, ldc);
  }
};

struct F16 {
  static constexpr DType kType = DType::f16;
  using Elem = float;  // fp16 values held in fp32, as sgemm reads them
  static constexpr bool kReadsHalf = false;
  static void from_f32(Elem* d, const float* s, int64_t n) { round_to_f16_n(d, s, n); }
  static void from_half(Elem* d, const uint16_t* s, int64_t n) { f16_to_f32_n(d, s, n); }
  static void multiply(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const Elem* a, const Elem* b,
                       float beta, float* c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(m), blasint(n),
                blasint(k), alpha, a, blasint(ta ? m : k), b, blasint(tb ? k : n), beta, c, blasint(ldc));
  }
};

// Calls fn(F{}) with the format of `dtype`.
template <typename Fn>
void with_format(const char* op, DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) return fn(Bf16{});
  LATTICE_CHECK(dtype == DType::f16, "cpu {}: {} is not a 16-bit matmul type (bf16 or f16)", op, dtype_name(dtype));
  fn(F16{});
}

// This thread's scratch buffer `slot` for format F, at least n elements. It
// only grows: resizing down and up again would zero the regrown part on
// every call (for the LM head's dlogits, ~100 MB per backward).
template <class F>
typename F::Elem* scratch(int slot, int64_t n) {
  thread_local std::vector<typename F::Elem> bufs[3];
  if (bufs[slot].size() < size_t(n)) bufs[slot].resize(size_t(n));
  return bufs[slot].data();
}

// Operand x, stored (rows, cols) with row stride ld, in the packed form F's
// multiply reads: x itself when it already is that, else converted into
// scratch buffer `slot`.
template <class F>
const typename F::Elem* prepared(const MatmulOperand& x, int64_t rows, int64_t cols, int64_t ld, int slot) {
  const bool half = x.dtype == F::kType;
  if constexpr (F::kReadsHalf) {
    if (half && ld == cols) return static_cast<const typename F::Elem*>(x.data);
  }
  typename F::Elem* out = scratch<F>(slot, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    if (half)
      F::from_half(out + r * cols, static_cast<const uint16_t*>(x.data) + r * ld, cols);
    else
      F::from_f32(out + r * cols, static_cast<const float*>(x.data) + r * ld, cols);
  }
  return out;
}

}  // namespace

void gemm_half(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
               int64_t lda, MatmulOperand b, int64_t ldb, float beta, float* c, int64_t ldc) {
  LATTICE_CHECK(m > 0 && n > 0 && k > 0, "cpu gemm_half: empty product ({}, {}, {})", m, n, k);
  check_matmul_operand("gemm_half", "a", a, dtype);
  check_matmul_operand("gemm_half", "b", b, dtype);
  with_format("gemm_half", dtype, [&](auto f) {
    using F = decltype(f);
    // Stored layouts: a (m, k) or (k, m); b (k, n) or (n, k).
    const auto* ap = prepared<F>(a, trans_a ? k : m, trans_a ? m : k, lda, 0);
    const auto* bp = prepared<F>(b, trans_b ? n : k, trans_b ? k : n, ldb, 1);
    F::multiply(trans_a, trans_b, m, n, k, alpha, ap, bp, beta, c, ldc);
  });
}

void gemm_half_out(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   MatmulOperand a, int64_t lda, MatmulOperand b, int64_t ldb, const float* bias, uint16_t* c,
                   int64_t ldc) {
  LATTICE_CHECK(half_out_direct(dtype), "cpu gemm_half_out: {} outputs are written through fp32", dtype_name(dtype));
  LATTICE_CHECK(m > 0 && n > 0 && k > 0, "cpu gemm_half_out: empty product ({}, {}, {})", m, n, k);
  check_matmul_operand("gemm_half_out", "a", a, dtype);
  check_matmul_operand("gemm_half_out", "b", b, dtype);
  const auto* ap = prepared<Bf16>(a, trans_a ? k : m, trans_a ? m : k, lda, 0);
  const auto* bp = prepared<Bf16>(b, trans_b ? n : k, trans_b ? k : n, ldb, 1);
  gemm_bf16_packed_out(trans_a, trans_b, m, n, k, alpha, ap, bp, bias, c, ldc);
}

void linear_backward_half(DType dtype, float* dinp, float* dweight, MatmulOperand dout, MatmulOperand inp,
                          MatmulOperand weight, int64_t N, int64_t C, int64_t OC) {
  LATTICE_CHECK(N > 0 && C > 0 && OC > 0, "cpu linear_backward_half: empty product ({}, {}, {})", N, C, OC);
  check_matmul_operand("linear_backward", "dout", dout, dtype);
  check_matmul_operand("linear_backward", "inp", inp, dtype);
  check_matmul_operand("linear_backward", "weight", weight, dtype);
  with_format("linear_backward", dtype, [&](auto f) {
    using F = decltype(f);
    const auto* d = prepared<F>(dout, N, OC, OC, 0);  // rounded once for both products
    if (dinp)                                         // (N, OC) @ (OC, C)
      F::multiply(false, false, N, C, OC, 1.0f, d, prepared<F>(weight, OC, C, C, 1), 0.0f, dinp, C);
    if (dweight)  // += (N, OC)^T @ (N, C)
      F::multiply(true, false, OC, C, N, 1.0f, d, prepared<F>(inp, N, C, C, 2), 1.0f, dweight, C);
  });
}

void round_to_half(DType dtype, uint16_t* dst, const float* src, int64_t n) {
  LATTICE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "cpu round_to_half: {} is not bf16 or f16",
                dtype_name(dtype));
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lo = blk * kBlock, len = std::min(kBlock, n - lo);
    if (dtype == DType::bf16)
      f32_to_bf16_n(dst + lo, src + lo, len);
    else
      f32_to_f16_n(dst + lo, src + lo, len);
  }
}

}  // namespace lattice::cpu
