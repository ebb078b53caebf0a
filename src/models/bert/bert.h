// BERT encoder with the masked-LM head (Devlin et al. 2019; HF BertForMaskedLM).
//
// Embeddings: word + learned position + token-type (every position is
// segment 0: a window is one segment), then LayerNorm and dropout. Blocks are
// post-LN: x -> LN(x + drop(attn(x))) -> LN(h + drop(mlp(h))), with
// bidirectional attention masked only at [PAD] keys, GELU with erf in the MLP.
// MLM head: transform dense + GELU + LayerNorm, then the decoder (the word
// embeddings, tied by default) + a per-token bias; the loss is the cross-entropy
// at the selected (masked) positions only, every other target kIgnoreIndex.
// Parameter names follow Hugging Face BertForMaskedLM (`bert.embeddings.*`,
// `bert.encoder.layer.N.*`, `cls.predictions.*`); linear weights are (OC, C)
// like torch.nn.Linear.
//
// Tensor parallelism, from sharding_policy() (models/policy.h): query, key and
// value column-parallel (whole heads per rank), attention.output.dense and
// output.dense row-parallel, intermediate.dense column-parallel, the word
// embeddings (and an untied decoder) vocab-parallel, everything else
// replicated. The decoder bias is replicated: each rank adds its vocabulary
// slice to its logits and all-gathers the slices' gradients (tp mappings).
// Under pp the tied word embeddings span the first and the last stage.
// The key bias cannot change a softmax row (it shifts all of a query's scores
// alike): its exact gradient is zero, and backward keeps it exactly zero.
//
// Masked-LM data (bert_mlm.cpp, the registry's prepare_batch): the four ids
// after the tokenizer's own are [PAD], [MASK], [CLS], [SEP] (special_ids()); a
// window of T tokens becomes [CLS] x_0 .. x_{T-3} [SEP] (the window's last two
// tokens are dropped so the sequence stays T long).
//
// Padding: the key mask comes from the token ids, which only the chunk with
// the embedding reads. Loader windows never hold [PAD]; a model split into
// pipeline chunks refuses inputs that do (later chunks could not mask them).
//
// Shapes: B, T, C, NH, V, L, F as in core/shapes.h; a "_l" suffix is this
// rank's share (NH_l = NH / tp, C_l = C / tp, F_l = F / tp, V_l = padded V / tp).
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

namespace lattice::bert {

struct BertConfig {
  int n_layer = 2, n_head = 2, d_model = 64, d_ff = 256, vocab_size = 261, max_seq_len = 64;
  int type_vocab_size = 2;
  bool tie_embeddings = true;  // decoder = word embeddings (HF default)
  float dropout = 0.0f;        // hidden and attention-probability dropout
  float norm_eps = 1e-12f;
  float init_std = 0.02f;
  // The ids the tokenizer itself uses (ModelConfig::tokenizer_vocab: bytes 257,
  // gpt2 50257); [PAD] [MASK] [CLS] [SEP] take the next four.
  int tokenizer_vocab = 257;
};

// The special ids: the four right after the tokenizer's own, in the order of
// config's arch_traits(bert).special_tokens, which is the order
// data::make_tokenizer(name, dir, those tokens) numbers them: 257..260 for
// bytes, 50257..50260 for gpt2, whatever vocab_size pads the table to.
struct SpecialIds {
  int32_t pad, mask, cls, sep;
  int32_t n_regular;  // ids [0, n_regular) are ordinary tokens (random replacements come from them)
};
SpecialIds special_ids(const BertConfig& cfg);

// Masked-LM rates (BERT's).
inline constexpr float kMaskRate = 0.15f;        // share of the ordinary positions selected
inline constexpr float kMaskTokenRate = 0.8f;    // of those: -> [MASK]
inline constexpr float kRandomTokenRate = 0.1f;  // -> a random ordinary token (the rest keep theirs)

// Rewrites a loader batch in place into a masked-LM batch: inputs (B, T) i32
// windows -> [CLS] x_0 .. x_{T-3} [SEP] with the selected positions replaced;
// targets (B, T) i32 -> the original token at selected positions, kIgnoreIndex
// elsewhere. Position t of row b draws from Philox keyed by (coords.seed,
// RngPurpose::mask_lm, coords.step) with counter (coords.sample0 + b, t) (site
// 0 selects, 1 picks mask/random/keep, 2 the random token), so the masks do
// not depend on how the global batch is split. [PAD], [CLS] and [SEP]
// positions are never selected. Requires T >= 3.
void mask_lm_batch(const BertConfig& cfg, const StepCoords& coords, Tensor& inputs, Tensor& targets);

// The parameter table (HF names) with the policy applied.
std::vector<ParamSpec> param_specs(const BertConfig& cfg);
ShardingPolicy sharding_policy(const BertConfig& cfg);

// model.* keys -> BertConfig (one line for what BERT cannot take), and the
// registry entry (bert_registry.cpp).
BertConfig config_of(const ModelConfig& m);
ModelEntry registry_entry();

class Bert final : public ChunkModel {
 public:
  // Runs the chunk `span` (the whole model by default). `params` must hold the
  // chunk's entries (select_stage_params of param_specs(cfg)) sharded for this
  // rank of `tp`, laid out in table order (query, key and value of a layer are
  // adjacent, so their local shards read as one fused (3 C_l, C) weight).
  Bert(const BertConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span = {});

  static ActivationBytes activation_bytes_of(const BertConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                             int64_t B, int64_t T, ops::AttentionState attention);
  double flops_per_token(int64_t T) const override;
  const BertConfig& config() const { return cfg_; }

 private:
  // The parameters of block i; qkv_w / qkv_b are the fused views of query, key, value.
  struct LayerView {
    ParamView qkv_w, qkv_b, attn_out_w, attn_out_b, attn_ln_w, attn_ln_b;
    ParamView fc_w, fc_b, out_w, out_b, out_ln_w, out_ln_b;
  };

  void embed_forward(Context& ctx, const Tensor& ids) override;
  void embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) override;
  void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) override;
  void block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx,
                      SavedTensors& saved) override;
  double head_forward(Context& ctx, const Tensor& x) override;
  void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) override;
  void qkv_bias_backward(Tensor& dbias, const Tensor& dbias_qkv);
  const Tensor* key_mask(const Context& ctx) const;
  bool whole_model() const;

  BertConfig cfg_;
  SpecialIds ids_;
  int64_t heads_l_ = 0;
  ParamView word_, pos_, type_, emb_ln_w_, emb_ln_b_;                   // embedding
  ParamView tr_w_, tr_b_, tr_ln_w_, tr_ln_b_, decoder_, decoder_bias_;  // MLM head
  std::vector<LayerView> layers_;                                       // blocks [span_.first_layer, span_.end_layer)
  tp::VocabParallelEmbedding embed_;
  tp::ColumnParallelLinear qkv_, fc_, decoder_head_;
  tp::RowParallelLinear attn_out_, mlp_out_;
};

}  // namespace lattice::bert
