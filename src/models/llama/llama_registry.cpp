// LLaMA's registry entry: model.* keys -> LlamaConfig, and the functions the
// framework calls (models/registry.h).
#include "models/llama/llama.h"
#include "models/registry.h"

namespace lattice::llama {

LlamaConfig config_of(const ModelConfig& m) {
  const int kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  LATTICE_CHECK(m.n_head > 0 && m.d_model % m.n_head == 0, "model.d_model: {} is not divisible by model.n_head ({})",
                m.d_model, m.n_head);
  LATTICE_CHECK(kv > 0 && m.n_head % kv == 0, "model.n_kv_head: model.n_head ({}) is not divisible by n_kv_head ({})",
                m.n_head, kv);
  LATTICE_CHECK((m.d_model / m.n_head) % 2 == 0,
                "model.d_model: llama's rotary embeddings need an even head size, got d_model / n_head = {}",
                m.d_model / m.n_head);
  LlamaConfig c;
  copy_common_keys(m, c);
  c.n_kv_head = kv;
  c.d_ff = m.d_ff > 0 ? m.d_ff : 4 * m.d_model;
  c.rope_theta = m.rope_theta > 0 ? m.rope_theta : 10000.0;
  return c;
}

ModelEntry registry_entry() {
  ModelEntry e = chunk_model_entry<Llama>(ModelArch::llama, &config_of, &param_specs, &sharding_policy);
  return e;
}

}  // namespace lattice::llama
