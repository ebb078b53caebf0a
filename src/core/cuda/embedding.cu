// CUDA token embedding (declared in kernels.h), vocab-parallel masking as in
// core/kernels/cpu/embedding.h.
//
// Backward without atomics: repeated ids would make float atomicAdd order,
// and so the result, depend on scheduling. Instead the token indices are
// stably sorted by weight row (cub radix sort on the row as an unsigned key of
// just the bits V needs, tokens outside the shard keyed V so they sort last
// and are skipped), and the first position of
// each run of equal rows gets one block that adds the run's dout rows, in
// token order, onto dweight. Each dweight element then sees exactly the CPU
// kernel's sequence of additions, so the result is bitwise the CPU's. The sort
// costs O(N) work and 4 N ints of workspace; the alternative of one block per
// vocabulary row scanning all ids costs O(V N) reads.
//
// Templated on the storage S of out / dout (float, Bf16, F16); the table and
// its gradient are fp32: forward rounds each looked-up value once, backward
// adds widened dout values in fp32 in the same order.
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace lattice::cuda {

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// Bits of the sort keys, which lie in [0, V].
int key_bits(int64_t V) {
  int bits = 1;
  while ((int64_t(1) << bits) <= V) ++bits;
  return bits;
}

template <typename S>
__global__ void embedding_forward_kernel(S* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                                         int64_t N, int64_t V, int64_t C) {
  for (int64_t i = first_index(); i < N * C; i += grid_stride()) {
    const int64_t row = int64_t(ids[i / C]) - vocab_start;
    out[i] = narrow<S>((row >= 0 && row < V) ? weight[row * C + i % C] : 0.0f);
  }
}

__global__ void sort_keys_kernel(uint32_t* keys, int32_t* tokens, const int32_t* ids, int64_t vocab_start, int64_t N,
                                 int64_t V) {
  for (int64_t n = first_index(); n < N; n += grid_stride()) {
    const int64_t row = int64_t(ids[n]) - vocab_start;
    keys[n] = uint32_t((row >= 0 && row < V) ? row : V);
    tokens[n] = int32_t(n);
  }
}

// Block p starts work only at the first position of a run of equal rows.
template <typename S>
__global__ void embedding_runs_kernel(float* dweight, const S* dout, const uint32_t* rows, const int32_t* tokens,
                                      int64_t N, int64_t V, int64_t C) {
  const int64_t p = blockIdx.x;
  const uint32_t row = rows[p];
  if (int64_t(row) == V || (p > 0 && rows[p - 1] == row)) return;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dweight[int64_t(row) * C + c];
    for (int64_t q = p; q < N && rows[q] == row; ++q) acc += widen(dout[int64_t(tokens[q]) * C + c]);
    dweight[int64_t(row) * C + c] = acc;
  }
}

size_t sort_temp_bytes(int64_t N, int64_t V) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), int(N), 0, key_bits(V));
  return bytes;
}

}  // namespace

template <typename S>
void launch_embedding_forward(cudaStream_t stream, S* out, const int32_t* ids, const float* weight, int64_t vocab_start,
                              int64_t N, int64_t V, int64_t C) {
  if (N * C == 0) return;
  embedding_forward_kernel<<<blocks_for(N * C), kThreads, 0, stream>>>(out, ids, weight, vocab_start, N, V, C);
}

size_t embedding_backward_workspace_bytes(int64_t N, int64_t V) {
  return 4 * align_up(size_t(N) * sizeof(int32_t)) + sort_temp_bytes(N, V);
}

template <typename S>
cudaError_t launch_embedding_backward(cudaStream_t stream, float* dweight, const S* dout, const int32_t* ids,
                                      int64_t vocab_start, int64_t N, int64_t V, int64_t C, void* workspace,
                                      size_t workspace_bytes) {
  if (N == 0 || C == 0) return cudaSuccess;
  const size_t part = align_up(size_t(N) * sizeof(int32_t));
  char* ws = static_cast<char*>(workspace);
  uint32_t* keys_in = reinterpret_cast<uint32_t*>(ws);
  uint32_t* keys_out = reinterpret_cast<uint32_t*>(ws + part);
  int32_t* tokens_in = reinterpret_cast<int32_t*>(ws + 2 * part);
  int32_t* tokens_out = reinterpret_cast<int32_t*>(ws + 3 * part);
  size_t temp_bytes = workspace_bytes - 4 * part;
  sort_keys_kernel<<<blocks_for(N), kThreads, 0, stream>>>(keys_in, tokens_in, ids, vocab_start, N, V);
  cudaError_t e = cub::DeviceRadixSort::SortPairs(ws + 4 * part, temp_bytes, keys_in, keys_out, tokens_in, tokens_out,
                                                  int(N), 0, key_bits(V), stream);
  if (e != cudaSuccess) return e;
  embedding_runs_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dweight, dout, keys_out, tokens_out, N, V, C);
  return cudaSuccess;
}

#define LATTICE_INSTANTIATE(S)                                                                                         \
  template void launch_embedding_forward<S>(cudaStream_t, S*, const int32_t*, const float*, int64_t, int64_t, int64_t, \
                                            int64_t);                                                                  \
  template cudaError_t launch_embedding_backward<S>(cudaStream_t, float*, const S*, const int32_t*, int64_t, int64_t,  \
                                                    int64_t, int64_t, void*, size_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cuda
