// The CUDA side of the device abstraction.
//
// The CUDA backend is a separate shared library (liblattice_cuda.so, built from
// src/core/cuda/ whenever the toolkit is present) that exports one C symbol,
// `lattice_cuda_backend_create`, returning a CudaBackend. The core loads it on
// first use (dlopen), so the lattice binary starts on machines without CUDA
// libraries and only `runtime.device: cuda` needs them. The library is looked
// for in $LATTICE_CUDA_LIB, then next to the running binary (../lib), then on
// the loader path.
//
// Pointers are device pointers of device `dev`. Calls enqueue their work on
// the device's one compute stream (the legacy default stream) in call order
// and return without waiting for it, except those that hand data to the
// host (copies to or from host memory, sum_squares), which wait, within
// set_host_wait_timeout's limit. So a fault
// inside a kernel is reported by the next waiting call; run with
// CUDA_LAUNCH_BLOCKING=1 to have it reported by the launch. NCCL runs on
// streams of its own, ordered against this one by events (comm/stream_order.h).
// Matrices are row-major; gemm computes C = alpha * op(A) op(B) + beta * C with
// op(A) of shape (m, k) and op(B) of shape (k, n). Every other kernel has the
// semantics, argument order and shapes of its CPU twin in core/kernels/cpu/
// (core/ops.h checks the arguments of both): parameter gradients accumulate,
// activation gradients overwrite, and no kernel's result depends on
// scheduling (no float atomics; the one exception is cuDNN's fused attention
// backward where cuDNN refuses its deterministic form, or, on compute
// capability 10.x, its pinned engine; each said by a stderr line:
// core/cuda/sdpa_cudnn.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/kernels/cpu/rope.h"
#include "core/kernels/matmul_operand.h"
#include "core/rng.h"

namespace lattice::comm {
struct RollCallHooks;  // comm/roll_call_hooks.h
}  // namespace lattice::comm

namespace lattice {

// One attention call (core/cuda/attention.h has the math): the shape, the
// mask (causal, or bidirectional limited by a (B, T) i32 device key mask, or
// none), and the dropout on the probabilities keyed as the CPU kernels key it.
struct CudaAttentionArgs {
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  int64_t head_offset = 0;            // global index of local head 0 (tp shards)
  bool causal = true;                 // false: bidirectional, keys limited by key_mask
  const int32_t* key_mask = nullptr;  // (B, T) on the device; nonzero = attend; null = every key
  RngKey key;                         // dropout key (purpose, step, layer, site)
  int64_t sample0 = 0;                // global index of sample 0
  float p = 0.0f;                     // dropout probability on the probabilities
  // att and scratch are the compact state (ops::attention_state_shape): room
  // for the fused path's Stats and O only, not (B, NH, T, T). The plain path
  // then keeps P in a temporary, one sample at a time, and backward
  // recomputes it.
  bool compact_state = false;
};

class CudaBackend {
 public:
  virtual ~CudaBackend() = default;
  // 0 when there is no usable device (no GPU or no driver); `why` says which.
  virtual int device_count(std::string* why) = 0;
  virtual std::string device_name(int dev) = 0;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  // The device's PCI address (cudaDeviceGetPCIBusId, e.g. "0000:3B:00.0"): which physical GPU a visible index
  // is, whatever CUDA_VISIBLE_DEVICES or a cgroup renumbered.
  virtual std::string device_pci_bus_id(int dev) = 0;

  virtual void* malloc(size_t bytes, int dev) = 0;
  virtual void free(void* ptr, int dev) = 0;
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) = 0;
  virtual void memset_zero(void* ptr, size_t bytes, int dev) = 0;
  // `rows` rows of `width` bytes, row r from src + r * spitch to dst + r * dpitch, both on device `dev`:
  // one strided copy on the compute stream, ordered with the kernels around it (no host wait).
  virtual void copy_rows(int dev, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t rows) = 0;
  virtual void synchronize(int dev) = 0;
  // The most device memory in use at once from `dev`'s default memory pool
  // since the process started (cudaMemPoolAttrUsedMemHigh): everything malloc
  // above serves, so the Tensors the allocator counts (core/allocator.h) and
  // the backend's own scratch that it does not (the cuBLASLt workspace, the
  // 16-bit matmuls' fp32 scratch, cuDNN's attention workspace, the plain
  // attention's temporaries, reduction partials). Not in it: the CUDA
  // context, the cuBLAS/cuDNN handles' own memory and NCCL's buffers.
  virtual int64_t pool_used_peak_bytes(int dev) = 0;
  // The longest a host wait for the compute stream (a copy to or from host
  // memory, sum_squares, synchronize) may take, in seconds, before it throws
  // lattice::Error; <= 0: no limit (the default). The compute stream can wait
  // for a collective (comm::Work::wait_on_device), so a transfer that never
  // completes shows here; the plugin sets runtime.comm_timeout_s.
  virtual void set_host_wait_timeout(double seconds) = 0;
  // The roll call those host waits answer while they poll ("a copy to the
  // host on cuda:0, for the compute stream") and hold when they time out,
  // asking world_ranks first (then the rest of the world) and appending what
  // they heard: the lattice binary's table (comm/roll_call_hooks.h), which
  // must outlive the backend; null: none (the default). The plugin sets it
  // with the host wait limit, asking the whole job.
  virtual void set_roll_call(const comm::RollCallHooks* hooks, std::vector<int> world_ranks) = 0;

  // runtime.precision: the operand type of gemm and linear_forward. f32 (the
  // default): fp32 without TF32. bf16 or f16: an fp32 operand is rounded to
  // it on each call (round to nearest even; in f16 a value beyond 65504
  // becomes inf, which is how an fp16 overflow shows), an operand already of
  // that type (a parameter's 16-bit shadow, core/param.h) is read as it is,
  // and the product runs on the tensor cores with fp32 accumulation into the
  // fp32 output (cublasGemmEx, CUBLAS_COMPUTE_32F), as the CPU's emulation
  // does (core/kernels/cpu/matmul.h). Everything else stays fp32. Any other
  // dtype throws.
  virtual void set_matmul_dtype(DType operands) = 0;
  virtual DType matmul_dtype() const = 0;

  // out (n) = in (n) rounded to `dtype` (bf16 or f16) as raw bits, round to
  // nearest even (dtype.h's f32_to_bf16 / f32_to_f16): a shadow's refresh.
  virtual void round_to_half(int dev, void* out, DType dtype, const float* in, int64_t n) = 0;

  // ---- kernels (f32; matmul operands may be 16-bit, see set_matmul_dtype) ----
  // A 16-bit operand whose type is not the matmul type throws.
  virtual void gemm(int dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
                    MatmulOperand b, float beta, float* c) = 0;
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), bias may be null:
  // one cuBLASLt matmul with the bias in its epilogue where it can be
  // (core/cuda/lt_plan.h says when), f32 without TF32; under 16-bit matmuls
  // the 16-bit gemm, then the bias kernel.
  virtual void linear_forward(int dev, float* out, const float* inp, MatmulOperand weight, const float* bias, int64_t N,
                              int64_t C, int64_t OC) = 0;
  // pre (N, OC) = the linear above, act (N, OC) = gelu(pre) (tanh form): one
  // cuBLASLt matmul with the GELU_AUX(_BIAS) epilogue where lt_plan.h allows it
  // and a first-use probe found cuBLASLt's GELU to be this one, else the
  // linear and the GELU kernel (and always so under 16-bit matmuls).
  virtual void linear_gelu_forward(int dev, float* act, float* pre, const float* inp, MatmulOperand weight,
                                   const float* bias, int64_t N, int64_t C, int64_t OC) = 0;
  // dinp (N, C) = dout (N, OC) @ weight (OC, C) (overwrite; skipped when null),
  // dweight (OC, C) += dout^T @ inp and dbias (OC) += column sums of dout
  // (each skipped when null): ops::linear_backward. Under f32 matmuls the
  // products run through cuBLASLt with dbias in the dweight matmul's BGRADB
  // epilogue where it can be (core/cuda/lt_plan.h); under 16-bit matmuls
  // dout is rounded once for both 16-bit gemms, and the column-sum kernel
  // sums the fp32 dout.
  virtual void linear_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               MatmulOperand weight, int64_t N, int64_t C, int64_t OC) = 0;
  virtual void add_bias(int dev, float* out, const float* bias, int64_t rows, int64_t cols) = 0;
  virtual void bias_backward(int dev, float* dbias, const float* dout, int64_t rows, int64_t cols) = 0;  // +=
  virtual void gelu_forward(int dev, float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) = 0;
  virtual void gelu_erf_forward(int dev, float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_erf_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) = 0;
  virtual void swiglu_forward(int dev, float* out, const float* inp, int64_t N, int64_t F) = 0;
  virtual void swiglu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t N, int64_t F) = 0;
  virtual void add(int dev, float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void scale(int dev, float* x, float s, int64_t n) = 0;
  virtual double sum_squares(int dev, const float* x, int64_t n) = 0;  // accumulated in double
  // *acc += sum of x, in double, in stream order: no host wait (acc: one double on the device).
  virtual void sum_into(int dev, double* acc, const float* x, int64_t n) = 0;
  virtual bool all_finite(int dev, const float* x, int64_t n) = 0;  // no NaN or infinity
  virtual void softmax_forward(int dev, float* out, const float* inp, int64_t N, int64_t K) = 0;
  virtual void softmax_backward(int dev, float* dinp, const float* dout, const float* out, int64_t N, int64_t K) = 0;
  // Inverted dropout on (B, S) rows; backward is the same call on dout.
  virtual void dropout(int dev, float* out, const float* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
                       int64_t S) = 0;

  virtual void layernorm_forward(int dev, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, float eps, int64_t N, int64_t C) = 0;
  virtual void layernorm_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean, const float* rstd,
                                  int64_t N, int64_t C) = 0;
  virtual void rmsnorm_forward(int dev, float* out, float* rstd, const float* inp, const float* weight, float eps,
                               int64_t N, int64_t C) = 0;
  virtual void rmsnorm_backward(int dev, float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int64_t N, int64_t C) = 0;

  // sign +1: rope_forward; -1: rope_backward (the transposed rotation).
  virtual void rope(int dev, float* out, const float* inp, const cpu::RopeDims& d, double sign) = 0;
  virtual void repeat_kv_forward(int dev, float* out, const float* inp, int64_t N, int64_t NH, int64_t KV,
                                 int64_t HS) = 0;
  virtual void repeat_kv_backward(int dev, float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                                  int64_t HS) = 0;

  virtual void embedding_forward(int dev, float* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                                 int64_t N, int64_t V, int64_t C) = 0;
  virtual void embedding_backward(int dev, float* dweight, const float* dout, const int32_t* ids, int64_t vocab_start,
                                  int64_t N, int64_t V, int64_t C) = 0;

  // Softmax cross-entropy; the full-vocabulary backward is
  // shard_cross_entropy_backward with col_start 0 and n_valid V.
  virtual void cross_entropy_forward(int dev, float* losses, float* lse, const float* logits, const int32_t* targets,
                                     int ignore_index, int64_t N, int64_t V) = 0;
  virtual void shard_row_max(int dev, float* row_max, const float* logits, int64_t n_valid, int64_t N, int64_t K) = 0;
  virtual void shard_softmax_partials(int dev, float* sums, const float* logits, const float* row_max,
                                      const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N,
                                      int64_t K) = 0;
  virtual void cross_entropy_from_partials(int dev, float* losses, float* lse, const float* row_max, const float* sums,
                                           const int32_t* targets, int ignore_index, int64_t N) = 0;
  virtual void shard_cross_entropy_backward(int dev, float* dlogits, const float* logits, const float* lse,
                                            const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                            int ignore_index, int64_t N, int64_t K) = 0;

  virtual void adamw(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
                     float grad_scale) = 0;
  // momentum null when mu == 0 (plain SGD).
  virtual void sgd(int dev, float* param, const float* grad, float* momentum, int64_t n, float lr, float mu,
                   float weight_decay, float grad_scale) = 0;

  // ---- kernels on 16-bit activations ----
  // `act` is bf16 or f16 (anything else throws): the void pointers are
  // activations of that type (Bf16 / F16 of core/kernels/storage.h); the
  // float pointers are parameters, parameter gradients and saved statistics,
  // fp32. Each is its f32 twin above with loads widened to fp32, fp32 math
  // and reductions, and stores rounded to nearest even.
  virtual void add16(int dev, DType act, void* out, const void* a, const void* b, int64_t n) = 0;
  virtual void scale16(int dev, DType act, void* x, float s, int64_t n) = 0;
  virtual double sum_squares16(int dev, DType act, const void* x, int64_t n) = 0;
  virtual bool all_finite16(int dev, DType act, const void* x, int64_t n) = 0;
  virtual void dropout16(int dev, DType act, void* out, const void* inp, const RngKey& key, int64_t sample0, float p,
                         int64_t B, int64_t S) = 0;
  virtual void layernorm_forward16(int dev, DType act, void* out, float* mean, float* rstd, const void* inp,
                                   const float* weight, const float* bias, float eps, int64_t N, int64_t C) = 0;
  virtual void layernorm_backward16(int dev, DType act, void* dinp, float* dweight, float* dbias, const void* dout,
                                    const void* inp, const float* weight, const float* mean, const float* rstd,
                                    int64_t N, int64_t C) = 0;
  virtual void rmsnorm_forward16(int dev, DType act, void* out, float* rstd, const void* inp, const float* weight,
                                 float eps, int64_t N, int64_t C) = 0;
  virtual void rmsnorm_backward16(int dev, DType act, void* dinp, float* dweight, const void* dout, const void* inp,
                                  const float* weight, const float* rstd, int64_t N, int64_t C) = 0;
  virtual void gelu_forward16(int dev, DType act, void* out, const void* inp, int64_t n) = 0;
  virtual void gelu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) = 0;
  virtual void gelu_erf_forward16(int dev, DType act, void* out, const void* inp, int64_t n) = 0;
  virtual void gelu_erf_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) = 0;
  virtual void swiglu_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t F) = 0;
  virtual void swiglu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t N,
                                 int64_t F) = 0;
  virtual void rope16(int dev, DType act, void* out, const void* inp, const cpu::RopeDims& d, double sign) = 0;
  virtual void repeat_kv_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t NH, int64_t KV,
                                   int64_t HS) = 0;
  virtual void repeat_kv_backward16(int dev, DType act, void* dinp, const void* dout, int64_t N, int64_t NH, int64_t KV,
                                    int64_t HS) = 0;
  // Embedding: 16-bit out / dout, fp32 table and gradient (+=, deterministic).
  virtual void embedding_forward16(int dev, DType act, void* out, const int32_t* ids, const float* weight,
                                   int64_t vocab_start, int64_t N, int64_t V, int64_t C) = 0;
  virtual void embedding_backward16(int dev, DType act, float* dweight, const void* dout, const int32_t* ids,
                                    int64_t vocab_start, int64_t N, int64_t V, int64_t C) = 0;
  // Bias: 16-bit rows, fp32 bias and gradient (+=).
  virtual void add_bias16(int dev, DType act, void* out, const float* bias, int64_t rows, int64_t cols) = 0;
  virtual void bias_backward16(int dev, DType act, float* dbias, const void* dout, int64_t rows, int64_t cols) = 0;
  virtual void softmax_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t K) = 0;
  virtual void softmax_backward16(int dev, DType act, void* dinp, const void* dout, const void* out, int64_t N,
                                  int64_t K) = 0;
  // Cross-entropy: 16-bit logits and dlogits; losses, lse, row max and sums fp32.
  virtual void cross_entropy_forward16(int dev, DType act, float* losses, float* lse, const void* logits,
                                       const int32_t* targets, int ignore_index, int64_t N, int64_t V) = 0;
  virtual void shard_row_max16(int dev, DType act, float* row_max, const void* logits, int64_t n_valid, int64_t N,
                               int64_t K) = 0;
  virtual void shard_softmax_partials16(int dev, DType act, float* sums, const void* logits, const float* row_max,
                                        const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N,
                                        int64_t K) = 0;
  virtual void shard_cross_entropy_backward16(int dev, DType act, void* dlogits, const void* logits, const float* lse,
                                              const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                              int ignore_index, int64_t N, int64_t K) = 0;

  // ---- matmuls on 16-bit activations (core/ops.h's contract) ----
  // `act` (bf16 or f16) is the activations' type and must be the matmul type
  // (set_matmul_dtype), else these throw. The void pointers are of type `act`
  // unless a DType beside them says f32; a weight is fp32 (rounded on the
  // call) or `act` (its shadow); bias, dweight and dbias are fp32. Every
  // product is cublasGemmEx with 16-bit A and B and CUBLAS_COMPUTE_32F into
  // fp32 (the output itself, or a grow-only fp32 scratch in blocks of rows),
  // then one kernel adds the bias (and GELU) and rounds to nearest even once.
  // A 16-bit output with nothing to add (no bias, no GELU, beta 0) is
  // written and rounded by cuBLAS itself where half_outputs_direct(dev).
  // c (m, n) = round(alpha * op(a) op(b) + beta * widen(c)); a, b fp32 or `act`.
  // Whether cuBLAS rounds a 16-bit output of the matmul type as Lattice does
  // (half_out_probe.h): checked on the first call per device and type, then
  // remembered; false (with one line on stderr) keeps the fp32 scratch path.
  virtual bool half_outputs_direct(int dev) = 0;
  virtual void gemm16(int dev, DType act, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      MatmulOperand a, MatmulOperand b, float beta, void* c) = 0;
  // out (N, OC) of `out_dtype` (act, or f32 unrounded) = inp (N, C) @ weight^T + bias.
  virtual void linear_forward16(int dev, DType act, void* out, DType out_dtype, const void* inp, MatmulOperand weight,
                                const float* bias, int64_t N, int64_t C, int64_t OC) = 0;
  // pre (N, OC) = round(inp @ weight^T + bias), gelu (N, OC) = round(gelu(pre)) (tanh form).
  virtual void linear_gelu_forward16(int dev, DType act, void* gelu, void* pre, const void* inp, MatmulOperand weight,
                                     const float* bias, int64_t N, int64_t C, int64_t OC) = 0;
  // dinp (N, C) of `dinp_dtype` (act, or f32 unrounded) = dout @ weight, or
  // null; dweight (OC, C) += dout^T @ inp and dbias (OC) += column sums of
  // dout, each fp32 or null. dout is 16-bit already: nothing is rounded but dinp.
  virtual void linear_backward16(int dev, DType act, void* dinp, DType dinp_dtype, float* dweight, float* dbias,
                                 const void* dout, const void* inp, MatmulOperand weight, int64_t N, int64_t C,
                                 int64_t OC) = 0;

  // ---- mixed dtypes (f32 beside one 16-bit type) ----
  // out (n) = round(widen(a) + widen(b)) in out's dtype; each of out, a, b f32
  // or one 16-bit type; out may alias a or b (ops::add_inplace).
  virtual void add_mixed(int dev, void* out, DType out_dtype, const void* a, DType a_dtype, const void* b,
                         DType b_dtype, int64_t n) = 0;
  // out (n) = in (n) converted between two distinct dtypes of f32, bf16, f16
  // (ops::convert: round to nearest even; widening exact).
  virtual void convert(int dev, void* out, DType out_dtype, const void* in, DType in_dtype, int64_t n) = 0;

  // ---- attention ----
  // Two paths behind one pair of calls. The plain one (core/cuda/attention.h)
  // always exists. With 16-bit matmuls on (set_matmul_dtype bf16 or f16), a
  // call the plan of core/cuda/sdpa_plan.h supports (no dropout, no key mask,
  // head size a multiple of 8 up to 128, T long enough) runs cuDNN's fused
  // attention in that type instead (core/cuda/sdpa_cudnn.h); a shape cuDNN
  // refuses takes the plain path, with one line on stderr. The two paths
  // leave different state in `att`, so forward and backward of one call must
  // see the same arguments and the same matmul type; callers need not know
  // which ran.
  // out (B, T, C), or null for att alone (ops::attention_probs: the plain
  // path skips dropout and P @ V; the fused path, which keeps O and Stats
  // in att, writes its output into the backend's work buffer); att
  // (B, NH, T, T) saved: plain, the probabilities before dropout; fused,
  // Stats and the 16-bit output (sdpa_plan.h); qkv (B, T, 3C).
  // fp32 activations: the fused path works on 16-bit copies of qkv and dout.
  // With a.compact_state att and scratch have room for Stats and O only: the
  // fused path runs as ever; the plain one runs sample by sample, P in a
  // temporary of the backend's, and its backward computes it there again
  // (ops.h, attention_state_shape).
  virtual void attention_forward(int dev, float* out, float* att, const float* qkv, const CudaAttentionArgs& a) = 0;
  // dqkv (B, T, 3C) overwritten; scratch (B, NH, T, T): plain, holds dS on
  // return; fused or compact, unused.
  virtual void attention_backward(int dev, float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* att, const CudaAttentionArgs& a) = 0;
  // The same on 16-bit activations: qkv, out, att, dout, dqkv and scratch of
  // type `act`, which must be the matmul type (else one error naming
  // runtime.precision). fp32 math (scores, softmax, row sums), P stored
  // rounded to `act` and read back widened, outputs rounded once, the
  // dropout masks of the f32 calls (ops.h). The plain path's products are
  // cublasGemmStridedBatchedEx with 16-bit operands and fp32 compute; the
  // fused path reads and writes these buffers directly.
  virtual void attention_forward16(int dev, DType act, void* out, void* att, const void* qkv,
                                   const CudaAttentionArgs& a) = 0;
  virtual void attention_backward16(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                                    const void* att, const CudaAttentionArgs& a) = 0;
  // "" when attention with these arguments on activations of dtype `act`
  // (f32, or the matmul type) takes the fused path on `dev`, else why it
  // takes the plain one (16-bit matmuls off, the plan's reason, or cuDNN's
  // refusal). Builds the fused graphs on first use, as the calls above do.
  virtual std::string attention_plain_reason(int dev, const CudaAttentionArgs& a, DType act) = 0;
  // False when the fused backward these arguments take on `dev` may give
  // other bits from run to run (cuDNN's accumulating form, or on compute
  // capability 10.x a direct form off the pinned engine: sdpa_plan.h,
  // sdpa_backward_may_vary); true for every other call, the plain path's too.
  virtual bool attention_backward_repeatable(int dev, const CudaAttentionArgs& a, DType act) = 0;
};

// The loaded backend; throws lattice::Error with a clear reason when the
// library cannot be loaded (not built, or CUDA libraries missing).
CudaBackend& cuda_backend();
// True when the library loads and reports at least one device; never throws.
bool cuda_available(std::string* why = nullptr);

}  // namespace lattice

extern "C" lattice::CudaBackend* lattice_cuda_backend_create();
