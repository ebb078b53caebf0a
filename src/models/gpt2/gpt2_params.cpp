// GPT-2's parameter table (HF names, (OC, C) linear weights).
#include <cmath>

#include "models/gpt2/gpt2.h"

namespace lattice::gpt2 {

namespace {

ParamSpec weight(std::string name, Shape shape, Placement pl, int layer, float std, int n_fused = 1) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.placement = pl;
  s.n_fused = n_fused;
  s.layer = layer;
  s.weight_decay = true;
  s.init = InitKind::normal;
  s.init_std = std;
  return s;
}

// Biases and norm parameters: no weight decay (GPT-2 practice).
ParamSpec vec(std::string name, int64_t n, Placement pl, int layer, InitKind init, int n_fused = 1) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = {n};
  s.placement = pl;
  s.n_fused = n_fused;
  s.layer = layer;
  s.init = init;
  return s;
}

}  // namespace

std::vector<ParamSpec> param_specs(const Gpt2Config& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = 4 * C, L = cfg.n_layer;
  const float std = cfg.init_std;
  const float proj_std = std / std::sqrt(2.0f * float(L));  // GPT-2 scaled residual projections
  std::vector<ParamSpec> t;
  t.push_back(weight("wte.weight", {V, C}, Placement::vocab, kEmbeddingLayer, std));
  if (cfg.tie_embeddings) {  // the LM head on the last stage holds a replica
    t.back().tie_group = "wte";
    t.back().tie_layer = int(L);
  }
  t.push_back(weight("wpe.weight", {cfg.max_seq_len, C}, Placement::replicated, kEmbeddingLayer, std));
  for (int i = 0; i < L; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    t.push_back(vec(h + "ln_1.weight", C, Placement::replicated, i, InitKind::ones));
    t.push_back(vec(h + "ln_1.bias", C, Placement::replicated, i, InitKind::zeros));
    t.push_back(weight(h + "attn.c_attn.weight", {3 * C, C}, Placement::column, i, std, 3));
    t.push_back(vec(h + "attn.c_attn.bias", 3 * C, Placement::column, i, InitKind::zeros, 3));
    t.push_back(weight(h + "attn.c_proj.weight", {C, C}, Placement::row, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vec(h + "attn.c_proj.bias", C, Placement::replicated, i, InitKind::zeros));
    t.push_back(vec(h + "ln_2.weight", C, Placement::replicated, i, InitKind::ones));
    t.push_back(vec(h + "ln_2.bias", C, Placement::replicated, i, InitKind::zeros));
    t.push_back(weight(h + "mlp.c_fc.weight", {F, C}, Placement::column, i, std));
    t.push_back(vec(h + "mlp.c_fc.bias", F, Placement::column, i, InitKind::zeros));
    t.push_back(weight(h + "mlp.c_proj.weight", {C, F}, Placement::row, i, proj_std));
    t.back().init = InitKind::scaled_normal;
    t.push_back(vec(h + "mlp.c_proj.bias", C, Placement::replicated, i, InitKind::zeros));
  }
  t.push_back(vec("ln_f.weight", C, Placement::replicated, int(L), InitKind::ones));
  t.push_back(vec("ln_f.bias", C, Placement::replicated, int(L), InitKind::zeros));
  // A tied head is the same logical parameter as wte (one replica on a single
  // stage; pipeline stages add a replica in the "wte" tie group).
  if (!cfg.tie_embeddings) t.push_back(weight("lm_head.weight", {V, C}, Placement::vocab, int(L), std));
  return t;
}

}  // namespace lattice::gpt2
