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
#pragma once

#include <cstdint>
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

enum class InitKind : uint8_t { normal, zeros, ones };

// Owning pipeline layer: the embedding is layer kEmbeddingLayer, block i is
// layer i, the final norm and head are layer n_layer (kHeadLayer resolves to it).
inline constexpr int kEmbeddingLayer = -1;

struct ParamSpec {
  std::string name;  // logical name, e.g. "h.0.attn.c_attn.weight"
  Shape shape;       // logical shape
  Placement placement = Placement::replicated;
  int n_fused = 1;   // logical matrices fused along the split dim (QKV = 3, gate-up = 2)
  int layer = kEmbeddingLayer;
  std::string tie_group;  // non-empty: one logical parameter with a replica per owning stage
  bool weight_decay = false;
  InitKind init = InitKind::zeros;
  float init_std = 0.0f;  // for InitKind::normal
};

struct ParamEntry {
  ParamSpec spec;
  Shape local_shape;  // this rank's shard (the logical shape when unsharded)
  int64_t offset = 0; // element offset in the flat buffers
  int64_t numel = 0;
};

class FlatParams {
 public:
  FlatParams() = default;
  // Lays out `specs` in order (unsharded) in two flat buffers of `dtype`.
  FlatParams(const std::vector<ParamSpec>& specs, DType dtype, Device device = Device::cpu());

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
  DType dtype() const { return values_.dtype(); }

  // Initial values from the logical coordinates: element e of parameter
  // `name` is rng_normal(init_key(seed, name), 0, e) * init_std, so the values
  // do not depend on the layout.
  void init(uint64_t seed);
  void zero_grad() { grads_.zero_(); }

 private:
  std::vector<ParamEntry> entries_;
  Tensor values_, grads_;
};

}  // namespace lattice
