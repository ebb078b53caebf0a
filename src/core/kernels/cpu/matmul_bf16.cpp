#include "core/kernels/cpu/matmul_bf16.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/kernels/cpu/matmul_half.h"

#ifdef LATTICE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#endif

namespace lattice::cpu {

namespace {

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

void f32_to_bf16_n(uint16_t* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

namespace {

#ifdef LATTICE_HAVE_DNNL
// One oneDNN matmul: c (m, n) of type c_type, row stride ldc, = alpha op(a)
// op(b) (+ bias (n), f32) (+ beta c), a and b bf16 packed in their stored
// layouts ((m, k) or (k, m); (k, n) or (n, k)), fp32 accumulation.
void dnnl_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                 const uint16_t* b, const float* bias, float beta, void* c, dnnl::memory::data_type c_type,
                 int64_t ldc) {
  using dnnl::memory;
  // Logical (m, k) and (k, n) with the transposes as strides; c (m, n) with row stride ldc.
  const memory::desc ad({m, k}, memory::data_type::bf16, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc bd({k, n}, memory::data_type::bf16, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  const memory::desc cd({m, n}, c_type, memory::dims{ldc, 1});
  const memory::desc biasd({1, n}, memory::data_type::f32, memory::dims{n, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  Dnnl& d = dnnl_ctx();
  const dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd),
                                        attr, d.eng);
  memory am(ad, d.eng, const_cast<uint16_t*>(a)), bm(bd, d.eng, const_cast<uint16_t*>(b)), cm(cd, d.eng, c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(biasd, d.eng, const_cast<float*>(bias)));
  dnnl::matmul(pd).execute(d.stream, args);
  d.stream.wait();
}
#endif

}  // namespace

void gemm_bf16_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      const uint16_t* b, float beta, float* c, int64_t ldc) {
#ifndef LATTICE_HAVE_DNNL
  LATTICE_FAIL("gemm_bf16: this build has no oneDNN");
#else
  dnnl_matmul(trans_a, trans_b, m, n, k, alpha, a, b, nullptr, beta, c, dnnl::memory::data_type::f32, ldc);
#endif
}

void gemm_bf16_packed_out(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                          const uint16_t* b, const float* bias, uint16_t* c, int64_t ldc) {
#ifndef LATTICE_HAVE_DNNL
  LATTICE_FAIL("gemm_bf16: this build has no oneDNN");
#else
  dnnl_matmul(trans_a, trans_b, m, n, k, alpha, a, b, bias, 0.0f, c, dnnl::memory::data_type::bf16, ldc);
#endif
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_half(DType::bf16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lattice::cpu
