// CUDA LayerNorm and RMSNorm (declared in kernels.h). Forward and the input
// gradient run one block of kRowThreads per row: the row statistics are block
// sums in a fixed tree (launch.cuh), the per-element formulas are
// core/kernels/math.h, as on the CPU. The parameter gradients are column sums
// over rows (column_sum_kernel), deterministic without atomics. Templated on
// the activation storage (float, Bf16, F16: fp32 math, stats and parameter
// gradients fp32).
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

namespace {

template <typename S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp, const float* weight,
                                         const float* bias, float eps, int64_t C) {
  const S* x = inp + int64_t(blockIdx.x) * C;
  S* y = out + int64_t(blockIdx.x) * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += widen(x[c]);
  const float m = block_sum(s) / float(C);
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (widen(x[c]) - m) * (widen(x[c]) - m);
  const float rs = math::rstd_of(block_sum(v) / float(C), eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    y[c] = narrow<S>(math::layernorm_out(widen(x[c]), m, rs, weight[c], bias[c]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

template <typename S>
__global__ void layernorm_dinp_kernel(S* dinp, const S* dout, const S* inp, const float* weight, const float* mean,
                                      const float* rstd, int64_t C) {
  const int64_t off = int64_t(blockIdx.x) * C;
  const S* x = inp + off;
  const S* dy = dout + off;
  const float m = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sum_dn = 0.0f, sum_dn_n = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float dn = weight[c] * widen(dy[c]);
    sum_dn += dn;
    sum_dn_n += dn * (widen(x[c]) - m) * rs;
  }
  const float mean_dn = block_sum(sum_dn) / float(C), mean_dn_n = block_sum(sum_dn_n) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[off + c] = narrow<S>(math::layernorm_dinp(widen(x[c]), widen(dy[c]), weight[c], m, rs, mean_dn, mean_dn_n));
}

template <typename S>
struct LayernormWeightTerm {  // dweight[c] += xhat[r, c] * dout[r, c]
  const S *dout, *inp;
  const float *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return (widen(inp[r * C + c]) - mean[r]) * rstd[r] * widen(dout[r * C + c]);
  }
};

template <typename S>
__global__ void rmsnorm_forward_kernel(S* out, float* rstd, const S* inp, const float* weight, float eps, int64_t C) {
  const S* x = inp + int64_t(blockIdx.x) * C;
  S* y = out + int64_t(blockIdx.x) * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += widen(x[c]) * widen(x[c]);
  const float rs = math::rstd_of(block_sum(ss) / float(C), eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] = narrow<S>(math::rmsnorm_out(widen(x[c]), rs, weight[c]));
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}

template <typename S>
__global__ void rmsnorm_dinp_kernel(S* dinp, const S* dout, const S* inp, const float* weight, const float* rstd,
                                    int64_t C) {
  const int64_t off = int64_t(blockIdx.x) * C;
  const S* x = inp + off;
  const S* dy = dout + off;
  const float rs = rstd[blockIdx.x];
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += widen(dy[c]) * weight[c] * widen(x[c]);
  const float k = math::rmsnorm_k(rs, block_sum(dot), float(C));
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[off + c] = narrow<S>(math::rmsnorm_dinp(widen(x[c]), widen(dy[c]), weight[c], rs, k));
}

template <typename S>
struct RmsnormWeightTerm {  // dweight[c] += x[r, c] * rstd[r] * dout[r, c]
  const S *dout, *inp;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return widen(inp[r * C + c]) * rstd[r] * widen(dout[r * C + c]);
  }
};

}  // namespace

template <typename S>
void launch_layernorm_forward(cudaStream_t stream, S* out, float* mean, float* rstd, const S* inp, const float* weight,
                              const float* bias, float eps, int64_t N, int64_t C) {
  if (N == 0) return;
  layernorm_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, eps, C);
}

template <typename S>
void launch_layernorm_backward(cudaStream_t stream, S* dinp, float* dweight, float* dbias, const S* dout, const S* inp,
                               const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  layernorm_dinp_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, C);
  launch_column_sum(stream, dweight, N, C, LayernormWeightTerm<S>{dout, inp, mean, rstd, C});
  launch_column_sum(stream, dbias, N, C, RowTerm<S>{dout, C});
}

template <typename S>
void launch_rmsnorm_forward(cudaStream_t stream, S* out, float* rstd, const S* inp, const float* weight, float eps,
                            int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, rstd, inp, weight, eps, C);
}

template <typename S>
void launch_rmsnorm_backward(cudaStream_t stream, S* dinp, float* dweight, const S* dout, const S* inp,
                             const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_dinp_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, C);
  launch_column_sum(stream, dweight, N, C, RmsnormWeightTerm<S>{dout, inp, rstd, C});
}

#define LATTICE_INSTANTIATE(S)                                                                                        \
  template void launch_layernorm_forward<S>(cudaStream_t, S*, float*, float*, const S*, const float*, const float*,   \
                                            float, int64_t, int64_t);                                                 \
  template void launch_layernorm_backward<S>(cudaStream_t, S*, float*, float*, const S*, const S*, const float*,      \
                                             const float*, const float*, int64_t, int64_t);                           \
  template void launch_rmsnorm_forward<S>(cudaStream_t, S*, float*, const S*, const float*, float, int64_t, int64_t); \
  template void launch_rmsnorm_backward<S>(cudaStream_t, S*, float*, const S*, const S*, const float*, const float*,  \
                                           int64_t, int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
