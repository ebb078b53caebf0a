// GPT-2's registry entry: model.* keys -> Gpt2Config, and the four functions
// the framework calls (models/registry.h).
#include "models/gpt2/gpt2.h"
#include "models/registry.h"

namespace lattice::gpt2 {

Gpt2Config config_of(const ModelConfig& m) {
  LATTICE_CHECK(m.d_ff == 4 * m.d_model, "model.d_ff: gpt2 uses d_ff = 4 * d_model = {}, got {} — remove d_ff",
                4 * m.d_model, m.d_ff);
  Gpt2Config c;
  copy_common_keys(m, c);
  return c;
}

ModelEntry registry_entry() {
  ModelEntry e = chunk_model_entry<Gpt2>(ModelArch::gpt2, &config_of, &param_specs, &sharding_policy);
  return e;
}

}  // namespace lattice::gpt2
