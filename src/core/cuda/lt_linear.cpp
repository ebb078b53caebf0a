// Linear forward through cuBLASLt (lt_linear.h): the plan of lt_plan.h turned
// into descriptors, a heuristic query and one cublasLtMatmul.
#include "core/cuda/lt_linear.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/lt_plan.h"

namespace lattice::cuda {

namespace {

// Owns one cuBLASLt descriptor; destroyed at scope exit, also on a throw.
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

cublasLtEpilogue_t epilogue_of(const LtLinearPlan& p) {
  const bool bias = p.bias == LtBias::epilogue;
  if (p.gelu == LtGelu::epilogue) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Runs the plan's matmul (D = op(A) op(B), bias and GELU in the epilogue when
// the plan says so; aux receives the GELU input then). Returns false, having
// enqueued nothing, when the heuristic offers no algorithm for this epilogue
// and these alignments.
bool run_matmul(cublasLtHandle_t handle, cudaStream_t stream, const LtLinearPlan& p, float* out, const float* inp,
                const float* weight, const float* bias, float* aux, void* workspace) {
  MatmulDesc desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.value, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(desc.value, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(op_of(p.op_a)));
  set(desc.value, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(op_of(p.op_b)));
  set(desc.value, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue_of(p)));
  if (p.bias == LtBias::epilogue) set(desc.value, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  if (p.gelu == LtGelu::epilogue) {
    set(desc.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux));
    set(desc.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
  }

  Layout a, b, d;
  make_layout(a, p.a);
  make_layout(b, p.b);
  make_layout(d, p.d);

  Preference pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.value));
  set(pref.value, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kLtWorkspaceBytes));
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_d);
  set(pref.value, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_d);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.value, a.value, b.value, d.value, d.value,
                                                           pref.value, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  CUBLAS_CHECK(st);
  if (found == 0) return false;
  CUBLAS_CHECK(result.state);

  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle, desc.value, &alpha, weight, a.value, inp, b.value, &beta, out, d.value, out,
                              d.value, &result.algo, workspace, kLtWorkspaceBytes, stream));
  return true;
}

}  // namespace

void lt_linear_forward(cublasLtHandle_t handle, cudaStream_t stream, float* out, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC, void* workspace) {
  LtLinearPlan p = plan_lt_linear(N, C, OC, reinterpret_cast<uintptr_t>(inp), reinterpret_cast<uintptr_t>(weight),
                                  reinterpret_cast<uintptr_t>(out), reinterpret_cast<uintptr_t>(bias));
  if (p.zero_out) CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N * OC) * sizeof(float), stream));
  if (p.matmul && !run_matmul(handle, stream, p, out, inp, weight, bias, nullptr, workspace)) {
    const bool retried = p.bias == LtBias::epilogue;
    p = without_bias_epilogue(p);
    LATTICE_CHECK(retried && run_matmul(handle, stream, p, out, inp, weight, bias, nullptr, workspace),
                  "cuda linear_forward: cuBLASLt offers no f32 algorithm for N {} C {} OC {} (alignments {}/{}/{} "
                  "bytes)",
                  N, C, OC, p.align_b, p.align_a, p.align_d);
  }
  if (p.bias == LtBias::kernel) launch_add_bias(stream, out, bias, N, OC);
}

bool lt_linear_gelu_forward(cublasLtHandle_t handle, cudaStream_t stream, float* act, float* pre, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C, int64_t OC, void* workspace,
                            bool epilogue_ok) {
  const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  const LtLinearPlan p =
      plan_lt_linear_gelu(N, C, OC, addr(inp), addr(weight), addr(pre), addr(act), addr(bias), epilogue_ok);
  if (p.gelu == LtGelu::epilogue && run_matmul(handle, stream, p, act, inp, weight, bias, pre, workspace)) return true;
  if (p.gelu == LtGelu::none) return false;  // N == 0 or OC == 0
  lt_linear_forward(handle, stream, pre, inp, weight, bias, N, C, OC, workspace);
  launch_gelu_forward(stream, act, pre, N * OC);
  return false;
}

}  // namespace lattice::cuda
