#include "models/policy.h"

#include "core/error.h"

namespace lattice {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const PolicyRule* rule_for(const std::string& name, const ShardingPolicy& policy) {
  for (const PolicyRule& r : policy.rules)
    if (ends_with(name, r.suffix)) return &r;
  return nullptr;
}

}  // namespace

std::string_view role_name(Role r) {
  switch (r) {
    case Role::attn_qkv: return "attn_qkv";
    case Role::attn_out: return "attn_out";
    case Role::mlp_in: return "mlp_in";
    case Role::mlp_out: return "mlp_out";
    case Role::vocab_embedding: return "vocab_embedding";
    case Role::lm_head: return "lm_head";
    case Role::replicated: return "replicated";
  }
  return "?";
}

Placement placement_of(Role r, int tensor_rank) {
  switch (r) {
    case Role::attn_qkv:
    case Role::mlp_in: return Placement::column;
    case Role::attn_out:
    case Role::mlp_out: return tensor_rank >= 2 ? Placement::row : Placement::replicated;
    case Role::vocab_embedding:
    case Role::lm_head: return Placement::vocab;
    case Role::replicated: return Placement::replicated;
  }
  return Placement::replicated;
}

Role role_of(const std::string& name, const ShardingPolicy& policy) {
  const PolicyRule* r = rule_for(name, policy);
  return r ? r->role : Role::replicated;
}

std::vector<ParamSpec> apply_policy(std::vector<ParamSpec> table, const ShardingPolicy& policy) {
  for (ParamSpec& s : table) {
    const PolicyRule* r = rule_for(s.name, policy);
    const Role role = r ? r->role : Role::replicated;
    s.placement = placement_of(role, int(s.shape.size()));
    s.n_fused = s.placement == Placement::column ? (r ? r->n_fused : 1) : 1;
    s.max_shards = s.placement == Placement::column && r ? r->max_shards : 0;
    s.matmul_weight = s.shape.size() == 2 && role != Role::vocab_embedding && role != Role::replicated;
    LATTICE_CHECK(s.placement != Placement::vocab || s.shape.size() == 2,
                  "policy: '{}' has role {} but is not a 2-D (rows, C) tensor", s.name, role_name(role));
    LATTICE_CHECK(s.n_fused >= 1 && (s.shape.empty() || s.shape[0] % s.n_fused == 0),
                  "policy: '{}' has {} rows, not divisible into {} fused parts", s.name,
                  s.shape.empty() ? 0 : s.shape[0], s.n_fused);
    for (const TieRule& t : policy.ties)
      if (t.name == s.name) {
        s.tie_group = t.group;
        s.tie_layer = t.with_layer;
      }
  }
  return table;
}

ParamSpec matrix_param(std::string name, Shape shape, int layer, float std) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.layer = layer;
  s.weight_decay = true;
  s.init = InitKind::normal;
  s.init_std = std;
  return s;
}

ParamSpec vector_param(std::string name, int64_t n, int layer, InitKind init) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = {n};
  s.layer = layer;
  s.init = init;
  return s;
}

}  // namespace lattice
