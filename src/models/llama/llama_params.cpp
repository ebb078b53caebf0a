// LLaMA's parameter table (HF LlamaForCausalLM names, (OC, C) linear weights)
// and its sharding policy.
#include "models/llama/llama.h"

namespace lattice::llama {

ShardingPolicy sharding_policy(const LlamaConfig& cfg) {
  ShardingPolicy p;
  p.rules = {{"self_attn.q_proj.weight", Role::attn_qkv},
             {"self_attn.k_proj.weight", Role::attn_qkv, 1, cfg.n_kv_head},
             {"self_attn.v_proj.weight", Role::attn_qkv, 1, cfg.n_kv_head},
             {"self_attn.o_proj.weight", Role::attn_out},
             {"mlp.gate_proj.weight", Role::mlp_in},
             {"mlp.up_proj.weight", Role::mlp_in},
             {"mlp.down_proj.weight", Role::mlp_out},
             {"embed_tokens.weight", Role::vocab_embedding},
             {"lm_head.weight", Role::lm_head}};
  if (cfg.tie_embeddings) p.ties = {{"model.embed_tokens.weight", "embed_tokens", cfg.n_layer}};
  return p;
}

// Order matters: q, k, v and gate, up sit next to each other so that their
// local rows form one contiguous (OC, C) weight (Llama::bind_rows).
std::vector<ParamSpec> param_specs(const LlamaConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.d_ff, L = cfg.n_layer;
  const int64_t HS = C / cfg.n_head, KVC = int64_t(cfg.n_kv_head) * HS;
  const float std = cfg.init_std;
  std::vector<ParamSpec> t;
  t.push_back(matrix_param("model.embed_tokens.weight", {V, C}, kEmbeddingLayer, std));
  for (int i = 0; i < L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    t.push_back(vector_param(h + "input_layernorm.weight", C, i, InitKind::ones));
    t.push_back(matrix_param(h + "self_attn.q_proj.weight", {C, C}, i, std));
    t.push_back(matrix_param(h + "self_attn.k_proj.weight", {KVC, C}, i, std));
    t.push_back(matrix_param(h + "self_attn.v_proj.weight", {KVC, C}, i, std));
    t.push_back(matrix_param(h + "self_attn.o_proj.weight", {C, C}, i, std));
    t.push_back(vector_param(h + "post_attention_layernorm.weight", C, i, InitKind::ones));
    t.push_back(matrix_param(h + "mlp.gate_proj.weight", {F, C}, i, std));
    t.push_back(matrix_param(h + "mlp.up_proj.weight", {F, C}, i, std));
    t.push_back(matrix_param(h + "mlp.down_proj.weight", {C, F}, i, std));
  }
  t.push_back(vector_param("model.norm.weight", C, int(L), InitKind::ones));
  if (!cfg.tie_embeddings) t.push_back(matrix_param("lm_head.weight", {V, C}, int(L), std));
  return apply_policy(std::move(t), sharding_policy(cfg));
}

}  // namespace lattice::llama
