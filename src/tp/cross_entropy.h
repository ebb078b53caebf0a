// Vocabulary-parallel cross-entropy (Megatron cross_entropy.py): the loss on
// logits split by vocabulary columns, without ever gathering them.
//
// Rank r holds columns [vocab_start, vocab_start + V_l) of the padded
// vocabulary (the output of a vocab-parallel LM head, core/param.h
// Placement::vocab). Forward takes each row's max over local columns and
// all-reduces it (max), then the local sum of exp(logit - max) and the
// target's logit (0 on ranks that do not hold it) and all-reduces both (sum):
// two small (N)-sized collectives instead of an (N, V) gather; with one rank
// the max and the sums come from one pass over the logits. Global columns
// >= vocab_size are padding: they never enter the max or the sum (so they
// never win, whatever they hold) and get zero gradient. Rows whose target is
// ignore_index get loss 0 and zero gradient; other targets must lie in
// [0, vocab_size).
//
// Shapes: logits_local (N, V_l), targets (N) i32 (global ids), losses (N) and
// lse (N) the full per-token values, identical on every rank.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::tp {

void vocab_parallel_cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits_local,
                                          const Tensor& targets, int64_t vocab_start, int64_t vocab_size,
                                          int ignore_index, comm::Group& tp);
// dlogits_local (N, V_l) = (softmax - onehot(target)) * dloss on the local
// columns (overwrite; padding columns and ignored rows 0); may be the same
// tensor as logits_local. Needs lse from forward and no communication.
void vocab_parallel_cross_entropy_backward(Tensor& dlogits_local, const Tensor& logits_local, const Tensor& lse,
                                           const Tensor& targets, float dloss, int64_t vocab_start, int64_t vocab_size,
                                           int ignore_index);

}  // namespace lattice::tp
