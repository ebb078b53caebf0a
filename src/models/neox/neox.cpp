// GPT-NeoX forward and backward (see neox.h). One block reads like the
// diagram: from the block input, the attention branch (norm, qkv matmul, RoPE,
// attention, dense matmul, dropout) and the MLP branch (norm, fc matmul, GELU,
// proj matmul, dropout), both added to the input. Backward sends the output
// gradient down both branches and sums what they give back with the residual.
// The chunk walk, its memory and recomputation are ChunkModel's.
#include "models/neox/neox.h"

#include "core/ops.h"

namespace lattice::neox {

namespace {

// RNG sites; block i is layer id i + 1 (0 is the embedding, which has no dropout).
enum Site : uint32_t { kAttnProbs = 0, kAttnResid = 1, kMlpResid = 2 };

// What one block saves besides its output: the inputs of every backward op.
struct BlockActs : SavedTensors {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor qkv;                      // (B, T, 3 C_l) q and k rotated
  Tensor att;                      // make.attention: (B, NH_l, T, T) P before dropout, or compact
  Tensor atty;                     // (B, T, C_l) attention output before dense
  Tensor ln2, ln2_mean, ln2_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor fch, fch_gelu;            // (B, T, F_l)
};

// Backward scratch shared by the chunk's contexts.
struct Scratch : SavedTensors {
  Tensor c1, c2, c3, f1, f2, qkv_grad, att_scratch;
};

class Activations final : public ChunkActivations {
 public:
  Activations(const NeoxConfig& cfg, const TpShard& shard) {
    LATTICE_CHECK(cfg.d_model % cfg.n_head == 0 && (cfg.d_model / cfg.n_head) % 2 == 0,
                  "neox: d_model {} must be n_head {} times an even head size", cfg.d_model, cfg.n_head);
    LATTICE_CHECK(cfg.n_head % shard.size == 0, "neox: n_head {} is not divisible by tp {}", cfg.n_head, shard.size);
    LATTICE_CHECK(cfg.d_ff % shard.size == 0, "neox: d_ff {} is not divisible by tp {}", cfg.d_ff, shard.size);
    arch = "neox", C = cfg.d_model, tp = shard.size, n_layer = cfg.n_layer, max_seq_len = cfg.max_seq_len;
    NH_l = cfg.n_head / shard.size;
    C_l = C / shard.size;
    F_l = cfg.d_ff / shard.size;
    V_l = padded_vocab(cfg.vocab_size, shard) / shard.size;
    attention = {.NH = NH_l, .HS = C / cfg.n_head, .p = cfg.dropout};
  }
  std::unique_ptr<SavedTensors> block(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto a = std::make_unique<BlockActs>();
    a->ln1 = make({B, T, C}), a->ln1_mean = make.master({B, T}), a->ln1_rstd = make.master({B, T});
    a->qkv = make({B, T, 3 * C_l}), a->att = make.attention(attention_at(B, T)), a->atty = make({B, T, C_l});
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

Neox::Neox(const NeoxConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : ChunkModel(std::make_unique<Activations>(cfg, params.shard()), params, tp, span),
      cfg_(cfg),
      NH_l_(cfg.n_head / tp.size()),
      HS_(cfg.d_model / cfg.n_head),
      embed_(tp),
      qkv_({.bias = true}, tp),
      fc_({.bias = true}, tp),
      head_({.bias = false}, tp),
      dense_({.bias = true}, tp),
      proj_({.bias = true}, tp) {
  if (span_.embedding) embed_in_ = bind(params, "gpt_neox.embed_in.weight");
  if (span_.head) {
    head_p_.norm_w = bind(params, "gpt_neox.final_layer_norm.weight");
    head_p_.norm_b = bind(params, "gpt_neox.final_layer_norm.bias");
    head_p_.head_w = bind(params, cfg.tie_embeddings ? "gpt_neox.embed_in.weight" : "embed_out.weight");
    head_p_.eps = cfg.norm_eps, head_p_.vocab_size = cfg.vocab_size;
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    auto p = [&, h = "gpt_neox.layers." + std::to_string(i) + "."](const char* name) { return bind(params, h + name); };
    layers_.push_back(LayerView{
        p("input_layernorm.weight"), p("input_layernorm.bias"), p("attention.query_key_value.weight"),
        p("attention.query_key_value.bias"), p("attention.dense.weight"), p("attention.dense.bias"),
        p("post_attention_layernorm.weight"), p("post_attention_layernorm.bias"), p("mlp.dense_h_to_4h.weight"),
        p("mlp.dense_h_to_4h.bias"), p("mlp.dense_4h_to_h.weight"), p("mlp.dense_4h_to_h.bias")});
  }
}

ActivationBytes Neox::activation_bytes_of(const NeoxConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                          int64_t B, int64_t T, ops::AttentionState attention) {
  return ChunkModel::activation_bytes_of(Activations(cfg, shard), span, dtype, B, T, attention);
}

void Neox::block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Tensor& branch = scratch_of<Scratch>(ctx).c1;  // (B, T, C)
  // Attention branch: out = x + dropout(dense(attention(rope(qkv(ln_1(x)))))).
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln_1_w.w, p.ln_1_b.w, cfg_.norm_eps);
  qkv_.forward(a.qkv, a.ln1, p.qkv_w.mm(), &p.qkv_b.w);
  ops::rope_forward(a.qkv, a.qkv, int(2 * NH_l_), HS_, cfg_.rope_theta, ctx.pos0);  // q and k heads lead each row
  attend(ctx, i, a.atty, a.att, a.qkv, dropout_at(c, cfg_.dropout, layer, kAttnProbs));
  dense_.forward(branch, a.atty, p.dense_w.mm(), &p.dense_b.w);
  ops::dropout_forward(branch, branch, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  ops::add(out, x, branch);
  // MLP branch, from the same x: out += dropout(proj(gelu(fc(ln_2(x))))).
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, x, p.ln_2_w.w, p.ln_2_b.w, cfg_.norm_eps);
  fc_.forward(a.fch, a.ln2, p.fc_w.mm(), &p.fc_b.w);
  ops::gelu_erf_forward(a.fch_gelu, a.fch);
  proj_.forward(branch, a.fch_gelu, p.proj_w.mm(), &p.proj_b.w);
  ops::dropout_forward(branch, branch, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  ops::add_inplace(out, branch);
}

void Neox::block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  const int layer = layer_of(i) + 1;
  const StepCoords& c = ctx.coords;
  Scratch& w = scratch_of<Scratch>(ctx);
  Tensor &dbranch = w.c1, &dln = w.c2, &dnorm = w.c3;
  // MLP branch: dx = ln_2's input gradient.
  ops::dropout_backward(dbranch, dout, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  proj_.backward(&w.f1, &p.proj_w.g, &p.proj_b.g, dbranch, a.fch_gelu, p.proj_w.mm());
  ops::gelu_erf_backward(w.f2, w.f1, a.fch);
  fc_.backward(&dln, &p.fc_w.g, &p.fc_b.g, w.f2, a.ln2, p.fc_w.mm());
  ops::layernorm_backward(dx, p.ln_2_w.g, p.ln_2_b.g, dln, x, p.ln_2_w.w, a.ln2_mean, a.ln2_rstd);
  // Attention branch: dx += ln_1's input gradient.
  ops::dropout_backward(dbranch, dout, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  Tensor datty = dnorm.view(0, a.atty.shape());  // (B, T, C_l)
  dense_.backward(&datty, &p.dense_w.g, &p.dense_b.g, dbranch, a.atty, p.dense_w.mm());
  const ops::Dropout probs = dropout_at(c, cfg_.dropout, layer, kAttnProbs);
  recompute_attention(ctx, i, a.att, a.qkv, probs);
  ops::attention_backward(w.qkv_grad, w.att_scratch, datty, a.qkv, a.att, int(NH_l_), probs, head_offset());
  ops::rope_backward(w.qkv_grad, w.qkv_grad, int(2 * NH_l_), HS_, cfg_.rope_theta);
  qkv_.backward(&dln, &p.qkv_w.g, &p.qkv_b.g, w.qkv_grad, a.ln1, p.qkv_w.mm());
  ops::layernorm_backward(dnorm, p.ln_1_w.g, p.ln_1_b.g, dln, x, p.ln_1_w.w, a.ln1_mean, a.ln1_rstd);
  ops::add_inplace(dx, dnorm);
  // The residual.
  ops::add_inplace(dx, dout);
}

void Neox::embed_forward(Context& ctx, const Tensor& ids) { embed_.forward(ctx.emb, ids, embed_in_.w); }

void Neox::embed_backward(Context& ctx, Tensor& demb, Tensor&) { embed_.backward(embed_in_.g, demb, ctx.inputs); }

double Neox::head_forward(Context& ctx, const Tensor& x) { return layernorm_head_forward(ctx, x, head_p_, head_); }

void Neox::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  layernorm_head_backward(ctx, x, dloss, head_p_, head_, scratch_of<Scratch>(ctx).c1, dx);
}

double Neox::flops_per_token(int64_t T) const {
  // 6 N + attention, N counting every weight (a tied head once), as gpt2.cpp.
  const double C = cfg_.d_model, L = cfg_.n_layer, V = cfg_.vocab_size, F = cfg_.d_ff;
  const double per_layer = 4 * C * C + 2 * C * F + (3 * C + C + F + C) + 4 * C;  // weights, biases, norms
  const double n = V * C + L * per_layer + 2 * C + (cfg_.tie_embeddings ? 0 : V * C);
  return 6 * n + 12 * L * C * double(T);
}

}  // namespace lattice::neox
