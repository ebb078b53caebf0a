#include "tp/cross_entropy.h"

#include <algorithm>

#include "core/ops.h"

namespace lattice::tp {

namespace {

// Local columns of the shard that are real vocabulary entries.
int64_t valid_columns(const Tensor& logits_local, int64_t vocab_start, int64_t vocab_size) {
  LATTICE_CHECK(logits_local.defined() && logits_local.ndim() >= 1, "tp::vocab_parallel_cross_entropy: no logits");
  LATTICE_CHECK(vocab_start >= 0 && vocab_size > 0, "tp::vocab_parallel_cross_entropy: vocab_start {} vocab_size {}",
                vocab_start, vocab_size);
  return std::clamp<int64_t>(vocab_size - vocab_start, 0, logits_local.dim(-1));
}

void check_targets(const Tensor& targets, int64_t vocab_size, int ignore_index) {
  LATTICE_CHECK(targets.defined() && targets.dtype() == DType::i32,
                "tp::vocab_parallel_cross_entropy: targets must be i32");
  if (!targets.device().is_cpu()) return;
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < targets.numel(); ++n)
    LATTICE_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < vocab_size),
                  "tp::vocab_parallel_cross_entropy: target {} of row {} is outside [0, {}) and not ignore_index ({})",
                  t[n], n, vocab_size, ignore_index);
}

}  // namespace

void vocab_parallel_cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits_local,
                                          const Tensor& targets, int64_t vocab_start, int64_t vocab_size,
                                          int ignore_index, comm::Group& tp) {
  const int64_t n_valid = valid_columns(logits_local, vocab_start, vocab_size);
  check_targets(targets, vocab_size, ignore_index);
  const int64_t N = targets.numel();
  const DType stats = master_dtype(logits_local.dtype());  // fp32 beside 16-bit logits
  Tensor row_max = Tensor::empty({N}, stats, logits_local.device());
  Tensor sums = Tensor::empty({2, N}, stats, logits_local.device());  // [sum exp; target logit]
  if (tp.size() == 1) {
    ops::shard_softmax_stats(row_max, sums, logits_local, targets, vocab_start, n_valid);  // one pass
  } else {
    ops::shard_row_max(row_max, logits_local, n_valid);
    tp.all_reduce(row_max, {.op = comm::ReduceOp::max})->wait_on_device();
    ops::shard_softmax_partials(sums, logits_local, row_max, targets, vocab_start, n_valid);
    tp.all_reduce(sums, {.op = comm::ReduceOp::sum})->wait_on_device();
  }
  ops::cross_entropy_from_partials(losses, lse, row_max, sums, targets, ignore_index);
}

void vocab_parallel_cross_entropy_backward(Tensor& dlogits_local, const Tensor& logits_local, const Tensor& lse,
                                           const Tensor& targets, float dloss, int64_t vocab_start, int64_t vocab_size,
                                           int ignore_index) {
  const int64_t n_valid = valid_columns(logits_local, vocab_start, vocab_size);
  ops::shard_cross_entropy_backward(dlogits_local, logits_local, lse, targets, dloss, vocab_start, n_valid,
                                    ignore_index);
}

}  // namespace lattice::tp
