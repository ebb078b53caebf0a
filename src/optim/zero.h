// ZeRO-1: the optimizer state sharded over the data-parallel group.
//
// Layout: the FlatParams is built with pad_multiple = dp (core/param.h), so
// its padded buffers hold P = dp * S elements, S = ceil(N / dp), N = numel().
// dp rank r owns the contiguous shard [r S, (r + 1) S) of the flat layout and
// keeps optimizer state (AdamW m and v, SGD momentum) for those S elements
// only; padding elements (>= N) are never updated and stay zero.
//
// Per step, collectives over dp in this order on every dp rank:
//   reduce_scatter_grads  sum the gradients over dp; afterwards this rank's
//                         shard of params.grads() holds the dp sum (elements
//                         outside the shard keep this rank's local sums)
//   shard_grad_squares    this shard's part of the squared global norm
//                         (sum it over every rank of the job)
//   step                  update the shard, then all-gather the values, so
//                         every dp rank again holds all N values (marked
//                         written: a 16-bit shadow is then refreshed whole
//                         by the caller, core/param.h)
// The shard is updated entry piece by entry piece with ops::adamw_update /
// ops::sgd_update and the weight decay of the entry each element belongs to,
// so every element sees the arithmetic of the unsharded optimizer.
#pragma once

#include "comm/communicator.h"
#include "optim/optimizer.h"

namespace lattice::optim {

class ZeroOptimizer final : public Optimizer {
 public:
  // `params` must be padded to a multiple of dp.size(); `dp` is kept by reference.
  ZeroOptimizer(const OptimizerOptions& opts, const FlatParams& params, comm::Group& dp);

  void reduce_scatter_grads(FlatParams& params);
  double shard_grad_squares(const FlatParams& params, int tp_size) const;
  // Reads the shard's summed gradients (reduce_scatter_grads first), scaled by grad_scale.
  void step(FlatParams& params, double lr, int64_t step, float grad_scale) override;
  // This shard's state, shard_numel() elements per buffer.
  std::vector<std::pair<std::string, Tensor*>> state() override;

  int64_t shard_begin() const { return begin_; }  // flat offset of this rank's shard
  int64_t shard_numel() const { return size_; }   // S, padding included

 private:
  OptimizerOptions o_;
  comm::Group& dp_;
  int64_t begin_ = 0, size_ = 0;
  Tensor m_, v_;    // (S) AdamW moments, or m_ = SGD momentum
  Tensor staging_;  // (S) reduce-scatter output
};

}  // namespace lattice::optim
