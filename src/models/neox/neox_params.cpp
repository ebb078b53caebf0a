// GPT-NeoX's parameter table (HF GPTNeoXForCausalLM names, (OC, C) linear
// weights), its sharding policy, and its registry entry.
#include <cmath>

#include "models/neox/neox.h"
#include "models/registry.h"

namespace lattice::neox {

// Megatron's split, said by role: the block's two column/row pairs, the two
// vocabulary tables; everything else (norms, row-layer biases) replicated.
ShardingPolicy sharding_policy(const NeoxConfig& cfg) {
  ShardingPolicy p;
  p.rules = {{"attention.query_key_value.weight", Role::attn_qkv, 3},
             {"attention.query_key_value.bias", Role::attn_qkv, 3},
             {"attention.dense.weight", Role::attn_out},
             {"mlp.dense_h_to_4h.weight", Role::mlp_in},
             {"mlp.dense_h_to_4h.bias", Role::mlp_in},
             {"mlp.dense_4h_to_h.weight", Role::mlp_out},
             {"embed_in.weight", Role::vocab_embedding},
             {"embed_out.weight", Role::lm_head}};
  // A tied head is embed_in itself: a replica on the head's stage (layer n_layer).
  if (cfg.tie_embeddings) p.ties = {{"gpt_neox.embed_in.weight", "embed_in", cfg.n_layer}};
  return p;
}

std::vector<ParamSpec> param_specs(const NeoxConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.d_ff, L = cfg.n_layer;
  const float std = cfg.init_std;
  const float out_std = std / std::sqrt(2.0f * float(L));  // both branches write into the residual
  std::vector<ParamSpec> t;
  t.push_back(matrix_param("gpt_neox.embed_in.weight", {V, C}, kEmbeddingLayer, std));
  for (int i = 0; i < L; ++i) {
    const std::string h = "gpt_neox.layers." + std::to_string(i) + ".";
    t.push_back(vector_param(h + "input_layernorm.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "input_layernorm.bias", C, i, InitKind::zeros));
    t.push_back(vector_param(h + "post_attention_layernorm.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "post_attention_layernorm.bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "attention.query_key_value.weight", {3 * C, C}, i, std));
    t.push_back(vector_param(h + "attention.query_key_value.bias", 3 * C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "attention.dense.weight", {C, C}, i, out_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vector_param(h + "attention.dense.bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "mlp.dense_h_to_4h.weight", {F, C}, i, std));
    t.push_back(vector_param(h + "mlp.dense_h_to_4h.bias", F, i, InitKind::zeros));
    t.push_back(matrix_param(h + "mlp.dense_4h_to_h.weight", {C, F}, i, out_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vector_param(h + "mlp.dense_4h_to_h.bias", C, i, InitKind::zeros));
  }
  t.push_back(vector_param("gpt_neox.final_layer_norm.weight", C, int(L), InitKind::ones));
  t.push_back(vector_param("gpt_neox.final_layer_norm.bias", C, int(L), InitKind::zeros));
  if (!cfg.tie_embeddings) t.push_back(matrix_param("embed_out.weight", {V, C}, int(L), std));
  return apply_policy(std::move(t), sharding_policy(cfg));
}

NeoxConfig config_of(const ModelConfig& m) {
  LATTICE_CHECK(m.n_head > 0 && m.d_model % m.n_head == 0 && (m.d_model / m.n_head) % 2 == 0,
                "model.d_model: neox's rotary embeddings need d_model = n_head ({}) times an even head size, got {}",
                m.n_head, m.d_model);
  NeoxConfig c;
  copy_common_keys(m, c);
  c.d_ff = m.d_ff > 0 ? m.d_ff : 4 * m.d_model;
  c.rope_theta = m.rope_theta > 0 ? m.rope_theta : 10000.0;
  return c;
}

ModelEntry registry_entry() {
  return chunk_model_entry<Neox>(ModelArch::neox, &config_of, &param_specs, &sharding_policy);
}

}  // namespace lattice::neox
