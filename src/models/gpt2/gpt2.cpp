// GPT-2 forward and backward (see gpt2.h). One block reads like the diagram:
// norm, qkv matmul, attention, proj matmul, dropout + residual, norm, fc
// matmul, GELU, proj matmul, dropout + residual; backward makes the same calls
// in reverse.
#include "models/gpt2/gpt2.h"

#include <algorithm>
#include <utility>

#include "core/ops.h"
#include "tp/cross_entropy.h"

namespace lattice::gpt2 {

namespace {

// RNG sites. Layer ids: 0 is the embedding, block i is i + 1.
enum Site : uint32_t { kAttnProbs = 0, kAttnResid = 1, kMlpResid = 2, kEmbed = 0 };

ops::Dropout dropout_at(const StepCoords& c, float p, int layer, uint32_t site) {
  ops::Dropout d;
  d.p = c.train ? p : 0.0f;
  d.key.seed = c.seed;
  d.key.purpose = RngPurpose::dropout;
  d.key.step = uint32_t(c.step);
  d.key.layer = uint32_t(layer);
  d.key.site = site;
  d.sample0 = c.sample0;
  return d;
}

void check_heads(const Gpt2Config& cfg, int tp) {
  LATTICE_CHECK(cfg.d_model % cfg.n_head == 0, "gpt2: d_model {} is not divisible by n_head {}", cfg.d_model,
                cfg.n_head);
  LATTICE_CHECK(cfg.n_head % tp == 0, "gpt2: n_head {} is not divisible by tp {}", cfg.n_head, tp);
}

}  // namespace

// Saved activations of one block, all (B, T, ...) of the model dtype.
struct Gpt2::BlockActs {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor qkv;                      // (B, T, 3 C_l): this rank's heads of q, k, v
  Tensor att;                      // (B, NH_l, T, T) probabilities before dropout
  Tensor atty;                     // (B, T, C_l) attention output before c_proj
  Tensor res1;                     // (B, T, C) residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (B, T, C), (B, T), (B, T)
  Tensor fch, fch_gelu;            // (B, T, F_l)
  Tensor out;                      // (B, T, C) block output
};

struct Gpt2::Context final : ModelContext {
  int64_t B = 0, T = 0;
  StepCoords coords;
  Tensor inputs, targets;          // (B, T) i32 (inputs: with the embedding)
  Tensor emb;                      // (B, T, C) embedding output, or the chunk's input activation
  std::vector<BlockActs> blocks;   // this chunk's blocks
  Tensor lnf, lnf_mean, lnf_rstd;  // (B, T, C), (B, T), (B, T)   (with the head)
  Tensor logits;                   // (B, T, V_l); backward overwrites it with dlogits
  Tensor losses, lse;              // (B, T)
  Workspace* ws = nullptr;

  int64_t bytes() const override {
    int64_t n = int64_t(emb.nbytes() + lnf.nbytes() + lnf_mean.nbytes() + lnf_rstd.nbytes() + logits.nbytes() +
                        losses.nbytes() + lse.nbytes());
    for (const BlockActs& a : blocks)
      for (const Tensor* t : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.att, &a.atty, &a.res1, &a.ln2,
                              &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu, &a.out})
        n += int64_t(t->nbytes());
    return n;
  }
};

Gpt2::Gpt2(const Gpt2Config& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : cfg_(cfg), span_(span), tp_(tp), embed_(tp), qkv_({.bias = true}, tp), fc_({.bias = true}, tp), head_({.bias = false}, tp),
      attn_proj_({.bias = true}, tp), mlp_proj_({.bias = true}, tp) {
  check_heads(cfg, tp.size());
  LATTICE_CHECK(params.shard().size == tp.size() && params.shard().rank == tp.rank(),
                "gpt2: parameters sharded for tp rank {} of {}, group '{}' is rank {} of {}", params.shard().rank,
                params.shard().size, tp.name(), tp.rank(), tp.size());
  heads_l_ = cfg.n_head / tp.size();
  shard_ = params.shard();
  dims_ = dims_of(cfg, shard_);
  dtype_ = params.dtype();
  device_ = params.values().device();
  if (span_.end_layer < 0) span_.end_layer = cfg.n_layer;
  LATTICE_CHECK(0 <= span_.first_layer && span_.first_layer <= span_.end_layer && span_.end_layer <= cfg.n_layer,
                "gpt2: chunk layers [{}, {}) outside the model's {}", span_.first_layer, span_.end_layer, cfg.n_layer);
  auto bind = [&](const std::string& name) { return P{params.value(name), params.grad(name)}; };
  if (span_.embedding) {
    wte_ = bind("wte.weight");
    wpe_ = bind("wpe.weight");
  }
  if (span_.head) {
    ln_f_w_ = bind("ln_f.weight");
    ln_f_b_ = bind("ln_f.bias");
    lm_head_ = bind(cfg.tie_embeddings ? "wte.weight" : "lm_head.weight");
    vocab_start_ = int64_t(tp.rank()) * lm_head_.w.dim(0);
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    layers_.push_back(LayerView{bind(h + "ln_1.weight"), bind(h + "ln_1.bias"), bind(h + "attn.c_attn.weight"),
                                bind(h + "attn.c_attn.bias"), bind(h + "attn.c_proj.weight"),
                                bind(h + "attn.c_proj.bias"), bind(h + "ln_2.weight"), bind(h + "ln_2.bias"),
                                bind(h + "mlp.c_fc.weight"), bind(h + "mlp.c_fc.bias"),
                                bind(h + "mlp.c_proj.weight"), bind(h + "mlp.c_proj.bias")});
  }
}

Gpt2::~Gpt2() = default;

Gpt2::Dims Gpt2::dims_of(const Gpt2Config& cfg, const TpShard& shard) {
  Dims d;
  d.C = cfg.d_model;
  d.NH_l = cfg.n_head / shard.size;
  d.C_l = d.C / shard.size;
  d.F_l = 4 * d.C_l;
  d.V_l = padded_vocab(cfg.vocab_size, shard) / shard.size;
  return d;
}

Gpt2::BlockActs Gpt2::make_block_acts(const MakeTensor& make, const Dims& d, int64_t B, int64_t T, BlockPart part) {
  BlockActs a;
  if (part != BlockPart::scratch) a.out = make({B, T, d.C});
  if (part == BlockPart::output) return a;
  a.ln1 = make({B, T, d.C}), a.ln1_mean = make({B, T}), a.ln1_rstd = make({B, T});
  a.qkv = make({B, T, 3 * d.C_l}), a.att = make({B, d.NH_l, T, T}), a.atty = make({B, T, d.C_l});
  a.res1 = make({B, T, d.C});
  a.ln2 = make({B, T, d.C}), a.ln2_mean = make({B, T}), a.ln2_rstd = make({B, T});
  a.fch = make({B, T, d.F_l}), a.fch_gelu = make({B, T, d.F_l});
  return a;
}

void Gpt2::make_context_tensors(Context& ctx, const MakeTensor& make, const Dims& d, const Gpt2Config& cfg,
                                const StageSpan& span, int64_t B, int64_t T) {
  LATTICE_CHECK(T <= cfg.max_seq_len, "gpt2: sequence length {} exceeds max_seq_len {}", T, cfg.max_seq_len);
  ctx.B = B;
  ctx.T = T;
  if (span.embedding) ctx.emb = make({B, T, d.C});  // otherwise the previous chunk's activation
  for (int i = span.first_layer; i < span.end_layer; ++i)
    ctx.blocks.push_back(
        make_block_acts(make, d, B, T, i - span.first_layer < span.recompute ? BlockPart::output : BlockPart::all));
  if (span.head) {
    ctx.lnf = make({B, T, d.C}), ctx.lnf_mean = make({B, T}), ctx.lnf_rstd = make({B, T});
    ctx.logits = make({B, T, d.V_l});
    ctx.losses = make({B, T}), ctx.lse = make({B, T});
  }
}

void Gpt2::make_workspace_tensors(Workspace& ws, const MakeTensor& make, const Dims& d, const StageSpan& span,
                                  int64_t B, int64_t T) {
  ws.B = B, ws.T = T;
  ws.c1 = make({B, T, d.C}), ws.c2 = make({B, T, d.C}), ws.c3 = make({B, T, d.C});
  ws.f1 = make({B, T, d.F_l}), ws.f2 = make({B, T, d.F_l});
  ws.qkv_grad = make({B, T, 3 * d.C_l}), ws.att_grad = make({B, d.NH_l, T, T});
  ws.dbuf[0] = make({B, T, d.C}), ws.dbuf[1] = make({B, T, d.C});
  ws.acts.reset();
  if (span.recompute > 0) ws.acts = std::make_unique<BlockActs>(make_block_acts(make, d, B, T, BlockPart::scratch));
}

Gpt2::BlockActs& Gpt2::acts_for(Context& ctx, size_t i) {
  if (int(i) >= span_.recompute) return ctx.blocks[i];
  BlockActs& scratch = *ctx.ws->acts;
  scratch.out = ctx.blocks[i].out;  // the one tensor a recomputed block keeps
  return scratch;
}

Gpt2::Workspace& Gpt2::workspace(int64_t B, int64_t T) {
  if (ws_.B == B && ws_.T == T) return ws_;
  const MakeTensor alloc = [this](Shape s) { return Tensor::empty(std::move(s), dtype_, device_); };
  make_workspace_tensors(ws_, alloc, dims_, span_, B, T);
  return ws_;
}

std::unique_ptr<ModelContext> Gpt2::make_context(int64_t B, int64_t T) const {
  auto ctx = std::make_unique<Context>();
  const MakeTensor alloc = [this](Shape s) { return Tensor::empty(std::move(s), dtype_, device_); };
  make_context_tensors(*ctx, alloc, dims_, cfg_, span_, B, T);
  return ctx;
}

ActivationBytes Gpt2::activation_bytes_of(const Gpt2Config& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                          int64_t B, int64_t T) {
  check_heads(cfg, shard.size);
  if (span.end_layer < 0) span.end_layer = cfg.n_layer;
  const Dims d = dims_of(cfg, shard);
  int64_t counted = 0;
  // The allocator takes at least one byte per tensor (core/allocator.cpp).
  MakeTensor count = [&](Shape s) {
    counted += std::max<int64_t>(1, shape_numel(s) * int64_t(dtype_size(dtype)));
    return Tensor();
  };
  ActivationBytes out;
  Context ctx;
  make_context_tensors(ctx, count, d, cfg, span, B, T);
  out.context = std::exchange(counted, 0);
  Workspace ws;
  make_workspace_tensors(ws, count, d, span, B, T);
  out.workspace = std::exchange(counted, 0);
  // The loss's row max and [sum exp; target logit] (tp/cross_entropy.cpp), per head forward.
  if (span.head) out.transient = 3 * B * T * int64_t(dtype_size(dtype));
  return out;
}

ActivationBytes Gpt2::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes_of(cfg_, span_, shard_, dtype_, B, T);
}

void Gpt2::block_forward(BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer) {
  const StepCoords& c = ctx.coords;
  Tensor& tmp = ctx.ws->c1;  // (B, T, C)
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln_1_w.w, p.ln_1_b.w, cfg_.norm_eps);
  qkv_.forward(a.qkv, a.ln1, p.c_attn_w.w, &p.c_attn_b.w);
  ops::attention_forward(a.atty, a.att, a.qkv, int(heads_l_), dropout_at(c, cfg_.dropout, layer, kAttnProbs),
                         head_offset());
  attn_proj_.forward(tmp, a.atty, p.attn_proj_w.w, &p.attn_proj_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  ops::add(a.res1, x, tmp);
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, p.ln_2_w.w, p.ln_2_b.w, cfg_.norm_eps);
  fc_.forward(a.fch, a.ln2, p.c_fc_w.w, &p.c_fc_b.w);
  ops::gelu_forward(a.fch_gelu, a.fch);
  mlp_proj_.forward(tmp, a.fch_gelu, p.mlp_proj_w.w, &p.mlp_proj_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  ops::add(a.out, a.res1, tmp);
}

// dout: gradient of the block output; dx: gradient of its input (overwrite).
void Gpt2::block_backward(Tensor& dx, Tensor& dout, BlockActs& a, const Tensor& x, LayerView& p,
                          Context& ctx, int layer) {
  const StepCoords& c = ctx.coords;
  Workspace& w = *ctx.ws;
  Tensor &c1 = w.c1, &dres1 = w.c2, &c3 = w.c3;
  ops::dropout_backward(c1, dout, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  mlp_proj_.backward(&w.f1, &p.mlp_proj_w.g, &p.mlp_proj_b.g, c1, a.fch_gelu, p.mlp_proj_w.w);
  ops::gelu_backward(w.f2, w.f1, a.fch);
  fc_.backward(&c1, &p.c_fc_w.g, &p.c_fc_b.g, w.f2, a.ln2, p.c_fc_w.w);
  ops::layernorm_backward(dres1, p.ln_2_w.g, p.ln_2_b.g, c1, a.res1, p.ln_2_w.w, a.ln2_mean, a.ln2_rstd);
  ops::add_inplace(dres1, dout);
  ops::dropout_backward(c1, dres1, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  Tensor datty = c3.view(0, a.atty.shape());  // (B, T, C_l)
  attn_proj_.backward(&datty, &p.attn_proj_w.g, &p.attn_proj_b.g, c1, a.atty, p.attn_proj_w.w);
  ops::attention_backward(w.qkv_grad, w.att_grad, datty, a.qkv, a.att, int(heads_l_),
                          dropout_at(c, cfg_.dropout, layer, kAttnProbs), head_offset());
  qkv_.backward(&c1, &p.c_attn_w.g, &p.c_attn_b.g, w.qkv_grad, a.ln1, p.c_attn_w.w);
  ops::layernorm_backward(dx, p.ln_1_w.g, p.ln_1_b.g, c1, x, p.ln_1_w.w, a.ln1_mean, a.ln1_rstd);
  ops::add_inplace(dx, dres1);
}

void Gpt2::embed_forward(Context& ctx, const Tensor& ids) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  // Token plus position embedding; positions 0..T-1 are the first T rows of wpe.
  embed_.forward(ctx.emb, ids, wte_.w);
  Tensor pos = wpe_.w.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = ctx.emb.view(b * T * C, {T, C});
    ops::add_inplace(row, pos);
  }
  ops::dropout_forward(ctx.emb, ctx.emb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
}

double Gpt2::head_forward(Context& ctx, const Tensor& x, const Tensor& targets) {
  ops::layernorm_forward(ctx.lnf, ctx.lnf_mean, ctx.lnf_rstd, x, ln_f_w_.w, ln_f_b_.w, cfg_.norm_eps);
  head_.forward(ctx.logits, ctx.lnf, lm_head_.w, nullptr);
  tp::vocab_parallel_cross_entropy_forward(ctx.losses, ctx.lse, ctx.logits, targets, vocab_start_, cfg_.vocab_size,
                                           kIgnoreIndex, tp_);
  Tensor host = ctx.losses.device().is_cpu() ? ctx.losses : ctx.losses.to(Device::cpu());
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    sum += host.dtype() == DType::f64 ? host.data<double>()[i] : double(host.data<float>()[i]);
  return sum;
}

Tensor Gpt2::logits(const ModelContext& base) const {
  LATTICE_CHECK(span_.head, "gpt2: logits come from the chunk with the head");
  return static_cast<const Context&>(base).logits;
}

double Gpt2::forward(ModelContext& base, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                     Tensor* output) {
  auto& ctx = static_cast<Context&>(base);
  LATTICE_CHECK(input.numel() == ctx.B * ctx.T * (span_.embedding ? 1 : cfg_.d_model),
                "gpt2: input {} does not match the context ({}, {})", shape_str(input.shape()), ctx.B, ctx.T);
  ctx.coords = coords;
  ctx.targets = targets;
  ctx.ws = &workspace(ctx.B, ctx.T);
  if (span_.embedding) {
    ctx.inputs = input;
    embed_forward(ctx, input);
  } else {
    ctx.emb = input;  // the previous chunk's activation, alive until backward
  }
  const Tensor* x = &ctx.emb;
  for (size_t i = 0; i < layers_.size(); ++i) {
    block_forward(acts_for(ctx, i), *x, layers_[i], ctx, span_.first_layer + int(i) + 1);
    x = &ctx.blocks[i].out;
  }
  if (span_.head) return head_forward(ctx, *x, targets);
  LATTICE_CHECK(output != nullptr, "gpt2: a chunk without the head needs an output activation");
  output->copy_from(*x);
  return 0.0;
}

void Gpt2::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  Workspace& w = *ctx.ws;
  tp::vocab_parallel_cross_entropy_backward(ctx.logits, ctx.logits, ctx.lse, ctx.targets, dloss, vocab_start_,
                                            cfg_.vocab_size, kIgnoreIndex);
  head_.backward(&w.c1, &lm_head_.g, nullptr, ctx.logits, ctx.lnf, lm_head_.w);
  ops::layernorm_backward(dx, ln_f_w_.g, ln_f_b_.g, w.c1, x, ln_f_w_.w, ctx.lnf_mean, ctx.lnf_rstd);
}

void Gpt2::backward(ModelContext& base, float dloss, const Tensor* doutput, Tensor* dinput) {
  auto& ctx = static_cast<Context&>(base);
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  Workspace& w = *(ctx.ws = &workspace(B, T));
  Tensor* dout = &w.dbuf[0];
  Tensor* dx = &w.dbuf[1];
  const Tensor& last = layers_.empty() ? ctx.emb : ctx.blocks.back().out;
  if (span_.head) {
    head_backward(ctx, last, dloss, *dout);
    if (on_grads_ready) on_grads_ready(cfg_.n_layer);
  } else {
    LATTICE_CHECK(doutput != nullptr, "gpt2: a chunk without the head needs the output gradient");
    dout->copy_from(*doutput);
  }
  for (int i = int(layers_.size()) - 1; i >= 0; --i) {
    const Tensor& x = i > 0 ? ctx.blocks[size_t(i - 1)].out : ctx.emb;
    const int layer = span_.first_layer + i + 1;
    BlockActs& a = acts_for(ctx, size_t(i));
    if (i < span_.recompute) block_forward(a, x, layers_[size_t(i)], ctx, layer);  // same coords, same masks
    block_backward(*dx, *dout, a, x, layers_[size_t(i)], ctx, layer);
    if (on_grads_ready) on_grads_ready(layer - 1);  // the block's ParamSpec layer (dropout keys count from 1)
    std::swap(dout, dx);
  }
  // *dout is now the gradient of the chunk's input.
  if (!span_.embedding) {
    LATTICE_CHECK(dinput != nullptr, "gpt2: a chunk without the embedding needs an input gradient");
    dinput->copy_from(*dout);
    return;
  }
  ops::dropout_backward(*dx, *dout, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
  embed_.backward(wte_.g, *dx, ctx.inputs);
  Tensor dpos = wpe_.g.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) ops::add_inplace(dpos, dx->view(b * T * C, {T, C}));
  if (on_grads_ready) on_grads_ready(kEmbeddingLayer);
}

double Gpt2::flops_per_token(int64_t T) const {
  // N excludes the position embedding (a lookup, no matmul); a tied head counts once.
  const double C = cfg_.d_model, L = cfg_.n_layer, V = cfg_.vocab_size;
  double per_layer = 12 * C * C + 13 * C;  // qkv + proj + fc + proj weights, biases and norms
  double n = V * C + L * per_layer + 2 * C + (cfg_.tie_embeddings ? 0 : V * C);
  return 6 * n + 12 * L * C * double(T);
}

}  // namespace lattice::gpt2
