// Parameters as named views into one flat buffer, driven by one table.
//
// A model lists each parameter once as a ParamSpec: logical name (HF naming
// where the model has one), logical (unsharded) shape, tp placement, fused
// count, owning pipeline layer, tie group, weight decay and init rule. From
// that table alone come the local shape, the flat-buffer offsets, what the
// optimizer decays, grad-norm de-duplication, checkpoint names and slicing.
// Optim, pipeline and checkpoint read these types without knowing any model.
//
// FlatParams owns two buffers of the same layout: values and gradients.
// Gradients accumulate over microbatches; zero_grad() clears them per step.
// With pad_multiple > 1 (ZeRO-1: the dp size) both buffers are allocated with
// padded_numel() = numel() rounded up to that multiple, so they split into
// equal blocks for reduce-scatter and all-gather; values()/grads() stay the
// first numel() elements and the padding stays zero.
//
// Under runtime.precision bf16 or fp16 FlatParams also holds a 16-bit shadow
// of the values (enable_shadow): the same padded layout, rounded once per
// write, which the matmuls read instead of rounding the fp32 weights on every
// call. The fp32 values stay the master copy. A version counter keeps the two
// honest: writers bump it, refresh_shadow() records the version it rounded,
// and reading a stale shadow throws (see "the 16-bit shadow" below).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lattice {

// How a tensor is split over the tp group (dim 0 is the output dim of a
// linear weight stored (OC, C)):
//   replicated  every rank holds the whole tensor
//   column      split along dim 0 (output features); n_fused parts split separately
//   row         split along the last dim (input features); biases stay replicated
//   vocab       split along dim 0 (vocabulary rows)
enum class Placement : uint8_t { replicated, column, row, vocab };
std::string_view placement_name(Placement p);

// Initial-value rules, applied to the LOGICAL tensor (then sliced), so values
// never depend on tp. fan_in / fan_out are the logical dims (last, first) of a
// 2-D weight. scaled_normal is normal(init_std) already scaled by the model
// (GPT-2's residual projections use std / sqrt(2 L)); it is kept distinct so
// tables say what they mean.
enum class InitKind : uint8_t {
  zeros,
  ones,
  normal,           // N(0, init_std^2)
  scaled_normal,    // N(0, init_std^2), init_std scaled for residual projections
  uniform,          // U(-init_std, init_std)
  xavier_uniform,   // U(-a, a), a = sqrt(6 / (fan_in + fan_out))
  xavier_normal,    // N(0, 2 / (fan_in + fan_out))
  kaiming_uniform,  // U(-a, a), a = sqrt(3 / fan_in)  (gain 1)
  kaiming_normal,   // N(0, 1 / fan_in)
};

// Owning pipeline layer: the embedding is layer kEmbeddingLayer, block i is
// layer i, the final norm and head are layer n_layer (kHeadLayer resolves to it).
inline constexpr int kEmbeddingLayer = -1;
inline constexpr int kNoLayer = -1000;

struct ParamSpec {
  std::string name;  // logical name, e.g. "h.0.attn.c_attn.weight"
  Shape shape;       // logical shape
  Placement placement = Placement::replicated;
  int n_fused = 1;  // logical matrices fused along the split dim (QKV = 3, gate-up = 2)
  int layer = kEmbeddingLayer;
  std::string tie_group{};   // non-empty: one logical parameter with a replica per owning stage
  int tie_layer = kNoLayer;  // a tied parameter also lives with this layer (GPT-2's LM head uses wte)
  bool tie_replica = false;  // set by stage selection: held here only as the replica for tie_layer
  bool weight_decay = false;
  InitKind init = InitKind::zeros;
  float init_std = 0.0f;  // for InitKind::normal
  int max_shards = 0;     // column only, > 0: each part splits into at most this many blocks
                          // (LLaMA k/v: n_kv_head); a larger tp holds each block on
                          // tp / max_shards consecutive ranks (tp_replicas), whose
                          // gradients the model sums (tp/replicas.h)
  // A linear layer's weight or an untied LM head (the policy's attn_qkv,
  // attn_out, mlp_in, mlp_out and lm_head roles on a 2-D tensor): forward and
  // backward read it only as a matmul operand, so under a 16-bit shadow its
  // fp32 values are read by the optimizer and checkpoints alone, and ZeRO-1
  // gathers only its 16-bit copy (optim/zero.h). Models get no fp32 view of
  // such a weight when there is a shadow (ChunkModel::bind).
  bool matmul_weight = false;
};

// This rank's place in the tensor-parallel group, for slicing logical tensors.
// Vocabulary-split tensors are padded to a multiple of size * vocab_multiple
// rows (Megatron's make-vocab-size-divisible-by); padded rows are zero, never
// win a softmax and never receive gradient.
struct TpShard {
  int rank = 0;
  int size = 1;
  int64_t vocab_multiple = 1;  // the plugin sets model.vocab_multiple (64 by default)
};

int64_t padded_vocab(int64_t vocab, const TpShard& shard);

// How many tp ranks hold each block of `spec`: tp / max_shards for a column
// tensor whose max_shards (> 0) is below tp, otherwise 1 (replicated tensors
// count as not split: their weight in the grad norm is the caller's).
int tp_replicas(const ParamSpec& spec, const TpShard& shard);

// How a placement slices the logical tensor (shapes of ParamSpec):
//   column  dim 0 = n_fused parts of P rows; with S = tp / tp_replicas blocks
//           and s = r / tp_replicas, rank r keeps rows
//           [f P + s P/S, f P + (s+1) P/S) of every part f, in part order
//   row     last dim split evenly, rank r keeps block r
//   vocab   dim 0 padded to padded_vocab(), rank r keeps block r
//   replicated  everything
Shape local_shape(const ParamSpec& spec, const TpShard& shard);
// The logical element index of local element `local`, or -1 for a padding row.
int64_t local_to_logical(const ParamSpec& spec, const TpShard& shard, int64_t local);
// Throws a one-line Error when the placement cannot split `spec` over shard.size.
void check_shardable(const ParamSpec& spec, const TpShard& shard);

struct ParamEntry {
  ParamSpec spec;
  Shape local_shape;   // this rank's shard (the logical shape when unsharded)
  int64_t offset = 0;  // element offset in the flat buffers
  int64_t numel = 0;
};

// Each spec's entry for this tp shard, in order, at consecutive offsets of
// the flat buffers (FlatParams' layout, for planners that allocate nothing).
std::vector<ParamEntry> lay_out_params(const std::vector<ParamSpec>& specs, const TpShard& shard);

// The fp32 values' write count and the count the 16-bit shadow was rounded
// at (kNever before its first refresh), shared by a FlatParams and the
// ShadowViews it hands out, so a view stays checkable after a move.
struct ShadowVersions {
  static constexpr uint64_t kNever = ~uint64_t(0);
  uint64_t values = 0, shadow = kNever;
};

// One parameter's view of the 16-bit shadow (or of adjacent entries read as one
// fused weight). get() checks, on every read, that the shadow was rounded from
// the current fp32 values, and throws naming the parameter when it was not.
class ShadowView {
 public:
  ShadowView() = default;
  bool defined() const { return view_.defined(); }
  const Tensor& get() const&;
  const Tensor& get() const&& = delete;  // the view would die with the temporary

 private:
  friend class FlatParams;
  ShadowView(Tensor view, std::shared_ptr<const ShadowVersions> versions, std::string name)
      : view_(std::move(view)), versions_(std::move(versions)), name_(std::move(name)) {}
  Tensor view_;
  std::shared_ptr<const ShadowVersions> versions_;
  std::string name_;
};

class FlatParams {
 public:
  FlatParams() = default;
  // Lays out this rank's shard of each spec, in order, in two flat buffers.
  FlatParams(const std::vector<ParamSpec>& specs, DType dtype, Device device = Device::cpu(), const TpShard& shard = {},
             int64_t pad_multiple = 1);

  const std::vector<ParamEntry>& entries() const { return entries_; }
  const ParamEntry& entry(const std::string& name) const;
  bool has(const std::string& name) const;
  Tensor value(const std::string& name) const;  // view with the local shape
  Tensor grad(const std::string& name) const;
  Tensor value(const ParamEntry& e) const { return values_.view(e.offset, e.local_shape); }
  Tensor grad(const ParamEntry& e) const { return grads_.view(e.offset, e.local_shape); }

  Tensor& values() { return values_; }  // the flat buffers, (numel)
  Tensor& grads() { return grads_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  int64_t numel() const { return values_.numel(); }
  // The padded buffers (padded_numel()), whose first numel() elements are values()/grads().
  Tensor& padded_values() { return padded_values_; }
  Tensor& padded_grads() { return padded_grads_; }
  int64_t padded_numel() const { return padded_values_.numel(); }
  DType dtype() const { return values_.dtype(); }
  const TpShard& shard() const { return shard_; }

  // Initial values from the logical coordinates: element e of parameter
  // `name` is drawn from rng_*(init_key(seed, name), 0, e) by its InitKind,
  // so the values do not depend on the layout (padding rows are 0). A writer:
  // marks the values written.
  void init(uint64_t seed);
  void zero_grad() { grads_.zero_(); }

  // ---- the 16-bit shadow (runtime.precision bf16 / fp16) ------------------
  // The values rounded to bf16 or f16 (nearest even, as a 16-bit matmul
  // rounds an fp32 operand), padded_numel() elements of the same layout on
  // the same device: 2 bytes per parameter more. Only an f32 FlatParams has
  // one. Models bind their matmul weights to it (ShadowView); norms,
  // embeddings, optimizers and checkpoints keep reading the fp32 values.
  //
  // The contract, so a stale shadow is an error and never a silent result:
  //   - every writer of the fp32 values calls mark_written() after writing
  //     (init, the optimizers' step incl. ZeRO-1's all-gather, a checkpoint
  //     load, and anything new that writes them, a broadcast say);
  //   - whoever drives the writes calls refresh_shadow() before the next
  //     forward (the plugin after init, each optimizer step and a load;
  //     bench/train_step likewise);
  //   - every read through a ShadowView checks the shadow is current.
  // A writer that forgets mark_written() escapes the check; the bit-for-bit
  // tests against per-call rounding (test_shadow_weights) catch that.
  //
  // Partial values (ZeRO-1's 16-bit gather, optim/zero.h): after an update
  // each dp rank rounds its own shard into the shadow and the dp group
  // all-gathers the shadow, plus the fp32 values of every entry that is not
  // a matmul weight (ParamSpec::matmul_weight). The fp32 values of matmul
  // weights outside this rank's shard are then stale: values_partial() is
  // true until a full fp32 gather (ZeroOptimizer::gather_values; checkpoint
  // saves do it first) or a writer of every value (init, a checkpoint load)
  // calls mark_values_complete(). While they are partial, rounding them
  // again (refresh_shadow after a new write) is an error.
  void enable_shadow(DType half);  // bf16 or f16; stale until the first refresh
  bool has_shadow() const { return shadow_.defined(); }
  DType shadow_dtype() const { return shadow_.dtype(); }
  void mark_written() { ++versions_->values; }
  // Rounds all values into the shadow and records their version. Nothing
  // without a shadow, or when nothing was written since the last rounding.
  void refresh_shadow();
  // The shadow was made current by other means (ZeRO-1's 16-bit gather):
  // records the values' version as rounded and the values as partial.
  void mark_shadow_gathered();
  void mark_values_complete() { values_partial_ = false; }
  bool values_partial() const { return values_partial_; }
  bool shadow_current() const { return versions_->shadow == versions_->values; }
  uint64_t values_version() const { return versions_->values; }
  ShadowView shadow_view(const ParamEntry& e) const;
  // Elements [offset, offset + numel(shape)) as `shape`, named `what` in errors (fused weights).
  ShadowView shadow_view(int64_t offset, Shape shape, std::string what) const;
  const Tensor& shadow() const { return shadow_; }  // the flat shadow (padded_numel()), unchecked
  Tensor& padded_shadow() { return shadow_; }       // the same, for its writers (ZeRO-1's gather)

 private:
  std::vector<ParamEntry> entries_;
  TpShard shard_;
  Tensor padded_values_, padded_grads_;  // the storage
  Tensor values_, grads_;                // views of their first numel() elements
  Tensor shadow_;                        // padded_numel() bf16/f16, or undefined
  std::shared_ptr<ShadowVersions> versions_ = std::make_shared<ShadowVersions>();
  bool values_partial_ = false;  // see "Partial values" above
};

}  // namespace lattice
