#include "core/kernels/cpu/matmul_f16.h"

#include <cblas.h>
// GCC 12's own _mm512_cvtps_ph / _mm512_cvtph_ps use the `__m256i __Y = __Y`
// idiom for an undefined value, which -Wmaybe-uninitialized reports once they
// are inlined here; nothing of ours is uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace lattice::cpu {

namespace {

// n values of one row; the hardware conversions round to nearest even and
// keep subnormals, as f32_to_f16 does (test_ops_matmul_f16 checks them
// against it).
void round_row(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(f32_to_f16(src[i]));
}
#pragma GCC diagnostic pop

// A thread's rounding buffer `i`, at least n elements.
float* round_buffer(int i, int64_t n) {
  thread_local std::vector<float> bufs[2];
  bufs[i].resize(size_t(n));
  return bufs[i].data();
}

}  // namespace

void round_to_f16(float* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) round_row(dst + r * cols, src + r * ld, cols);
}

void gemm_f16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  LATTICE_CHECK(m > 0 && n > 0 && k > 0, "gemm_f16: empty product ({}, {}, {})", m, n, k);
  // Rounded copies in the operands' stored layout, packed: (m, k) or (k, m); (k, n) or (n, k).
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  float *a16 = round_buffer(0, m * k), *b16 = round_buffer(1, k * n);
  round_to_f16(a16, a, a_rows, a_cols, lda);
  round_to_f16(b16, b, b_rows, b_cols, ldb);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m),
              blasint(n), blasint(k), alpha, a16, blasint(a_cols), b16, blasint(b_cols), beta, c, blasint(ldc));
}

}  // namespace lattice::cpu
