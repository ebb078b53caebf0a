// Launchers for the CUDA kernels, called by the backend (backend_*.cpp). Plain
// C++ declarations so the host side compiles with the C++ compiler; the
// kernels live in one .cu file per family: kernels.cu (element-wise,
// reductions and optimizer steps), softmax.cu, norm.cu, rope.cu, embedding.cu,
// loss.cu.
//
// Invariants: f32, except the launchers templated on the activation storage
// type S (float, Bf16 or F16 of core/kernels/storage.h: loads widened to
// fp32, fp32 math, stores rounded to nearest even; instantiated for those
// three in the .cu files); every pointer is a device pointer of the current
// device; the launchers only enqueue on `stream` (an empty size writes
// nothing; the reductions and the column sum still launch, over no input);
// the caller checks the launch (cudaGetLastError) and synchronizes, so the .cu
// files need no error machinery (the one exception, the cub sort of
// embedding_backward, returns its status). The per-element and per-row math is
// core/kernels/math.h, shared with the CPU kernels. Parameter gradients
// accumulate (+=), activation gradients overwrite (=). No kernel uses float
// atomics: every reduction has a fixed order, so results are bitwise
// reproducible run to run.
//
// Shapes: rows = N (folded leading dims), cols = C (last dim), n = numel;
// other letters as in core/shapes.h and the matching CPU kernel headers
// (core/kernels/cpu/).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/kernels/cpu/rope.h"
#include "core/kernels/storage.h"
#include "core/rng.h"

namespace lattice::cuda {

// X(S) for each activation storage type the templated launchers are
// instantiated for, in the .cu files: LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE).
#define LATTICE_EACH_STORAGE(X) X(float) X(Bf16) X(F16)

// ---- element-wise and reductions (kernels.cu) ----------------------------
// out (N, C) += bias (C), broadcast over rows; S the storage of out (the bias is fp32).
template <typename S>
void launch_add_bias(cudaStream_t stream, S* out, const float* bias, int64_t rows, int64_t cols);
// dbias (C) += column sums of dout (N, C), in fp32.
template <typename S>
void launch_bias_backward(cudaStream_t stream, float* dbias, const S* dout, int64_t rows, int64_t cols);

// out (n) = gelu(inp), tanh approximation; dinp (n) = dout * gelu'(inp).
template <typename S>
void launch_gelu_forward(cudaStream_t stream, S* out, const S* inp, int64_t n);
template <typename S>
void launch_gelu_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t n);
// The same with the exact erf GELU (BERT).
template <typename S>
void launch_gelu_erf_forward(cudaStream_t stream, S* out, const S* inp, int64_t n);
template <typename S>
void launch_gelu_erf_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t n);

// out (N, F) = silu(gate) * up with inp (N, 2F) = [gate | up]; dinp (N, 2F).
template <typename S>
void launch_swiglu_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t F);
template <typename S>
void launch_swiglu_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t N, int64_t F);

// out (n) = a + b; out may alias a or b. Mixed storage (float beside Bf16 or
// F16; instantiated for those): out = narrow<S>(widen(a) + widen(b)).
template <typename S, typename A = S, typename B = S>
void launch_add(cudaStream_t stream, S* out, const A* a, const B* b, int64_t n);
// out (n) = narrow<O>(widen(in)) for distinct O, I of float, Bf16, F16.
template <typename O, typename I>
void launch_convert(cudaStream_t stream, O* out, const I* in, int64_t n);
// The one rounding of a 16-bit matmul output: out (rows, cols) =
// narrow<S>(acc + bias) with acc the fp32 product, bias (cols) fp32 or null;
// with gelu non-null also gelu = narrow<S>(gelu_tanh(widen(out))), the bits
// of launch_gelu_forward on out.
template <typename S>
void launch_narrow_rows(cudaStream_t stream, S* out, S* gelu, const float* acc, const float* bias, int64_t rows,
                        int64_t cols);
// x (n) *= s
template <typename S>
void launch_scale(cudaStream_t stream, S* x, float s, int64_t n);
// out[i] = bf16 of in[i], round to nearest even (dtype.h's f32_to_bf16).
void launch_to_bf16(cudaStream_t stream, uint16_t* out, const float* in, int64_t n);
// out[i] = IEEE fp16 bits of in[i], round to nearest even, beyond 65504 inf (dtype.h's f32_to_f16).
void launch_to_f16(cudaStream_t stream, uint16_t* out, const float* in, int64_t n);
// out[i] = f32 of bf16 in[i] (exact).
void launch_from_bf16(cudaStream_t stream, float* out, const uint16_t* in, int64_t n);
// out[i] = f32 of fp16 in[i] (exact).
void launch_from_f16(cudaStream_t stream, float* out, const uint16_t* in, int64_t n);

// Inverted dropout on (B, S): element s of row b is kept when
// rng_keep(key, sample0 + b, s, p) and scaled by 1 / (1 - p), else 0; the
// same map serves backward. out may alias inp; 0 <= p < 1.
template <typename Store>
void launch_dropout(cudaStream_t stream, Store* out, const Store* inp, const RngKey& key, int64_t sample0, float p,
                    int64_t B, int64_t S);

// Reductions over all of x (n) in two fixed stages: kReduceBlocks blocks of
// partial results, then one block combines them in order. `workspace` holds
// reduce_workspace_bytes() (the partials); the result is one device value.
constexpr int kReduceBlocks = 1024;
size_t reduce_workspace_bytes();
// *acc += sum of x, accumulated in double (no host wait: the loss of a
// microbatch added where it lies, read once per step).
void launch_sum_into(cudaStream_t stream, double* acc, const float* x, int64_t n, void* workspace);
// *result = sum of x squared, accumulated in double.
template <typename S>
void launch_sum_squares(cudaStream_t stream, double* result, const S* x, int64_t n, void* workspace);
// *result = 1 when some element of x is NaN or infinite, else 0.
template <typename S>
void launch_any_nonfinite(cudaStream_t stream, int* result, const S* x, int64_t n, void* workspace);

// One AdamW step on n elements: g = grad * grad_scale, then
// math::adamw_step(param, g, m, v, ...) with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};
void launch_adamw(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args);

// One SGD step on n elements: g = grad * grad_scale, then
// math::sgd_momentum_step (momentum non-null) or math::sgd_step (null).
struct SgdArgs {
  float lr, momentum, weight_decay, grad_scale;
};
void launch_sgd(cudaStream_t stream, float* param, const float* grad, float* momentum, int64_t n, const SgdArgs& args);

// ---- row softmax (softmax.cu): one block per row ---------------------------
// out (N, K) = softmax of each row of inp (N, K); out may be inp. S: float,
// Bf16 or F16 (fp32 math and reductions).
template <typename S>
void launch_softmax_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t K);
// dinp (N, K) = out * (dout - rowsum(dout * out)), overwrite; dinp may be dout.
template <typename S>
void launch_softmax_backward(cudaStream_t stream, S* dinp, const S* dout, const S* out, int64_t N, int64_t K);

// ---- normalisation (norm.cu): one block per row --------------------------
// out (N, C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
// S is the activation storage (float, Bf16, F16); the rest is fp32.
template <typename S>
void launch_layernorm_forward(cudaStream_t stream, S* out, float* mean, float* rstd, const S* inp, const float* weight,
                              const float* bias, float eps, int64_t N, int64_t C);
// dinp (N, C) overwrite; dweight, dbias (C) +=.
template <typename S>
void launch_layernorm_backward(cudaStream_t stream, S* dinp, float* dweight, float* dbias, const S* dout, const S* inp,
                               const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
// out (N, C) = inp * rstd * weight; saves rstd (N).
template <typename S>
void launch_rmsnorm_forward(cudaStream_t stream, S* out, float* rstd, const S* inp, const float* weight, float eps,
                            int64_t N, int64_t C);
// dinp (N, C) overwrite; dweight (C) +=.
template <typename S>
void launch_rmsnorm_backward(cudaStream_t stream, S* dinp, float* dweight, const S* dout, const S* inp,
                             const float* weight, const float* rstd, int64_t N, int64_t C);

// ---- rotary embeddings and grouped k/v heads (rope.cu) --------------------
// out (B, T, W) = inp rotated as cpu::rope_forward (sign +1) or backward
// (sign -1); out may be inp. S: float, Bf16 or F16 (here and for repeat_kv).
template <typename S>
void launch_rope(cudaStream_t stream, S* out, const S* inp, const cpu::RopeDims& d, double sign);
// out (N, 3 NH HS) = [q | k' | v'] from inp (N, (NH + 2 KV) HS), as
// cpu::repeat_kv_forward; backward sums each group back (overwrite).
template <typename S>
void launch_repeat_kv_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS);
template <typename S>
void launch_repeat_kv_backward(cudaStream_t stream, S* dinp, const S* dout, int64_t N, int64_t NH, int64_t KV,
                               int64_t HS);

// ---- embedding (embedding.cu) --------------------------------------------
// out (N, C) = weight (V, C)[ids - vocab_start], zero rows for ids outside the
// shard. S: the storage of out / dout (float, Bf16, F16); weight and dweight fp32.
template <typename S>
void launch_embedding_forward(cudaStream_t stream, S* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                              int64_t N, int64_t V, int64_t C);
// dweight (V, C) += dout (N, C) scattered by ids, deterministically: a stable
// sort of the token indices by row, then one block per run of equal rows adds
// the run's dout rows in token order. `workspace` holds
// embedding_backward_workspace_bytes(N, V); returns the sort's status.
size_t embedding_backward_workspace_bytes(int64_t N, int64_t V);
template <typename S>
cudaError_t launch_embedding_backward(cudaStream_t stream, float* dweight, const S* dout, const int32_t* ids,
                                      int64_t vocab_start, int64_t N, int64_t V, int64_t C, void* workspace,
                                      size_t workspace_bytes);

// ---- softmax cross-entropy (loss.cu): one block per row -------------------
// losses (N), lse (N) from logits (N, V) and targets (N); ignored rows lose 0.
// S: the storage of logits and dlogits (float, Bf16, F16); the per-row
// statistics (losses, lse, row_max, sums) are fp32.
template <typename S>
void launch_cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, const S* logits,
                                  const int32_t* targets, int ignore_index, int64_t N, int64_t V);
// The vocab-parallel pieces, as core/kernels/cpu/loss_shard.h: logits (N, K)
// hold global columns [col_start, col_start + K), the first n_valid valid.
template <typename S>
void launch_shard_row_max(cudaStream_t stream, float* row_max, const S* logits, int64_t n_valid, int64_t N, int64_t K);
template <typename S>
void launch_shard_softmax_partials(cudaStream_t stream, float* sums, const S* logits, const float* row_max,
                                   const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N, int64_t K);
void launch_cross_entropy_from_partials(cudaStream_t stream, float* losses, float* lse, const float* row_max,
                                        const float* sums, const int32_t* targets, int ignore_index, int64_t N);
// dlogits (N, K) overwrite, may be logits; the full-vocabulary backward is
// col_start 0, n_valid K.
template <typename S>
void launch_shard_cross_entropy_backward(cudaStream_t stream, S* dlogits, const S* logits, const float* lse,
                                         const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                         int ignore_index, int64_t N, int64_t K);

}  // namespace lattice::cuda
