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
#include "models/model.h"
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

class Gpt2 final : public LanguageModel {
 public:
  // Runs the chunk `span` (the whole model by default). Binds views into
  // `params`, which must hold the chunk's entries (select_stage_params of
  // param_specs(cfg)) sharded for this rank of `tp` (FlatParams::shard()).
  Gpt2(const Gpt2Config& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});
  ~Gpt2() override;

  std::string arch() const override { return "gpt2"; }
  std::unique_ptr<ModelContext> make_context(int64_t B, int64_t T) const override;
  ActivationBytes activation_bytes(int64_t B, int64_t T) const override;
  // The same for chunk `span` of a model sharded as `shard`, without building it
  // (lattice plan). Throws the constructor's and make_context's one-line errors.
  static ActivationBytes activation_bytes_of(const Gpt2Config& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T);
  double forward(ModelContext& ctx, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                 Tensor* output = nullptr) override;
  void backward(ModelContext& ctx, float dloss, const Tensor* doutput = nullptr, Tensor* dinput = nullptr) override;
  double flops_per_token(int64_t T) const override;
  const Gpt2Config& config() const { return cfg_; }
  // The logits (B, T, V_l) of the last forward on `ctx` (a chunk with the head):
  // this rank's padded vocabulary rows. Read them before backward, which
  // overwrites them with dlogits.
  Tensor logits(const ModelContext& ctx) const;

 private:
  // Value and gradient views of one parameter.
  struct P {
    Tensor w, g;
  };
  // The parameters of block i (LayerView: no pointer arithmetic in the loop).
  struct LayerView {
    P ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b;
    P ln_2_w, ln_2_b, c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b;
  };
  struct Context;
  struct BlockActs;
  // Backward scratch shared by every context of this chunk (not saved state).
  struct Workspace {
    int64_t B = 0, T = 0;
    Tensor c1, c2, c3, f1, f2, qkv_grad, att_grad, dbuf[2];
    std::unique_ptr<BlockActs> acts;  // scratch activations of recomputed blocks
  };
  // This rank's sizes that every activation shape is made of.
  struct Dims {
    int64_t C = 0, NH_l = 0, C_l = 0, F_l = 0, V_l = 0;
  };
  // Which tensors of a block: all; only `out` (a recomputed block in a
  // context); all but `out` (the workspace scratch, which borrows the context's).
  enum class BlockPart { all, output, scratch };
  // Makes one tensor of a shape: allocates it, or only counts its bytes, so
  // allocation and byte count (activation_bytes) read the same tensor lists below.
  using MakeTensor = std::function<Tensor(Shape)>;
  static Dims dims_of(const Gpt2Config& cfg, const TpShard& shard);
  static BlockActs make_block_acts(const MakeTensor& make, const Dims& d, int64_t B, int64_t T, BlockPart part);
  static void make_context_tensors(Context& ctx, const MakeTensor& make, const Dims& d, const Gpt2Config& cfg,
                                   const StageSpan& span, int64_t B, int64_t T);
  static void make_workspace_tensors(Workspace& ws, const MakeTensor& make, const Dims& d, const StageSpan& span,
                                     int64_t B, int64_t T);
  // The activations block i of this chunk computes into: its own in the
  // context, or the workspace scratch (with the context's `out`) when recomputed.
  BlockActs& acts_for(Context& ctx, size_t i);
  Workspace& workspace(int64_t B, int64_t T);

  int head_offset() const { return int(heads_l_) * tp_.rank(); }
  void block_forward(BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer);
  void block_backward(Tensor& dx, Tensor& dres, BlockActs& a, const Tensor& x, LayerView& p,
                      Context& ctx, int layer);
  void embed_forward(Context& ctx, const Tensor& ids);
  double head_forward(Context& ctx, const Tensor& x, const Tensor& targets);
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx);

  Gpt2Config cfg_;
  StageSpan span_;
  comm::Group& tp_;
  Workspace ws_;
  TpShard shard_;  // how params is sharded
  Dims dims_;
  int64_t heads_l_ = 0, vocab_start_ = 0;  // this rank's heads; its first (padded) vocabulary row
  DType dtype_ = DType::f32;
  Device device_;
  P wte_, wpe_, ln_f_w_, ln_f_b_, lm_head_;
  std::vector<LayerView> layers_;  // blocks [span_.first_layer, span_.end_layer)
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, fc_, head_;  // head: logits on the local vocabulary rows
  tp::RowParallelLinear attn_proj_, mlp_proj_;
};

}  // namespace lattice::gpt2
