// BERT forward and backward (see bert.h). One post-LN block reads like the
// diagram: qkv matmul, attention, proj matmul, dropout + residual, norm, fc
// matmul, GELU, proj matmul, dropout + residual, norm; backward makes the same
// calls in reverse. The chunk walk and its memory are ChunkModel's.
#include "models/bert/bert.h"

#include <algorithm>
#include <utility>

#include "core/ops.h"
#include "tp/mappings.h"

namespace lattice::bert {

namespace {

// RNG sites. Layer ids: 0 is the embedding, block i is i + 1.
enum Site : uint32_t { kAttnProbs = 0, kAttnResid = 1, kMlpResid = 2, kEmbed = 0 };

void check_heads(const BertConfig& cfg, int tp) {
  LATTICE_CHECK(cfg.d_model % cfg.n_head == 0, "bert: d_model {} is not divisible by n_head {}", cfg.d_model,
                cfg.n_head);
  LATTICE_CHECK(cfg.n_head % tp == 0, "bert: n_head {} is not divisible by tp {}", cfg.n_head, tp);
  LATTICE_CHECK(cfg.d_ff % tp == 0, "bert: d_ff {} is not divisible by tp {}", cfg.d_ff, tp);
}

struct EmbedActs : SavedTensors {
  Tensor key_mask;    // (B, T) i32, defined only when the inputs hold [PAD]
  Tensor sum;         // (B, T, C) word + position + type, before LayerNorm
  Tensor mean, rstd;  // (B, T) of the LayerNorm whose output is the embedding
};

// Saved activations of one block besides its output, all of the model dtype.
struct BlockActs : SavedTensors {
  Tensor qkv;                   // (B, T, 3 C_l): this rank's heads of q, k, v
  Tensor att;                   // (B, NH_l, T, T) probabilities before dropout
  Tensor atty;                  // (B, T, C_l) attention output before attention.output.dense
  Tensor res1;                  // (B, T, C) x + attention branch
  Tensor h1, h1_mean, h1_rstd;  // (B, T, C), (B, T), (B, T): attention.output.LayerNorm
  Tensor fch, fch_gelu;         // (B, T, F_l)
  Tensor res2;                  // (B, T, C) h1 + MLP branch
  Tensor out_mean, out_rstd;    // (B, T): output.LayerNorm, whose output is the block's
};

struct HeadActs : LmHeadTensors {
  Tensor tr, tr_gelu;              // (B, T, C) transform dense, its GELU
  Tensor tr_ln, tr_mean, tr_rstd;  // (B, T, C), (B, T), (B, T)
};

struct Scratch : SavedTensors {
  Tensor c1, c2, c3, f1, f2, qkv_grad, att_scratch, qkv_bias_grad;
  // (1, padded V), (1, V_l), (1, V_l): the decoder bias, this rank's slice and its gradient (head)
  Tensor bias_full, bias_l, dbias_l;
};

class Activations final : public ChunkActivations {
 public:
  Activations(const BertConfig& cfg, const TpShard& shard) {
    check_heads(cfg, shard.size);
    arch = "bert", C = cfg.d_model, tp = shard.size, n_layer = cfg.n_layer, max_seq_len = cfg.max_seq_len;
    NH_l = cfg.n_head / shard.size;
    C_l = C / shard.size;
    F_l = cfg.d_ff / shard.size;
    V_pad = padded_vocab(cfg.vocab_size, shard);
    V_l = V_pad / shard.size;
    attention = {.NH = NH_l, .HS = C / cfg.n_head, .causal = false, .key_mask = true, .p = cfg.dropout};
  }
  std::unique_ptr<SavedTensors> embedding(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto e = std::make_unique<EmbedActs>();
    e->sum = make({B, T, C}), e->mean = make.master({B, T}), e->rstd = make.master({B, T});
    return e;
  }
  std::unique_ptr<SavedTensors> block(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto a = std::make_unique<BlockActs>();
    a->qkv = make({B, T, 3 * C_l}), a->att = make.attention(attention_at(B, T)), a->atty = make({B, T, C_l});
    a->res1 = make({B, T, C}), a->h1 = make({B, T, C}), a->h1_mean = make.master({B, T}),
    a->h1_rstd = make.master({B, T});
    a->fch = make({B, T, F_l}), a->fch_gelu = make({B, T, F_l});
    a->res2 = make({B, T, C}), a->out_mean = make.master({B, T}), a->out_rstd = make.master({B, T});
    return a;
  }
  std::unique_ptr<LmHeadTensors> head(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto h = std::make_unique<HeadActs>();
    h->tr = make({B, T, C}), h->tr_gelu = make({B, T, C});
    h->tr_ln = make({B, T, C}), h->tr_mean = make.master({B, T}), h->tr_rstd = make.master({B, T});
    return h;
  }
  std::unique_ptr<SavedTensors> scratch(const MakeTensor& make, const StageSpan& span, int64_t B,
                                        int64_t T) const override {
    auto w = std::make_unique<Scratch>();
    w->c1 = make({B, T, C}), w->c2 = make({B, T, C}), w->c3 = make({B, T, C});
    w->f1 = make({B, T, F_l}), w->f2 = make({B, T, F_l});
    w->qkv_grad = make({B, T, 3 * C_l}), w->att_scratch = make.attention_scratch(attention_at(B, T));
    w->qkv_bias_grad = make.master({3 * C_l});
    if (span.head)
      w->bias_full = make.master({1, V_pad}), w->bias_l = make.master({1, V_l}), w->dbias_l = make.master({1, V_l});
    return w;
  }
  int64_t NH_l = 0, C_l = 0, F_l = 0, V_pad = 0;
};

}  // namespace

Bert::Bert(const BertConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : ChunkModel(std::make_unique<Activations>(cfg, params.shard()), params, tp, span),
      cfg_(cfg),
      ids_(special_ids(cfg)),
      heads_l_(cfg.n_head / tp.size()),
      embed_(tp),
      qkv_({.bias = true}, tp),
      fc_({.bias = true}, tp),
      decoder_head_({.bias = false}, tp),
      attn_out_({.bias = true}, tp),
      mlp_out_({.bias = true}, tp) {
  auto p = [&](const std::string& name) { return bind(params, name); };
  const std::string e = "bert.embeddings.";
  if (span_.embedding) {
    word_ = p(e + "word_embeddings.weight");
    pos_ = p(e + "position_embeddings.weight");
    type_ = p(e + "token_type_embeddings.weight");
    emb_ln_w_ = p(e + "LayerNorm.weight");
    emb_ln_b_ = p(e + "LayerNorm.bias");
  }
  if (span_.head) {
    const std::string c = "cls.predictions.";
    tr_w_ = p(c + "transform.dense.weight");
    tr_b_ = p(c + "transform.dense.bias");
    tr_ln_w_ = p(c + "transform.LayerNorm.weight");
    tr_ln_b_ = p(c + "transform.LayerNorm.bias");
    decoder_ = p(cfg.tie_embeddings ? e + "word_embeddings.weight" : c + "decoder.weight");
    decoder_bias_ = p(c + "bias");
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    const std::string h = "bert.encoder.layer." + std::to_string(i) + ".";
    auto qkv = [&](const std::string& kind) {  // the fused [q | k | v] layout the attention reads
      const std::string s = h + "attention.self.";
      return bind_rows(params, {s + "query." + kind, s + "key." + kind, s + "value." + kind});
    };
    layers_.push_back(LayerView{
        qkv("weight"), qkv("bias"), p(h + "attention.output.dense.weight"), p(h + "attention.output.dense.bias"),
        p(h + "attention.output.LayerNorm.weight"), p(h + "attention.output.LayerNorm.bias"),
        p(h + "intermediate.dense.weight"), p(h + "intermediate.dense.bias"), p(h + "output.dense.weight"),
        p(h + "output.dense.bias"), p(h + "output.LayerNorm.weight"), p(h + "output.LayerNorm.bias")});
  }
}

ActivationBytes Bert::activation_bytes_of(const BertConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                          int64_t B, int64_t T, ops::AttentionState attention) {
  return ChunkModel::activation_bytes_of(Activations(cfg, shard), span, dtype, B, T, attention);
}

bool Bert::whole_model() const {
  return span_.embedding && span_.head && span_.first_layer == 0 && span_.end_layer == cfg_.n_layer;
}

const Tensor* Bert::key_mask(const Context& ctx) const {
  const auto* e = as_ptr<EmbedActs>(ctx.embed.get());
  return e && e->key_mask.defined() ? &e->key_mask : nullptr;
}

void Bert::block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Tensor& tmp = scratch_of<Scratch>(ctx).c1;  // (B, T, C)
  qkv_.forward(a.qkv, x, p.qkv_w.mm(), &p.qkv_b.w);
  ops::attention_masked_forward(a.atty, a.att, a.qkv, key_mask(ctx), int(heads_l_),
                                dropout_at(c, cfg_.dropout, layer, kAttnProbs), head_offset());
  attn_out_.forward(tmp, a.atty, p.attn_out_w.mm(), &p.attn_out_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  ops::add(a.res1, x, tmp);
  ops::layernorm_forward(a.h1, a.h1_mean, a.h1_rstd, a.res1, p.attn_ln_w.w, p.attn_ln_b.w, cfg_.norm_eps);
  fc_.forward(a.fch, a.h1, p.fc_w.mm(), &p.fc_b.w);
  ops::gelu_erf_forward(a.fch_gelu, a.fch);
  mlp_out_.forward(tmp, a.fch_gelu, p.out_w.mm(), &p.out_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  ops::add(a.res2, a.h1, tmp);
  ops::layernorm_forward(out, a.out_mean, a.out_rstd, a.res2, p.out_ln_w.w, p.out_ln_b.w, cfg_.norm_eps);
}

void Bert::block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Scratch& w = scratch_of<Scratch>(ctx);
  Tensor &c1 = w.c1, &dres = w.c2, &c3 = w.c3;
  ops::layernorm_backward(dres, p.out_ln_w.g, p.out_ln_b.g, dout, a.res2, p.out_ln_w.w, a.out_mean, a.out_rstd);
  ops::dropout_backward(c1, dres, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  mlp_out_.backward(&w.f1, &p.out_w.g, &p.out_b.g, c1, a.fch_gelu, p.out_w.mm());
  ops::gelu_erf_backward(w.f2, w.f1, a.fch);
  fc_.backward(&c1, &p.fc_w.g, &p.fc_b.g, w.f2, a.h1, p.fc_w.mm());
  ops::add_inplace(c1, dres);  // dh1: the MLP branch plus the residual
  ops::layernorm_backward(dres, p.attn_ln_w.g, p.attn_ln_b.g, c1, a.res1, p.attn_ln_w.w, a.h1_mean, a.h1_rstd);
  ops::dropout_backward(c1, dres, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  Tensor datty = c3.view(0, a.atty.shape());  // (B, T, C_l)
  attn_out_.backward(&datty, &p.attn_out_w.g, &p.attn_out_b.g, c1, a.atty, p.attn_out_w.mm());
  const ops::Dropout probs = dropout_at(c, cfg_.dropout, layer, kAttnProbs);
  recompute_attention(ctx, i, a.att, a.qkv, probs, key_mask(ctx));
  ops::attention_masked_backward(w.qkv_grad, w.att_scratch, datty, a.qkv, a.att, key_mask(ctx), int(heads_l_), probs,
                                 head_offset());
  w.qkv_bias_grad.zero_();
  qkv_.backward(&dx, &p.qkv_w.g, &w.qkv_bias_grad, w.qkv_grad, x, p.qkv_w.mm());
  qkv_bias_backward(p.qkv_b.g, w.qkv_bias_grad);
  ops::add_inplace(dx, dres);
}

// The query and value bias gradients from dbias_qkv = [dq | dk | dv] column
// sums (3 C_l). The key bias shifts every score of a query row by the same
// q_i . b_k, which the softmax ignores, so its exact gradient is zero: it
// stays exactly zero instead of accumulating rounding noise (which differs
// between layouts, and which Adam would turn into full-size steps).
void Bert::qkv_bias_backward(Tensor& dbias, const Tensor& dbias_qkv) {
  const int64_t C_l = dbias_qkv.numel() / 3;
  for (int64_t part : {0, 2}) {
    Tensor acc = dbias.view(part * C_l, {C_l});
    ops::add_inplace(acc, dbias_qkv.view(part * C_l, {C_l}));
  }
}

namespace {

// The decoder bias (V), padded to the padded vocabulary in w.bias_full: this
// rank's slice (V_l) of it, in w.bias_l.
Tensor decoder_bias_slice(Scratch& w, const Tensor& bias, comm::Group& tp) {
  w.bias_full.zero_();
  w.bias_full.view(0, {bias.numel()}).copy_from(bias);
  tp::scatter_to_tp_region_forward(w.bias_l, w.bias_full, tp);
  return w.bias_l.view(0, {w.bias_l.numel()});
}

// Decoder bias: this rank's slice of the gradient (w.dbias_l), all-gathered
// into the whole vector and added to the parameter's gradient `g` (V).
void add_decoder_bias_grad(Scratch& w, Tensor& g, comm::Group& tp) {
  tp::scatter_to_tp_region_backward(w.bias_full, w.dbias_l, tp);
  ops::add_inplace(g, w.bias_full.view(0, {g.numel()}));
}

}  // namespace

void Bert::embed_forward(Context& ctx, const Tensor& ids) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  auto& e = as<EmbedActs>(*ctx.embed);
  // The key padding mask, only when some id is [PAD] (loader windows never are).
  const Tensor host = ids.on_host();
  const int32_t* id = host.data<int32_t>();
  const bool padded = std::any_of(id, id + B * T, [&](int32_t v) { return v == ids_.pad; });
  LATTICE_CHECK(!padded || whole_model(),
                "bert: the inputs hold [PAD] but the model is split into pipeline chunks, whose later chunks "
                "cannot see the padding mask — use parallel.pp = 1 for padded batches");
  e.key_mask = Tensor();
  if (padded) {
    Tensor mask = Tensor::empty({B, T}, DType::i32);
    for (int64_t i = 0; i < B * T; ++i) mask.data<int32_t>()[i] = id[i] != ids_.pad;
    e.key_mask = ids.device().is_cpu() ? mask : mask.to(ids.device());
  }
  // Word + position (rows 0..T-1) + token type 0, then LayerNorm and dropout.
  embed_.forward(e.sum, ids, word_.w);
  Tensor pos = pos_.w.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = e.sum.view(b * T * C, {T, C});
    ops::add_inplace(row, pos);
  }
  ops::add_bias_forward(e.sum, type_.w.view(0, {C}));
  ops::layernorm_forward(ctx.emb, e.mean, e.rstd, e.sum, emb_ln_w_.w, emb_ln_b_.w, cfg_.norm_eps);
  ops::dropout_forward(ctx.emb, ctx.emb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
}

void Bert::embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  auto& e = as<EmbedActs>(*ctx.embed);
  ops::dropout_backward(demb, demb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
  ops::layernorm_backward(scratch, emb_ln_w_.g, emb_ln_b_.g, demb, e.sum, emb_ln_w_.w, e.mean, e.rstd);
  embed_.backward(word_.g, scratch, ctx.inputs);
  Tensor dpos = pos_.g.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) ops::add_inplace(dpos, scratch.view(b * T * C, {T, C}));
  Tensor dtype0 = type_.g.view(0, {C});
  ops::add_bias_backward(dtype0, scratch);
}

double Bert::head_forward(Context& ctx, const Tensor& x) {
  auto& h = head_of<HeadActs>(ctx);
  Scratch& w = scratch_of<Scratch>(ctx);
  ops::linear_forward(h.tr, x, tr_w_.mm(), &tr_b_.w);
  ops::gelu_erf_forward(h.tr_gelu, h.tr);
  ops::layernorm_forward(h.tr_ln, h.tr_mean, h.tr_rstd, h.tr_gelu, tr_ln_w_.w, tr_ln_b_.w, cfg_.norm_eps);
  const Tensor bias = decoder_bias_slice(w, decoder_bias_.w, tp_);
  w.dbias_l.zero_();
  Tensor dbias_l = w.dbias_l.view(0, {w.dbias_l.numel()});
  const double loss = lm_head_forward(
      ctx, h.tr_ln,
      {.linear = decoder_head_, .weight = decoder_, .bias = &bias, .dbias = &dbias_l, .vocab_size = cfg_.vocab_size});
  if (h.forward_dloss) add_decoder_bias_grad(w, decoder_bias_.g, tp_);  // forward did the head's backward
  return loss;
}

void Bert::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  auto& h = head_of<HeadActs>(ctx);
  Scratch& w = scratch_of<Scratch>(ctx);
  const bool in_forward = h.forward_dloss.has_value();  // the decoder's gradients are in already
  // The bias again (another microbatch's forward may have used the scratch),
  // for a head in chunks, which computes its logits again.
  const Tensor bias = decoder_bias_slice(w, decoder_bias_.w, tp_);
  w.dbias_l.zero_();
  Tensor dbias_l = w.dbias_l.view(0, {w.dbias_l.numel()});
  lm_head_backward(
      ctx, h.tr_ln, dloss,
      {.linear = decoder_head_, .weight = decoder_, .bias = &bias, .dbias = &dbias_l, .vocab_size = cfg_.vocab_size},
      w.c1);
  if (!in_forward) add_decoder_bias_grad(w, decoder_bias_.g, tp_);
  ops::layernorm_backward(w.c2, tr_ln_w_.g, tr_ln_b_.g, w.c1, h.tr_gelu, tr_ln_w_.w, h.tr_mean, h.tr_rstd);
  ops::gelu_erf_backward(w.c1, w.c2, h.tr);
  ops::linear_backward(&dx, &tr_w_.g, &tr_b_.g, w.c1, x, tr_w_.mm());
}

double Bert::flops_per_token(int64_t T) const {
  // N excludes the position and token-type embeddings (lookups, no matmul); a tied decoder counts once.
  const double C = cfg_.d_model, L = cfg_.n_layer, V = cfg_.vocab_size, F = cfg_.d_ff;
  const double per_layer = 4 * C * C + 2 * C * F + 9 * C + F;  // q, k, v, out, fc, proj; biases and norms
  const double head = C * C + 3 * C + V + (cfg_.tie_embeddings ? 0 : V * C);
  const double n = V * C + 2 * C + L * per_layer + head;
  return 6 * n + 12 * L * C * double(T);
}

}  // namespace lattice::bert
