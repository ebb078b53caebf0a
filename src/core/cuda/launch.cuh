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

// acc[c] += sum over r < rows of term(r, c), for c < cols, in two stages
// when there are many rows. The rows are cut into column_sum_chunks(rows)
// chunks of rows_per_chunk (the last one shorter); block (tile, chunk) sums
// its chunk's rows of the tile's columns: threadIdx.x picks a column
// (coalesced reads along a row), threadIdx.y a lane of rows, and the lanes'
// partial sums are added in lane order. One chunk: the block adds its total
// into acc. Several: each chunk's totals go to partial[chunk * cols + c] and
// column_sum_combine_kernel adds them into acc in chunk order. The chunk
// count comes from rows alone (as every launch shape here), so the order of
// the sums is fixed by the shape. Before the chunks (2026-11-24, desk-check)
// a sum had only ceil(cols / 32) blocks, 24 for GPT-2's 768 columns on a GPU
// of 132 SMs, each walking every row.
constexpr int64_t kColSumChunkRows = 256;  // rows per chunk, at most (more only past 64 chunks: rows > 16384)
constexpr int64_t kColSumMaxChunks = 64;

inline int64_t column_sum_chunks(int64_t rows) {
  const int64_t c = (rows + kColSumChunkRows - 1) / kColSumChunkRows;
  return c < 1 ? 1 : c > kColSumMaxChunks ? kColSumMaxChunks : c;
}

template <typename Term>
__global__ void column_sum_kernel(float* out, bool into_acc, int64_t rows, int64_t rows_per_chunk, int64_t cols,
                                  Term term) {
  __shared__ float partial[kRowLanes][kColTile];
  const int64_t col = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) sum += term(r, col);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    if (into_acc)
      out[col] += total;
    else
      out[int64_t(blockIdx.y) * cols + col] = total;
  }
}

// acc[c] += the chunks' totals of column c, in chunk order. (A template, as
// the kernels above, so each .cu file that launches it has its own.)
template <int = 0>
__global__ void column_sum_combine_kernel(float* acc, const float* partial, int64_t chunks, int64_t cols) {
  for (int64_t c = first_index(); c < cols; c += grid_stride()) {
    float total = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) total += partial[k * cols + c];
    acc[c] += total;
  }
}

template <typename Term>
void launch_column_sum(cudaStream_t stream, float* acc, int64_t rows, int64_t cols, Term term) {
  if (cols == 0) return;
  const dim3 block(kColTile, kRowLanes);
  const unsigned tiles = unsigned((cols + kColTile - 1) / kColTile);
  const int64_t chunks = column_sum_chunks(rows);
  if (chunks == 1) {
    column_sum_kernel<<<dim3(tiles, 1), block, 0, stream>>>(acc, true, rows, rows, cols, term);
    return;
  }
  // The chunks' totals from the stream-ordered pool (which keeps freed
  // memory, backend.cpp: a sub-allocation, not a cudaMalloc). If even that
  // fails, nothing is launched and the error stays the last one, for the
  // caller's launch check to report (a one-chunk sum instead would change
  // the order of the sums with the free memory).
  float* partial = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(chunks * cols) * sizeof(float), stream) != cudaSuccess)
    return;
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  column_sum_kernel<<<dim3(tiles, unsigned(chunks)), block, 0, stream>>>(partial, false, rows, rows_per_chunk, cols,
                                                                         term);
  column_sum_combine_kernel<><<<blocks_for(cols), kThreads, 0, stream>>>(acc, partial, chunks, cols);
  cudaFreeAsync(partial, stream);
}

}  // namespace lattice::cuda
