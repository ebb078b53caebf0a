// Plain CUDA attention (attention.h): cuBLAS strided-batched products over
// the heads of each sample around the row kernels of attention_kernels.cu.
#include "core/cuda/attention.h"

#include <climits>
#include <cmath>
#include <type_traits>

#include "core/cuda/kernels.h"
#include "core/error.h"

namespace lattice::cuda {

namespace {

int to_int(int64_t v, const char* what) {
  LATTICE_CHECK(v >= 0 && v <= INT_MAX, "cuda attention: {} = {} exceeds the int range cuBLAS takes", what, v);
  return int(v);
}

template <typename T>
constexpr cudaDataType_t kCudaType = std::is_same_v<T, float>  ? CUDA_R_32F
                                     : std::is_same_v<T, Bf16> ? CUDA_R_16BF
                                                               : CUDA_R_16F;

template <typename S>
constexpr bool kHalf = !std::is_same_v<S, float>;

// Row-major C (m, n) = alpha op(A) op(B) for `batch` matrices at fixed
// strides (elements), fp32 compute. Row-major X (r, c) is column-major X^T,
// so cuBLAS computes C^T = op(B)^T op(A)^T with B first. All fp32: the sgemm
// (no TF32); else cublasGemmStridedBatchedEx with each operand's type.
template <typename A, typename B, typename C>
void gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const A* a, int64_t lda,
             int64_t sa, const B* b, int64_t ldb, int64_t sb, C* c, int64_t ldc, int64_t sc, int64_t batch) {
  const float beta = 0.0f;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  if constexpr (std::is_same_v<A, float> && std::is_same_v<B, float> && std::is_same_v<C, float>)
    st = cublasSgemmStridedBatched(h, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b,
                                   to_int(ldb, "ldb"), sb, a, to_int(lda, "lda"), sa, &beta, c, to_int(ldc, "ldc"), sc,
                                   to_int(batch, "batch"));
  else
    st = cublasGemmStridedBatchedEx(h, op_b, op_a, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b,
                                    kCudaType<B>, to_int(ldb, "ldb"), sb, a, kCudaType<A>, to_int(lda, "lda"), sa,
                                    &beta, c, kCudaType<C>, to_int(ldc, "ldc"), sc, to_int(batch, "batch"),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  LATTICE_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda attention: the strided-batched gemm failed: {} ({})",
                cublasGetStatusName(st), cublasGetStatusString(st));
}

uint64_t align_up(uint64_t v) { return (v + 255) / 256 * 256; }

// Where `work` holds what: fp32 rows of one sample (16-bit: scores or dP),
// its fp32 out or dqkv (16-bit), its dropped probabilities of S (p > 0).
template <typename S>
struct Work {
  uint64_t rows = 0, product = 0, dropped = 0, end = 0;
};
template <typename S>
Work<S> work_layout(const AttentionArgs& a) {
  const uint64_t sample = uint64_t(a.NH * a.T * a.T);
  Work<S> w;
  if constexpr (kHalf<S>) {
    w.product = align_up(sample * sizeof(float));
    w.dropped = w.product + align_up(uint64_t(a.T * 3 * a.NH * a.HS) * sizeof(float));
  }
  w.end = w.dropped + (a.p > 0.0f ? sample * sizeof(S) : 0);
  return w;
}
template <typename T>
T* at(void* work, uint64_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(work) + offset);
}

// dst (n) of S = src (n) fp32 rounded to nearest even.
template <typename S>
void store(cudaStream_t stream, S* dst, const float* src, int64_t n) {
  if constexpr (std::is_same_v<S, Bf16>)
    launch_to_bf16(stream, reinterpret_cast<uint16_t*>(dst), src, n);
  else
    launch_to_f16(stream, reinterpret_cast<uint16_t*>(dst), src, n);
}

}  // namespace

void check_attention(const AttentionArgs& a) {
  LATTICE_CHECK(a.B > 0 && a.T > 0 && a.NH > 0 && a.HS > 0, "cuda attention: empty shape B {} T {} NH {} HS {}", a.B,
                a.T, a.NH, a.HS);
  LATTICE_CHECK(a.p >= 0.0f && a.p < 1.0f, "cuda attention: dropout p = {} is outside [0, 1)", a.p);
  LATTICE_CHECK(!a.causal || a.key_mask == nullptr, "cuda attention: a key mask is for bidirectional attention only");
  to_int(a.B * a.NH * a.T, "rows");
}

template <typename S>
size_t attention_work_bytes(const AttentionArgs& a) {
  return size_t(work_layout<S>(a).end);
}

template <typename S>
void attention_forward(cublasHandle_t blas, cudaStream_t stream, S* out, S* att, void* work, const S* qkv,
                       const AttentionArgs& a) {
  check_attention(a);
  LATTICE_CHECK(work != nullptr || attention_work_bytes<S>(a) == 0, "cuda attention: no work buffer");
  const int64_t T = a.T, HS = a.HS, NH = a.NH, C = NH * HS, TT = T * T, rows = NH * T;
  const float scale = 1.0f / std::sqrt(float(HS));
  const Work<S> w = work_layout<S>(a);
  for (int64_t b = 0; b < a.B; ++b) {
    const S* q = qkv + b * T * 3 * C;
    S* P = att + b * NH * TT;
    float* s;  // the fp32 scores, then probabilities
    if constexpr (kHalf<S>)
      s = at<float>(work, w.rows);
    else
      s = P;
    gemm_rm(blas, false, true, T, T, HS, scale, q, 3 * C, HS, q + C, 3 * C, HS, s, T, TT, NH);  // S = scale q k^T
    launch_masked_softmax_rows(stream, s, P, a, b * rows, rows);
    if (!out) continue;  // P alone
    const S* probs = P;
    if (a.p > 0.0f) {
      S* dropped = at<S>(work, w.dropped);
      launch_dropout_rows(stream, dropped, static_cast<const float*>(s), a, b * rows, rows);
      probs = dropped;
    }
    // out = Pd v
    if constexpr (kHalf<S>) {
      float* o = at<float>(work, w.product);
      gemm_rm(blas, false, false, T, HS, T, 1.0f, probs, T, TT, q + 2 * C, 3 * C, HS, o, C, HS, NH);
      store(stream, out + b * T * C, o, T * C);
    } else {
      gemm_rm(blas, false, false, T, HS, T, 1.0f, probs, T, TT, q + 2 * C, 3 * C, HS, out + b * T * C, C, HS, NH);
    }
  }
}

template <typename S>
void attention_backward(cublasHandle_t blas, cudaStream_t stream, S* dqkv, S* scratch, void* work, const S* dout,
                        const S* qkv, const S* att, const AttentionArgs& a) {
  check_attention(a);
  LATTICE_CHECK(work != nullptr || attention_work_bytes<S>(a) == 0, "cuda attention: no work buffer");
  const int64_t T = a.T, HS = a.HS, NH = a.NH, C = NH * HS, TT = T * T, rows = NH * T;
  const float scale = 1.0f / std::sqrt(float(HS));
  const Work<S> w = work_layout<S>(a);
  for (int64_t b = 0; b < a.B; ++b) {
    const S* q = qkv + b * T * 3 * C;
    const S* dO = dout + b * T * C;
    const S* P = att + b * NH * TT;
    S* dS = scratch + b * NH * TT;
    const S* probs = P;
    if (a.p > 0.0f) {
      S* dropped = at<S>(work, w.dropped);
      launch_dropout_rows(stream, dropped, P, a, b * rows, rows);
      probs = dropped;
    }
    float* ds;  // fp32 dPd, then dS
    if constexpr (kHalf<S>)
      ds = at<float>(work, w.rows);
    else
      ds = dS;
    gemm_rm(blas, false, true, T, T, HS, 1.0f, dO, C, HS, q + 2 * C, 3 * C, HS, ds, T, TT, NH);  // dPd = dO v^T
    launch_softmax_backward_rows(stream, ds, dS, P, a, b * rows, rows);
    // dQ = scale dS k, dK = scale dS^T q, dV = Pd^T dO, into dq (T, 3C)
    S* dq_s = dqkv + b * T * 3 * C;
    auto products = [&](auto* dq) {
      gemm_rm(blas, false, false, T, HS, T, scale, dS, T, TT, q + C, 3 * C, HS, dq, 3 * C, HS, NH);
      gemm_rm(blas, true, false, T, HS, T, scale, dS, T, TT, q, 3 * C, HS, dq + C, 3 * C, HS, NH);
      gemm_rm(blas, true, false, T, HS, T, 1.0f, probs, T, TT, dO, C, HS, dq + 2 * C, 3 * C, HS, NH);
    };
    if constexpr (kHalf<S>) {
      float* dq = at<float>(work, w.product);
      products(dq);
      store(stream, dq_s, dq, T * 3 * C);
    } else {
      products(dq_s);
    }
  }
}

#define LATTICE_INSTANTIATE(S)                                                                                     \
  template size_t attention_work_bytes<S>(const AttentionArgs&);                                                   \
  template void attention_forward<S>(cublasHandle_t, cudaStream_t, S*, S*, void*, const S*, const AttentionArgs&); \
  template void attention_backward<S>(cublasHandle_t, cudaStream_t, S*, S*, void*, const S*, const S*, const S*,   \
                                      const AttentionArgs&);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
