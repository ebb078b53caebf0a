// Linear forward on CUDA through cuBLASLt: runs an LtLinearPlan (lt_plan.h,
// which has the math and every choice) as one cublasLtMatmul with the bias in
// its epilogue, or a plain matmul and the add_bias kernel where the plan or
// the heuristic says so.
//
// Invariants: f32 in and out with CUBLAS_COMPUTE_32F (no TF32), so results
// match the CPU's f32 linear within f32 tolerance; device pointers of the
// current device; only enqueues on `stream` (the caller checks and
// synchronizes); `workspace` is device memory of kLtWorkspaceBytes that no
// other call uses meanwhile. out is overwritten. Deterministic run to run on
// one GPU: the heuristic's choice depends only on the shapes, alignments and
// device, and every cuBLASLt split-k reduction scheme is ordered (in place
// with counters, or a separate reduction pass), never float atomics.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lattice::cuda {

// cuBLASLt workspace: the size NVIDIA's cuBLAS guide recommends for Hopper
// (larger than the 4 MiB it gives for earlier GPUs).
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
void lt_linear_forward(cublasLtHandle_t handle, cudaStream_t stream, float* out, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC, void* workspace);

// pre (N, OC) = inp @ weight^T + bias and act (N, OC) = gelu(pre) (tanh form):
// one matmul with the GELU_AUX(_BIAS) epilogue where lt_plan.h's
// plan_lt_linear_gelu allows it and `epilogue_ok`, else lt_linear_forward into
// pre and the GELU kernel. pre and act are overwritten and must not overlap.
// Returns whether the fused epilogue ran.
bool lt_linear_gelu_forward(cublasLtHandle_t handle, cudaStream_t stream, float* act, float* pre, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C, int64_t OC, void* workspace,
                            bool epilogue_ok);

}  // namespace lattice::cuda
