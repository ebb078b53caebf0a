// The model registry: model.arch -> everything the framework needs from a
// model. `lattice train`, `lattice plan`, verify-layout and checkpoints build
// every model through here, so adding a model is a folder (parameter table,
// sharding policy, forward/backward) plus one ModelEntry in registry.cpp
// (docs/adding-a-model.md walks through it).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/ops.h"
#include "core/param.h"
#include "models/model.h"
#include "models/policy.h"

namespace lattice {

struct ModelEntry {
  ModelArch arch;
  // The parameter table with the policy applied (apply_policy); throws one
  // line for a config the model cannot take.
  std::function<std::vector<ParamSpec>(const ModelConfig&)> param_specs;
  std::function<ShardingPolicy(const ModelConfig&)> policy;
  std::function<std::unique_ptr<LanguageModel>(const ModelConfig&, FlatParams&, comm::Group&, StageSpan)> build;
  std::function<ActivationBytes(const ModelConfig&, const StageSpan&, const TpShard&, DType, int64_t B, int64_t T,
                                ops::AttentionState attention)>
      activation_bytes;
  // Optional: the model's training objective on a batch the loader filled with
  // windows (inputs) and next tokens (targets), both (B, T) i32, rewritten in
  // place; e.g. BERT's masked-LM masking. `coords` keys its randomness
  // (sample0 = global index of row 0), so it must not depend on the layout.
  std::function<void(const ModelConfig&, const StepCoords& coords, Tensor& inputs, Tensor& targets)> prepare_batch;
};

// Copies the model.* keys every architecture's config has (n_layer, n_head,
// d_model, vocab_size, max_seq_len, tie_embeddings, dropout, norm_eps,
// init_std) into `c`; config_of adds the model's own.
template <class Cfg>
void copy_common_keys(const ModelConfig& m, Cfg& c) {
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.d_model = m.d_model;
  c.vocab_size = m.vocab_size;
  c.max_seq_len = m.max_seq_len;
  c.tie_embeddings = m.tie_embeddings;
  c.dropout = m.dropout;
  c.norm_eps = float(m.norm_eps);
  c.init_std = float(m.init_std);
}

// The entry of a model built the usual way: `config_of` turns model.* keys
// into the model's config (one line for what it cannot take), `specs` and
// `policy` are its table and policy, Model(cfg, params, tp, span) its chunk and
// Model::activation_bytes_of(cfg, span, shard, dtype, B, T, attention) its byte count.
template <class Model, class Cfg>
ModelEntry chunk_model_entry(ModelArch arch, Cfg (*config_of)(const ModelConfig&),
                             std::vector<ParamSpec> (*specs)(const Cfg&), ShardingPolicy (*policy)(const Cfg&)) {
  ModelEntry e;
  e.arch = arch;
  e.param_specs = [=](const ModelConfig& m) { return specs(config_of(m)); };
  e.policy = [=](const ModelConfig& m) { return policy(config_of(m)); };
  e.build = [=](const ModelConfig& m, FlatParams& p, comm::Group& tp,
                StageSpan span) -> std::unique_ptr<LanguageModel> {
    return std::make_unique<Model>(config_of(m), p, tp, span);
  };
  e.activation_bytes = [=](const ModelConfig& m, const StageSpan& span, const TpShard& shard, DType dtype, int64_t B,
                           int64_t T, ops::AttentionState attention) {
    return Model::activation_bytes_of(config_of(m), span, shard, dtype, B, T, attention);
  };
  return e;
}

const std::vector<ModelEntry>& model_registry();
const ModelEntry& model_entry(ModelArch arch);  // one line listing the registered archs if absent
std::vector<std::string> registered_archs();

std::vector<ParamSpec> model_param_specs(const ModelConfig& cfg);
ShardingPolicy model_sharding_policy(const ModelConfig& cfg);
// The model object for pipeline chunk `span` (the whole model by default).
// `params` must hold the chunk's entries (select_stage_params of
// model_param_specs(cfg)) sharded for this rank of `tp` (a group of one rank
// for the unsharded model).
std::unique_ptr<LanguageModel> build_model(const ModelConfig& cfg, FlatParams& params, comm::Group& tp,
                                           StageSpan span = {});
// The activation bytes of chunk `span` of that model, sharded as `shard`, at
// microbatch (B, T) in `dtype`, without building it (lattice plan).
// `attention`: the state attention takes there (ops::attention_state_shape).
ActivationBytes model_activation_bytes(const ModelConfig& cfg, const StageSpan& span, const TpShard& shard, DType dtype,
                                       int64_t B, int64_t T, ops::AttentionState attention);

}  // namespace lattice
