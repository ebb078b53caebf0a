// Linear layers on CUDA through cuBLASLt: runs the plans of lt_plan.h (which
// has the math and every choice) as cublasLtMatmul calls with the bias, the
// GELU or the bias gradient in the epilogue, or plain matmuls and the
// kernels where the plan or the heuristic says so.
//
// Invariants: f32 in and out with CUBLAS_COMPUTE_32F (no TF32), so results
// match the CPU's f32 linear within f32 tolerance; device pointers of the
// current device `LtCall::dev`; only enqueues on `stream` (the caller checks
// and synchronizes); `workspace` is device memory of kLtWorkspaceBytes that
// no other call uses meanwhile. Deterministic run to run on one GPU: the
// heuristic's choice depends only on the plan's key (shapes, alignments,
// device), and every cuBLASLt split-k reduction scheme is ordered (in place
// with counters, or a separate reduction pass), never float atomics. The
// order of the BGRADB epilogue's reduction is cuBLASLt's own and not
// documented; test_cuda_linear checks that a second run gives the same bits.
//
// The descriptors, layouts and heuristic result of each plan are built once
// and kept in an LtMatmulCache (lt_plan.h's LtCache keyed by LtKey), which the
// caller owns and serializes with the workspace: the backend holds one, under
// its workspace lock.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lattice::cuda {

// cuBLASLt workspace: the size NVIDIA's cuBLAS guide recommends for Hopper
// (larger than the 4 MiB it gives for earlier GPUs).
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// The cuBLASLt objects of the plans run so far (see the header comment).
class LtMatmulCache {
 public:
  LtMatmulCache();
  ~LtMatmulCache();
  LtMatmulCache(const LtMatmulCache&) = delete;
  LtMatmulCache& operator=(const LtMatmulCache&) = delete;
  size_t size() const;    // cached plans
  size_t builds() const;  // plans built so far (heuristic queries)

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// What every call needs: the device's handle and number, the stream, the
// workspace (kLtWorkspaceBytes) and the cache.
struct LtCall {
  cublasLtHandle_t handle = nullptr;
  int dev = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  LtMatmulCache* cache = nullptr;
};

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
void lt_linear_forward(const LtCall& call, float* out, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, int64_t OC);

// pre (N, OC) = inp @ weight^T + bias and act (N, OC) = gelu(pre) (tanh form):
// one matmul with the GELU_AUX(_BIAS) epilogue where lt_plan.h's
// plan_lt_linear_gelu allows it and `epilogue_ok`, else lt_linear_forward into
// pre and the GELU kernel. pre and act are overwritten and must not overlap.
// Returns whether the fused epilogue ran.
bool lt_linear_gelu_forward(const LtCall& call, float* act, float* pre, const float* inp, const float* weight,
                            const float* bias, int64_t N, int64_t C, int64_t OC, bool epilogue_ok);

// dinp (N, C) = dout (N, OC) @ weight (OC, C)   (overwritten; skipped when null)
// dweight (OC, C) += dout^T @ inp               (skipped when null)
// dbias (OC) += column sums of dout             (skipped when null): with
// dweight, the BGRADB epilogue of its matmul into `bgrad_scratch` (OC
// floats of device memory no other call uses meanwhile, best kLtBgradAlign
// aligned), then added into dbias; alone, or where the heuristic has no BGRADB
// algorithm, the column-sum kernel.
void lt_linear_backward(const LtCall& call, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC, float* bgrad_scratch);

}  // namespace lattice::cuda
