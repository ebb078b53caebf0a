// BERT's registry entry: model.* keys -> BertConfig, and the functions the
// framework calls (models/registry.h), including prepare_batch (masked LM).
#include "models/bert/bert.h"
#include "models/registry.h"

namespace lattice::bert {

BertConfig config_of(const ModelConfig& m) {
  LATTICE_CHECK(m.tokenizer_vocab > 0,
                "bert: ModelConfig::tokenizer_vocab is unset — fill_derived() sets it from data.tokenizer");
  BertConfig c;
  copy_common_keys(m, c);
  c.d_ff = m.d_ff;
  c.tokenizer_vocab = m.tokenizer_vocab;
  (void)special_ids(c);  // one line when vocab_size leaves no room for them
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
