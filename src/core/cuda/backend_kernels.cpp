// The CUDA backend's kernels (backend_impl.h): the launchers of the .cu files
// (kernels.h) on the device's stream, for f32 activations and, as the `*16`
// entry points, for bf16/fp16 ones; the reductions copy their one value back.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "core/cuda/backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace lattice::cuda {

namespace {

// Row kernels launch one block per row, and grids hold at most INT_MAX blocks.
void check_rows(const char* op, int64_t N) {
  LATTICE_CHECK(N <= INT_MAX, "cuda {}: {} rows exceed the {} blocks of one grid", op, N, INT_MAX);
}

}  // namespace

// embedding_backward on dout of storage type S (float, Bf16, F16).
template <typename S>
void Backend::embedding_backward_on(int dev, float* dweight, const S* dout, const int32_t* ids, int64_t vocab_start,
                                    int64_t N, int64_t V, int64_t C) {
  LATTICE_CHECK(N < INT_MAX && V < INT_MAX, "cuda embedding_backward: {} tokens or {} rows exceed the int32 sort", N,
                V);
  use(dev);
  std::lock_guard<std::mutex> lock(ws_mu_);
  const size_t bytes = embedding_backward_workspace_bytes(N, V);
  void* ws = workspace(dev, bytes);
  CUDA_CHECK(launch_embedding_backward(kStream, dweight, dout, ids, vocab_start, N, V, C, ws, bytes));
  finish();
}

// out (n) of storage O = in (n) of storage I, where they differ.
template <typename O, typename I>
void Backend::convert_as(void* out, const void* in, int64_t n) {
  if constexpr (!std::is_same_v<O, I>) launch_convert(kStream, static_cast<O*>(out), static_cast<const I*>(in), n);
}

// Calls f(float{}) for f32, else f(S{}).
template <typename S, typename F>
void Backend::f32_or(DType t, F&& f) {
  if (t == DType::f32) return f(float{});
  f(S{});
}

// A two-stage reduction (kernels.h) to one device value of type T in the
// scratch buffer after its partials, copied back to the host.
template <typename T, typename Launch>
T Backend::reduce(int dev, Launch&& launch) {
  use(dev);
  // The stream's earlier work within the host wait limit, before the lock: the wait below is then for the
  // reduction's own kernels only.
  drain_compute(dev, "a reduction to the host");
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

void Backend::add_bias(int dev, float* out, const float* bias, int64_t rows, int64_t cols) {
  run(dev, [&] { launch_add_bias(kStream, out, bias, rows, cols); });
}

void Backend::bias_backward(int dev, float* dbias, const float* dout, int64_t rows, int64_t cols) {
  run(dev, [&] { launch_bias_backward(kStream, dbias, dout, rows, cols); });
}

void Backend::gelu_forward(int dev, float* out, const float* inp, int64_t n) {
  run(dev, [&] { launch_gelu_forward(kStream, out, inp, n); });
}

void Backend::gelu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) {
  run(dev, [&] { launch_gelu_backward(kStream, dinp, dout, inp, n); });
}

void Backend::gelu_erf_forward(int dev, float* out, const float* inp, int64_t n) {
  run(dev, [&] { launch_gelu_erf_forward(kStream, out, inp, n); });
}

void Backend::gelu_erf_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t n) {
  run(dev, [&] { launch_gelu_erf_backward(kStream, dinp, dout, inp, n); });
}

void Backend::swiglu_forward(int dev, float* out, const float* inp, int64_t N, int64_t F) {
  run(dev, [&] { launch_swiglu_forward(kStream, out, inp, N, F); });
}

void Backend::swiglu_backward(int dev, float* dinp, const float* dout, const float* inp, int64_t N, int64_t F) {
  run(dev, [&] { launch_swiglu_backward(kStream, dinp, dout, inp, N, F); });
}

void Backend::add(int dev, float* out, const float* a, const float* b, int64_t n) {
  run(dev, [&] { launch_add(kStream, out, a, b, n); });
}

void Backend::scale(int dev, float* x, float s, int64_t n) {
  run(dev, [&] { launch_scale(kStream, x, s, n); });
}

double Backend::sum_squares(int dev, const float* x, int64_t n) {
  return reduce<double>(dev, [&](double* result, void* ws) { launch_sum_squares(kStream, result, x, n, ws); });
}

bool Backend::all_finite(int dev, const float* x, int64_t n) {
  return reduce<int>(dev, [&](int* result, void* ws) { launch_any_nonfinite(kStream, result, x, n, ws); }) == 0;
}

void Backend::softmax_forward(int dev, float* out, const float* inp, int64_t N, int64_t K) {
  check_rows("softmax_forward", N);
  run(dev, [&] { launch_softmax_forward(kStream, out, inp, N, K); });
}

void Backend::softmax_backward(int dev, float* dinp, const float* dout, const float* out, int64_t N, int64_t K) {
  check_rows("softmax_backward", N);
  run(dev, [&] { launch_softmax_backward(kStream, dinp, dout, out, N, K); });
}

void Backend::dropout(int dev, float* out, const float* inp, const RngKey& key, int64_t sample0, float p, int64_t B,
                      int64_t S) {
  run(dev, [&] { launch_dropout(kStream, out, inp, key, sample0, p, B, S); });
}

void Backend::layernorm_forward(int dev, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, float eps, int64_t N, int64_t C) {
  check_rows("layernorm_forward", N);
  run(dev, [&] { launch_layernorm_forward(kStream, out, mean, rstd, inp, weight, bias, eps, N, C); });
}

void Backend::layernorm_backward(int dev, float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                                 int64_t C) {
  check_rows("layernorm_backward", N);
  run(dev, [&] { launch_layernorm_backward(kStream, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
}

void Backend::rmsnorm_forward(int dev, float* out, float* rstd, const float* inp, const float* weight, float eps,
                              int64_t N, int64_t C) {
  check_rows("rmsnorm_forward", N);
  run(dev, [&] { launch_rmsnorm_forward(kStream, out, rstd, inp, weight, eps, N, C); });
}

void Backend::rmsnorm_backward(int dev, float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int64_t N, int64_t C) {
  check_rows("rmsnorm_backward", N);
  run(dev, [&] { launch_rmsnorm_backward(kStream, dinp, dweight, dout, inp, weight, rstd, N, C); });
}

void Backend::rope(int dev, float* out, const float* inp, const cpu::RopeDims& d, double sign) {
  run(dev, [&] { launch_rope(kStream, out, inp, d, sign); });
}

void Backend::repeat_kv_forward(int dev, float* out, const float* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  run(dev, [&] { launch_repeat_kv_forward(kStream, out, inp, N, NH, KV, HS); });
}

void Backend::repeat_kv_backward(int dev, float* dinp, const float* dout, int64_t N, int64_t NH, int64_t KV,
                                 int64_t HS) {
  run(dev, [&] { launch_repeat_kv_backward(kStream, dinp, dout, N, NH, KV, HS); });
}

void Backend::embedding_forward(int dev, float* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                                int64_t N, int64_t V, int64_t C) {
  run(dev, [&] { launch_embedding_forward(kStream, out, ids, weight, vocab_start, N, V, C); });
}

void Backend::embedding_backward(int dev, float* dweight, const float* dout, const int32_t* ids, int64_t vocab_start,
                                 int64_t N, int64_t V, int64_t C) {
  embedding_backward_on(dev, dweight, dout, ids, vocab_start, N, V, C);
}

void Backend::cross_entropy_forward(int dev, float* losses, float* lse, const float* logits, const int32_t* targets,
                                    int ignore_index, int64_t N, int64_t V) {
  check_rows("cross_entropy_forward", N);
  run(dev, [&] { launch_cross_entropy_forward(kStream, losses, lse, logits, targets, ignore_index, N, V); });
}

void Backend::shard_row_max(int dev, float* row_max, const float* logits, int64_t n_valid, int64_t N, int64_t K) {
  check_rows("shard_row_max", N);
  run(dev, [&] { launch_shard_row_max(kStream, row_max, logits, n_valid, N, K); });
}

void Backend::shard_softmax_partials(int dev, float* sums, const float* logits, const float* row_max,
                                     const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N, int64_t K) {
  check_rows("shard_softmax_partials", N);
  run(dev, [&] { launch_shard_softmax_partials(kStream, sums, logits, row_max, targets, col_start, n_valid, N, K); });
}

void Backend::cross_entropy_from_partials(int dev, float* losses, float* lse, const float* row_max, const float* sums,
                                          const int32_t* targets, int ignore_index, int64_t N) {
  run(dev, [&] { launch_cross_entropy_from_partials(kStream, losses, lse, row_max, sums, targets, ignore_index, N); });
}

void Backend::shard_cross_entropy_backward(int dev, float* dlogits, const float* logits, const float* lse,
                                           const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                           int ignore_index, int64_t N, int64_t K) {
  check_rows("shard_cross_entropy_backward", N);
  run(dev, [&] {
    launch_shard_cross_entropy_backward(kStream, dlogits, logits, lse, targets, dloss, col_start, n_valid, ignore_index,
                                        N, K);
  });
}

void Backend::adamw(int dev, float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
                    float grad_scale) {
  run(dev, [&] {
    launch_adamw(kStream, param, grad, m, v, n,
                 AdamWArgs{lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale});
  });
}

void Backend::sgd(int dev, float* param, const float* grad, float* momentum, int64_t n, float lr, float mu,
                  float weight_decay, float grad_scale) {
  run(dev, [&] { launch_sgd(kStream, param, grad, momentum, n, SgdArgs{lr, mu, weight_decay, grad_scale}); });
}

// ---- kernels on 16-bit activations: the launchers above instantiated for Bf16 / F16 ----

void Backend::add16(int dev, DType act, void* out, const void* a, const void* b, int64_t n) {
  run16(dev, act, [&](auto s) { launch_add(kStream, as(s, out), as(s, a), as(s, b), n); });
}

void Backend::scale16(int dev, DType act, void* x, float s, int64_t n) {
  run16(dev, act, [&](auto t) { launch_scale(kStream, as(t, x), s, n); });
}

void Backend::sum_into(int dev, double* acc, const float* x, int64_t n) {
  // The partials live in the shared workspace: later users of it come after
  // these kernels in stream order (every reduction runs on kStream).
  std::lock_guard<std::mutex> lock(ws_mu_);
  void* ws = workspace(dev, reduce_workspace_bytes());
  run(dev, [&] { launch_sum_into(kStream, acc, x, n, ws); });
}

double Backend::sum_squares16(int dev, DType act, const void* x, int64_t n) {
  return reduce<double>(dev, [&](double* result, void* ws) {
    on_act16(act, [&](auto s) { launch_sum_squares(kStream, result, as(s, x), n, ws); });
  });
}

bool Backend::all_finite16(int dev, DType act, const void* x, int64_t n) {
  return reduce<int>(dev, [&](int* result, void* ws) {
           on_act16(act, [&](auto s) { launch_any_nonfinite(kStream, result, as(s, x), n, ws); });
         }) == 0;
}

void Backend::dropout16(int dev, DType act, void* out, const void* inp, const RngKey& key, int64_t sample0, float p,
                        int64_t B, int64_t S) {
  run16(dev, act, [&](auto s) { launch_dropout(kStream, as(s, out), as(s, inp), key, sample0, p, B, S); });
}

void Backend::layernorm_forward16(int dev, DType act, void* out, float* mean, float* rstd, const void* inp,
                                  const float* weight, const float* bias, float eps, int64_t N, int64_t C) {
  check_rows("layernorm_forward", N);
  run16(dev, act, [&](auto s) {
    launch_layernorm_forward(kStream, as(s, out), mean, rstd, as(s, inp), weight, bias, eps, N, C);
  });
}

void Backend::layernorm_backward16(int dev, DType act, void* dinp, float* dweight, float* dbias, const void* dout,
                                   const void* inp, const float* weight, const float* mean, const float* rstd,
                                   int64_t N, int64_t C) {
  check_rows("layernorm_backward", N);
  run16(dev, act, [&](auto s) {
    launch_layernorm_backward(kStream, as(s, dinp), dweight, dbias, as(s, dout), as(s, inp), weight, mean, rstd, N, C);
  });
}

void Backend::rmsnorm_forward16(int dev, DType act, void* out, float* rstd, const void* inp, const float* weight,
                                float eps, int64_t N, int64_t C) {
  check_rows("rmsnorm_forward", N);
  run16(dev, act, [&](auto s) { launch_rmsnorm_forward(kStream, as(s, out), rstd, as(s, inp), weight, eps, N, C); });
}

void Backend::rmsnorm_backward16(int dev, DType act, void* dinp, float* dweight, const void* dout, const void* inp,
                                 const float* weight, const float* rstd, int64_t N, int64_t C) {
  check_rows("rmsnorm_backward", N);
  run16(dev, act, [&](auto s) {
    launch_rmsnorm_backward(kStream, as(s, dinp), dweight, as(s, dout), as(s, inp), weight, rstd, N, C);
  });
}

void Backend::gelu_forward16(int dev, DType act, void* out, const void* inp, int64_t n) {
  run16(dev, act, [&](auto s) { launch_gelu_forward(kStream, as(s, out), as(s, inp), n); });
}

void Backend::gelu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) {
  run16(dev, act, [&](auto s) { launch_gelu_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), n); });
}

void Backend::gelu_erf_forward16(int dev, DType act, void* out, const void* inp, int64_t n) {
  run16(dev, act, [&](auto s) { launch_gelu_erf_forward(kStream, as(s, out), as(s, inp), n); });
}

void Backend::gelu_erf_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t n) {
  run16(dev, act, [&](auto s) { launch_gelu_erf_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), n); });
}

void Backend::swiglu_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t F) {
  run16(dev, act, [&](auto s) { launch_swiglu_forward(kStream, as(s, out), as(s, inp), N, F); });
}

void Backend::swiglu_backward16(int dev, DType act, void* dinp, const void* dout, const void* inp, int64_t N,
                                int64_t F) {
  run16(dev, act, [&](auto s) { launch_swiglu_backward(kStream, as(s, dinp), as(s, dout), as(s, inp), N, F); });
}

void Backend::rope16(int dev, DType act, void* out, const void* inp, const cpu::RopeDims& d, double sign) {
  run16(dev, act, [&](auto s) { launch_rope(kStream, as(s, out), as(s, inp), d, sign); });
}

void Backend::repeat_kv_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t NH, int64_t KV,
                                  int64_t HS) {
  run16(dev, act, [&](auto s) { launch_repeat_kv_forward(kStream, as(s, out), as(s, inp), N, NH, KV, HS); });
}

void Backend::repeat_kv_backward16(int dev, DType act, void* dinp, const void* dout, int64_t N, int64_t NH, int64_t KV,
                                   int64_t HS) {
  run16(dev, act, [&](auto s) { launch_repeat_kv_backward(kStream, as(s, dinp), as(s, dout), N, NH, KV, HS); });
}

void Backend::embedding_forward16(int dev, DType act, void* out, const int32_t* ids, const float* weight,
                                  int64_t vocab_start, int64_t N, int64_t V, int64_t C) {
  run16(dev, act, [&](auto s) { launch_embedding_forward(kStream, as(s, out), ids, weight, vocab_start, N, V, C); });
}

void Backend::embedding_backward16(int dev, DType act, float* dweight, const void* dout, const int32_t* ids,
                                   int64_t vocab_start, int64_t N, int64_t V, int64_t C) {
  on_act16(act, [&](auto s) { embedding_backward_on(dev, dweight, as(s, dout), ids, vocab_start, N, V, C); });
}

void Backend::add_bias16(int dev, DType act, void* out, const float* bias, int64_t rows, int64_t cols) {
  run16(dev, act, [&](auto s) { launch_add_bias(kStream, as(s, out), bias, rows, cols); });
}

void Backend::bias_backward16(int dev, DType act, float* dbias, const void* dout, int64_t rows, int64_t cols) {
  run16(dev, act, [&](auto s) { launch_bias_backward(kStream, dbias, as(s, dout), rows, cols); });
}

void Backend::softmax_forward16(int dev, DType act, void* out, const void* inp, int64_t N, int64_t K) {
  check_rows("softmax_forward", N);
  run16(dev, act, [&](auto s) { launch_softmax_forward(kStream, as(s, out), as(s, inp), N, K); });
}

void Backend::softmax_backward16(int dev, DType act, void* dinp, const void* dout, const void* out, int64_t N,
                                 int64_t K) {
  check_rows("softmax_backward", N);
  run16(dev, act, [&](auto s) { launch_softmax_backward(kStream, as(s, dinp), as(s, dout), as(s, out), N, K); });
}

void Backend::cross_entropy_forward16(int dev, DType act, float* losses, float* lse, const void* logits,
                                      const int32_t* targets, int ignore_index, int64_t N, int64_t V) {
  check_rows("cross_entropy_forward", N);
  run16(dev, act, [&](auto s) {
    launch_cross_entropy_forward(kStream, losses, lse, as(s, logits), targets, ignore_index, N, V);
  });
}

void Backend::shard_row_max16(int dev, DType act, float* row_max, const void* logits, int64_t n_valid, int64_t N,
                              int64_t K) {
  check_rows("shard_row_max", N);
  run16(dev, act, [&](auto s) { launch_shard_row_max(kStream, row_max, as(s, logits), n_valid, N, K); });
}

void Backend::shard_softmax_partials16(int dev, DType act, float* sums, const void* logits, const float* row_max,
                                       const int32_t* targets, int64_t col_start, int64_t n_valid, int64_t N,
                                       int64_t K) {
  check_rows("shard_softmax_partials", N);
  run16(dev, act, [&](auto s) {
    launch_shard_softmax_partials(kStream, sums, as(s, logits), row_max, targets, col_start, n_valid, N, K);
  });
}

void Backend::shard_cross_entropy_backward16(int dev, DType act, void* dlogits, const void* logits, const float* lse,
                                             const int32_t* targets, float dloss, int64_t col_start, int64_t n_valid,
                                             int ignore_index, int64_t N, int64_t K) {
  check_rows("shard_cross_entropy_backward", N);
  run16(dev, act, [&](auto s) {
    launch_shard_cross_entropy_backward(kStream, as(s, dlogits), as(s, logits), lse, targets, dloss, col_start, n_valid,
                                        ignore_index, N, K);
  });
}

void Backend::add_mixed(int dev, void* out, DType out_dtype, const void* a, DType a_dtype, const void* b, DType b_dtype,
                        int64_t n) {
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

void Backend::convert(int dev, void* out, DType out_dtype, const void* in, DType in_dtype, int64_t n) {
  auto takes = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
  LATTICE_CHECK(takes(out_dtype) && takes(in_dtype) && out_dtype != in_dtype,
                "cuda convert: from {} to {}: converts between two of f32, bf16, f16", dtype_name(in_dtype),
                dtype_name(out_dtype));
  run(dev, [&] {
    storage(out_dtype,
            [&](auto o) { storage(in_dtype, [&](auto i) { convert_as<decltype(o), decltype(i)>(out, in, n); }); });
  });
}

}  // namespace lattice::cuda
