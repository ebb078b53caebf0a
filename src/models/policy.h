// Sharding policies: how a model is split, said once per model in the
// vocabulary that Megatron, ColossalAI and torchtitan converged on.
//
// A model's parameter table (ParamSpec list) gives names, logical shapes,
// owning layers, init and weight decay: no parallel information. Its
// ShardingPolicy says which parameters play which ROLE:
//
//   role              tp placement                       typical parameters
//   attn_qkv          column (n_fused = fused parts)     GPT-2 c_attn (3), LLaMA q/k/v_proj
//   attn_out          row (its bias replicated)          GPT-2 attn.c_proj, LLaMA o_proj
//   mlp_in            column (n_fused: gate-up = 2)      GPT-2 c_fc, LLaMA gate/up_proj
//   mlp_out           row (its bias replicated)          GPT-2 mlp.c_proj, LLaMA down_proj
//   vocab_embedding   vocab (rows padded)                wte, embed_tokens, word_embeddings
//   lm_head           vocab (rows padded)                an untied LM head / MLM decoder
//   replicated        replicated                         norms, position embeddings, biases after a reduce
//
// plus which parameter is TIED to which layer (the LM head reusing the token
// embedding: a tie group whose replica lives on the stage of that layer).
// Layers are the pipeline's unit: kEmbeddingLayer, blocks 0..n_layer-1, and
// n_layer for the final norm and head; a stage holds the parameters of its
// layers (select_stage_params). apply_policy() turns table + policy into the
// ParamSpecs that FlatParams, the sharder, the optimizer, grad-norm
// de-duplication and checkpoints read; nothing else knows how a model is split.
//
// Rules match parameter names by suffix ("attn.c_attn.weight" matches
// "h.3.attn.c_attn.weight"); the first rule that matches wins; a parameter no
// rule matches is replicated. A rule for a role that splits a 1-D tensor
// (a column bias) splits it like its weight's dim 0.
#pragma once

#include <string>
#include <vector>

#include "core/param.h"

namespace lattice {

enum class Role : uint8_t { attn_qkv, attn_out, mlp_in, mlp_out, vocab_embedding, lm_head, replicated };
std::string_view role_name(Role r);
Placement placement_of(Role r, int tensor_rank);  // row-role biases (rank 1) stay replicated

struct PolicyRule {
  std::string suffix;  // matched against the end of the parameter name
  Role role = Role::replicated;
  int n_fused = 1;  // logical matrices fused along dim 0 (QKV = 3, gate-up = 2)
  int max_shards = 0;  // column roles: split into at most this many blocks, each then
                       // replicated on tp / max_shards ranks (LLaMA k/v: n_kv_head); 0: no limit
};

struct TieRule {
  std::string name;   // the parameter (e.g. "wte.weight")
  std::string group;  // tie group name (e.g. "wte")
  int with_layer = 0;  // the other layer that uses it (n_layer: the head)
};

struct ShardingPolicy {
  std::vector<PolicyRule> rules;
  std::vector<TieRule> ties;
};

// The ParamSpecs with placement, n_fused and tie fields filled from `policy`.
// Throws one line when a rule names a role that cannot split the tensor.
std::vector<ParamSpec> apply_policy(std::vector<ParamSpec> table, const ShardingPolicy& policy);

// The two kinds of row a parameter table is made of: a matrix (linear weight
// or embedding) with weight decay and N(0, std^2) init, and a vector (bias or
// norm parameter) without weight decay, initialised as `init`.
ParamSpec matrix_param(std::string name, Shape shape, int layer, float std);
ParamSpec vector_param(std::string name, int64_t n, int layer, InitKind init);
// The role a parameter gets (for docs, `lattice plan` and tests).
Role role_of(const std::string& name, const ShardingPolicy& policy);

}  // namespace lattice
