// CPU pieces of softmax cross-entropy over a column shard of the logits.
//
// Vocabulary-parallel cross-entropy (tp/cross_entropy.h) holds columns
// [col_start, col_start + K) of the (padded) vocabulary on each rank and never
// gathers the logits: each rank reduces its own columns, the caller all-reduces
// the per-row statistics over tp, and the loss is finished from them. Columns
// j >= n_valid of a shard are padding (global column >= the logical vocab
// size): they never enter a max or a sum and get zero gradient, whatever they
// hold. Targets are global column ids; ignore_index (or any id outside this
// shard) simply picks nothing here.
//
// Shapes: N rows, K local columns; stats are (N) per row.
//
// T is the storage type of the logits and dlogits: float, double, or Bf16 /
// F16 (core/kernels/storage.h); row_max, sums, lse, losses and dloss are
// compute_t<T> (fp32 beside 16-bit logits), all arithmetic in compute_t<T>.
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"

namespace lattice::cpu {

// row_max (N) = max over columns [0, n_valid) of logits (N, K); -inf when n_valid <= 0.
template <typename T>
void shard_row_max(compute_t<T>* row_max, const T* logits, int64_t n_valid, int64_t N, int64_t K);

// sums (2, N): sums[n] = sum_{j < n_valid} exp(logits[n, j] - row_max[n]);
// sums[N + n] = logits[n, targets[n] - col_start] when that column lies in
// [0, n_valid), else 0.
template <typename T>
void shard_softmax_partials(compute_t<T>* sums, const T* logits, const compute_t<T>* row_max, const int32_t* targets,
                            int64_t col_start, int64_t n_valid, int64_t N, int64_t K);

// shard_row_max and shard_softmax_partials in one pass over the logits
// (vec_math.h max_sum_exp): what a single shard (tp = 1) needs, reading the
// (N, K) logits from memory once instead of twice. Same outputs up to
// rounding: the sum is rescaled block by block as the max grows.
template <typename T>
void shard_softmax_stats(compute_t<T>* row_max, compute_t<T>* sums, const T* logits, const int32_t* targets,
                         int64_t col_start, int64_t n_valid, int64_t N, int64_t K);

// From the tp-reduced statistics: lse (N) = row_max + log(sums[0]);
// losses (N) = lse - sums[1], 0 where targets == ignore_index.
template <typename T>
void cross_entropy_from_partials(T* losses, T* lse, const T* row_max, const T* sums, const int32_t* targets,
                                 int ignore_index, int64_t N);

// dlogits (N, K) = (exp(logits - lse) - [col_start + j == target]) * dloss on
// columns j < n_valid; 0 on padding columns and on rows with ignored targets.
// dlogits may be the same memory as logits.
template <typename T>
void shard_cross_entropy_backward(T* dlogits, const T* logits, const compute_t<T>* lse, const int32_t* targets,
                                  compute_t<T> dloss, int64_t col_start, int64_t n_valid, int ignore_index, int64_t N,
                                  int64_t K);

}  // namespace lattice::cpu
