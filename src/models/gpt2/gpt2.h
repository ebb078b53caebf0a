// GPT-2: learned position embedding, pre-LN blocks with fused QKV attention
// and a GELU MLP, final LayerNorm, LM head tied to the token embedding (or
// separate), dropout on embeddings, attention probabilities and residual
// branches. Parameter names follow Hugging Face GPT-2 (`wte.weight`,
// `h.0.attn.c_attn.weight`, ...); linear weights are stored (OC, C) — HF's
// Conv1D stores (C, OC), so HF interop transposes them.
//
// Tensor parallelism (Megatron), from sharding_policy() (models/policy.h):
// QKV and fc are column-parallel (whole heads per rank), the two output
// projections row-parallel, the token embedding and LM head vocab-parallel
// (vocabulary padded, loss on the sharded logits), norms, biases after a
// reduce and the position embedding replicated. With a tp group of one rank
// this is the plain single-rank model.
//
// Shapes: B, T, C, NH, V, L as in core/shapes.h; F = 4C; a "_l" suffix is
// this rank's share (NH_l = NH / tp, F_l = F / tp, V_l = padded V / tp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/param.h"
#include "models/chunk_model.h"
#include "models/policy.h"
#include "tp/embedding.h"
#include "tp/linear.h"

namespace lattice::gpt2 {

struct Gpt2Config {
  int n_layer = 2, n_head = 2, d_model = 64, vocab_size = 256, max_seq_len = 64;
  bool tie_embeddings = true;
  float dropout = 0.0f;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
};

// The parameter table: the one place that lists GPT-2's parameters, with the
// placements its sharding policy gives them.
std::vector<ParamSpec> param_specs(const Gpt2Config& cfg);
// Megatron's GPT-2 split: fused QKV and fc column-parallel, both output
// projections row-parallel, wte (and an untied head) vocab-parallel, the rest
// replicated; a tied head shares wte with the head layer (n_layer).
ShardingPolicy sharding_policy(const Gpt2Config& cfg);

}  // namespace lattice::gpt2

namespace lattice {
struct ModelEntry;
}

namespace lattice::gpt2 {

// model.* keys -> Gpt2Config (one line for what GPT-2 cannot take), and the
// registry entry (gpt2_registry.cpp).
Gpt2Config config_of(const ModelConfig& m);
ModelEntry registry_entry();

class Gpt2 final : public ChunkModel {
 public:
  // Runs the chunk `span` (the whole model by default). Binds views into
  // `params`, which must hold the chunk's entries (select_stage_params of
  // param_specs(cfg)) sharded for this rank of `tp` (FlatParams::shard()).
  Gpt2(const Gpt2Config& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});

  // What chunk `span` of a model sharded as `shard` holds, without building it
  // (lattice plan). Throws the constructor's and make_context's one-line errors.
  static ActivationBytes activation_bytes_of(const Gpt2Config& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T, ops::AttentionState attention);
  double flops_per_token(int64_t T) const override;
  bool kv_cache_ready() const override { return true; }  // attend() and ctx.pos0
  const Gpt2Config& config() const { return cfg_; }

 private:
  // The parameters of block i (LayerView: no pointer arithmetic in the loop).
  struct LayerView {
    ParamView ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b;
    ParamView ln_2_w, ln_2_b, c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b;
  };

  void embed_forward(Context& ctx, const Tensor& ids) override;
  void embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) override;
  void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) override;
  void block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx,
                      SavedTensors& saved) override;
  double head_forward(Context& ctx, const Tensor& x) override;
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) override;

  Gpt2Config cfg_;
  int64_t heads_l_ = 0;  // this rank's heads
  ParamView wte_, wpe_;
  LayerNormHead head_p_;           // ln_f and the LM head (wte when tied)
  std::vector<LayerView> layers_;  // blocks [span_.first_layer, span_.end_layer)
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, fc_, head_;  // head: logits on the local vocabulary rows
  tp::RowParallelLinear attn_proj_, mlp_proj_;
};

}  // namespace lattice::gpt2
