// Device helpers shared by the kernel files of the CUDA backend (*.cu only):
// grid-stride indexing, deterministic block and row reductions, and the
// column-sum kernel behind every parameter gradient that sums over rows.
//
// Invariants: every reduction here combines values in an order fixed by the
// launch shape alone (warp shuffles down a fixed tree, then the warps' sums in
// warp order), never by scheduling, so results are bitwise reproducible run to
// run. Launch shapes depend only on the problem size, never on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cuda {

constexpr int kThreads = 256;          // element-wise kernels
constexpr int kRowThreads = 256;       // one block per row (norms, losses)
constexpr int64_t kMaxBlocks = 65535;  // grid-stride cap for element-wise kernels
constexpr int kColTile = 32;           // columns per block of column_sum_kernel
constexpr int kRowLanes = 16;          // row lanes per block of column_sum_kernel

inline int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < kMaxBlocks ? b : kMaxBlocks);
}

__device__ __forceinline__ int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
// Same NaN handling as std::max on the CPU path: b wins only when a < b.
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};

// Reduces v over the block with op; every thread gets the result. blockDim.x
// must be a multiple of 32 (at most 1024). Ends with a barrier, so the same
// block may call it again at once.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T warp_vals[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  T total = warp_vals[0];
  for (int w = 1; w < warps; ++w) total = op(total, warp_vals[w]);
  __syncthreads();
  return total;
}
template <typename T>
__device__ T block_sum(T v) {
  return block_reduce(v, SumOp{});
}
template <typename T>
__device__ T block_max(T v) {
  return block_reduce(v, MaxOp{});
}

// Max of the first kv elements of the row x (one block per row); every
// thread gets it. -inf for an empty row. S: float, Bf16 or F16, widened.
template <typename S>
__device__ __forceinline__ float row_max(const S* x, int64_t kv) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < kv; j += blockDim.x) mx = MaxOp{}(mx, widen(x[j]));
  return block_max(mx);
}

// Sum of exp(x[j] - mx) over the first kv elements of the row x.
template <typename S>
__device__ __forceinline__ float row_sum_exp(const S* x, int64_t kv, float mx) {
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < kv; j += blockDim.x) s += expf(widen(x[j]) - mx);
  return block_sum(s);
}

// The term of a plain column sum: x[r, c] of a row-major (rows, C) matrix of
// storage type S (float, Bf16, F16), widened to fp32.
template <typename S>
struct RowTerm {
  const S* x;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return widen(x[r * C + c]); }
};

// acc[c] += sum over r < rows of term(r, c), for c < cols. Block (kColTile,
// kRowLanes): threadIdx.x picks a column of the block's tile (coalesced reads
// along a row), threadIdx.y a lane of rows; the lanes' partial sums are added
// in lane order. Grid: ceil(cols / kColTile) blocks.
template <typename Term>
__global__ void column_sum_kernel(float* acc, int64_t rows, int64_t cols, Term term) {
  __shared__ float partial[kRowLanes][kColTile];
  const int64_t col = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += term(r, col);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    acc[col] += total;
  }
}

template <typename Term>
void launch_column_sum(cudaStream_t stream, float* acc, int64_t rows, int64_t cols, Term term) {
  if (cols == 0) return;
  dim3 block(kColTile, kRowLanes);
  dim3 grid(unsigned((cols + kColTile - 1) / kColTile));
  column_sum_kernel<<<grid, block, 0, stream>>>(acc, rows, cols, term);
}

}  // namespace lattice::cuda
