// The CUDA backend's matmuls (backend_impl.h): gemm and linear forward and
// backward, through cuBLASLt (fp32, with the bias and GELU epilogues) or
// cublasGemmEx on bf16/fp16 operands with fp32 accumulation, f32 and 16-bit
// activations; and round_to_half, the parameters' 16-bit shadow.
//
// A 16-bit output is the fp32 sum rounded once, as on the CPU. With a bias
// or GELU (or beta) the sum goes to fp32 scratch and one kernel adds, rounds
// and applies GELU: cuBLAS would take the bias only in the output's type
// (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), rounding the fp32
// parameter first. With nothing to add cuBLAS writes the 16-bit output
// itself, where the first-use probe (half_out_probe.h) found that it rounds
// as Lattice does: no scratch, no second pass over the output.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/half_out_probe.h"
#include "core/cuda/kernels.h"
#include "core/cuda/lt_linear.h"
#include "core/cuda/lt_plan.h"
#include "core/kernels/cpu/matmul.h"  // check_matmul_operand (inline)

namespace lattice::cuda {

namespace {

// Most fp32 elements one block of a 16-bit matmul output is summed into
// before it is rounded (64 MiB of scratch per device), unless one row alone
// has more columns: a block is never less than one row.
constexpr int64_t kAcc16Elems = int64_t(1) << 24;

int checked_int(int64_t v, const char* what) {
  LATTICE_CHECK(v >= 0 && v <= INT_MAX, "gemm: {} = {} is out of the range cuBLAS int arguments take", what, v);
  return int(v);
}

}  // namespace

// Operand x in the matmul's 16-bit type: x itself when it already is (a
// parameter's shadow, 16-bit activations), else rounded into `scratch` (n
// elements). half_mu_ held.
const void* Backend::half_operand(const MatmulOperand& x, uint16_t* scratch, int64_t n) {
  if (x.dtype != DType::f32) return x.data;
  auto round = matmul_dtype_ == DType::bf16 ? launch_to_bf16 : launch_to_f16;
  round(kStream, scratch, static_cast<const float*>(x.data), n);
  return scratch;
}

// Operands a (na elements) and b (nb) as half_operand gives them, the
// fp32 ones rounded into the operand scratch (b's copy starting 256 bytes
// aligned, as cuBLAS's vectorised kernels want). half_mu_ held.
std::pair<const void*, const void*> Backend::halves(int dev, const MatmulOperand& a, int64_t na, const MatmulOperand& b,
                                                    int64_t nb) {
  const int64_t ra = a.dtype == DType::f32 ? na : 0, rb = b.dtype == DType::f32 ? nb : 0;
  const int64_t ra_padded = (ra + 127) / 128 * 128;
  uint16_t* scratch =
      ra + rb > 0 ? static_cast<uint16_t*>(grown(half_operands_, dev, size_t(ra_padded + rb) * sizeof(uint16_t)))
                  : nullptr;
  return {half_operand(a, scratch, ra), half_operand(b, scratch + ra_padded, rb)};
}

// A 16-bit matrix advanced by `elems` elements.
const void* Backend::at16(const void* p, int64_t elems) { return static_cast<const uint16_t*>(p) + elems; }

// Row-major C (m, n; row stride ldc) = alpha op(A) op(B) + beta C with A and
// B of the matmul's 16-bit type (row strides lda, ldb), C of `c_dtype` (f32,
// or the matmul type, rounded by cuBLAS), fp32 accumulation: column-major
// C^T = op(B)^T op(A)^T, so cuBLAS gets B first.
void Backend::gemm_ex(cublasHandle_t h, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c, DType c_dtype,
                      int64_t ldc) {
  LATTICE_CHECK(c_dtype == DType::f32 || c_dtype == matmul_dtype_, "cuda gemm: a {} output of {} matmuls",
                dtype_name(c_dtype), dtype_name(matmul_dtype_));
  const int mi = checked_int(m, "m"), ni = checked_int(n, "n"), ki = checked_int(k, "k");
  if (mi == 0 || ni == 0) return;
  const cudaDataType_t type = matmul_dtype_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, ni, mi, ki,
                            &alpha, b, type, checked_int(ldb, "ldb"), a, type, checked_int(lda, "lda"), &beta, c,
                            c_dtype == DType::f32 ? CUDA_R_32F : type, checked_int(ldc, "ldc"), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

// The probe of half_out_probe.h on `dev` for the matmul type: its product
// through cuBLAS with a 16-bit C, every bit compared. Runs once per device
// and type; a mismatch, or cuBLAS refusing the call, is one line on stderr
// and keeps the fp32 scratch path.
bool Backend::half_outputs_direct(int dev) {
  if (matmul_dtype_ == DType::f32) return false;
  return half_out_[matmul_dtype_ == DType::bf16 ? 0 : 1].get(dev, [&] { return probe_half_outputs(dev); });
}

bool Backend::probe_half_outputs(int dev) {
  const bool bf16 = matmul_dtype_ == DType::bf16;
  const HalfOutProbe p = make_half_out_probe(bf16);
  // a | b | c, each at a 256-byte offset.
  const size_t na = p.a16.size(), nb = p.b16.size(), nc = p.expected.size(), stride = 128;
  auto pad = [&](size_t n) { return (n + stride - 1) / stride * stride; };
  auto* d = static_cast<uint16_t*>(malloc((pad(na) + pad(nb) + nc) * sizeof(uint16_t), dev));
  uint16_t *da = d, *db = d + pad(na), *dc = db + pad(nb);
  std::vector<uint16_t> got(nc);
  std::string why;
  try {
    copy(da, Device::cuda(dev), p.a16.data(), Device::cpu(), na * sizeof(uint16_t));
    copy(db, Device::cuda(dev), p.b16.data(), Device::cpu(), nb * sizeof(uint16_t));
    gemm_ex(blas(dev), false, false, p.m, p.n, p.k, 1.0f, da, p.k, db, p.n, 0.0f, dc, matmul_dtype_, p.n);
    copy(got.data(), Device::cpu(), dc, Device::cuda(dev), nc * sizeof(uint16_t));
  } catch (const std::exception& e) {
    why = e.what();
  }
  free(d, dev);
  for (size_t i = 0; why.empty() && i < nc; ++i)
    if (got[i] != p.expected[i]) {
      char line[160];
      std::snprintf(line, sizeof(line), "the sum %.9g came out as bits 0x%04x, Lattice rounds it to 0x%04x",
                    double(p.sums[i]), unsigned(got[i]), unsigned(p.expected[i]));
      why = line;
    }
  if (!why.empty())
    std::fprintf(stderr,
                 "lattice: cuda:%d: cuBLAS does not write %s matmul outputs as Lattice rounds them (%s): they are "
                 "summed in fp32 scratch and rounded by Lattice's kernel\n",
                 dev, bf16 ? "bf16" : "fp16", why.c_str());
  return why.empty();
}

// Calls fn(r0, rows, acc) over blocks of the rows of a (rows, cols) 16-bit
// output, acc fp32 device scratch for one block (grow-only: kAcc16Elems,
// or one row of cols when that is more). half_mu_ held.
template <typename Fn>
void Backend::for_row_blocks(int dev, int64_t rows, int64_t cols, Fn&& fn) {
  if (rows == 0 || cols == 0) return;
  const int64_t block = std::clamp<int64_t>(kAcc16Elems / cols, 1, rows);
  float* acc = static_cast<float*>(grown(acc16_, dev, size_t(block * cols) * sizeof(float)));
  for (int64_t r0 = 0; r0 < rows; r0 += block) fn(r0, std::min(block, rows - r0), acc);
}

// out (N, OC) = inp @ weight^T + bias in `out_dtype` (act: rounded once,
// after the bias; f32: unrounded), with gelu non-null gelu = round(gelu(out)).
void Backend::linear16(int dev, DType act, void* out, DType out_dtype, void* gelu, const void* inp,
                       MatmulOperand weight, const float* bias, int64_t N, int64_t C, int64_t OC) {
  check_act16("linear_forward", act);
  cpu::check_matmul_operand("cuda linear_forward", "weight", weight, matmul_dtype_);
  const bool direct = out_dtype != DType::f32 && !bias && !gelu && half_outputs_direct(dev);
  cublasHandle_t h = blas(dev);
  std::lock_guard<std::mutex> lock(half_mu_);
  const auto [x16, w16] = halves(dev, MatmulOperand(inp, act), N * C, weight, OC * C);
  const int64_t ldx = std::max<int64_t>(1, C);
  if (out_dtype == DType::f32 || direct) {
    gemm_ex(h, false, true, N, OC, C, 1.0f, x16, ldx, w16, ldx, 0.0f, out, out_dtype, OC);
    if (bias) launch_add_bias(kStream, static_cast<float*>(out), bias, N, OC);
  } else {
    on_act16(act, [&](auto s) {
      using S = decltype(s);
      for_row_blocks(dev, N, OC, [&](int64_t r0, int64_t rows, float* acc) {
        gemm_ex(h, false, true, rows, OC, C, 1.0f, at16(x16, r0 * C), ldx, w16, ldx, 0.0f, acc, DType::f32, OC);
        launch_narrow_rows<S>(kStream, as(s, out) + r0 * OC, gelu ? as(s, gelu) + r0 * OC : nullptr, acc, bias, rows,
                              OC);
      });
    });
  }
  finish();
}

// Linear backward's two products with dout (N, OC) of the matmul's 16-bit
// type: dinp (N, C) = dout @ weight in `dinp_dtype` (f32, or the 16-bit
// type rounded once: by cuBLAS when `direct`, half_outputs_direct) and
// dweight (OC, C) += dout^T @ inp, each skipped when null; inp and weight
// fp32 (rounded here) or 16-bit. half_mu_ held.
void Backend::backward_products16(int dev, cublasHandle_t h, void* dinp, DType dinp_dtype, bool direct, float* dweight,
                                  const void* dout, const MatmulOperand& inp, const MatmulOperand& weight, int64_t N,
                                  int64_t C, int64_t OC) {
  const auto [x16, w16] = halves(dev, inp, dweight ? N * C : 0, weight, dinp ? OC * C : 0);
  const int64_t ldx = std::max<int64_t>(1, C), ldo = std::max<int64_t>(1, OC);
  if (dinp && (dinp_dtype == DType::f32 || direct))  // (N, OC) @ (OC, C)
    gemm_ex(h, false, false, N, C, OC, 1.0f, dout, ldo, w16, ldx, 0.0f, dinp, dinp_dtype, ldx);
  else if (dinp)
    on_act16(matmul_dtype_, [&](auto s) {
      using S = decltype(s);
      for_row_blocks(dev, N, C, [&](int64_t r0, int64_t rows, float* acc) {
        gemm_ex(h, false, false, rows, C, OC, 1.0f, at16(dout, r0 * OC), ldo, w16, ldx, 0.0f, acc, DType::f32, ldx);
        launch_narrow_rows<S>(kStream, as(s, dinp) + r0 * C, nullptr, acc, nullptr, rows, C);
      });
    });
  if (dweight)  // += (N, OC)^T @ (N, C)
    gemm_ex(h, true, false, OC, C, N, 1.0f, dout, ldo, x16, ldx, 1.0f, dweight, DType::f32, ldx);
}

// 16-bit activations of type `act` need the matmuls to run in it.
void Backend::check_act16(const char* op, DType act) const {
  LATTICE_CHECK(act == matmul_dtype_ && act != DType::f32,
                "cuda {}: {} activations need the matmuls to run in {} (runtime.precision {}), but they run in {}", op,
                dtype_name(act), dtype_name(act), act == DType::bf16 ? "bf16" : "fp16", dtype_name(matmul_dtype_));
}

// Whether cuBLASLt's GELU epilogue computes Lattice's GELU (the tanh form of
// math::gelu) on `dev`. Its documentation does not say which GELU it is, so
// the first linear_gelu_forward on a device runs a probe both ways: inp =
// I (8, 8), so pre = weight^T + bias covers [-6.25, 6.125] exactly, through
// the fused epilogue and through the plain linear and the GELU kernel. The
// fused path is used only when the two agree within 1e-5 (relative, plus
// 1e-6); otherwise one line on stderr says so and every call takes the
// kernel. (The erf GELU differs from the tanh form by up to ~5e-4.) When
// cuBLASLt offers no algorithm with the epilogue for the probe, the
// epilogue stays unused on that device.
bool Backend::gelu_epilogue_ok(int dev) {
  return gelu_epilogue_.get(dev, [&] { return probe_gelu_epilogue(dev); });
}

bool Backend::probe_gelu_epilogue(int dev) {
  constexpr int64_t N = 8, C = 8, OC = 64;
  std::vector<float> host(size_t(N * C + OC * C + OC), 0.0f);
  float* h_inp = host.data();
  float* h_w = h_inp + N * C;
  float* h_b = h_w + OC * C;
  for (int64_t i = 0; i < N; ++i) h_inp[i * C + i] = 1.0f;
  for (int64_t i = 0; i < OC * C; ++i) h_w[i] = -6.0f + 12.0f * float(i) / float(OC * C - 1);
  for (int64_t o = 0; o < OC; ++o) h_b[o] = 0.125f * float(o % 5) - 0.25f;
  const size_t out_floats = size_t(4 * N * OC);
  // Every buffer at a 256-byte offset, so the plan takes the epilogue.
  const size_t stride = 256 / sizeof(float);
  auto pad = [&](size_t n) { return (n + stride - 1) / stride * stride; };
  const size_t o_w = pad(size_t(N * C)), o_b = o_w + pad(size_t(OC * C)), o_out = o_b + pad(size_t(OC));
  float* d = static_cast<float*>(malloc((o_out + out_floats) * sizeof(float), dev));
  copy(d, Device::cuda(dev), h_inp, Device::cpu(), size_t(N * C) * sizeof(float));
  copy(d + o_w, Device::cuda(dev), h_w, Device::cpu(), size_t(OC * C) * sizeof(float));
  copy(d + o_b, Device::cuda(dev), h_b, Device::cpu(), size_t(OC) * sizeof(float));
  float* out = d + o_out;  // act_fused, pre_fused, act_plain, pre_plain: (N, OC) each
  const int64_t n = N * OC;
  bool fused = false;
  {
    cublasLtHandle_t h = blas_lt(dev);
    std::lock_guard<std::mutex> lock(ws_mu_);
    const LtCall call = lt_call(h, dev, workspace(dev, kLtWorkspaceBytes));
    fused = lt_linear_gelu_forward(call, out, out + n, d, d + o_w, d + o_b, N, C, OC, true);
    lt_linear_gelu_forward(call, out + 2 * n, out + 3 * n, d, d + o_w, d + o_b, N, C, OC, false);
    finish();
  }
  std::vector<float> got(out_floats);
  copy(got.data(), Device::cpu(), out, Device::cuda(dev), out_floats * sizeof(float));
  free(d, dev);
  bool agree = true;
  double worst = 0;  // largest |fused - plain|, act and pre
  for (int64_t i = 0; i < 2 * n; ++i) {
    const double a = got[size_t(i)], b = got[size_t(2 * n + i)];
    worst = std::max(worst, std::fabs(a - b));
    agree = agree && std::fabs(a - b) <= 1e-5 * std::fabs(b) + 1e-6;
  }
  const bool ok = fused && agree;
  if (fused && !ok)
    std::fprintf(stderr,
                 "lattice: cuda:%d: cuBLASLt's GELU epilogue differs from Lattice's GELU (tanh form) by up to %.3g: "
                 "linear + GELU runs as a matmul and the GELU kernel\n",
                 dev, worst);
  return ok;
}

void Backend::round_to_half(int dev, void* out, DType dtype, const float* in, int64_t n) {
  LATTICE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "cuda round_to_half: {} is not bf16 or f16",
                dtype_name(dtype));
  auto round = dtype == DType::bf16 ? launch_to_bf16 : launch_to_f16;
  run(dev, [&] { round(kStream, static_cast<uint16_t*>(out), in, n); });
}

// Row-major C (m, n) is column-major C^T (n, m), so compute
// C^T = op(B)^T op(A)^T: cuBLAS gets B first. A row-major (r, c) matrix is
// a column-major (c, r) one with leading dimension c.
void Backend::gemm(int dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
                   MatmulOperand b, float beta, float* c) {
  cpu::check_matmul_operand("cuda gemm", "a", a, matmul_dtype_);
  cpu::check_matmul_operand("cuda gemm", "b", b, matmul_dtype_);
  int mi = checked_int(m, "m"), ni = checked_int(n, "n"), ki = checked_int(k, "k");
  if (mi == 0 || ni == 0) return;
  int lda = checked_int(trans_a ? m : k, "lda");  // A stored (m, k), or (k, m) when trans_a
  int ldb = checked_int(trans_b ? k : n, "ldb");  // B stored (k, n), or (n, k) when trans_b
  lda = lda > 0 ? lda : 1;
  ldb = ldb > 0 ? ldb : 1;
  cublasHandle_t h = blas(dev);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (matmul_dtype_ == DType::f32) {
    CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, ni, mi, ki, &alpha, static_cast<const float*>(b.data), ldb,
                             static_cast<const float*>(a.data), lda, &beta, c, ni));
    finish();
    return;
  }
  // 16-bit operands, fp32 accumulation and output: an fp32 operand is
  // rounded on every call into stream-ordered scratch; a 16-bit one (a
  // parameter's shadow) is read where it is, with no conversion kernel.
  std::lock_guard<std::mutex> lock(half_mu_);
  const auto [a16, b16] = halves(dev, a, m * k, b, k * n);
  gemm_ex(h, trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, beta, c, DType::f32, n);
  finish();
}

void Backend::linear_forward(int dev, float* out, const float* inp, MatmulOperand weight, const float* bias, int64_t N,
                             int64_t C, int64_t OC) {
  if (matmul_dtype_ != DType::f32) {  // out (N, OC) = inp (N, C) weight^T through the 16-bit gemm, then the bias
    gemm(dev, false, true, N, OC, C, 1.0f, inp, weight, 0.0f, out);
    if (bias) add_bias(dev, out, bias, N, OC);
    return;
  }
  cpu::check_matmul_operand("cuda linear_forward", "weight", weight, matmul_dtype_);
  cublasLtHandle_t h = blas_lt(dev);
  std::lock_guard<std::mutex> lock(ws_mu_);
  lt_linear_forward(lt_call(h, dev, workspace(dev, kLtWorkspaceBytes)), out, inp,
                    static_cast<const float*>(weight.data), bias, N, C, OC);
  finish();
}

void Backend::linear_gelu_forward(int dev, float* act, float* pre, const float* inp, MatmulOperand weight,
                                  const float* bias, int64_t N, int64_t C, int64_t OC) {
  if (matmul_dtype_ != DType::f32) {  // the 16-bit linear into pre, then the GELU kernel
    linear_forward(dev, pre, inp, weight, bias, N, C, OC);
    gelu_forward(dev, act, pre, N * OC);
    return;
  }
  cpu::check_matmul_operand("cuda linear_gelu_forward", "weight", weight, matmul_dtype_);
  const bool epilogue_ok = gelu_epilogue_ok(dev);
  cublasLtHandle_t h = blas_lt(dev);
  std::lock_guard<std::mutex> lock(ws_mu_);
  lt_linear_gelu_forward(lt_call(h, dev, workspace(dev, kLtWorkspaceBytes)), act, pre, inp,
                         static_cast<const float*>(weight.data), bias, N, C, OC, epilogue_ok);
  finish();
}

void Backend::linear_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              MatmulOperand weight, int64_t N, int64_t C, int64_t OC) {
  cpu::check_matmul_operand("cuda linear_backward", "weight", weight, matmul_dtype_);
  if (matmul_dtype_ != DType::f32) {  // the 16-bit gemms on dout rounded once, then the column sums
    cublasHandle_t h = blas(dev);
    {
      std::lock_guard<std::mutex> lock(half_mu_);
      const int64_t n_dout = dinp || dweight ? N * OC : 0;
      const void* dout16 = half_operand(dout, static_cast<uint16_t*>(grown(dout16_, dev, size_t(n_dout) * 2)), n_dout);
      backward_products16(dev, h, dinp, DType::f32, false, dweight, dout16, inp, weight, N, C, OC);
    }
    if (dbias) launch_bias_backward(kStream, dbias, dout, N, OC);
    finish();
    return;
  }
  cublasLtHandle_t h = blas_lt(dev);
  std::lock_guard<std::mutex> lock(ws_mu_);
  // The BGRADB epilogue's vector right after the cuBLASLt workspace: as aligned as the buffer, up to
  // kLtBgradAlign (the plan reads its real alignment either way).
  static_assert(kLtWorkspaceBytes % kLtBgradAlign == 0);
  char* ws = static_cast<char*>(workspace(dev, kLtWorkspaceBytes + size_t(std::max<int64_t>(OC, 0)) * sizeof(float)));
  lt_linear_backward(lt_call(h, dev, ws), dinp, dweight, dbias, dout, inp, static_cast<const float*>(weight.data), N, C,
                     OC, reinterpret_cast<float*>(ws + kLtWorkspaceBytes));
  finish();
}

void Backend::gemm16(int dev, DType act, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     MatmulOperand a, MatmulOperand b, float beta, void* c) {
  check_act16("gemm", act);
  cpu::check_matmul_operand("cuda gemm", "a", a, matmul_dtype_);
  cpu::check_matmul_operand("cuda gemm", "b", b, matmul_dtype_);
  const bool direct = beta == 0.0f && half_outputs_direct(dev);
  cublasHandle_t h = blas(dev);
  std::lock_guard<std::mutex> lock(half_mu_);
  const auto [a16, b16] = halves(dev, a, m * k, b, k * n);
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
  if (direct) {
    gemm_ex(h, trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, 0.0f, c, act, n);
    finish();
    return;
  }
  on_act16(act, [&](auto s) {
    using S = decltype(s);
    S* cs = static_cast<S*>(c);
    for_row_blocks(dev, m, n, [&](int64_t r0, int64_t rows, float* acc) {
      if (beta != 0.0f) launch_convert(kStream, acc, cs + r0 * n, rows * n);
      // Rows r0.. of op(a): rows of a, or columns of a stored transposed.
      gemm_ex(h, trans_a, trans_b, rows, n, k, alpha, at16(a16, trans_a ? r0 : r0 * lda), lda, b16, ldb, beta, acc,
              DType::f32, n);
      launch_narrow_rows<S>(kStream, cs + r0 * n, nullptr, acc, nullptr, rows, n);
    });
  });
  finish();
}

void Backend::linear_forward16(int dev, DType act, void* out, DType out_dtype, const void* inp, MatmulOperand weight,
                               const float* bias, int64_t N, int64_t C, int64_t OC) {
  LATTICE_CHECK(out_dtype == act || out_dtype == DType::f32, "cuda linear_forward: out is {}, not {} or f32",
                dtype_name(out_dtype), dtype_name(act));
  linear16(dev, act, out, out_dtype, nullptr, inp, weight, bias, N, C, OC);
}

void Backend::linear_gelu_forward16(int dev, DType act, void* gelu, void* pre, const void* inp, MatmulOperand weight,
                                    const float* bias, int64_t N, int64_t C, int64_t OC) {
  linear16(dev, act, pre, act, gelu, inp, weight, bias, N, C, OC);
}

void Backend::linear_backward16(int dev, DType act, void* dinp, DType dinp_dtype, float* dweight, float* dbias,
                                const void* dout, const void* inp, MatmulOperand weight, int64_t N, int64_t C,
                                int64_t OC) {
  check_act16("linear_backward", act);
  cpu::check_matmul_operand("cuda linear_backward", "weight", weight, matmul_dtype_);
  LATTICE_CHECK(dinp_dtype == act || dinp_dtype == DType::f32, "cuda linear_backward: dinp is {}, not {} or f32",
                dtype_name(dinp_dtype), dtype_name(act));
  const bool direct = dinp && dinp_dtype != DType::f32 && half_outputs_direct(dev);
  cublasHandle_t h = blas(dev);
  {
    std::lock_guard<std::mutex> lock(half_mu_);
    backward_products16(dev, h, dinp, dinp_dtype, direct, dweight, dout, MatmulOperand(inp, act), weight, N, C, OC);
  }
  if (dbias) on_act16(act, [&](auto s) { launch_bias_backward(kStream, dbias, as(s, dout), N, OC); });
  finish();
}

}  // namespace lattice::cuda
