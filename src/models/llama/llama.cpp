// LLaMA forward and backward (see llama.h). One block reads like the diagram:
// RMSNorm, q/k/v matmul, RoPE, repeat k/v, attention, o matmul, residual,
// RMSNorm, gate/up matmul, SwiGLU, down matmul, residual; backward makes the
// same calls in reverse. The chunk walk and its memory are ChunkModel's.
#include "models/llama/llama.h"

#include <algorithm>
#include <utility>

#include "core/ops.h"
#include "tp/replicas.h"

namespace lattice::llama {

namespace {

enum Site : uint32_t { kAttnProbs = 0 };  // RNG site; block i is layer id i + 1

void check_heads(const LlamaConfig& cfg, int tp) {
  LATTICE_CHECK(cfg.d_model % cfg.n_head == 0 && (cfg.d_model / cfg.n_head) % 2 == 0,
                "llama: d_model {} must be n_head {} times an even head size", cfg.d_model, cfg.n_head);
  LATTICE_CHECK(cfg.n_kv_head > 0 && cfg.n_head % cfg.n_kv_head == 0,
                "llama: n_head {} is not divisible by n_kv_head {}", cfg.n_head, cfg.n_kv_head);
  LATTICE_CHECK(cfg.n_head % tp == 0, "llama: n_head {} is not divisible by tp {}", cfg.n_head, tp);
  LATTICE_CHECK(cfg.n_kv_head % tp == 0 || tp % cfg.n_kv_head == 0,
                "llama: tp {} must divide n_kv_head {} or be a multiple of it", tp, cfg.n_kv_head);
  LATTICE_CHECK(cfg.d_ff % tp == 0, "llama: d_ff {} is not divisible by tp {}", cfg.d_ff, tp);
}

// Saved activations of one block besides its output.
struct BlockActs : SavedTensors {
  Tensor ln1, ln1_rstd;  // (B, T, C), (B, T)
  Tensor qkv;            // (B, T, 3 C_l): rotated q, k, v with k/v repeated to NH_l heads
  Tensor att;            // make.attention: (B, NH_l, T, T) P before dropout, or compact
  Tensor atty;           // (B, T, C_l) attention output before o_proj
  Tensor res1;           // (B, T, C) residual after attention
  Tensor ln2, ln2_rstd;  // (B, T, C), (B, T)
  Tensor gu;             // (B, T, 2 F_l) [gate | up]
  Tensor act;            // (B, T, F_l) silu(gate) * up
};

struct HeadActs : LmHeadTensors {
  Tensor lnf, lnf_rstd;  // (B, T, C), (B, T)
};

struct Scratch : SavedTensors {
  Tensor c1, c2, c3, packed, f1, f2, qkv_grad, att_scratch;
  Tensor qkv_wgrad;  // (W_l, C), only with replicated k/v heads
};

class Activations final : public ChunkActivations {
 public:
  Activations(const LlamaConfig& cfg, const TpShard& shard) {
    check_heads(cfg, shard.size);
    arch = "llama", C = cfg.d_model, tp = shard.size, n_layer = cfg.n_layer, max_seq_len = cfg.max_seq_len;
    HS = C / cfg.n_head;
    NH_l = cfg.n_head / tp;
    KV_l = std::max(1, cfg.n_kv_head / tp);
    kv_replicas = tp > cfg.n_kv_head ? tp / cfg.n_kv_head : 1;
    C_l = NH_l * HS;
    W_l = (NH_l + 2 * KV_l) * HS;
    F_l = cfg.d_ff / tp;
    V_l = padded_vocab(cfg.vocab_size, shard) / tp;
    kv_groups = tp / kv_replicas;
    attention = {.NH = NH_l, .HS = HS, .p = cfg.dropout};
    kv_heads = KV_l;
  }
  std::unique_ptr<SavedTensors> block(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto a = std::make_unique<BlockActs>();
    a->ln1 = make({B, T, C}), a->ln1_rstd = make.master({B, T});
    a->qkv = make({B, T, 3 * C_l}), a->att = make.attention(attention_at(B, T)), a->atty = make({B, T, C_l});
    a->res1 = make({B, T, C});
    a->ln2 = make({B, T, C}), a->ln2_rstd = make.master({B, T});
    a->gu = make({B, T, 2 * F_l}), a->act = make({B, T, F_l});
    return a;
  }
  std::unique_ptr<LmHeadTensors> head(const MakeTensor& make, int64_t B, int64_t T) const override {
    auto h = std::make_unique<HeadActs>();
    h->lnf = make({B, T, C}), h->lnf_rstd = make.master({B, T});
    return h;
  }
  std::unique_ptr<SavedTensors> scratch(const MakeTensor& make, const StageSpan& span, int64_t B,
                                        int64_t T) const override {
    auto w = std::make_unique<Scratch>();
    w->c1 = make({B, T, C}), w->c2 = make({B, T, C}), w->c3 = make({B, T, C});
    w->packed = make({B, T, W_l});
    w->f1 = make({B, T, F_l}), w->f2 = make({B, T, 2 * F_l});
    w->qkv_grad = make({B, T, 3 * C_l}), w->att_scratch = make.attention_scratch(attention_at(B, T));
    if (kv_replicas > 1 && span.end_layer > span.first_layer) w->qkv_wgrad = make.master({W_l, C});
    return w;
  }
  // Besides the default: the replicated-k/v gradient sum's buffer (KV_l
  // blocks of tp / R; tp/replicas.cpp), after the q/k/v backward's own.
  int64_t backward_transient_bytes(const StageSpan& span, int64_t B, int64_t T, DType activation) const override {
    const int64_t n = ChunkActivations::backward_transient_bytes(span, B, T, activation);
    if (kv_replicas == 1 || span.end_layer <= span.first_layer) return n;
    return std::max(n, 2 * KV_l * HS * C * kv_groups * int64_t(dtype_size(master_dtype(activation))));
  }
  int64_t HS = 0, NH_l = 0, KV_l = 0, C_l = 0, W_l = 0, F_l = 0;
  int kv_replicas = 1, kv_groups = 1;
};

}  // namespace

Llama::Llama(const LlamaConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : ChunkModel(std::make_unique<Activations>(cfg, params.shard()), params, tp, span),
      cfg_(cfg),
      embed_(tp),
      qkv_({.bias = false}, tp),
      gate_up_({.bias = false}, tp),
      head_({.bias = false}, tp),
      o_proj_({.bias = false}, tp),
      down_proj_({.bias = false}, tp) {
  const Activations d(cfg, shard_);
  HS_ = d.HS, NH_l_ = d.NH_l, KV_l_ = d.KV_l, kv_replicas_ = d.kv_replicas;
  if (span_.embedding) embed_w_ = bind(params, "model.embed_tokens.weight");
  if (span_.head) {
    norm_w_ = bind(params, "model.norm.weight");
    lm_head_ = bind(params, cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  }
  // Local [q; k; v] is one (W_l, C) weight, [gate; up] one (2 F_l, C).
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    const std::string a = h + "self_attn.", m = h + "mlp.";
    layers_.push_back(LayerView{bind(params, h + "input_layernorm.weight"),
                                bind_rows(params, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}),
                                bind(params, a + "o_proj.weight"), bind(params, h + "post_attention_layernorm.weight"),
                                bind_rows(params, {m + "gate_proj.weight", m + "up_proj.weight"}),
                                bind(params, m + "down_proj.weight")});
  }
}

ActivationBytes Llama::activation_bytes_of(const LlamaConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                           int64_t B, int64_t T, ops::AttentionState attention) {
  return ChunkModel::activation_bytes_of(Activations(cfg, shard), span, dtype, B, T, attention);
}

void Llama::block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  Scratch& w = scratch_of<Scratch>(ctx);
  Tensor& tmp = w.c1;                      // (B, T, C)
  const int rotated = int(NH_l_ + KV_l_);  // q and k heads lead each packed row
  ops::rmsnorm_forward(a.ln1, a.ln1_rstd, x, p.input_norm.w, cfg_.norm_eps);
  qkv_.forward(w.packed, a.ln1, p.qkv.mm(), nullptr);
  ops::rope_forward(w.packed, w.packed, rotated, HS_, cfg_.rope_theta, ctx.pos0);
  ops::repeat_kv_forward(a.qkv, w.packed, int(NH_l_), int(KV_l_));
  attend(ctx, i, a.atty, a.att, a.qkv, dropout_at(ctx.coords, cfg_.dropout, layer_of(i) + 1, kAttnProbs));
  o_proj_.forward(tmp, a.atty, p.o.mm(), nullptr);
  ops::add(a.res1, x, tmp);
  ops::rmsnorm_forward(a.ln2, a.ln2_rstd, a.res1, p.post_norm.w, cfg_.norm_eps);
  gate_up_.forward(a.gu, a.ln2, p.gate_up.mm(), nullptr);
  ops::swiglu_forward(a.act, a.gu);
  down_proj_.forward(tmp, a.act, p.down.mm(), nullptr);
  ops::add(out, a.res1, tmp);
}

void Llama::block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx, SavedTensors& saved) {
  auto& a = as<BlockActs>(saved);
  LayerView& p = layers_[size_t(i)];
  Scratch& w = scratch_of<Scratch>(ctx);
  Tensor &c1 = w.c1, &dres1 = w.c2;
  const int rotated = int(NH_l_ + KV_l_);
  down_proj_.backward(&w.f1, &p.down.g, nullptr, dout, a.act, p.down.mm());
  ops::swiglu_backward(w.f2, w.f1, a.gu);
  gate_up_.backward(&c1, &p.gate_up.g, nullptr, w.f2, a.ln2, p.gate_up.mm());
  ops::rmsnorm_backward(dres1, p.post_norm.g, c1, a.res1, p.post_norm.w, a.ln2_rstd);
  ops::add_inplace(dres1, dout);
  Tensor datty = w.c3.view(0, a.atty.shape());  // (B, T, C_l)
  o_proj_.backward(&datty, &p.o.g, nullptr, dres1, a.atty, p.o.mm());
  const ops::Dropout probs = dropout_at(ctx.coords, cfg_.dropout, layer_of(i) + 1, kAttnProbs);
  recompute_attention(ctx, i, a.att, a.qkv, probs);
  ops::attention_backward(w.qkv_grad, w.att_scratch, datty, a.qkv, a.att, int(NH_l_), probs, head_offset());
  ops::repeat_kv_backward(w.packed, w.qkv_grad, int(NH_l_), int(KV_l_));
  ops::rope_backward(w.packed, w.packed, rotated, HS_, cfg_.rope_theta);
  qkv_weight_backward(ctx, c1, w.packed, a.ln1, p);
  ops::rmsnorm_backward(dx, p.input_norm.g, c1, x, p.input_norm.w, a.ln1_rstd);
  ops::add_inplace(dx, dres1);
}

// The q/k/v matmul's backward. With k/v heads replicated over R ranks each
// rank's k/v weight gradient is its own heads' share: the step's contribution
// is summed over the R ranks before it joins the accumulated gradient.
void Llama::qkv_weight_backward(Context& ctx, Tensor& dx, const Tensor& dpacked, const Tensor& x, LayerView& p) {
  if (kv_replicas_ == 1) return qkv_.backward(&dx, &p.qkv.g, nullptr, dpacked, x, p.qkv.mm());
  Scratch& w = scratch_of<Scratch>(ctx);
  w.qkv_wgrad.zero_();
  qkv_.backward(&dx, &w.qkv_wgrad, nullptr, dpacked, x, p.qkv.mm());
  const int64_t C = cfg_.d_model, q_rows = NH_l_ * HS_, kv_rows = 2 * KV_l_ * HS_;
  Tensor kv = w.qkv_wgrad.view(q_rows * C, {kv_rows, C});
  tp::sum_over_replicas(kv, kv_replicas_, tp_);
  ops::add_inplace(p.qkv.g, w.qkv_wgrad);
}

void Llama::embed_forward(Context& ctx, const Tensor& ids) { embed_.forward(ctx.emb, ids, embed_w_.w); }

void Llama::embed_backward(Context& ctx, Tensor& demb, Tensor&) { embed_.backward(embed_w_.g, demb, ctx.inputs); }

double Llama::head_forward(Context& ctx, const Tensor& x) {
  auto& h = head_of<HeadActs>(ctx);
  ops::rmsnorm_forward(h.lnf, h.lnf_rstd, x, norm_w_.w, cfg_.norm_eps);
  return lm_head_forward(ctx, h.lnf, {.linear = head_, .weight = lm_head_, .vocab_size = cfg_.vocab_size});
}

void Llama::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  auto& h = head_of<HeadActs>(ctx);
  Tensor& c1 = scratch_of<Scratch>(ctx).c1;
  lm_head_backward(ctx, h.lnf, dloss, {.linear = head_, .weight = lm_head_, .vocab_size = cfg_.vocab_size}, c1);
  ops::rmsnorm_backward(dx, norm_w_.g, c1, x, norm_w_.w, h.lnf_rstd);
}

double Llama::flops_per_token(int64_t T) const {
  // N counts every weight (as gpt2.cpp does); a tied head counts once.
  const double C = cfg_.d_model, L = cfg_.n_layer, V = cfg_.vocab_size, F = cfg_.d_ff;
  const double KVC = C / cfg_.n_head * cfg_.n_kv_head;
  const double per_layer = 2 * C * C + 2 * C * KVC + 3 * C * F + 2 * C;  // q, o; k, v; gate, up, down; norms
  const double n = V * C + L * per_layer + C + (cfg_.tie_embeddings ? 0 : V * C);
  return 6 * n + 12 * L * C * double(T);
}

}  // namespace lattice::llama
