// Linear layers through cuBLASLt (lt_linear.h): the plans of lt_plan.h turned
// into descriptors and a heuristic query once per plan key (cached), and one
// cublasLtMatmul per call.
#include "core/cuda/lt_linear.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/lt_plan.h"

namespace lattice::cuda {

namespace {

// Owns one cuBLASLt descriptor; destroyed with its owner, also on a throw.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct Owned {
  T value = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (value) Destroy(value);
  }
};
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The cached objects of one plan key: the descriptor (its pointer attributes
// are set again on every call), the layouts, and the heuristic's algorithm,
// or found == false when it offered none.
struct Entry {
  MatmulDesc desc;
  Layout a, b, d;
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct LtMatmulCache::Impl {
  LtCache<Entry> entries;
};

namespace {

cublasOperation_t op_of(LtOp op) { return op == LtOp::t ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <typename T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
template <typename T>
void set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
}

void make_layout(Layout& l, const LtLayout& s) {
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.value, CUDA_R_32F, s.rows, s.cols, s.ld));
}

cublasLtEpilogue_t epilogue_of(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::gelu_aux_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::bgradb:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Sets the epilogue's pointers: the bias (or bias gradient) vector and the
// aux matrix, where the plan's epilogue has them.
void set_pointers(cublasLtMatmulDesc_t desc, LtEpilogue e, const void* bias, void* aux) {
  if (e == LtEpilogue::bias || e == LtEpilogue::gelu_aux_bias || e == LtEpilogue::bgradb)
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (e == LtEpilogue::gelu_aux || e == LtEpilogue::gelu_aux_bias)
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
}

// Builds the descriptors of `p` and asks the heuristic for one algorithm.
// `bias` and `aux` are the first call's pointers: the heuristic reads their
// alignment, which the plan's key fixes.
void build(Entry& e, cublasLtHandle_t handle, const LtLinearPlan& p, const void* bias, void* aux) {
  const LtEpilogue epilogue = lt_epilogue(p);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&e.desc.value, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(e.desc.value, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(op_of(p.op_a)));
  set(e.desc.value, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(op_of(p.op_b)));
  set(e.desc.value, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue_of(epilogue)));
  set_pointers(e.desc.value, epilogue, bias, aux);
  if (epilogue == LtEpilogue::gelu_aux || epilogue == LtEpilogue::gelu_aux_bias)
    set(e.desc.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
  make_layout(e.a, p.a);
  make_layout(e.b, p.b);
  make_layout(e.d, p.d);

  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.value));
  set(pref.value, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kLtWorkspaceBytes));
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_d);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, e.desc.value, e.a.value, e.b.value, e.d.value,
                                                           e.d.value, pref.value, 1, &result, &found);
  // No algorithm: NOT_SUPPORTED, none found, or INVALID_VALUE, which the heuristic may also answer for an
  // epilogue and type combination it does not take. found stays false: the caller falls back.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
      (st == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)))
    return;
  CUBLAS_CHECK(st);
  e.algo = result.algo;
  e.found = true;
}

// Runs the plan's matmul: D = op(A) op(B) (+ D when it accumulates), with the
// epilogue the plan says (bias added or its gradient written to `bias`, GELU
// input written to `aux`). Returns false, having enqueued nothing, when the
// heuristic offers no algorithm for this plan.
bool run_matmul(const LtCall& call, const LtLinearPlan& p, float* d, const float* a, const float* b, const void* bias,
                float* aux) {
  auto make = [&](Entry& e) { build(e, call.handle, p, bias, aux); };
  Entry& e = call.cache->impl().entries.get(lt_key(call.dev, p), make);
  if (!e.found) return false;
  set_pointers(e.desc.value, lt_epilogue(p), bias, aux);
  const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(call.handle, e.desc.value, &alpha, a, e.a.value, b, e.b.value, &beta, d, e.d.value, d,
                              e.d.value, &e.algo, call.workspace, kLtWorkspaceBytes, call.stream));
  return true;
}

[[noreturn]] void no_algorithm(const char* op, const LtLinearPlan& p) {
  LATTICE_FAIL("cuda {}: cuBLASLt offers no f32 algorithm for m {} n {} k {} (alignments A {} B {} D {} bytes)", op,
               p.m, p.n, p.k, p.align_a, p.align_b, p.align_d);
}

}  // namespace

LtMatmulCache::LtMatmulCache() : impl_(std::make_unique<Impl>()) {}
LtMatmulCache::~LtMatmulCache() = default;
size_t LtMatmulCache::size() const { return impl_->entries.size(); }
size_t LtMatmulCache::builds() const { return impl_->entries.builds(); }

void lt_linear_forward(const LtCall& call, float* out, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, int64_t OC) {
  LtLinearPlan p = plan_lt_linear(N, C, OC, reinterpret_cast<uintptr_t>(inp), reinterpret_cast<uintptr_t>(weight),
                                  reinterpret_cast<uintptr_t>(out), reinterpret_cast<uintptr_t>(bias));
  if (p.zero_out) CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N * OC) * sizeof(float), call.stream));
  if (p.matmul && !run_matmul(call, p, out, weight, inp, bias, nullptr)) {
    const bool retried = p.bias == LtBias::epilogue;
    p = without_bias_epilogue(p);
    if (!retried || !run_matmul(call, p, out, weight, inp, nullptr, nullptr)) no_algorithm("linear_forward", p);
  }
  if (p.bias == LtBias::kernel) launch_add_bias(call.stream, out, bias, N, OC);
}

bool lt_linear_gelu_forward(const LtCall& call, float* act, float* pre, const float* inp, const float* weight,
                            const float* bias, int64_t N, int64_t C, int64_t OC, bool epilogue_ok) {
  const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  const LtLinearPlan p =
      plan_lt_linear_gelu(N, C, OC, addr(inp), addr(weight), addr(pre), addr(act), addr(bias), epilogue_ok);
  if (p.gelu == LtGelu::epilogue && run_matmul(call, p, act, weight, inp, bias, pre)) return true;
  if (p.gelu == LtGelu::none) return false;  // N == 0 or OC == 0
  lt_linear_forward(call, pre, inp, weight, bias, N, C, OC);
  launch_gelu_forward(call.stream, act, pre, N * OC);
  return false;
}

void lt_linear_backward(const LtCall& call, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC, float* bgrad_scratch) {
  const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  if (dinp) {
    const LtLinearPlan p = plan_lt_linear_dinp(N, C, OC, addr(dout), addr(weight), addr(dinp));
    if (p.zero_out) CUDA_CHECK(cudaMemsetAsync(dinp, 0, size_t(N * C) * sizeof(float), call.stream));
    if (p.matmul && !run_matmul(call, p, dinp, weight, dout, nullptr, nullptr)) no_algorithm("linear_backward", p);
  }
  if (!dweight) {
    if (dbias && N > 0 && OC > 0) launch_bias_backward(call.stream, dbias, dout, N, OC);
    return;
  }
  LtLinearPlan p =
      plan_lt_linear_dweight(N, C, OC, addr(inp), addr(dout), addr(dweight), dbias != nullptr, addr(bgrad_scratch));
  if (p.matmul && !run_matmul(call, p, dweight, inp, dout, bgrad_scratch, nullptr)) {
    const bool retried = p.bgrad == LtBgrad::epilogue;
    p = without_bias_epilogue(p);
    if (!retried || !run_matmul(call, p, dweight, inp, dout, nullptr, nullptr)) no_algorithm("linear_backward", p);
  }
  if (p.bgrad == LtBgrad::epilogue) launch_add(call.stream, dbias, dbias, bgrad_scratch, OC);
  if (p.bgrad == LtBgrad::kernel) launch_bias_backward(call.stream, dbias, dout, N, OC);
}

}  // namespace lattice::cuda
