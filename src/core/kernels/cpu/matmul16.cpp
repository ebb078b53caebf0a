#include "core/kernels/cpu/matmul16.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/bias.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_half.h"

namespace lattice::cpu {

namespace {

// Most fp32 elements one block of output rows accumulates into (64 MiB).
constexpr int64_t kAccElems = int64_t(1) << 24;

// This thread's fp32 accumulator, at least n elements. It only grows:
// shrinking and regrowing would zero the regrown part on every call.
float* accumulator(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

// Calls fn(r0, rows, acc) for consecutive blocks of the `rows` rows of a
// (rows, cols) output, acc an fp32 accumulator of rows * cols elements.
template <typename Fn>
void for_row_blocks(int64_t rows, int64_t cols, Fn&& fn) {
  if (rows == 0 || cols == 0) return;
  const int64_t block = std::clamp<int64_t>(kAccElems / cols, 1, rows);
  float* acc = accumulator(block * cols);
  for (int64_t r0 = 0; r0 < rows; r0 += block) fn(r0, std::min(block, rows - r0), acc);
}

// out (rows, cols) = narrow<S>(acc + bias), bias (cols) or null: the one
// rounding of a 16-bit output (the f32 ops add the bias to the same fp32
// values, cpu::add_bias).
template <typename S>
void narrow_rows(S* out, const float* acc, const float* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    S* o = out + r * cols;
    const float* a = acc + r * cols;
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) o[c] = narrow<S>(a[c] + bias[c]);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) o[c] = narrow<S>(a[c]);
    }
  }
}

template <typename S>
MatmulOperand act(const S* p) {
  return {p, storage_dtype<S>};
}

// Whether an (m, n, k) product with 16-bit outputs of S is written by the
// multiply itself (gemm_half_out: bf16 through oneDNN), with no fp32 block.
template <typename S>
bool direct(int64_t m, int64_t n, int64_t k) {
  return m > 0 && n > 0 && k > 0 && half_out_direct(storage_dtype<S>);
}

template <typename S>
uint16_t* bits(S* p) {
  return reinterpret_cast<uint16_t*>(p);
}

}  // namespace

template <typename S>
void gemm16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a, MatmulOperand b,
            float beta, S* c) {
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
  if (beta == 0.0f && direct<S>(m, n, k))
    return gemm_half_out(storage_dtype<S>, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, nullptr, bits(c), n);
  for_row_blocks(m, n, [&](int64_t r0, int64_t rows, float* acc) {
    S* cb = c + r0 * n;
    if (beta != 0.0f) {
#pragma omp parallel for simd schedule(static) if (rows * n > (1 << 15))
      for (int64_t i = 0; i < rows * n; ++i) acc[i] = widen(cb[i]);
    }
    // Rows r0.. of op(a): rows of a, or columns of a stored transposed.
    const MatmulOperand ab = shifted(a, trans_a ? r0 : r0 * lda);
    gemm(trans_a, trans_b, rows, n, k, alpha, ab, lda, b, ldb, beta, acc, n);
    narrow_rows(cb, acc, nullptr, rows, n);
  });
}

template <typename S>
void linear_forward16(S* out, const S* inp, MatmulOperand weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  if (direct<S>(N, OC, C))
    return gemm_half_out(storage_dtype<S>, false, true, N, OC, C, 1.0f, act(inp), C, weight, C, bias, bits(out), OC);
  for_row_blocks(N, OC, [&](int64_t r0, int64_t rows, float* acc) {
    linear_forward(acc, act(inp + r0 * C), weight, nullptr, rows, C, OC);
    narrow_rows(out + r0 * OC, acc, bias, rows, OC);
  });
}

template <typename S, typename D>
void linear_backward16(D* dinp, float* dweight, float* dbias, const S* dout, const S* inp, MatmulOperand weight,
                       int64_t N, int64_t C, int64_t OC) {
  if constexpr (std::is_same_v<D, float>) {
    linear_backward_products(dinp, dweight, act(dout), act(inp), weight, N, C, OC);
  } else {
    linear_backward_products(nullptr, dweight, act(dout), act(inp), weight, N, C, OC);
    if (dinp && direct<S>(N, C, OC))
      gemm_half_out(storage_dtype<S>, false, false, N, C, OC, 1.0f, act(dout), OC, weight, C, nullptr, bits(dinp), C);
    else if (dinp)
      for_row_blocks(N, C, [&](int64_t r0, int64_t rows, float* acc) {
        linear_backward_products(acc, nullptr, act(dout + r0 * OC), act(inp), weight, rows, C, OC);
        narrow_rows(dinp + r0 * C, acc, nullptr, rows, C);
      });
  }
  if (dbias) bias_backward<S>(dbias, dout, N, OC);
}

#define LATTICE_INSTANTIATE(S)                                                                                    \
  template void gemm16<S>(bool, bool, int64_t, int64_t, int64_t, float, MatmulOperand, MatmulOperand, float, S*); \
  template void linear_forward16<S>(S*, const S*, MatmulOperand, const float*, int64_t, int64_t, int64_t);        \
  template void linear_backward16<S, S>(S*, float*, float*, const S*, const S*, MatmulOperand, int64_t, int64_t,  \
                                        int64_t);                                                                 \
  template void linear_backward16<S, float>(float*, float*, float*, const S*, const S*, MatmulOperand, int64_t,   \
                                            int64_t, int64_t);
LATTICE_INSTANTIATE(Bf16)
LATTICE_INSTANTIATE(F16)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
