#include "core/kernels/cpu/matmul_bf16.h"

#include <omp.h>

#include <climits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

#ifdef LATTICE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace lattice::cpu {

namespace {

// src (rows, cols) with row stride ld -> dst packed (rows * cols), as bf16.
void pack_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = f32_to_bf16(s[c]);
  }
}

#ifdef LATTICE_HAVE_DNNL
// One engine and stream per thread: attention calls these gemms from inside
// its OpenMP loop over heads, and a oneDNN stream is not to be shared by
// threads executing at once. oneDNN caches the primitives it builds (its
// primitive cache, shared by the threads), so a matmul of a seen shape costs
// a lookup.
struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
};
Dnnl& dnnl_ctx() {
  thread_local Dnnl d;
  return d;
}
#endif

}  // namespace

bool bf16_matmul_available(std::string* why) {
#ifndef LATTICE_HAVE_DNNL
  if (why) *why = "this build has no oneDNN (install libdnnl-dev and rebuild)";
  return false;
#else
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    if (why) *why = "this CPU has no AVX512-BF16 instructions";
    return false;
  }
  if (why) *why = "oneDNN bf16 matmuls (AVX512-BF16)";
  return true;
#endif
}

namespace {

// c (m, n) = alpha * op(a) op(b) + beta * c from inputs already packed as
// bf16 in their stored layout ((m, k) or (k, m) for a; (k, n) or (n, k) for
// b, rows contiguous).
void gemm_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                 const uint16_t* b, float beta, float* c, int64_t ldc) {
#ifndef LATTICE_HAVE_DNNL
  LATTICE_FAIL("gemm_bf16: this build has no oneDNN");
#else
  using dnnl::memory;
  // Logical (m, k) and (k, n) with the transposes as strides; c (m, n) with row stride ldc.
  const memory::desc ad({m, k}, memory::data_type::bf16, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc bd({k, n}, memory::data_type::bf16, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc cd({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  Dnnl& d = dnnl_ctx();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, d.eng);
  memory am(ad, d.eng, const_cast<uint16_t*>(a)), bm(bd, d.eng, const_cast<uint16_t*>(b)), cm(cd, d.eng, c);
  dnnl::matmul(pd).execute(d.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  d.stream.wait();
#endif
}

// A thread's packing buffer `i`, at least n elements.
uint16_t* pack_buffer(int i, int64_t n) {
  thread_local std::vector<uint16_t> bufs[3];
  bufs[i].resize(size_t(n));
  return bufs[i].data();
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  LATTICE_CHECK(m > 0 && n > 0 && k > 0, "gemm_bf16: empty product ({}, {}, {})", m, n, k);
  uint16_t *ab = pack_buffer(0, m * k), *bb = pack_buffer(1, k * n);
  pack_bf16(ab, a, trans_a ? k : m, trans_a ? m : k, lda);
  pack_bf16(bb, b, trans_b ? n : k, trans_b ? k : n, ldb);
  gemm_packed(trans_a, trans_b, m, n, k, alpha, ab, bb, beta, c, ldc);
}

void linear_backward_bf16(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          int64_t N, int64_t C, int64_t OC) {
  LATTICE_CHECK(N > 0 && C > 0 && OC > 0, "linear_backward_bf16: empty product ({}, {}, {})", N, C, OC);
  uint16_t* db = pack_buffer(0, N * OC);
  pack_bf16(db, dout, N, OC, OC);
  if (dinp) {  // (N, OC) @ (OC, C)
    uint16_t* wb = pack_buffer(1, OC * C);
    pack_bf16(wb, weight, OC, C, C);
    gemm_packed(false, false, N, C, OC, 1.0f, db, wb, 0.0f, dinp, C);
  }
  if (dweight) {  // += (N, OC)^T @ (N, C)
    uint16_t* ib = pack_buffer(2, N * C);
    pack_bf16(ib, inp, N, C, C);
    gemm_packed(true, false, OC, C, N, 1.0f, db, ib, 1.0f, dweight, C);
  }
}

}  // namespace lattice::cpu
