// GPT-2's parameter table (HF names, (OC, C) linear weights).
#include <cmath>

#include "models/gpt2/gpt2.h"

namespace lattice::gpt2 {

namespace {

ParamSpec weight(std::string name, Shape shape, int layer, float std) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.layer = layer;
  s.weight_decay = true;
  s.init = InitKind::normal;
  s.init_std = std;
  return s;
}

// Biases and norm parameters: no weight decay (GPT-2 practice).
ParamSpec vec(std::string name, int64_t n, int layer, InitKind init) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = {n};
  s.layer = layer;
  s.init = init;
  return s;
}

}  // namespace

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
  t.push_back(weight("wte.weight", {V, C}, kEmbeddingLayer, std));
  t.push_back(weight("wpe.weight", {cfg.max_seq_len, C}, kEmbeddingLayer, std));
  for (int i = 0; i < L; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    t.push_back(vec(h + "ln_1.weight", C, i, InitKind::ones));
    t.push_back(vec(h + "ln_1.bias", C, i, InitKind::zeros));
    t.push_back(weight(h + "attn.c_attn.weight", {3 * C, C}, i, std));
    t.push_back(vec(h + "attn.c_attn.bias", 3 * C, i, InitKind::zeros));
    t.push_back(weight(h + "attn.c_proj.weight", {C, C}, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vec(h + "attn.c_proj.bias", C, i, InitKind::zeros));
    t.push_back(vec(h + "ln_2.weight", C, i, InitKind::ones));
    t.push_back(vec(h + "ln_2.bias", C, i, InitKind::zeros));
    t.push_back(weight(h + "mlp.c_fc.weight", {F, C}, i, std));
    t.push_back(vec(h + "mlp.c_fc.bias", F, i, InitKind::zeros));
    t.push_back(weight(h + "mlp.c_proj.weight", {C, F}, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vec(h + "mlp.c_proj.bias", C, i, InitKind::zeros));
  }
  t.push_back(vec("ln_f.weight", C, int(L), InitKind::ones));
  t.push_back(vec("ln_f.bias", C, int(L), InitKind::zeros));
  if (!cfg.tie_embeddings) t.push_back(weight("lm_head.weight", {V, C}, int(L), std));
  return apply_policy(std::move(t), sharding_policy(cfg));
}

}  // namespace lattice::gpt2
