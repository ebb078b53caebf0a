// BERT's registry entry: model.* keys -> BertConfig, and the functions the
// framework calls (models/registry.h), including prepare_batch (masked LM).
#include "models/bert/bert.h"
#include "models/registry.h"

namespace lattice::bert {

BertConfig config_of(const ModelConfig& m) {
  LATTICE_CHECK(m.vocab_size > 4, "model.vocab_size: bert needs room for its 4 special ids, got {}", m.vocab_size);
  BertConfig c;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.d_model = m.d_model;
  c.d_ff = m.d_ff;
  c.vocab_size = m.vocab_size;
  c.max_seq_len = m.max_seq_len;
  c.tie_embeddings = m.tie_embeddings;
  c.dropout = m.dropout;
  c.norm_eps = float(m.norm_eps);
  c.init_std = float(m.init_std);
  return c;
}

ModelEntry registry_entry() {
  ModelEntry e;
  e.arch = ModelArch::bert;
  e.param_specs = [](const ModelConfig& m) { return param_specs(config_of(m)); };
  e.policy = [](const ModelConfig& m) { return sharding_policy(config_of(m)); };
  e.build = [](const ModelConfig& m, FlatParams& p, comm::Group& tp, StageSpan span) -> std::unique_ptr<LanguageModel> {
    return std::make_unique<Bert>(config_of(m), p, tp, span);
  };
  e.activation_bytes = [](const ModelConfig& m, const StageSpan& span, const TpShard& shard, DType dtype, int64_t B,
                          int64_t T) { return Bert::activation_bytes_of(config_of(m), span, shard, dtype, B, T); };
  e.prepare_batch = [](const ModelConfig& m, const StepCoords& coords, Tensor& inputs, Tensor& targets) {
    mask_lm_batch(config_of(m), coords, inputs, targets);
  };
  return e;
}

}  // namespace lattice::bert
