// CUDA LayerNorm and RMSNorm (declared in kernels.h). Forward and the input
// gradient run one block of kRowThreads per row: the row statistics are block
// sums in a fixed tree (launch.cuh), the per-element formulas are
// core/kernels/math.h, as on the CPU. The parameter gradients are column sums
// over rows (column_sum_kernel), deterministic without atomics.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"

namespace lattice::cuda {

namespace {

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, float eps, int64_t C) {
  const float* x = inp + int64_t(blockIdx.x) * C;
  float* y = out + int64_t(blockIdx.x) * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s) / float(C);
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - m) * (x[c] - m);
  const float rs = math::rstd_of(block_sum(v) / float(C), eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] = math::layernorm_out(x[c], m, rs, weight[c], bias[c]);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int64_t C) {
  const int64_t off = int64_t(blockIdx.x) * C;
  const float* x = inp + off;
  const float* dy = dout + off;
  const float m = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sum_dn = 0.0f, sum_dn_n = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float dn = weight[c] * dy[c];
    sum_dn += dn;
    sum_dn_n += dn * (x[c] - m) * rs;
  }
  const float mean_dn = block_sum(sum_dn) / float(C), mean_dn_n = block_sum(sum_dn_n) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[off + c] = math::layernorm_dinp(x[c], dy[c], weight[c], m, rs, mean_dn, mean_dn_n);
}

struct LayernormWeightTerm {  // dweight[c] += xhat[r, c] * dout[r, c]
  const float *dout, *inp, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return (inp[r * C + c] - mean[r]) * rstd[r] * dout[r * C + c];
  }
};

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, float eps,
                                       int64_t C) {
  const float* x = inp + int64_t(blockIdx.x) * C;
  float* y = out + int64_t(blockIdx.x) * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  const float rs = math::rstd_of(block_sum(ss) / float(C), eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] = math::rmsnorm_out(x[c], rs, weight[c]);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}

__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int64_t C) {
  const int64_t off = int64_t(blockIdx.x) * C;
  const float* x = inp + off;
  const float* dy = dout + off;
  const float rs = rstd[blockIdx.x];
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dy[c] * weight[c] * x[c];
  const float k = math::rmsnorm_k(rs, block_sum(dot), float(C));
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[off + c] = math::rmsnorm_dinp(x[c], dy[c], weight[c], rs, k);
}

struct RmsnormWeightTerm {  // dweight[c] += x[r, c] * rstd[r] * dout[r, c]
  const float *dout, *inp, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return inp[r * C + c] * rstd[r] * dout[r * C + c]; }
};

}  // namespace

void launch_layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, float eps, int64_t N, int64_t C) {
  if (N == 0) return;
  layernorm_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, eps, C);
}

void launch_layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                               int64_t C) {
  if (N == 0) return;
  layernorm_dinp_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, C);
  launch_column_sum(stream, dweight, N, C, LayernormWeightTerm{dout, inp, mean, rstd, C});
  launch_column_sum(stream, dbias, N, C, RowTerm{dout, C});
}

void launch_rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp, const float* weight,
                            float eps, int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, rstd, inp, weight, eps, C);
}

void launch_rmsnorm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_dinp_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, C);
  launch_column_sum(stream, dweight, N, C, RmsnormWeightTerm{dout, inp, rstd, C});
}

}  // namespace lattice::cuda
