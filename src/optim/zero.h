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
//                         outside the shard keep this rank's local sums).
//                         With parallel.dp_bucket_mb > 0 the plugin
//                         all-reduces the gradients in dp buckets during
//                         backward instead (booster/grad_buckets.h): twice
//                         the reduce-scatter's bytes, overlapped with
//                         backward, and every rank holds the whole dp sum
//   shard_grad_squares    this shard's part of the squared global norm
//                         (sum it over every rank of the job)
//   step                  update the shard, then all-gather the values, so
//                         every dp rank again holds all N values (marked
//                         written: a 16-bit shadow is then refreshed whole
//                         by the caller, core/param.h)
//
// With a 16-bit shadow (runtime.precision bf16/fp16) step gathers less: each
// rank rounds its updated shard into its block of the shadow and the dp group
// all-gathers the shadow (2 bytes per parameter); the fp32 values of the
// entries forward and backward read in fp32 (norms, biases, embeddings:
// every entry that is not a ParamSpec::matmul_weight) go in fp32 too, by
// broadcast from the rank whose shard holds them (their counts differ per
// rank: a tied token embedding at the start of the buffer sits in the first
// shards, so an all-gather of equal blocks would move it dp times). A piece
// of 64Ki elements or more is broadcast where it lies; the shorter ones of a
// rank (norms, biases) are packed into one block first. The all-gather and
// every broadcast start before any is waited on. The shadow then holds
// exactly the bits the fp32 gather and a whole refresh would give, and the
// fp32 values of matmul weights outside the shard stay stale
// (FlatParams::values_partial) until gather_values(). For GPT-2 124M (tied
// wte: 39.5M of its 124.4M parameters read in fp32) that is 407 MB per step
// instead of 498 MB. When the fp32-read entries are half the parameters or
// more, the 16-bit gather would move more than the fp32 one, and step
// gathers the fp32 values instead (gathers_half).
//
// The shard is updated entry piece by entry piece with ops::adamw_update /
// ops::sgd_update and the weight decay of the entry each element belongs to,
// so every element sees the arithmetic of the unsharded optimizer.
#pragma once

#include "comm/communicator.h"
#include "optim/optimizer.h"

namespace lattice::optim {

// The fp32 part of the 16-bit gather over the flat layout `entries` split
// into dp shards of `shard` elements: per dp rank, its pieces of fp32-read
// entries (every entry that is not a matmul weight, adjacent ones merged,
// cut at the shard edges) of at least `in_place_min` elements, broadcast in
// place, and the shorter ones, packed into its block of a staging buffer
// (blocks at packed_offsets, packed_offsets.back() elements in all).
// ZeroOptimizer runs it; `lattice plan` counts the staging buffer with it.
struct HalfGatherPlan {
  struct Range {
    int64_t begin, end;
  };
  std::vector<int64_t> fp32_counts;  // per rank: elements of fp32-read entries in its shard
  std::vector<std::vector<Range>> in_place, packed;
  std::vector<int64_t> packed_offsets;  // dp + 1
  int64_t fp32_total() const;           // the sum of fp32_counts: the elements broadcast in fp32
  // Bytes the 16-bit gather brings together over a buffer of `padded`
  // elements (a 2-byte shadow of fp32 values, as core/param.h has it), and
  // whether that is less than the fp32 gather's 4 bytes per element.
  int64_t bytes(int64_t padded) const { return 2 * padded + 4 * fp32_total(); }
  bool saves_bytes(int64_t padded) const { return bytes(padded) < 4 * padded; }
};
HalfGatherPlan plan_half_gather(const std::vector<ParamEntry>& entries, int64_t shard, int dp, int64_t in_place_min);

class ZeroOptimizer final : public Optimizer {
 public:
  // `params` must be padded to a multiple of dp.size(); `dp` is kept by
  // reference. In the 16-bit gather, pieces of fp32-read entries of at least
  // `in_place_min` elements are broadcast where they lie (tests lower it).
  ZeroOptimizer(const OptimizerOptions& opts, const FlatParams& params, comm::Group& dp,
                int64_t in_place_min = kInPlaceBroadcast);
  static constexpr int64_t kInPlaceBroadcast = int64_t(1) << 16;

  void reduce_scatter_grads(FlatParams& params);
  double shard_grad_squares(const FlatParams& params, int tp_size) const;
  // Reads the shard's summed gradients (reduce_scatter_grads first), scaled by grad_scale.
  void step(FlatParams& params, double lr, int64_t step, float grad_scale) override;
  // All-gathers the fp32 values when the 16-bit gather left them partial
  // (collective over dp; nothing otherwise). Checkpoint saves call it.
  void gather_values(FlatParams& params);
  // Off: step all-gathers the fp32 values even with a shadow (the path
  // before the 16-bit gather; tests and benchmarks compare the two).
  void set_half_gather(bool on) { half_gather_ = on; }
  // Whether step gathers the 16-bit shadow (and the fp32-read entries) rather
  // than every fp32 value: with a shadow, when that moves fewer bytes (a model
  // whose embeddings are most of it, a tiny one with a large vocabulary, does
  // better with the fp32 gather). And the bytes step's gather brings together
  // (every rank's block counted once: what each rank holds after it).
  bool gathers_half(const FlatParams& params) const;
  int64_t gather_bytes(const FlatParams& params) const;
  // The fp32 part of the 16-bit gather (what each rank broadcasts, in place or packed).
  const HalfGatherPlan& half_gather_plan() const { return half_; }
  // This shard's state, shard_numel() elements per buffer.
  std::vector<std::pair<std::string, Tensor*>> state() override;

  int64_t shard_begin() const { return begin_; }  // flat offset of this rank's shard
  int64_t shard_numel() const { return size_; }   // S, padding included

 private:
  OptimizerOptions o_;
  comm::Group& dp_;
  int64_t begin_ = 0, size_ = 0;
  Tensor m_, v_;           // (S) AdamW moments, or m_ = SGD momentum
  Tensor staging_;         // (S) reduce-scatter output, allocated by its first use (not with dp buckets)
  HalfGatherPlan half_;    // the 16-bit gather's fp32 part
  Tensor packed_staging_;  // its packed blocks (half_.packed_offsets.back()), allocated on first use
  bool half_gather_ = true;

  void gather_half(FlatParams& params);
  void gather_fp32(FlatParams& params);  // every value, in place
};

}  // namespace lattice::optim
