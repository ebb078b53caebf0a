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
  ModelEntry e = chunk_model_entry<Bert>(ModelArch::bert, &config_of, &param_specs, &sharding_policy);
  e.prepare_batch = [](const ModelConfig& m, const StepCoords& coords, Tensor& inputs, Tensor& targets) {
    mask_lm_batch(config_of(m), coords, inputs, targets);
  };
  return e;
}

}  // namespace lattice::bert
