// The CUDA element-wise kernels (declared in kernels.h). Grid-stride loops
// over int64 indices; the math itself is core/kernels/math.h, the same code
// the CPU kernels run.
#include "core/cuda/kernels.h"
#include "core/kernels/math.h"

namespace lattice::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

__global__ void add_bias_kernel(float* out, const float* bias, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] += bias[i % cols];
}

// Block (32, kRowLanes): threadIdx.x picks a column of the block's 32-column
// tile (coalesced reads along a row), threadIdx.y a lane of rows; the lanes'
// partial sums are combined in shared memory in a fixed order.
constexpr int kRowLanes = 16;

__global__ void bias_backward_kernel(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  __shared__ float partial[kRowLanes][32];
  int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += dout[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    dbias[col] += total;
  }
}

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = math::gelu(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dinp[i] = dout[i] * math::gelu_grad(inp[i]);
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWArgs s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float mi = m[i], vi = v[i];
    param[i] = math::adamw_step(param[i], grad[i] * s.grad_scale, mi, vi, s.lr, s.beta1, s.beta2, s.eps, s.weight_decay,
                                s.bias_correction1, s.bias_correction2);
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void launch_add_bias(cudaStream_t stream, float* out, const float* bias, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(out, bias, rows, cols);
}

void launch_bias_backward(cudaStream_t stream, float* dbias, const float* dout, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  dim3 block(32, kRowLanes);
  dim3 grid(unsigned((cols + 31) / 32));
  bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, dout, rows, cols);
}

void launch_gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, n);
}

void launch_gelu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, inp, n);
}

void launch_add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, a, b, n);
}

void launch_adamw(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, m, v, n, args);
}

}  // namespace lattice::cuda
