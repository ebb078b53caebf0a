// Plain CUDA attention (attention.h): cuBLAS strided-batched products over
// the heads of each sample around the row kernels of attention_kernels.cu.
#include "core/cuda/attention.h"

#include <climits>
#include <cmath>

#include "core/error.h"

namespace lattice::cuda {

namespace {

int to_int(int64_t v, const char* what) {
  LATTICE_CHECK(v >= 0 && v <= INT_MAX, "cuda attention: {} = {} exceeds the int range cuBLAS takes", what, v);
  return int(v);
}

// Row-major C (m, n) = alpha op(A) op(B) + beta C for `batch` matrices at
// fixed strides (elements). Row-major X (r, c) is column-major X^T, so cuBLAS
// computes C^T = op(B)^T op(A)^T with B first.
void gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
             int64_t lda, int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc,
             int64_t sc, int64_t batch) {
  const cublasStatus_t st =
      cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(n, "n"),
                                to_int(m, "m"), to_int(k, "k"), &alpha, B, to_int(ldb, "ldb"), sb, A,
                                to_int(lda, "lda"), sa, &beta, C, to_int(ldc, "ldc"), sc, to_int(batch, "batch"));
  LATTICE_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda attention: cublasSgemmStridedBatched failed: {} ({})",
                cublasGetStatusName(st), cublasGetStatusString(st));
}

}  // namespace

void check_attention(const AttentionArgs& a) {
  LATTICE_CHECK(a.B > 0 && a.T > 0 && a.NH > 0 && a.HS > 0, "cuda attention: empty shape B {} T {} NH {} HS {}", a.B,
                a.T, a.NH, a.HS);
  LATTICE_CHECK(a.p >= 0.0f && a.p < 1.0f, "cuda attention: dropout p = {} is outside [0, 1)", a.p);
  LATTICE_CHECK(!a.causal || a.key_mask == nullptr, "cuda attention: a key mask is for bidirectional attention only");
  to_int(a.B * a.NH * a.T, "rows");
}

void attention_forward(cublasHandle_t blas, cudaStream_t stream, float* out, float* att, float* dropped,
                       const float* qkv, const AttentionArgs& a) {
  check_attention(a);
  LATTICE_CHECK(a.p == 0.0f || dropped != nullptr, "cuda attention: dropout needs the `dropped` buffer");
  const int64_t T = a.T, HS = a.HS, NH = a.NH, C = NH * HS, TT = T * T;
  const float scale = 1.0f / std::sqrt(float(HS));
  for (int64_t b = 0; b < a.B; ++b) {  // S = scale q k^T, heads batched
    const float* q = qkv + b * T * 3 * C;
    gemm_rm(blas, false, true, T, T, HS, scale, q, 3 * C, HS, q + C, 3 * C, HS, 0.0f, att + b * NH * TT, T, TT, NH);
  }
  launch_masked_softmax_rows(stream, att, a);
  const float* probs = att;
  if (a.p > 0.0f) {
    launch_dropout_rows(stream, dropped, att, a);
    probs = dropped;
  }
  for (int64_t b = 0; b < a.B; ++b) {  // out = Pd v
    const float* v = qkv + b * T * 3 * C + 2 * C;
    gemm_rm(blas, false, false, T, HS, T, 1.0f, probs + b * NH * TT, T, TT, v, 3 * C, HS, 0.0f, out + b * T * C, C, HS,
            NH);
  }
}

void attention_backward(cublasHandle_t blas, cudaStream_t stream, float* dqkv, float* scratch, float* dropped,
                        const float* dout, const float* qkv, const float* att, const AttentionArgs& a) {
  check_attention(a);
  LATTICE_CHECK(a.p == 0.0f || dropped != nullptr, "cuda attention: dropout needs the `dropped` buffer");
  const int64_t T = a.T, HS = a.HS, NH = a.NH, C = NH * HS, TT = T * T;
  const float scale = 1.0f / std::sqrt(float(HS));
  const float* probs = att;
  if (a.p > 0.0f) {
    launch_dropout_rows(stream, dropped, att, a);
    probs = dropped;
  }
  for (int64_t b = 0; b < a.B; ++b) {  // dPd = dO v^T
    const float* v = qkv + b * T * 3 * C + 2 * C;
    gemm_rm(blas, false, true, T, T, HS, 1.0f, dout + b * T * C, C, HS, v, 3 * C, HS, 0.0f, scratch + b * NH * TT, T,
            TT, NH);
  }
  launch_softmax_backward_rows(stream, scratch, att, a);
  for (int64_t b = 0; b < a.B; ++b) {
    const float* q = qkv + b * T * 3 * C;
    const float* dS = scratch + b * NH * TT;
    float* dq = dqkv + b * T * 3 * C;
    // dQ = scale dS k, dK = scale dS^T q, dV = Pd^T dO
    gemm_rm(blas, false, false, T, HS, T, scale, dS, T, TT, q + C, 3 * C, HS, 0.0f, dq, 3 * C, HS, NH);
    gemm_rm(blas, true, false, T, HS, T, scale, dS, T, TT, q, 3 * C, HS, 0.0f, dq + C, 3 * C, HS, NH);
    gemm_rm(blas, true, false, T, HS, T, 1.0f, probs + b * NH * TT, T, TT, dout + b * T * C, C, HS, 0.0f, dq + 2 * C,
            3 * C, HS, NH);
  }
}

}  // namespace lattice::cuda
