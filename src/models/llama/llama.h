// LLaMA-style decoder: RMSNorm pre-norm blocks, rotary position embeddings
// (HF rotate-half, rope_theta), grouped-query attention (n_kv_head k/v heads
// shared by groups of n_head / n_kv_head query heads), a SwiGLU MLP of width
// d_ff, no biases, final RMSNorm and an LM head (untied unless
// tie_embeddings). Parameter names follow Hugging Face LlamaForCausalLM
// (`model.embed_tokens.weight`, `model.layers.0.self_attn.q_proj.weight`,
// ..., `lm_head.weight`); linear weights are stored (OC, C) like HF's
// nn.Linear, so HF interop needs no transpose. model.dropout applies to the
// attention probabilities only (HF's attention_dropout).
//
// Tensor parallelism, from sharding_policy() (models/policy.h): q/k/v and
// gate/up column-parallel, o/down row-parallel, embed_tokens and lm_head
// vocab-parallel, norms replicated. k/v heads split across tp when tp divides
// n_kv_head; when n_kv_head divides tp, each k/v head is held by R = tp /
// n_kv_head consecutive ranks (ParamSpec::max_shards = n_kv_head) and the
// model sums its k/v weight gradients over them (tp/replicas.h). q/k/v and
// gate/up are separate parameters laid out next to each other in the table,
// so one matmul runs on their rows as a single (OC, C) weight.
//
// Shapes: B, T, C, NH, V, L as in core/shapes.h; HS = C / NH, KV the k/v
// heads, F = d_ff; a "_l" suffix is this rank's share (NH_l = NH / tp, KV_l =
// max(1, KV / tp), C_l = NH_l HS, F_l = F / tp, V_l = padded V / tp) and
// W_l = (NH_l + 2 KV_l) HS the width of the q/k/v projection output.
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

namespace lattice {
struct ModelEntry;
}

namespace lattice::llama {

struct LlamaConfig {
  int n_layer = 2, n_head = 4, n_kv_head = 2, d_model = 64, d_ff = 172, vocab_size = 256, max_seq_len = 64;
  bool tie_embeddings = false;
  float dropout = 0.0f;  // attention probabilities
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  float init_std = 0.02f;
};

// The parameter table: the one place that lists LLaMA's parameters (HF names).
std::vector<ParamSpec> param_specs(const LlamaConfig& cfg);
// q/k/v and gate/up column-parallel (k/v at most n_kv_head blocks), o/down
// row-parallel, embed_tokens and lm_head vocab-parallel, norms replicated; a
// tied head shares embed_tokens with the head layer (n_layer).
ShardingPolicy sharding_policy(const LlamaConfig& cfg);

// model.* keys -> LlamaConfig (one line for what LLaMA cannot take), and the
// registry entry (llama_registry.cpp).
LlamaConfig config_of(const ModelConfig& m);
ModelEntry registry_entry();

class Llama final : public ChunkModel {
 public:
  // Runs the chunk `span` (the whole model by default). Binds views into
  // `params`, which must hold the chunk's entries (select_stage_params of
  // param_specs(cfg)) sharded for this rank of `tp`.
  Llama(const LlamaConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});

  static ActivationBytes activation_bytes_of(const LlamaConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T, ops::AttentionState attention);
  double flops_per_token(int64_t T) const override;
  bool kv_cache_ready() const override { return true; }  // attend() and ctx.pos0
  const LlamaConfig& config() const { return cfg_; }

 private:
  // Block i's parameters; qkv and gate_up span several adjacent table entries.
  struct LayerView {
    ParamView input_norm, qkv, o, post_norm, gate_up, down;
  };

  void embed_forward(Context& ctx, const Tensor& ids) override;
  void embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) override;
  void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) override;
  void block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx,
                      SavedTensors& saved) override;
  double head_forward(Context& ctx, const Tensor& x) override;
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) override;
  void qkv_weight_backward(Context& ctx, Tensor& dx, const Tensor& dpacked, const Tensor& x, LayerView& p);

  LlamaConfig cfg_;
  int64_t HS_ = 0, NH_l_ = 0, KV_l_ = 0;  // head size, this rank's q and k/v heads
  int kv_replicas_ = 1;                   // ranks holding each k/v head
  ParamView embed_w_, norm_w_, lm_head_;
  std::vector<LayerView> layers_;
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, gate_up_, head_;
  tp::RowParallelLinear o_proj_, down_proj_;
};

}  // namespace lattice::llama
