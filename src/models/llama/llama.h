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
#include "models/model.h"
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

class Llama final : public LanguageModel {
 public:
  // Runs the chunk `span` (the whole model by default). Binds views into
  // `params`, which must hold the chunk's entries (select_stage_params of
  // param_specs(cfg)) sharded for this rank of `tp`.
  Llama(const LlamaConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});
  ~Llama() override;

  std::string arch() const override { return "llama"; }
  std::unique_ptr<ModelContext> make_context(int64_t B, int64_t T) const override;
  ActivationBytes activation_bytes(int64_t B, int64_t T) const override;
  static ActivationBytes activation_bytes_of(const LlamaConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T);
  double forward(ModelContext& ctx, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                 Tensor* output = nullptr) override;
  void backward(ModelContext& ctx, float dloss, const Tensor* doutput = nullptr, Tensor* dinput = nullptr) override;
  double flops_per_token(int64_t T) const override;
  const LlamaConfig& config() const { return cfg_; }
  // The logits (B, T, V_l) of the last forward on `ctx` (a chunk with the head):
  // this rank's padded vocabulary rows. Read them before backward, which
  // overwrites them with dlogits.
  Tensor logits(const ModelContext& ctx) const;

 private:
  struct P {
    Tensor w, g;
  };
  // Block i's parameters; qkv and gate_up span several adjacent table entries.
  struct LayerView {
    P input_norm, qkv, o, post_norm, gate_up, down;
  };
  struct Context;
  struct BlockActs;
  struct Workspace {
    int64_t B = 0, T = 0;
    Tensor c1, c2, c3, packed, f1, f2, qkv_grad, att_grad, dbuf[2];
    Tensor qkv_wgrad;                 // (W_l, C), only with replicated k/v heads
    std::unique_ptr<BlockActs> acts;  // scratch activations of recomputed blocks
  };
  struct Dims {
    int64_t C = 0, HS = 0, NH_l = 0, KV_l = 0, C_l = 0, W_l = 0, F_l = 0, V_l = 0;
    int kv_replicas = 1;
  };
  enum class BlockPart { all, output, scratch };
  using MakeTensor = std::function<Tensor(Shape)>;
  static Dims dims_of(const LlamaConfig& cfg, const TpShard& shard);
  static BlockActs make_block_acts(const MakeTensor& make, const Dims& d, int64_t B, int64_t T, BlockPart part);
  static void make_context_tensors(Context& ctx, const MakeTensor& make, const Dims& d, const LlamaConfig& cfg,
                                   const StageSpan& span, int64_t B, int64_t T);
  static void make_workspace_tensors(Workspace& ws, const MakeTensor& make, const Dims& d, const StageSpan& span,
                                     int64_t B, int64_t T);
  BlockActs& acts_for(Context& ctx, size_t i);
  Workspace& workspace(int64_t B, int64_t T);
  P bind_rows(FlatParams& params, const std::vector<std::string>& names) const;

  int head_offset() const { return int(dims_.NH_l) * tp_.rank(); }
  void block_forward(BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer);
  void block_backward(Tensor& dx, Tensor& dout, BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer);
  void qkv_weight_backward(Tensor& dx, const Tensor& dpacked, const Tensor& x, LayerView& p, Workspace& w);
  double head_forward(Context& ctx, const Tensor& x, const Tensor& targets);
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx);

  LlamaConfig cfg_;
  StageSpan span_;
  comm::Group& tp_;
  Workspace ws_;
  TpShard shard_;
  Dims dims_;
  int64_t vocab_start_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
  P embed_w_, norm_w_, lm_head_;
  std::vector<LayerView> layers_;
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, gate_up_, head_;
  tp::RowParallelLinear o_proj_, down_proj_;
};

}  // namespace lattice::llama
