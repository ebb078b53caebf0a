// The CUDA backend (core/backend.h): device memory, copies, cuBLAS gemm and
// the kernels of the .cu files (kernels.h), exported as the one C symbol
// lattice_cuda_backend_create that core/backend_loader.cpp looks up.
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
#include "core/backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/attention.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/lt_linear.h"
#include "core/cuda/lt_plan.h"
#include "core/cuda/sdpa_cudnn.h"
#include "core/kernels/cpu/matmul.h"  // check_matmul_operand (inline)

namespace lattice::cuda {

namespace {

// The stream every call uses: the device's legacy default stream.
constexpr cudaStream_t kStream = nullptr;

// Most fp32 elements one block of a 16-bit matmul output is summed into
// before it is rounded (64 MiB of scratch per device).
constexpr int64_t kAcc16Elems = int64_t(1) << 24;

int checked_int(int64_t v, const char* what) {
  LATTICE_CHECK(v >= 0 && v <= INT_MAX, "gemm: {} = {} is out of the range cuBLAS int arguments take", what, v);
  return int(v);
}

// Row kernels launch one block per row, and grids hold at most INT_MAX blocks.
void check_rows(const char* op, int64_t N) {
  LATTICE_CHECK(N <= INT_MAX, "cuda {}: {} rows exceed the {} blocks of one grid", op, N, INT_MAX);
}

class Backend final : public CudaBackend {
 public:
  int device_count(std::string* why) override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (why) *why = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
      return 0;
    }
    if (why) *why = n > 0 ? fmt::format("{} CUDA device(s)", n) : std::string("no CUDA device found");
    return n;
  }

  std::string device_name(int dev) override {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    return p.name;
  }

  void* malloc(size_t bytes, int dev) override {
    use(dev);
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, bytes, kStream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      cudaGetLastError();
      LATTICE_FAIL("out of memory on cuda:{} allocating {} bytes ({} of {} bytes free): {}", dev, bytes, free_b,
                   total_b, cudaGetErrorString(e));
    }
    return p;
  }

  void free(void* ptr, int dev) override {
    if (!ptr) return;
    use(dev);
    CUDA_CHECK(cudaFreeAsync(ptr, kStream));  // reused in stream order: no wait for the device
  }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) override {
    if (bytes == 0) return;
    if (dst_dev.is_cpu() && src_dev.is_cpu()) {
      std::memcpy(dst, src, bytes);
      return;
    }
    if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
      use(dst_dev.index);
      CUDA_CHECK(cudaMemcpyPeer(dst, dst_dev.index, src, src_dev.index, bytes));
      CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    cudaMemcpyKind kind = src_dev.is_cpu()   ? cudaMemcpyHostToDevice
                          : dst_dev.is_cpu() ? cudaMemcpyDeviceToHost
                                             : cudaMemcpyDeviceToDevice;
    int dev = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
    use(dev);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, kStream));
    // Host memory is the caller's again when copy returns; device to device stays in stream order.
    if (kind != cudaMemcpyDeviceToDevice) CUDA_CHECK(cudaStreamSynchronize(kStream));
  }

  void memset_zero(void* ptr, size_t bytes, int dev) override {
    if (bytes == 0) return;
    use(dev);
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, kStream));
    CUDA_CHECK(cudaGetLastError());
  }

  void synchronize(int dev) override {
    use(dev);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  void set_matmul_dtype(DType operands) override {
    LATTICE_CHECK(operands == DType::f32 || operands == DType::bf16 || operands == DType::f16,
                  "CUDA matmul operands must be f32, bf16 or f16, not {}", dtype_name(operands));
    matmul_dtype_ = operands;
  }

  DType matmul_dtype() const override { return matmul_dtype_; }

  void round_to_half(int dev, void* out, DType dtype, const float* in, int64_t n) override {
    LATTICE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "cuda round_to_half: {} is not bf16 or f16",
                  dtype_name(dtype));
    auto round = dtype == DType::bf16 ? launch_to_bf16 : launch_to_f16;
    run(dev, [&] { round(kStream, static_cast<uint16_t*>(out), in, n); });
  }

  // Row-major C (m, n) is column-major C^T (n, m), so compute
  // C^T = op(B)^T op(A)^T: cuBLAS gets B first. A row-major (r, c) matrix is
  // a column-major (c, r) one with leading dimension c.
  void gemm(int dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, MatmulOperand a,
            MatmulOperand b, float beta, float* c) override {
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
    gemm_ex(h, trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, beta, c, n);
    finish();
  }

  void linear_forward(int dev, float* out, const float* inp, MatmulOperand weight, const float* bias, int64_t N,
                      int64_t C, int64_t OC) override {
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

  void linear_gelu_forward(int dev, float* act, float* pre, const float* inp, MatmulOperand weight, const float* bias,
                           int64_t N, int64_t C, int64_t OC) override {
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

  void linear_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       MatmulOperand weight, int64_t N, int64_t C, int64_t OC) override {
    cpu::check_matmul_operand("cuda linear_backward", "weight", weight, matmul_dtype_);
    if (matmul_dtype_ != DType::f32) {  // the 16-bit gemms on dout rounded once, then the column sums
      cublasHandle_t h = blas(dev);
      {
        std::lock_guard<std::mutex> lock(half_mu_);
        const int64_t n_dout = dinp || dweight ? N * OC : 0;
        const void* dout16 =
            half_operand(dout, static_cast<uint16_t*>(grown(dout16_, dev, size_t(n_dout) * 2)), n_dout);
        backward_products16(dev, h, dinp, DType::f32, dweight, dout16, inp, weight, N, C, OC);
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
    lt_linear_backward(lt_call(h, dev, ws), dinp, dweight, dbias, dout, inp, static_cast<const float*>(weight.data), N,
                       C, OC, reinterpret_cast<float*>(ws + kLtWorkspaceBytes));
    finish();
  }

  void add_bias(int dev, float* out, const float* bias, int64_t rows, int64_t cols) override {
    run(dev, [&] { launch_add_bias(kStream, out, bias, rows, cols); });
  }

  void bias_backward(int dev, float* dbias, const float* dout, int64_t rows, int64_t cols) override {
    run(dev, [&] { launch_bias_backward(kStream, dbias, dout, rows, cols); });
  }

  void gelu_forward(int dev, float* out, const float* inp, int64_t n) override {
    run(dev, [&] { launch_gelu_forward(kStream, out, inp, n); });
  }

  void gelu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) override {
    run(dev, [&] { launch_gelu_backward(kStream, dinp, dout, inp, n); });
  }

  void gelu_erf_forward(int dev, float* out, const float* inp, int64_t n) override {
    run(dev, [&] { launch_gelu_erf_forward(kStream, out, inp, n); });
  }

  void gelu_erf_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) override {
    run(dev, [&] { launch_gelu_erf_backward(kStream, dinp, dout, inp, n); });
  }

  void swiglu_forward(int dev, float* out, const float* inp, int64_t N, int64_t F) override {
    run(dev, [&] { launch_swiglu_forward(kStream, out, inp, N, F); });
  }

  void swiglu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t N, int64_t F) override {
    run(dev, [&] { launch_swiglu_backward(kStream, dinp, dout, inp, N, F); });
  }

  void add(int dev, float* out, const float* a, const float* b, int64_t n) override {
    run(dev, [&] { launch_add(kStream, out, a, b, n); });
  }

  void scale(int dev, float* x, float s, int64_t n) override {
    run(dev, [&] { launch_scale(kStream, x, s, n); });
  }

  double sum_squares(int dev, const float* x, int64_t n) override {
    return reduce<double>(dev, [&](double* result, void* ws) { launch_sum_squares(kStream, result, x, n, ws); });
  }

  bool all_finite(int dev, const float* x, int64_t n) override {
    return reduce<int>(dev, [&](int* result, void* ws) { launch_any_nonfinite(kStream, result, x, n, ws); }) == 0;
  }

  void softmax_forward(int dev, float* out, const float* inp, int64_t N, int64_t K) override {
    check_rows("softmax_forward", N);
    run(dev, [&] { launch_softmax_forward(kStream, out, inp, N, K); });
  }

  void softmax_backward(int dev, float* dinp, const float* dout, const float* out, int64_t N, int64_t K) override {
    check_rows("softmax_backward", N);
    run(dev, [&] { launch_softmax_backward(kStream, dinp, dout, out, N, K); });
  }

  void dropout(int dev, float* out, const float* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
               int64_t S) override {
    run(dev, [&] { launch_dropout(kStream, out, inp, key, sample0, p, B, S); });
  }

  void layernorm_forward(int dev, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, float eps, int64_t N, int64_t C) override {
    check_rows("layernorm_forward", N);
    run(dev, [&] { launch_layernorm_forward(kStream, out, mean, rstd, inp, weight, bias, eps, N, C); });
  }

  void layernorm_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) override {
    check_rows("layernorm_backward", N);
    run(dev, [&] { launch_layernorm_backward(kStream, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
  }

  void rmsnorm_forward(int dev, float* out, float* rstd, const float* inp, const float* weight, float eps, int64_t N,
                       int64_t C) override {
    check_rows("rmsnorm_forward", N);
    run(dev, [&] { launch_rmsnorm_forward(kStream, out, rstd, inp, weight, eps, N, C); });
  }

  void rmsnorm_backward(int dev, float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) override {
    check_rows("rmsnorm_backward", N);
    run(dev, [&] { launch_rmsnorm_backward(kStream, dinp, dweight, dout, inp, weight, rstd, N, C); });
  }

  void rope(int dev, float* out, const float* inp, const cpu::RopeDims& d, double sign) override {
    run(dev, [&] { launch_rope(kStream, out, inp, d, sign); });
  }

  void repeat_kv_forward(int dev, float* out, const float* inp, int64_t N, int64_t NH, int64_t KV,
                         int64_t HS) override {
    run(dev, [&] { launch_repeat_kv_forward(kStream, out, inp, N, NH, KV, HS); });
  }

  void repeat_kv_backward(int dev, float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                          int64_t HS) override {
    run(dev, [&] { launch_repeat_kv_backward(kStream, dinp, dout, N, NH, KV, HS); });
  }

  void embedding_forward(int dev, float* out, const int32_t* ids, const float* weight, int64_t vocab_start, int64_t N,
                         int64_t V, int64_t C) override {
    run(dev, [&] { launch_embedding_forward(kStream, out, ids, weight, vocab_start, N, V, C); });
  }

  void embedding_backward(int dev, float* dweight, const float* dout, const int32_t* ids, int64_t vocab_start,
                          int64_t N, int64_t V, int64_t C) override {
    embedding_backward_on(dev, dweight, dout, ids, vocab_start, N, V, C);
  }

  void cross_entropy_forward(int dev, float* losses, float* lse, const float* logits, const int32_t* targets,
                             int ignore_index, int64_t N, int64_t V) override {
    check_rows("cross_entropy_forward", N);
    run(dev, [&] { launch_cross_entropy_forward(kStream, losses, lse, logits, targets, ignore_index, N, V); });
  }

  void shard_row_max(int dev, float* row_max, const float* logits, int64_t n_valid, int64_t N, int64_t K) override {
    check_rows("shard_row_max", N);
    run(dev, [&] { launch_shard_row_max(kStream, row_max, logits, n_valid, N, K); });
  }

  void shard_softmax_partials(int dev, float* sums, const float* logits, const float* row_max, const int32_t* targets,
                              int64_t col_start, int64_t n_valid, int64_t N, int64_t K) override {
    check_rows("shard_softmax_partials", N);
    run(dev, [&] { launch_shard_softmax_partials(kStream, sums, logits, row_max, targets, col_start, n_valid, N, K); });
  }

  void cross_entropy_from_partials(int dev, float* losses, float* lse, const float* row_max, const float* sums,
                                   const int32_t* targets, int ignore_index, int64_t N) override {
    run(dev,
        [&] { launch_cross_entropy_from_partials(kStream, losses, lse, row_max, sums, targets, ignore_index, N); });
  }

  void shard_cross_entropy_backward(int dev, float* dlogits, const float* logits, const float* lse,
                                    const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                    int ignore_index, int64_t N, int64_t K) override {
    check_rows("shard_cross_entropy_backward", N);
    run(dev, [&] {
      launch_shard_cross_entropy_backward(kStream, dlogits, logits, lse, targets, dloss, col_start, n_valid,
                                          ignore_index, N, K);
    });
  }

  void adamw(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
             float grad_scale) override {
    run(dev, [&] {
      launch_adamw(kStream, param, grad, m, v, n,
                   AdamWArgs{lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale});
    });
  }

  void sgd(int dev, float* param, const float* grad, float* momentum, int64_t n, float lr, float mu, float weight_decay,
           float grad_scale) override {
    run(dev, [&] { launch_sgd(kStream, param, grad, momentum, n, SgdArgs{lr, mu, weight_decay, grad_scale}); });
  }

  // ---- kernels on 16-bit activations: the launchers above instantiated for Bf16 / F16 ----

  void add16(int dev, DType act, void* out, const void* a, const void* b, int64_t n) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_add(kStream, as(s, out), as(s, a), as(s, b), n); }); });
  }

  void scale16(int dev, DType act, void* x, float s, int64_t n) override {
    run(dev, [&] { on_act16(act, [&](auto t) { launch_scale(kStream, as(t, x), s, n); }); });
  }

  double sum_squares16(int dev, DType act, const void* x, int64_t n) override {
    return reduce<double>(dev, [&](double* result, void* ws) {
      on_act16(act, [&](auto s) { launch_sum_squares(kStream, result, as(s, x), n, ws); });
    });
  }

  bool all_finite16(int dev, DType act, const void* x, int64_t n) override {
    return reduce<int>(dev, [&](int* result, void* ws) {
             on_act16(act, [&](auto s) { launch_any_nonfinite(kStream, result, as(s, x), n, ws); });
           }) == 0;
  }

  void dropout16(int dev, DType act, void* out, const void* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
                 int64_t S) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_dropout(kStream, as(s, out), as(s, inp), key, sample0, p, B, S); });
    });
  }

  void layernorm_forward16(int dev, DType act, void* out, float* mean, float* rstd, const void* inp,
                           const float* weight, const float* bias, float eps, int64_t N, int64_t C) override {
    check_rows("layernorm_forward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_layernorm_forward(kStream, as(s, out), mean, rstd, as(s, inp), weight, bias, eps, N, C);
      });
    });
  }

  void layernorm_backward16(int dev, DType act, void* dinp, float* dweight, float* dbias, const void* dout,
                            const void* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                            int64_t C) override {
    check_rows("layernorm_backward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_layernorm_backward(kStream, as(s, dinp), dweight, dbias, as(s, dout), as(s, inp), weight, mean, rstd, N,
                                  C);
      });
    });
  }

  void rmsnorm_forward16(int dev, DType act, void* out, float* rstd, const void* inp, const float* weight, float eps,
                         int64_t N, int64_t C) override {
    check_rows("rmsnorm_forward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_rmsnorm_forward(kStream, as(s, out), rstd, as(s, inp), weight, eps, N, C); });
    });
  }

  void rmsnorm_backward16(int dev, DType act, void* dinp, float* dweight, const void* dout, const void* inp,
                          const float* weight, const float* rstd, int64_t N, int64_t C) override {
    check_rows("rmsnorm_backward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_rmsnorm_backward(kStream, as(s, dinp), dweight, as(s, dout), as(s, inp), weight, rstd, N, C);
      });
    });
  }

  void gelu_forward16(int dev, DType act, void* out, const void* inp, int64_t n) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_gelu_forward(kStream, as(s, out), as(s, inp), n); }); });
  }

  void gelu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_gelu_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), n); });
    });
  }

  void gelu_erf_forward16(int dev, DType act, void* out, const void* inp, int64_t n) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_gelu_erf_forward(kStream, as(s, out), as(s, inp), n); }); });
  }

  void gelu_erf_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_gelu_erf_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), n); });
    });
  }

  void swiglu_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t F) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_swiglu_forward(kStream, as(s, out), as(s, inp), N, F); }); });
  }

  void swiglu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t N,
                         int64_t F) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_swiglu_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), N, F); });
    });
  }

  void rope16(int dev, DType act, void* out, const void* inp, const cpu::RopeDims& d, double sign) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_rope(kStream, as(s, out), as(s, inp), d, sign); }); });
  }

  void repeat_kv_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t NH, int64_t KV,
                           int64_t HS) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_repeat_kv_forward(kStream, as(s, out), as(s, inp), N, NH, KV, HS); });
    });
  }

  void repeat_kv_backward16(int dev, DType act, void* dinp, const void* dout, int64_t N, int64_t NH, int64_t KV,
                            int64_t HS) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_repeat_kv_backward(kStream, as(s, dinp), as(s, dout), N, NH, KV, HS); });
    });
  }

  void embedding_forward16(int dev, DType act, void* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                           int64_t N, int64_t V, int64_t C) override {
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_embedding_forward(kStream, as(s, out), ids, weight, vocab_start, N, V, C); });
    });
  }

  void embedding_backward16(int dev, DType act, float* dweight, const void* dout, const int32_t* ids,
                            int64_t vocab_start, int64_t N, int64_t V, int64_t C) override {
    on_act16(act, [&](auto s) { embedding_backward_on(dev, dweight, as(s, dout), ids, vocab_start, N, V, C); });
  }

  void add_bias16(int dev, DType act, void* out, const float* bias, int64_t rows, int64_t cols) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_add_bias(kStream, as(s, out), bias, rows, cols); }); });
  }

  void bias_backward16(int dev, DType act, float* dbias, const void* dout, int64_t rows, int64_t cols) override {
    run(dev, [&] { on_act16(act, [&](auto s) { launch_bias_backward(kStream, dbias, as(s, dout), rows, cols); }); });
  }

  void softmax_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t K) override {
    check_rows("softmax_forward", N);
    run(dev, [&] { on_act16(act, [&](auto s) { launch_softmax_forward(kStream, as(s, out), as(s, inp), N, K); }); });
  }

  void softmax_backward16(int dev, DType act, void* dinp, const void* dout, const void* out, int64_t N,
                          int64_t K) override {
    check_rows("softmax_backward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) { launch_softmax_backward(kStream, as(s, dinp), as(s, dout), as(s, out), N, K); });
    });
  }

  void cross_entropy_forward16(int dev, DType act, float* losses, float* lse, const void* logits,
                               const int32_t* targets, int ignore_index, int64_t N, int64_t V) override {
    check_rows("cross_entropy_forward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_cross_entropy_forward(kStream, losses, lse, as(s, logits), targets, ignore_index, N, V);
      });
    });
  }

  void shard_row_max16(int dev, DType act, float* row_max, const void* logits, int64_t n_valid, int64_t N,
                       int64_t K) override {
    check_rows("shard_row_max", N);
    run(dev,
        [&] { on_act16(act, [&](auto s) { launch_shard_row_max(kStream, row_max, as(s, logits), n_valid, N, K); }); });
  }

  void shard_softmax_partials16(int dev, DType act, float* sums, const void* logits, const float* row_max,
                                const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N,
                                int64_t K) override {
    check_rows("shard_softmax_partials", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_shard_softmax_partials(kStream, sums, as(s, logits), row_max, targets, col_start, n_valid, N, K);
      });
    });
  }

  void shard_cross_entropy_backward16(int dev, DType act, void* dlogits, const void* logits, const float* lse,
                                      const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                      int ignore_index, int64_t N, int64_t K) override {
    check_rows("shard_cross_entropy_backward", N);
    run(dev, [&] {
      on_act16(act, [&](auto s) {
        launch_shard_cross_entropy_backward(kStream, as(s, dlogits), as(s, logits), lse, targets, dloss, col_start,
                                            n_valid, ignore_index, N, K);
      });
    });
  }

  void gemm16(int dev, DType act, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              MatmulOperand a, MatmulOperand b, float beta, void* c) override {
    check_act16("gemm", act);
    cpu::check_matmul_operand("cuda gemm", "a", a, matmul_dtype_);
    cpu::check_matmul_operand("cuda gemm", "b", b, matmul_dtype_);
    cublasHandle_t h = blas(dev);
    std::lock_guard<std::mutex> lock(half_mu_);
    const auto [a16, b16] = halves(dev, a, m * k, b, k * n);
    const int64_t lda = std::max<int64_t>(1, trans_a ? m : k), ldb = std::max<int64_t>(1, trans_b ? k : n);
    on_act16(act, [&](auto s) {
      using S = decltype(s);
      S* cs = static_cast<S*>(c);
      for_row_blocks(dev, m, n, [&](int64_t r0, int64_t rows, float* acc) {
        if (beta != 0.0f) launch_convert(kStream, acc, cs + r0 * n, rows * n);
        // Rows r0.. of op(a): rows of a, or columns of a stored transposed.
        gemm_ex(h, trans_a, trans_b, rows, n, k, alpha, at16(a16, trans_a ? r0 : r0 * lda), lda, b16, ldb, beta, acc,
                n);
        launch_narrow_rows<S>(kStream, cs + r0 * n, nullptr, acc, nullptr, rows, n);
      });
    });
    finish();
  }

  void linear_forward16(int dev, DType act, void* out, DType out_dtype, const void* inp, MatmulOperand weight,
                        const float* bias, int64_t N, int64_t C, int64_t OC) override {
    LATTICE_CHECK(out_dtype == act || out_dtype == DType::f32, "cuda linear_forward: out is {}, not {} or f32",
                  dtype_name(out_dtype), dtype_name(act));
    linear16(dev, act, out, out_dtype, nullptr, inp, weight, bias, N, C, OC);
  }

  void linear_gelu_forward16(int dev, DType act, void* gelu, void* pre, const void* inp, MatmulOperand weight,
                             const float* bias, int64_t N, int64_t C, int64_t OC) override {
    linear16(dev, act, pre, act, gelu, inp, weight, bias, N, C, OC);
  }

  void linear_backward16(int dev, DType act, void* dinp, DType dinp_dtype, float* dweight, float* dbias,
                         const void* dout, const void* inp, MatmulOperand weight, int64_t N, int64_t C,
                         int64_t OC) override {
    check_act16("linear_backward", act);
    cpu::check_matmul_operand("cuda linear_backward", "weight", weight, matmul_dtype_);
    LATTICE_CHECK(dinp_dtype == act || dinp_dtype == DType::f32, "cuda linear_backward: dinp is {}, not {} or f32",
                  dtype_name(dinp_dtype), dtype_name(act));
    cublasHandle_t h = blas(dev);
    {
      std::lock_guard<std::mutex> lock(half_mu_);
      backward_products16(dev, h, dinp, dinp_dtype, dweight, dout, MatmulOperand(inp, act), weight, N, C, OC);
    }
    if (dbias) on_act16(act, [&](auto s) { launch_bias_backward(kStream, dbias, as(s, dout), N, OC); });
    finish();
  }

  void add_mixed(int dev, void* out, DType out_dtype, const void* a, DType a_dtype, const void* b, DType b_dtype,
                 int64_t n) override {
    const DType half = out_dtype != DType::f32 ? out_dtype : a_dtype != DType::f32 ? a_dtype : b_dtype;
    auto fits = [&](DType t) { return t == DType::f32 || t == half; };
    LATTICE_CHECK((half == DType::bf16 || half == DType::f16) && fits(out_dtype) && fits(a_dtype) && fits(b_dtype),
                  "cuda add: mixed dtypes are f32 beside one 16-bit type, got out {} a {} b {}", dtype_name(out_dtype),
                  dtype_name(a_dtype), dtype_name(b_dtype));
    run(dev, [&] {
      on_act16(half, [&](auto s) {
        using S = decltype(s);
        f32_or<S>(out_dtype, [&](auto o) {
          f32_or<S>(a_dtype, [&](auto x) {
            f32_or<S>(b_dtype, [&](auto y) { launch_add(kStream, as(o, out), as(x, a), as(y, b), n); });
          });
        });
      });
    });
  }

  void convert(int dev, void* out, DType out_dtype, const void* in, DType in_dtype, int64_t n) override {
    auto takes = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
    LATTICE_CHECK(takes(out_dtype) && takes(in_dtype) && out_dtype != in_dtype,
                  "cuda convert: from {} to {}: converts between two of f32, bf16, f16", dtype_name(in_dtype),
                  dtype_name(out_dtype));
    run(dev, [&] {
      storage(out_dtype,
              [&](auto o) { storage(in_dtype, [&](auto i) { convert_as<decltype(o), decltype(i)>(out, in, n); }); });
    });
  }

  void attention_forward(int dev, float* out, float* att, const float* qkv, const CudaAttentionArgs& a) override {
    attention_forward_on(dev, DType::f32, out, att, qkv, a);
  }

  void attention_backward(int dev, float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                          const CudaAttentionArgs& a) override {
    attention_backward_on(dev, DType::f32, dqkv, scratch, dout, qkv, att, a);
  }

  void attention_forward16(int dev, DType act, void* out, void* att, const void* qkv,
                           const CudaAttentionArgs& a) override {
    check_attention16(act);
    attention_forward_on(dev, act, out, att, qkv, a);
  }

  void attention_backward16(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                            const void* att, const CudaAttentionArgs& a) override {
    check_attention16(act);
    attention_backward_on(dev, act, dqkv, scratch, dout, qkv, att, a);
  }

  std::string attention_plain_reason(int dev, const CudaAttentionArgs& a, DType act) override {
    check_attention(a);
    if (matmul_dtype_ == DType::f32)
      return "runtime.precision is fp32 (cuDNN's fused attention takes bf16 or fp16 only)";
    if (act != DType::f32) check_attention16(act);
    const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
    std::string why;
    if (!sdpa_supported(s, &why)) return why;
    return fused_attention(dev, s) ? std::string() : sdpa_.refusal(dev, s);
  }

 private:
  struct Workspace {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  // Makes `dev` current. The first time for a device, its default memory pool
  // (what cudaMallocAsync serves every tensor from) is told to keep freed
  // memory: with the default release threshold of 0 it hands it back to the
  // driver at every synchronisation, and the next step allocates it again.
  static void use(int dev) {
    CUDA_CHECK(cudaSetDevice(dev));
    static std::once_flag kept[64];
    if (dev >= 0 && dev < 64)
      std::call_once(kept[dev], [dev] {
        cudaMemPool_t pool = nullptr;
        CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
        uint64_t keep_all = UINT64_MAX;
        CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
      });
  }

  // Operand x in the matmul's 16-bit type: x itself when it already is (a
  // parameter's shadow, 16-bit activations), else rounded into `scratch` (n
  // elements). half_mu_ held.
  const void* half_operand(const MatmulOperand& x, uint16_t* scratch, int64_t n) {
    if (x.dtype != DType::f32) return x.data;
    auto round = matmul_dtype_ == DType::bf16 ? launch_to_bf16 : launch_to_f16;
    round(kStream, scratch, static_cast<const float*>(x.data), n);
    return scratch;
  }

  // Operands a (na elements) and b (nb) as half_operand gives them, the
  // fp32 ones rounded into the operand scratch (b's copy starting 256 bytes
  // aligned, as cuBLAS's vectorised kernels want). half_mu_ held.
  std::pair<const void*, const void*> halves(int dev, const MatmulOperand& a, int64_t na, const MatmulOperand& b,
                                             int64_t nb) {
    const int64_t ra = a.dtype == DType::f32 ? na : 0, rb = b.dtype == DType::f32 ? nb : 0;
    const int64_t ra_padded = (ra + 127) / 128 * 128;
    uint16_t* scratch =
        ra + rb > 0 ? static_cast<uint16_t*>(grown(half_operands_, dev, size_t(ra_padded + rb) * sizeof(uint16_t)))
                    : nullptr;
    return {half_operand(a, scratch, ra), half_operand(b, scratch + ra_padded, rb)};
  }

  // A 16-bit matrix advanced by `elems` elements.
  static const void* at16(const void* p, int64_t elems) { return static_cast<const uint16_t*>(p) + elems; }

  // Row-major C (m, n; row stride ldc) = alpha op(A) op(B) + beta C with A and
  // B of the matmul's 16-bit type (row strides lda, ldb), C fp32, fp32
  // accumulation: column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B first.
  void gemm_ex(cublasHandle_t h, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    const int mi = checked_int(m, "m"), ni = checked_int(n, "n"), ki = checked_int(k, "k");
    if (mi == 0 || ni == 0) return;
    const cudaDataType_t type = matmul_dtype_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, ni, mi, ki,
                              &alpha, b, type, checked_int(ldb, "ldb"), a, type, checked_int(lda, "lda"), &beta, c,
                              CUDA_R_32F, checked_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // Calls fn(r0, rows, acc) over blocks of the rows of a (rows, cols) 16-bit
  // output, acc fp32 device scratch for rows * cols (grow-only, at most
  // kAcc16Elems). half_mu_ held.
  template <typename Fn>
  void for_row_blocks(int dev, int64_t rows, int64_t cols, Fn&& fn) {
    if (rows == 0 || cols == 0) return;
    const int64_t block = std::clamp<int64_t>(kAcc16Elems / cols, 1, rows);
    float* acc = static_cast<float*>(grown(acc16_, dev, size_t(block * cols) * sizeof(float)));
    for (int64_t r0 = 0; r0 < rows; r0 += block) fn(r0, std::min(block, rows - r0), acc);
  }

  // out (N, OC) = inp @ weight^T + bias in `out_dtype` (act: rounded once,
  // after the bias; f32: unrounded), with gelu non-null gelu = round(gelu(out)).
  void linear16(int dev, DType act, void* out, DType out_dtype, void* gelu, const void* inp, MatmulOperand weight,
                const float* bias, int64_t N, int64_t C, int64_t OC) {
    check_act16("linear_forward", act);
    cpu::check_matmul_operand("cuda linear_forward", "weight", weight, matmul_dtype_);
    cublasHandle_t h = blas(dev);
    std::lock_guard<std::mutex> lock(half_mu_);
    const auto [x16, w16] = halves(dev, MatmulOperand(inp, act), N * C, weight, OC * C);
    const int64_t ldx = std::max<int64_t>(1, C);
    if (out_dtype == DType::f32) {
      gemm_ex(h, false, true, N, OC, C, 1.0f, x16, ldx, w16, ldx, 0.0f, static_cast<float*>(out), OC);
      if (bias) launch_add_bias(kStream, static_cast<float*>(out), bias, N, OC);
    } else {
      on_act16(act, [&](auto s) {
        using S = decltype(s);
        for_row_blocks(dev, N, OC, [&](int64_t r0, int64_t rows, float* acc) {
          gemm_ex(h, false, true, rows, OC, C, 1.0f, at16(x16, r0 * C), ldx, w16, ldx, 0.0f, acc, OC);
          launch_narrow_rows<S>(kStream, as(s, out) + r0 * OC, gelu ? as(s, gelu) + r0 * OC : nullptr, acc, bias, rows,
                                OC);
        });
      });
    }
    finish();
  }

  // Linear backward's two products with dout (N, OC) of the matmul's 16-bit
  // type: dinp (N, C) = dout @ weight in `dinp_dtype` (f32, or the 16-bit
  // type rounded once) and dweight (OC, C) += dout^T @ inp, each skipped when
  // null; inp and weight fp32 (rounded here) or 16-bit. half_mu_ held.
  void backward_products16(int dev, cublasHandle_t h, void* dinp, DType dinp_dtype, float* dweight, const void* dout,
                           const MatmulOperand& inp, const MatmulOperand& weight, int64_t N, int64_t C, int64_t OC) {
    const auto [x16, w16] = halves(dev, inp, dweight ? N * C : 0, weight, dinp ? OC * C : 0);
    const int64_t ldx = std::max<int64_t>(1, C), ldo = std::max<int64_t>(1, OC);
    if (dinp && dinp_dtype == DType::f32)  // (N, OC) @ (OC, C)
      gemm_ex(h, false, false, N, C, OC, 1.0f, dout, ldo, w16, ldx, 0.0f, static_cast<float*>(dinp), ldx);
    else if (dinp)
      on_act16(matmul_dtype_, [&](auto s) {
        using S = decltype(s);
        for_row_blocks(dev, N, C, [&](int64_t r0, int64_t rows, float* acc) {
          gemm_ex(h, false, false, rows, C, OC, 1.0f, at16(dout, r0 * OC), ldo, w16, ldx, 0.0f, acc, ldx);
          launch_narrow_rows<S>(kStream, as(s, dinp) + r0 * C, nullptr, acc, nullptr, rows, C);
        });
      });
    if (dweight)  // += (N, OC)^T @ (N, C)
      gemm_ex(h, true, false, OC, C, N, 1.0f, dout, ldo, x16, ldx, 1.0f, dweight, ldx);
  }

  // 16-bit activations of type `act` need the matmuls to run in it.
  void check_act16(const char* op, DType act) const {
    LATTICE_CHECK(act == matmul_dtype_ && act != DType::f32,
                  "cuda {}: {} activations need the matmuls to run in {} (runtime.precision {}), but they run in {}",
                  op, dtype_name(act), dtype_name(act), act == DType::bf16 ? "bf16" : "fp16",
                  dtype_name(matmul_dtype_));
  }

  // The io type of the fused attention: the matmuls' 16-bit type.
  SdpaDType sdpa_dtype() const { return matmul_dtype_ == DType::f16 ? SdpaDType::fp16 : SdpaDType::bf16; }

  // Attention takes cuDNN's fused path: bf16 or fp16 matmuls and the shape usable (sdpa_cudnn.h).
  bool fused_attention(int dev, const SdpaShape& s) {
    if (matmul_dtype_ == DType::f32) return false;
    use(dev);
    return sdpa_.usable(dev, s);
  }

  // 16-bit attention multiplies its operands as they are: in the matmul type only.
  void check_attention16(DType act) const {
    LATTICE_CHECK(act == matmul_dtype_,
                  "cuda attention: {} activations need the matmuls in {} (runtime.precision {}), but they run in {}",
                  dtype_name(act), dtype_name(act), act == DType::bf16 ? "bf16" : "fp16", dtype_name(matmul_dtype_));
  }

  // Calls f(S{}) with the storage type of activation dtype `act` (f32, bf16, f16).
  template <typename F>
  static void on_storage(DType act, F&& f) {
    if (act == DType::f32) return f(float{});
    on_act16(act, std::forward<F>(f));
  }

  // The plain path's work buffer (cuda/attention.h), kept per device and
  // grown on demand (the calls that use it run in stream order, so one
  // suffices); null when a call needs none.
  void* attention_work(int dev, size_t bytes) {
    if (bytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    return grown(attention_work_, dev, bytes);
  }

  // When the fused path takes s: runs `pass(scratch)` with the pass's
  // scratch (sdpa_mu_ held) and says so; else false, for the plain path.
  template <typename Pass>
  bool ran_fused(int dev, const SdpaShape& s, SdpaPass which, const SdpaStaging& st, Pass&& pass) {
    if (!fused_attention(dev, s)) return false;
    std::lock_guard<std::mutex> lock(sdpa_mu_);
    pass(grown(sdpa_scratch_, dev, sdpa_.scratch_bytes(dev, s, which, st)));
    finish();
    return true;
  }

  // Either path, on activations of dtype `act` (f32: the f32 calls).
  void attention_forward_on(int dev, DType act, void* out, void* att, const void* qkv, const CudaAttentionArgs& a) {
    check_attention(a);
    const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
    const SdpaStaging st = sdpa_staging(s, SdpaPass::forward, reinterpret_cast<uintptr_t>(qkv), 0, 0);
    if (ran_fused(dev, s, SdpaPass::forward, st,
                  [&](void* scratch) { sdpa_.forward(dev, kStream, out, att, qkv, s, st, scratch); }))
      return;
    cublasHandle_t h = blas(dev);
    on_storage(act, [&](auto t) {
      using S = decltype(t);
      cuda::attention_forward<S>(h, kStream, static_cast<S*>(out), static_cast<S*>(att),
                                 attention_work(dev, attention_work_bytes<S>(a)), static_cast<const S*>(qkv), a);
    });
    finish();
  }

  void attention_backward_on(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                             const void* att, const CudaAttentionArgs& a) {
    check_attention(a);
    const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
    const SdpaStaging st = sdpa_staging(s, SdpaPass::backward, reinterpret_cast<uintptr_t>(qkv),
                                        reinterpret_cast<uintptr_t>(dout), reinterpret_cast<uintptr_t>(dqkv));
    if (ran_fused(dev, s, SdpaPass::backward, st,
                  [&](void* scratch) { sdpa_.backward(dev, kStream, dqkv, dout, qkv, att, s, st, scratch); }))
      return;
    cublasHandle_t h = blas(dev);
    on_storage(act, [&](auto t) {
      using S = decltype(t);
      cuda::attention_backward<S>(h, kStream, static_cast<S*>(dqkv), static_cast<S*>(scratch),
                                  attention_work(dev, attention_work_bytes<S>(a)), static_cast<const S*>(dout),
                                  static_cast<const S*>(qkv), static_cast<const S*>(att), a);
    });
    finish();
  }

  // Makes `dev` current, enqueues the launches and checks them (finish).
  template <typename Launch>
  static void run(int dev, Launch&& launch) {
    use(dev);
    launch();
    finish();
  }

  // embedding_backward on dout of storage type S (float, Bf16, F16).
  template <typename S>
  void embedding_backward_on(int dev, float* dweight, const S* dout, const int32_t* ids, int64_t vocab_start, int64_t N,
                             int64_t V, int64_t C) {
    LATTICE_CHECK(N < INT_MAX && V < INT_MAX, "cuda embedding_backward: {} tokens or {} rows exceed the int32 sort", N,
                  V);
    use(dev);
    std::lock_guard<std::mutex> lock(ws_mu_);
    const size_t bytes = embedding_backward_workspace_bytes(N, V);
    void* ws = workspace(dev, bytes);
    CUDA_CHECK(launch_embedding_backward(kStream, dweight, dout, ids, vocab_start, N, V, C, ws, bytes));
    finish();
  }

  // Calls f(Bf16{}) or f(F16{}) for the 16-bit activation dtype `act`.
  template <typename F>
  static void on_act16(DType act, F&& f) {
    if (act == DType::bf16) return f(Bf16{});
    if (act == DType::f16) return f(F16{});
    LATTICE_FAIL("cuda: 16-bit activation kernels take bf16 or f16, not dtype {}", int(act));
  }
  // out (n) of storage O = in (n) of storage I, where they differ.
  template <typename O, typename I>
  static void convert_as(void* out, const void* in, int64_t n) {
    if constexpr (!std::is_same_v<O, I>) launch_convert(kStream, static_cast<O*>(out), static_cast<const I*>(in), n);
  }
  // Calls f(float{}) for f32, else f(S{}).
  template <typename S, typename F>
  static void f32_or(DType t, F&& f) {
    if (t == DType::f32) return f(float{});
    f(S{});
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

  // A two-stage reduction (kernels.h) to one device value of type T in the
  // scratch buffer after its partials, copied back to the host.
  template <typename T, typename Launch>
  T reduce(int dev, Launch&& launch) {
    use(dev);
    std::lock_guard<std::mutex> lock(ws_mu_);
    const size_t partial_bytes = reduce_workspace_bytes();
    char* ws = static_cast<char*>(workspace(dev, partial_bytes + sizeof(T)));
    T* result = reinterpret_cast<T*>(ws + partial_bytes);
    launch(result, static_cast<void*>(ws));
    finish();
    T host{};
    CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(T), cudaMemcpyDeviceToHost, kStream));
    CUDA_CHECK(cudaStreamSynchronize(kStream));
    return host;
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
  bool gelu_epilogue_ok(int dev) {
    {
      std::lock_guard<std::mutex> lock(gelu_mu_);
      if (size_t(dev) < gelu_epilogue_.size() && gelu_epilogue_[size_t(dev)] != 0)
        return gelu_epilogue_[size_t(dev)] > 0;
    }
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
    std::lock_guard<std::mutex> lock(gelu_mu_);
    if (size_t(dev) >= gelu_epilogue_.size()) gelu_epilogue_.resize(size_t(dev) + 1, 0);
    gelu_epilogue_[size_t(dev)] = ok ? 1 : -1;
    return ok;
  }

  // Makes `dev` current and returns its cuBLAS handle, creating it on first use.
  cublasHandle_t blas(int dev) {
    use(dev);
    std::lock_guard<std::mutex> lock(mu_);
    if (size_t(dev) >= handles_.size()) handles_.resize(size_t(dev) + 1, nullptr);
    if (!handles_[dev]) {
      cublasHandle_t h = nullptr;
      CUBLAS_CHECK(cublasCreate(&h));
      CUBLAS_CHECK(cublasSetStream(h, kStream));
      // Plain fp32 (no TF32) so results match the CPU path within f32 tolerance.
      CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
      handles_[dev] = h;
    }
    return handles_[dev];
  }

  // Makes `dev` current and returns its cuBLASLt handle, creating it on first use.
  cublasLtHandle_t blas_lt(int dev) {
    use(dev);
    std::lock_guard<std::mutex> lock(mu_);
    if (size_t(dev) >= lt_handles_.size()) lt_handles_.resize(size_t(dev) + 1, nullptr);
    if (!lt_handles_[dev]) CUBLAS_CHECK(cublasLtCreate(&lt_handles_[dev]));
    return lt_handles_[dev];
  }

  // A cuBLASLt call on `dev` with this workspace, its plans cached in lt_cache_;
  // the caller holds ws_mu_ until the call has been enqueued.
  LtCall lt_call(cublasLtHandle_t h, int dev, void* ws) {
    return LtCall{.handle = h, .dev = dev, .stream = kStream, .workspace = ws, .cache = &lt_cache_};
  }

  // The scratch buffer of `dev`, grown to at least `bytes`; never shrunk or
  // freed (see the header comment). The caller holds ws_mu_ and has made
  // `dev` current.
  void* workspace(int dev, size_t bytes) { return grown(workspaces_, dev, bytes); }

  // Buffer `dev` of `per_device`, grown to at least `bytes`. The free is
  // stream-ordered: the kernels already enqueued on the old buffer finish first.
  void* grown(std::vector<Workspace>& per_device, int dev, size_t bytes) {
    if (size_t(dev) >= per_device.size()) per_device.resize(size_t(dev) + 1);
    Workspace& w = per_device[size_t(dev)];
    if (w.bytes < bytes) {
      free(w.ptr, dev);
      w = {malloc(bytes, dev), bytes};
    }
    return w.ptr;
  }

  std::mutex mu_;
  std::vector<cublasHandle_t> handles_;       // indexed by device; null until first gemm there
  std::vector<cublasLtHandle_t> lt_handles_;  // indexed by device; null until first linear there
  std::vector<Workspace> attention_work_;     // indexed by device: the plain attention's work buffer
  std::mutex ws_mu_;
  std::vector<Workspace> workspaces_;  // indexed by device; guarded by ws_mu_
  LtMatmulCache lt_cache_;             // cuBLASLt plans of every device (LtKey has the device); ws_mu_
  std::mutex half_mu_;
  std::vector<Workspace> half_operands_;  // indexed by device: bf16/f16 copies of a gemm's fp32 operands; half_mu_
  std::vector<Workspace> dout16_;         // indexed by device: linear backward's fp32 dout rounded once; half_mu_
  std::vector<Workspace> acc16_;          // indexed by device: fp32 sums of 16-bit matmul outputs; half_mu_
  DType matmul_dtype_ = DType::f32;       // runtime.precision (set_matmul_dtype)
  std::mutex gelu_mu_;
  std::vector<int> gelu_epilogue_;  // indexed by device: 0 unknown, 1 cuBLASLt's GELU is ours, -1 it is not
  CudnnSdpa sdpa_;                  // cuDNN fused attention: handles and built graphs
  std::mutex sdpa_mu_;
  std::vector<Workspace> sdpa_scratch_;  // indexed by device: its io copies and workspace; sdpa_mu_
};

}  // namespace

}  // namespace lattice::cuda

extern "C" __attribute__((visibility("default"))) lattice::CudaBackend* lattice_cuda_backend_create() {
  static lattice::CudaBackend* backend = new lattice::cuda::Backend();  // never destroyed, see above
  return backend;
}
