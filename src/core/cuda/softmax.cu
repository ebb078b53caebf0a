// CUDA row softmax over the last dim (declared in kernels.h), the twin of
// cpu::softmax_forward/backward. One block of kRowThreads per row: the row max,
// the sum of exponentials and the backward's dot product are block reductions
// in a fixed tree (launch.cuh); the per-element formulas are
// math::softmax_prob and math::softmax_grad (the CPU computes the same values
// through its vectorised exp, kernels/cpu/vec_math.h). Every thread reads
// its elements of a row before writing them, after the row's reductions, so
// out may be inp and dinp may be dout. Templated on the storage S (float,
// Bf16, F16): loads widened, fp32 math and reductions, one rounding on store.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

namespace {

template <typename S>
__global__ void softmax_forward_kernel(S* out, const S* inp, int64_t K) {
  const int64_t off = int64_t(blockIdx.x) * K;
  const float mx = row_max(inp + off, K);
  const float inv = 1.0f / row_sum_exp(inp + off, K, mx);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
    out[off + k] = narrow<S>(math::softmax_prob(widen(inp[off + k]), mx, inv));
}

template <typename S>
__global__ void softmax_backward_kernel(S* dinp, const S* dout, const S* out, int64_t K) {
  const int64_t off = int64_t(blockIdx.x) * K;
  float dot = 0.0f;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) dot += widen(dout[off + k]) * widen(out[off + k]);
  dot = block_sum(dot);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
    dinp[off + k] = narrow<S>(math::softmax_grad(widen(out[off + k]), widen(dout[off + k]), dot));
}

}  // namespace

template <typename S>
void launch_softmax_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t K) {
  if (N == 0 || K == 0) return;
  softmax_forward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(out, inp, K);
}

template <typename S>
void launch_softmax_backward(cudaStream_t stream, S* dinp, const S* dout, const S* out, int64_t N, int64_t K) {
  if (N == 0 || K == 0) return;
  softmax_backward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dinp, dout, out, K);
}

#define LATTICE_INSTANTIATE(S)                                                           \
  template void launch_softmax_forward<S>(cudaStream_t, S*, const S*, int64_t, int64_t); \
  template void launch_softmax_backward<S>(cudaStream_t, S*, const S*, const S*, int64_t, int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
