// CUDA row softmax over the last dim (declared in kernels.h), the twin of
// cpu::softmax_forward/backward. One block of kRowThreads per row: the row max,
// the sum of exponentials and the backward's dot product are block reductions
// in a fixed tree (launch.cuh); the per-element formulas are
// math::softmax_prob and math::softmax_grad (the CPU computes the same values
// through its vectorised exp, kernels/cpu/vec_math.h). Every thread reads
// its elements of a row before writing them, after the row's reductions, so
// out may be inp and dinp may be dout.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"

namespace lattice::cuda {

namespace {

__global__ void softmax_forward_kernel(float* out, const float* inp, int64_t K) {
  const int64_t off = int64_t(blockIdx.x) * K;
  const float mx = row_max(inp + off, K);
  const float inv = 1.0f / row_sum_exp(inp + off, K, mx);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) out[off + k] = math::softmax_prob(inp[off + k], mx, inv);
}

__global__ void softmax_backward_kernel(float* dinp, const float* dout, const float* out, int64_t K) {
  const int64_t off = int64_t(blockIdx.x) * K;
  float dot = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) dot += dout[off + k] * out[off + k];
  dot = block_sum(dot);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
    dinp[off + k] = math::softmax_grad(out[off + k], dout[off + k], dot);
}

}  // namespace

void launch_softmax_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int64_t K) {
  if (N == 0 || K == 0) return;
  softmax_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, inp, K);
}

void launch_softmax_backward(cudaStream_t stream, float* dinp, const float* dout, const float* out, int64_t N,
                             int64_t K) {
  if (N == 0 || K == 0) return;
  softmax_backward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, out, K);
}

}  // namespace lattice::cuda
