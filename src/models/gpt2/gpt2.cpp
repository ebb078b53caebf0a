// GPT-2 forward and backward (see gpt2.h). One block reads like the diagram:
// norm, qkv matmul, attention, proj matmul, dropout + residual, norm, fc
// matmul, GELU, proj matmul, dropout + residual; backward makes the same calls
// in reverse. The chunk walk and its memory are ChunkModel's (chunk_model.h).
#include "models/gpt2/gpt2.h"

#include <utility>

#include "core/ops.h"

namespace lattice::gpt2 {

namespace {

// RNG sites. Layer ids: 0 is the embedding, block i is i + 1.
enum Site : uint32_t { kAttnProbs = 0, kAttnResid = 1, kMlpResid = 2, kEmbed = 0 };

void check_heads(const Gpt2Config& cfg, int tp) {
  LATTICE_CHECK(cfg.d_model % cfg.n_head == 0, "gpt2: d_model {} is not divisible by n_head {}", cfg.d_model,
                cfg.n_head);
  LATTICE_CHECK(cfg.n_head % tp == 0, "gpt2: n_head {} is not divisible by tp {}", cfg.n_head, tp);
}

// Saved activations of one block besides its output, all (B, T, ...) of the model dtype.
struct BlockActs : SavedTensors {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor qkv;                      // (B, T, 3 C_l): this rank's heads of q, k, v
  Tensor att;                      // make.attention: (B, NH_l, T, T) P before dropout, or compact
  Tensor atty;                     // (B, T, C_l) attention output before c_proj
  Tensor res1;                     // (B, T, C) residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor fch, fch_gelu;            // (B, T, F_l)
};

// Backward scratch shared by every context of a chunk.
struct Scratch : SavedTensors {
  Tensor c1, c2, c3, f1, f2, qkv_grad, att_scratch;
};

// This rank's sizes that every activation shape is made of.
class Activations final : public ChunkActivations {
 public:
  Activations(const Gpt2Config& cfg, const TpShard& shard) {
    check_heads(cfg, shard.size);
    arch = "gpt2", C = cfg.d_model, tp = shard.size, n_layer = cfg.n_layer, max_seq_len = cfg.max_seq_len;
    NH_l = cfg.n_head / shard.size;
    C_l = C / shard.size;
    F_l = 4 * C_l;
    V_l = padded_vocab(cfg.vocab_size, shard) / shard.size;
    attention = {.NH = NH_l, .HS = C / cfg.n_head, .p = cfg.dropout};
  }
  std::unique_ptr<SavedTensors> block(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto a = std::make_unique<BlockActs>();
    a->ln1 = make({B, T, C}), a->ln1_mean = make.master({B, T}), a->ln1_rstd = make.master({B, T});
    a->qkv = make({B, T, 3 * C_l}), a->att = make.attention(attention_at(B, T)), a->atty = make({B, T, C_l});
    a->res1 = make({B, T, C});
    a->ln2 = make({B, T, C}), a->ln2_mean = make.master({B, T}), a->ln2_rstd = make.master({B, T});
    a->fch = make({B, T, F_l}), a->fch_gelu = make({B, T, F_l});
    return a;
  }
  std::unique_ptr<LmHeadTensors> head(const MakeTensor& make, int64_t B, int64_t T) const override {
    return layernorm_head(make, B, T);
  }
  std::unique_ptr<SavedTensors> scratch(const MakeTensor& make, const StageSpan&, int64_t B, int64_t T) const override {
    auto w = std::make_unique<Scratch>();
    w->c1 = make({B, T, C}), w->c2 = make({B, T, C}), w->c3 = make({B, T, C});
    w->f1 = make({B, T, F_l}), w->f2 = make({B, T, F_l});
    w->qkv_grad = make({B, T, 3 * C_l}), w->att_scratch = make.attention_scratch(attention_at(B, T));
    return w;
  }
  int64_t NH_l = 0, C_l = 0, F_l = 0;
};

}  // namespace

Gpt2::Gpt2(const Gpt2Config& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : ChunkModel(std::make_unique<Activations>(cfg, params.shard()), params, tp, span),
      cfg_(cfg),
      heads_l_(cfg.n_head / tp.size()),
      embed_(tp),
      qkv_({.bias = true}, tp),
      fc_({.bias = true}, tp),
      head_({.bias = false}, tp),
      attn_proj_({.bias = true}, tp),
      mlp_proj_({.bias = true}, tp) {
  if (span_.embedding) {
    wte_ = bind(params, "wte.weight");
    wpe_ = bind(params, "wpe.weight");
  }
  if (span_.head) {
    head_p_.norm_w = bind(params, "ln_f.weight");
    head_p_.norm_b = bind(params, "ln_f.bias");
    head_p_.head_w = bind(params, cfg.tie_embeddings ? "wte.weight" : "lm_head.weight");
    head_p_.eps = cfg.norm_eps, head_p_.vocab_size = cfg.vocab_size;
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    auto p = [&, h = "h." + std::to_string(i) + "."](const char* name) { return bind(params, h + name); };
    layers_.push_back(LayerView{p("ln_1.weight"), p("ln_1.bias"), p("attn.c_attn.weight"), p("attn.c_attn.bias"),
                                p("attn.c_proj.weight"), p("attn.c_proj.bias"), p("ln_2.weight"), p("ln_2.bias"),
                                p("mlp.c_fc.weight"), p("mlp.c_fc.bias"), p("mlp.c_proj.weight"),
                                p("mlp.c_proj.bias")});
  }
}

ActivationBytes Gpt2::activation_bytes_of(const Gpt2Config& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                          int64_t B, int64_t T, ops::AttentionState attention) {
  return ChunkModel::activation_bytes_of(Activations(cfg, shard), span, dtype, B, T, attention);
}

void Gpt2::block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Tensor& tmp = scratch_of<Scratch>(ctx).c1;  // (B, T, C)
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln_1_w.w, p.ln_1_b.w, cfg_.norm_eps);
  qkv_.forward(a.qkv, a.ln1, p.c_attn_w.mm(), &p.c_attn_b.w);
  attend(ctx, i, a.atty, a.att, a.qkv, dropout_at(c, cfg_.dropout, layer, kAttnProbs));
  attn_proj_.forward(tmp, a.atty, p.attn_proj_w.mm(), &p.attn_proj_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  ops::add(a.res1, x, tmp);
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, p.ln_2_w.w, p.ln_2_b.w, cfg_.norm_eps);
  fc_.forward_gelu(a.fch_gelu, a.fch, a.ln2, p.c_fc_w.mm(), &p.c_fc_b.w);
  mlp_proj_.forward(tmp, a.fch_gelu, p.mlp_proj_w.mm(), &p.mlp_proj_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  ops::add(out, a.res1, tmp);
}

void Gpt2::block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Scratch& w = scratch_of<Scratch>(ctx);
  Tensor &c1 = w.c1, &dres1 = w.c2, &c3 = w.c3;
  ops::dropout_backward(c1, dout, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  mlp_proj_.backward(&w.f1, &p.mlp_proj_w.g, &p.mlp_proj_b.g, c1, a.fch_gelu, p.mlp_proj_w.mm());
  ops::gelu_backward(w.f2, w.f1, a.fch);
  fc_.backward(&c1, &p.c_fc_w.g, &p.c_fc_b.g, w.f2, a.ln2, p.c_fc_w.mm());
  ops::layernorm_backward(dres1, p.ln_2_w.g, p.ln_2_b.g, c1, a.res1, p.ln_2_w.w, a.ln2_mean, a.ln2_rstd);
  ops::add_inplace(dres1, dout);
  ops::dropout_backward(c1, dres1, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  Tensor datty = c3.view(0, a.atty.shape());  // (B, T, C_l)
  attn_proj_.backward(&datty, &p.attn_proj_w.g, &p.attn_proj_b.g, c1, a.atty, p.attn_proj_w.mm());
  const ops::Dropout probs = dropout_at(c, cfg_.dropout, layer, kAttnProbs);
  recompute_attention(ctx, i, a.att, a.qkv, probs);
  ops::attention_backward(w.qkv_grad, w.att_scratch, datty, a.qkv, a.att, int(heads_l_), probs, head_offset());
  qkv_.backward(&c1, &p.c_attn_w.g, &p.c_attn_b.g, w.qkv_grad, a.ln1, p.c_attn_w.mm());
  ops::layernorm_backward(dx, p.ln_1_w.g, p.ln_1_b.g, c1, x, p.ln_1_w.w, a.ln1_mean, a.ln1_rstd);
  ops::add_inplace(dx, dres1);
}

void Gpt2::embed_forward(Context& ctx, const Tensor& ids) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  // Token plus position embedding; positions pos0 .. pos0 + T - 1 are those rows of wpe.
  embed_.forward(ctx.emb, ids, wte_.w);
  Tensor pos = wpe_.w.view(ctx.pos0 * C, {T, C});
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = ctx.emb.view(b * T * C, {T, C});
    ops::add_inplace(row, pos);
  }
  ops::dropout_forward(ctx.emb, ctx.emb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
}

void Gpt2::embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  ops::dropout_backward(scratch, demb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
  embed_.backward(wte_.g, scratch, ctx.inputs);
  Tensor dpos = wpe_.g.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) ops::add_inplace(dpos, scratch.view(b * T * C, {T, C}));
}

double Gpt2::head_forward(Context& ctx, const Tensor& x) { return layernorm_head_forward(ctx, x, head_p_, head_); }

void Gpt2::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  layernorm_head_backward(ctx, x, dloss, head_p_, head_, scratch_of<Scratch>(ctx).c1, dx);
}

double Gpt2::flops_per_token(int64_t T) const {
  // N excludes the position embedding (a lookup, no matmul); a tied head counts once.
  const double C = cfg_.d_model, L = cfg_.n_layer, V = cfg_.vocab_size;
  double per_layer = 12 * C * C + 13 * C;  // qkv + proj + fc + proj weights, biases and norms
  double n = V * C + L * per_layer + 2 * C + (cfg_.tie_embeddings ? 0 : V * C);
  return 6 * n + 12 * L * C * double(T);
}

}  // namespace lattice::gpt2
