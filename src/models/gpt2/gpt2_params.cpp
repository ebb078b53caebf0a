// GPT-2's parameter table (HF names, (OC, C) linear weights).
#include <cmath>

#include "models/gpt2/gpt2.h"

namespace lattice::gpt2 {

ShardingPolicy sharding_policy(const Gpt2Config& cfg) {
  ShardingPolicy p;
  p.rules = {{"attn.c_attn.weight", Role::attn_qkv, 3}, {"attn.c_attn.bias", Role::attn_qkv, 3},
             {"attn.c_proj.weight", Role::attn_out},    {"mlp.c_fc.weight", Role::mlp_in},
             {"mlp.c_fc.bias", Role::mlp_in},           {"mlp.c_proj.weight", Role::mlp_out},
             {"wte.weight", Role::vocab_embedding},     {"lm_head.weight", Role::lm_head}};
  // A tied head is the same logical parameter as wte: a replica on the head's stage.
  if (cfg.tie_embeddings) p.ties = {{"wte.weight", "wte", cfg.n_layer}};
  return p;
}

std::vector<ParamSpec> param_specs(const Gpt2Config& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = 4 * C, L = cfg.n_layer;
  const float std = cfg.init_std;
  const float proj_std = std / std::sqrt(2.0f * float(L));  // GPT-2 scaled residual projections
  std::vector<ParamSpec> t;
  t.push_back(matrix_param("wte.weight", {V, C}, kEmbeddingLayer, std));
  t.push_back(matrix_param("wpe.weight", {cfg.max_seq_len, C}, kEmbeddingLayer, std));
  for (int i = 0; i < L; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    t.push_back(vector_param(h + "ln_1.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "ln_1.bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "attn.c_attn.weight", {3 * C, C}, i, std));
    t.push_back(vector_param(h + "attn.c_attn.bias", 3 * C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "attn.c_proj.weight", {C, C}, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vector_param(h + "attn.c_proj.bias", C, i, InitKind::zeros));
    t.push_back(vector_param(h + "ln_2.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "ln_2.bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "mlp.c_fc.weight", {F, C}, i, std));
    t.push_back(vector_param(h + "mlp.c_fc.bias", F, i, InitKind::zeros));
    t.push_back(matrix_param(h + "mlp.c_proj.weight", {C, F}, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vector_param(h + "mlp.c_proj.bias", C, i, InitKind::zeros));
  }
  t.push_back(vector_param("ln_f.weight", C, int(L), InitKind::ones));
  t.push_back(vector_param("ln_f.bias", C, int(L), InitKind::zeros));
  if (!cfg.tie_embeddings) t.push_back(matrix_param("lm_head.weight", {V, C}, int(L), std));
  return apply_policy(std::move(t), sharding_policy(cfg));
}

}  // namespace lattice::gpt2
