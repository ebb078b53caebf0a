// GPT-NeoX-style decoder (the walkthrough model of docs/adding-a-model.md):
// the parallel-residual block of GPT-J / GPT-NeoX / Pythia,
//
//   out = x + attn(ln_1(x)) + mlp(ln_2(x)),
//
// where both branches read the block input (GPT-2 feeds the MLP the output of
// attention). Attention uses rotary positions on every q/k dimension
// (rope_theta; NeoX's rotary_pct = 1), a fused QKV projection with bias, an
// output projection with bias; the MLP is dense_h_to_4h, exact (erf) GELU,
// dense_4h_to_h, width d_ff; LayerNorm with bias everywhere; no position
// table; an LM head untied unless tie_embeddings. model.dropout applies to
// the attention probabilities and to both residual branches.
//
// Parameter names follow Hugging Face GPTNeoXForCausalLM
// (`gpt_neox.embed_in.weight`, `gpt_neox.layers.0.attention.query_key_value.
// weight`, ..., `embed_out.weight`); linear weights are (OC, C). One
// difference: the fused QKV rows here are [q; k; v] (three (C, C) blocks,
// n_fused = 3), where HF NeoX interleaves them per head; an HF converter would
// permute those rows.
//
// Tensor parallelism comes from sharding_policy() alone: QKV and
// dense_h_to_4h column-parallel, dense and dense_4h_to_h row-parallel,
// embed_in and embed_out vocab-parallel, norms and row biases replicated.
// The model file holds no parallel code beyond using the tp layers.
//
// Shapes: B, T, C, NH, V, L as in core/shapes.h; HS = C / NH, F = d_ff; a
// "_l" suffix is this rank's share (NH_l = NH / tp, C_l = NH_l HS, F_l = F /
// tp, V_l = padded V / tp).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/param.h"
#include "models/chunk_model.h"
#include "models/policy.h"
#include "tp/embedding.h"
#include "tp/linear.h"

namespace lattice {
struct ModelEntry;
}

namespace lattice::neox {

struct NeoxConfig {
  int n_layer = 2, n_head = 2, d_model = 64, d_ff = 256, vocab_size = 256, max_seq_len = 64;
  bool tie_embeddings = false;
  float dropout = 0.0f;
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  float init_std = 0.02f;
};

// The parameter table (HF names) with its sharding policy applied.
std::vector<ParamSpec> param_specs(const NeoxConfig& cfg);
// Which parameter plays which tensor-parallel role (models/policy.h).
ShardingPolicy sharding_policy(const NeoxConfig& cfg);
// model.* keys -> NeoxConfig (one line for what it cannot take), and the
// registry entry.
NeoxConfig config_of(const ModelConfig& m);
ModelEntry registry_entry();

class Neox final : public ChunkModel {
 public:
  // Runs the chunk `span` (the whole model by default) on `params`, which hold
  // the chunk's entries sharded for this rank of `tp`.
  Neox(const NeoxConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});

  static ActivationBytes activation_bytes_of(const NeoxConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T, ops::AttentionState attention);
  double flops_per_token(int64_t T) const override;
  bool kv_cache_ready() const override { return true; }  // attend() and ctx.pos0

 private:
  struct LayerView {
    ParamView ln_1_w, ln_1_b, qkv_w, qkv_b, dense_w, dense_b;
    ParamView ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b;
  };

  void embed_forward(Context& ctx, const Tensor& ids) override;
  void embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) override;
  void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) override;
  void block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx,
                      SavedTensors& saved) override;
  double head_forward(Context& ctx, const Tensor& x) override;
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) override;

  NeoxConfig cfg_;
  int64_t NH_l_ = 0, HS_ = 0;
  ParamView embed_in_;
  LayerNormHead head_p_;           // final_layer_norm and embed_out (embed_in when tied)
  std::vector<LayerView> layers_;  // blocks [span_.first_layer, span_.end_layer)
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, fc_, head_;
  tp::RowParallelLinear dense_, proj_;
};

}  // namespace lattice::neox
