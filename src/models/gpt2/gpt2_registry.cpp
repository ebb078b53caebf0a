// GPT-2's registry entry: model.* keys -> Gpt2Config, and the four functions
// the framework calls (models/registry.h).
#include "models/gpt2/gpt2.h"
#include "models/registry.h"

namespace lattice::gpt2 {

Gpt2Config config_of(const ModelConfig& m) {
  LATTICE_CHECK(m.d_ff == 4 * m.d_model, "model.d_ff: gpt2 uses d_ff = 4 * d_model = {}, got {} — remove d_ff",
                4 * m.d_model, m.d_ff);
  Gpt2Config c;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.d_model = m.d_model;
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
  e.arch = ModelArch::gpt2;
  e.param_specs = [](const ModelConfig& m) { return param_specs(config_of(m)); };
  e.policy = [](const ModelConfig& m) { return sharding_policy(config_of(m)); };
  e.build = [](const ModelConfig& m, FlatParams& p, comm::Group& tp, StageSpan span) -> std::unique_ptr<LanguageModel> {
    return std::make_unique<Gpt2>(config_of(m), p, tp, span);
  };
  e.activation_bytes = [](const ModelConfig& m, const StageSpan& span, const TpShard& shard, DType dtype, int64_t B,
                          int64_t T) { return Gpt2::activation_bytes_of(config_of(m), span, shard, dtype, B, T); };
  return e;
}

}  // namespace lattice::gpt2
