// The CUDA backend (core/backend.h), private to liblattice_cuda: the class,
// its shared state (handles, scratch buffers, their locks) and the helpers its
// translation units share. The definitions:
//   backend.cpp            device, memory, copies, handles and scratch, the
//                          matmul dtype, and the exported factory
//                          lattice_cuda_backend_create that
//                          core/backend_loader.cpp looks up;
//   backend_matmul.cpp     cuBLAS/cuBLASLt gemm and linear, f32 and 16-bit;
//   backend_kernels.cpp    the kernels of the .cu files (kernels.h): element-
//                          wise, norms, RoPE, embedding, loss, optimizers;
//   backend_attention.cpp  attention, cuDNN's fused path or the plain one.
//
// Invariants: every call enqueues on the legacy default stream of its device,
// in call order (the contract of core/backend.h); calls that hand data to the
// host wait for it. A bad launch is reported by the call that made it; a fault
// inside a kernel by the next call that waits (CUDA_LAUNCH_BLOCKING=1 makes
// every launch wait, to find the kernel at fault). Memory comes from CUDA's
// stream-ordered allocator on that stream, so freeing never waits for the
// device, and NCCL's streams (comm/nccl/) keep running. One cuBLAS and one
// cuBLASLt handle per device, created on first use and kept for the life of
// the process (the backend is a never-destroyed singleton: tearing handles
// down after the CUDA runtime has shut down at exit would crash). Likewise one
// grow-only scratch buffer per device for the calls that need workspace
// (embedding backward, the reductions, cuBLASLt); the calls that use it run
// in stream order, so one suffices. cuBLASLt's descriptors and heuristic
// results are built once per plan key and kept (lt_linear.h), under the same
// lock as that buffer. Attention under bf16 or fp16 matmuls goes through
// cuDNN's fused attention where it can (sdpa_cudnn.h), with its own scratch
// buffer.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/lt_linear.h"
#include "core/cuda/sdpa_cudnn.h"

namespace lattice::cuda {

// The stream every call uses: the device's legacy default stream.
inline constexpr cudaStream_t kStream = nullptr;

// A yes or no about a device that a first-use probe finds and that is then
// kept: how cuBLAS(Lt) behaves there. Callers of one device wait for its
// probe; a probe that throws leaves the question open for the next call.
class DeviceVerdicts {
 public:
  template <typename Probe>  // bool probe()
  bool get(int dev, Probe&& probe) {
    std::lock_guard<std::mutex> lock(mu_);
    if (size_t(dev) >= verdicts_.size()) verdicts_.resize(size_t(dev) + 1, 0);
    int& v = verdicts_[size_t(dev)];
    if (v == 0) v = probe() ? 1 : -1;
    return v > 0;
  }

 private:
  std::mutex mu_;
  std::vector<int> verdicts_;  // by device: 0 not probed yet, 1 yes, -1 no
};

class Backend final : public CudaBackend {
 public:
  // ---- device, memory, copies (backend.cpp) ----
  int device_count(std::string* why) override;
  std::string device_name(int dev) override;
  std::string device_pci_bus_id(int dev) override;
  void* malloc(size_t bytes, int dev) override;
  void free(void* ptr, int dev) override;
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) override;
  void memset_zero(void* ptr, size_t bytes, int dev) override;
  void copy_rows(int dev, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) override;
  void synchronize(int dev) override;
  int64_t pool_used_peak_bytes(int dev) override;
  void set_host_wait_timeout(double seconds) override { host_wait_timeout_s_ = seconds; }
  void set_roll_call(const comm::RollCallHooks* hooks, std::vector<int> world_ranks) override {
    roll_call_ = hooks;
    roll_call_ranks_ = std::move(world_ranks);
  }
  // Waits for `dev`'s compute stream within the host wait limit (no-op without one); `what` names the caller.
  void drain_compute(int dev, const char* what);
  void set_matmul_dtype(DType operands) override;
  DType matmul_dtype() const override { return matmul_dtype_; }

  // ---- matmuls (backend_matmul.cpp) ----
  void round_to_half(int dev, void* out, DType dtype, const float* in, int64_t n) override;
  void gemm(int dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
            MatmulOperand b, float beta, float* c) override;
  void linear_forward(int dev, float* out, const float* inp, MatmulOperand weight, const float* bias, int64_t N,
                      int64_t C, int64_t OC) override;
  void linear_gelu_forward(int dev, float* act, float* pre, const float* inp, MatmulOperand weight, const float* bias,
                           int64_t N, int64_t C, int64_t OC) override;
  void linear_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       MatmulOperand weight, int64_t N, int64_t C, int64_t OC) override;
  bool half_outputs_direct(int dev) override;
  void gemm16(int dev, DType act, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              MatmulOperand a, MatmulOperand b, float beta, void* c) override;
  void linear_forward16(int dev, DType act, void* out, DType out_dtype, const void* inp, MatmulOperand weight,
                        const float* bias, int64_t N, int64_t C, int64_t OC) override;
  void linear_gelu_forward16(int dev, DType act, void* gelu, void* pre, const void* inp, MatmulOperand weight,
                             const float* bias, int64_t N, int64_t C, int64_t OC) override;
  void linear_backward16(int dev, DType act, void* dinp, DType dinp_dtype, float* dweight, float* dbias,
                         const void* dout, const void* inp, MatmulOperand weight, int64_t N, int64_t C,
                         int64_t OC) override;

  // ---- kernels (backend_kernels.cpp) ----
  void add_bias(int dev, float* out, const float* bias, int64_t rows, int64_t cols) override;
  void bias_backward(int dev, float* dbias, const float* dout, int64_t rows, int64_t cols) override;
  void gelu_forward(int dev, float* out, const float* inp, int64_t n) override;
  void gelu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) override;
  void gelu_erf_forward(int dev, float* out, const float* inp, int64_t n) override;
  void gelu_erf_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) override;
  void swiglu_forward(int dev, float* out, const float* inp, int64_t N, int64_t F) override;
  void swiglu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t N, int64_t F) override;
  void add(int dev, float* out, const float* a, const float* b, int64_t n) override;
  void scale(int dev, float* x, float s, int64_t n) override;
  double sum_squares(int dev, const float* x, int64_t n) override;
  void sum_into(int dev, double* acc, const float* x, int64_t n) override;
  bool all_finite(int dev, const float* x, int64_t n) override;
  void softmax_forward(int dev, float* out, const float* inp, int64_t N, int64_t K) override;
  void softmax_backward(int dev, float* dinp, const float* dout, const float* out, int64_t N, int64_t K) override;
  void dropout(int dev, float* out, const float* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
               int64_t S) override;
  void layernorm_forward(int dev, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, float eps, int64_t N, int64_t C) override;
  void layernorm_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) override;
  void rmsnorm_forward(int dev, float* out, float* rstd, const float* inp, const float* weight, float eps, int64_t N,
                       int64_t C) override;
  void rmsnorm_backward(int dev, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) override;
  void rope(int dev, float* out, const float* inp, const cpu::RopeDims& d, double sign) override;
  void repeat_kv_forward(int dev, float* out, const float* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS) override;
  void repeat_kv_backward(int dev, float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                          int64_t HS) override;
  void embedding_forward(int dev, float* out, const int32_t* ids, const float* weight, int64_t vocab_start, int64_t N,
                         int64_t V, int64_t C) override;
  void embedding_backward(int dev, float* dweight, const float* dout, const int32_t* ids, int64_t vocab_start,
                          int64_t N, int64_t V, int64_t C) override;
  void cross_entropy_forward(int dev, float* losses, float* lse, const float* logits, const int32_t* targets,
                             int ignore_index, int64_t N, int64_t V) override;
  void shard_row_max(int dev, float* row_max, const float* logits, int64_t n_valid, int64_t N, int64_t K) override;
  void shard_softmax_partials(int dev, float* sums, const float* logits, const float* row_max, const int32_t* targets,
                              int64_t col_start, int64_t n_valid, int64_t N, int64_t K) override;
  void cross_entropy_from_partials(int dev, float* losses, float* lse, const float* row_max, const float* sums,
                                   const int32_t* targets, int ignore_index, int64_t N) override;
  void shard_cross_entropy_backward(int dev, float* dlogits, const float* logits, const float* lse,
                                    const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                    int ignore_index, int64_t N, int64_t K) override;
  void adamw(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
             float grad_scale) override;
  void sgd(int dev, float* param, const float* grad, float* momentum, int64_t n, float lr, float mu, float weight_decay,
           float grad_scale) override;

  // 16-bit activations: the launchers above instantiated for Bf16 / F16.
  void add16(int dev, DType act, void* out, const void* a, const void* b, int64_t n) override;
  void scale16(int dev, DType act, void* x, float s, int64_t n) override;
  double sum_squares16(int dev, DType act, const void* x, int64_t n) override;
  bool all_finite16(int dev, DType act, const void* x, int64_t n) override;
  void dropout16(int dev, DType act, void* out, const void* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
                 int64_t S) override;
  void layernorm_forward16(int dev, DType act, void* out, float* mean, float* rstd, const void* inp,
                           const float* weight, const float* bias, float eps, int64_t N, int64_t C) override;
  void layernorm_backward16(int dev, DType act, void* dinp, float* dweight, float* dbias, const void* dout,
                            const void* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                            int64_t C) override;
  void rmsnorm_forward16(int dev, DType act, void* out, float* rstd, const void* inp, const float* weight, float eps,
                         int64_t N, int64_t C) override;
  void rmsnorm_backward16(int dev, DType act, void* dinp, float* dweight, const void* dout, const void* inp,
                          const float* weight, const float* rstd, int64_t N, int64_t C) override;
  void gelu_forward16(int dev, DType act, void* out, const void* inp, int64_t n) override;
  void gelu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) override;
  void gelu_erf_forward16(int dev, DType act, void* out, const void* inp, int64_t n) override;
  void gelu_erf_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) override;
  void swiglu_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t F) override;
  void swiglu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t N,
                         int64_t F) override;
  void rope16(int dev, DType act, void* out, const void* inp, const cpu::RopeDims& d, double sign) override;
  void repeat_kv_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t NH, int64_t KV,
                           int64_t HS) override;
  void repeat_kv_backward16(int dev, DType act, void* dinp, const void* dout, int64_t N, int64_t NH, int64_t KV,
                            int64_t HS) override;
  void embedding_forward16(int dev, DType act, void* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                           int64_t N, int64_t V, int64_t C) override;
  void embedding_backward16(int dev, DType act, float* dweight, const void* dout, const int32_t* ids,
                            int64_t vocab_start, int64_t N, int64_t V, int64_t C) override;
  void add_bias16(int dev, DType act, void* out, const float* bias, int64_t rows, int64_t cols) override;
  void bias_backward16(int dev, DType act, float* dbias, const void* dout, int64_t rows, int64_t cols) override;
  void softmax_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t K) override;
  void softmax_backward16(int dev, DType act, void* dinp, const void* dout, const void* out, int64_t N,
                          int64_t K) override;
  void cross_entropy_forward16(int dev, DType act, float* losses, float* lse, const void* logits,
                               const int32_t* targets, int ignore_index, int64_t N, int64_t V) override;
  void shard_row_max16(int dev, DType act, float* row_max, const void* logits, int64_t n_valid, int64_t N,
                       int64_t K) override;
  void shard_softmax_partials16(int dev, DType act, float* sums, const void* logits, const float* row_max,
                                const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N,
                                int64_t K) override;
  void shard_cross_entropy_backward16(int dev, DType act, void* dlogits, const void* logits, const float* lse,
                                      const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                      int ignore_index, int64_t N, int64_t K) override;
  void add_mixed(int dev, void* out, DType out_dtype, const void* a, DType a_dtype, const void* b, DType b_dtype,
                 int64_t n) override;
  void convert(int dev, void* out, DType out_dtype, const void* in, DType in_dtype, int64_t n) override;

  // ---- attention (backend_attention.cpp) ----
  void attention_forward(int dev, float* out, float* att, const float* qkv, const CudaAttentionArgs& a) override;
  void attention_backward(int dev, float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                          const CudaAttentionArgs& a) override;
  void attention_forward16(int dev, DType act, void* out, void* att, const void* qkv,
                           const CudaAttentionArgs& a) override;
  void attention_backward16(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                            const void* att, const CudaAttentionArgs& a) override;
  std::string attention_plain_reason(int dev, const CudaAttentionArgs& a, DType act) override;
  bool attention_backward_repeatable(int dev, const CudaAttentionArgs& a, DType act) override;

 private:
  struct Workspace {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  // Makes `dev` current, enqueues the launches and checks them (finish).
  template <typename Launch>
  static void run(int dev, Launch&& launch) {
    use(dev);
    launch();
    finish();
  }

  // Calls f(Bf16{}) or f(F16{}) for the 16-bit activation dtype `act`.
  template <typename F>
  static void on_act16(DType act, F&& f) {
    if (act == DType::bf16) return f(Bf16{});
    if (act == DType::f16) return f(F16{});
    LATTICE_FAIL("cuda: 16-bit activation kernels take bf16 or f16, not dtype {}", int(act));
  }

  // Calls f(float{}), f(Bf16{}) or f(F16{}) for f32, bf16 or f16.
  template <typename F>
  static void storage(DType t, F&& f) {
    if (t == DType::f32) return f(float{});
    on_act16(t, f);
  }

  // An activation pointer as the storage type of the tag s.
  template <typename S>
  static S* as(S, void* p) {
    return static_cast<S*>(p);
  }

  template <typename S>
  static const S* as(S, const void* p) {
    return static_cast<const S*>(p);
  }

  // Reports a bad launch. The kernel itself runs on in stream order; a fault
  // inside it surfaces at the next call that waits (see the header comment).
  static void finish() { CUDA_CHECK(cudaGetLastError()); }

  // run, with f called on the storage type of the 16-bit activation dtype `act` (on_act16).
  template <typename F>
  static void run16(int dev, DType act, F&& f) {
    run(dev, [&] { on_act16(act, f); });
  }

  // backend.cpp
  static void use(int dev);
  cublasHandle_t blas(int dev);
  cublasLtHandle_t blas_lt(int dev);
  LtCall lt_call(cublasLtHandle_t h, int dev, void* ws);
  void* workspace(int dev, size_t bytes);
  void* grown(std::vector<Workspace>& per_device, int dev, size_t bytes);

  // backend_matmul.cpp
  const void* half_operand(const MatmulOperand& x, uint16_t* scratch, int64_t n);
  std::pair<const void*, const void*> halves(int dev, const MatmulOperand& a, int64_t na, const MatmulOperand& b,
                                             int64_t nb);
  static const void* at16(const void* p, int64_t elems);
  void gemm_ex(cublasHandle_t h, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c, DType c_dtype, int64_t ldc);
  template <typename Fn>
  void for_row_blocks(int dev, int64_t rows, int64_t cols, Fn&& fn);
  void linear16(int dev, DType act, void* out, DType out_dtype, void* gelu, const void* inp, MatmulOperand weight,
                const float* bias, int64_t N, int64_t C, int64_t OC);
  void backward_products16(int dev, cublasHandle_t h, void* dinp, DType dinp_dtype, bool direct, float* dweight,
                           const void* dout, const MatmulOperand& inp, const MatmulOperand& weight, int64_t N,
                           int64_t C, int64_t OC);
  void check_act16(const char* op, DType act) const;
  bool gelu_epilogue_ok(int dev);
  bool probe_gelu_epilogue(int dev);
  bool probe_half_outputs(int dev);

  // backend_kernels.cpp
  template <typename S>
  void embedding_backward_on(int dev, float* dweight, const S* dout, const int32_t* ids, int64_t vocab_start, int64_t N,
                             int64_t V, int64_t C);
  template <typename O, typename I>
  static void convert_as(void* out, const void* in, int64_t n);
  template <typename S, typename F>
  static void f32_or(DType t, F&& f);
  template <typename T, typename Launch>
  T reduce(int dev, Launch&& launch);

  // backend_attention.cpp
  SdpaDType sdpa_dtype() const;
  bool fused_attention(int dev, const SdpaShape& s);
  void check_attention16(DType act) const;
  void* attention_work(int dev, size_t bytes);
  template <typename S>
  S* attention_temps(int dev, const CudaAttentionArgs& a, S** dS);
  template <typename Pass>
  bool ran_fused(int dev, const SdpaShape& s, SdpaPass which, const SdpaStaging& st, Pass&& pass);
  void note_forward(const void* att, bool fused);
  bool forward_was_fused(const void* att);
  void attention_forward_on(int dev, DType act, void* out, void* att, const void* qkv, const CudaAttentionArgs& a);
  void attention_backward_on(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                             const void* att, const CudaAttentionArgs& a);

  std::mutex mu_;
  std::vector<cublasHandle_t> handles_;       // indexed by device; null until first gemm there
  std::vector<cublasLtHandle_t> lt_handles_;  // indexed by device; null until first linear there
  std::vector<Workspace> attention_work_;     // indexed by device: the plain attention's work buffer
  std::vector<Workspace> attention_temps_;    // indexed by device: P and dS of a compact call on the plain path
  std::mutex ws_mu_;
  std::vector<Workspace> workspaces_;  // indexed by device; guarded by ws_mu_
  LtMatmulCache lt_cache_;             // cuBLASLt plans of every device (LtKey has the device); ws_mu_
  std::mutex half_mu_;
  std::vector<Workspace> half_operands_;  // indexed by device: bf16/f16 copies of a gemm's fp32 operands; half_mu_
  std::vector<Workspace> dout16_;         // indexed by device: linear backward's fp32 dout rounded once; half_mu_
  std::vector<Workspace> acc16_;          // indexed by device: fp32 sums of 16-bit matmul outputs; half_mu_
  DType matmul_dtype_ = DType::f32;       // runtime.precision (set_matmul_dtype)
  double host_wait_timeout_s_ = 0;        // set_host_wait_timeout; <= 0: none
  DeviceVerdicts half_out_[2];            // [bf16, f16]: cuBLAS rounds 16-bit outputs as Lattice (probe_half_outputs)
  DeviceVerdicts gelu_epilogue_;          // cuBLASLt's GELU epilogue is Lattice's GELU (probe_gelu_epilogue)
  CudnnSdpa sdpa_;                        // cuDNN fused attention: handles and built graphs
  std::mutex sdpa_mu_;
  std::vector<Workspace> sdpa_scratch_;        // indexed by device: sdpa_scratch_layout's; sdpa_mu_
  std::unordered_set<const void*> fused_att_;  // att buffers whose last forward was fused (O, Stats); sdpa_mu_

  // set_roll_call: the binary's roll call (null: none) and the world ranks drain_compute asks first on a timeout.
  const comm::RollCallHooks* roll_call_ = nullptr;
  std::vector<int> roll_call_ranks_;
};

}  // namespace lattice::cuda
