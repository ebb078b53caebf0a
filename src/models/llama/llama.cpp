// LLaMA forward and backward (see llama.h). One block reads like the diagram:
// RMSNorm, q/k/v matmul, RoPE, repeat k/v, attention, o matmul, residual,
// RMSNorm, gate/up matmul, SwiGLU, down matmul, residual; backward makes the
// same calls in reverse.
#include "models/llama/llama.h"

#include <algorithm>
#include <utility>

#include "core/ops.h"
#include "tp/cross_entropy.h"
#include "tp/replicas.h"

namespace lattice::llama {

namespace {

enum Site : uint32_t { kAttnProbs = 0 };  // RNG site; block i is layer id i + 1

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

}  // namespace

// Saved activations of one block.
struct Llama::BlockActs {
  Tensor ln1, ln1_rstd;  // (B, T, C), (B, T)
  Tensor qkv;            // (B, T, 3 C_l): rotated q, k, v with k/v repeated to NH_l heads
  Tensor att;            // (B, NH_l, T, T) probabilities before dropout
  Tensor atty;           // (B, T, C_l) attention output before o_proj
  Tensor res1;           // (B, T, C) residual after attention
  Tensor ln2, ln2_rstd;  // (B, T, C), (B, T)
  Tensor gu;             // (B, T, 2 F_l) [gate | up]
  Tensor act;            // (B, T, F_l) silu(gate) * up
  Tensor out;            // (B, T, C) block output
};

struct Llama::Context final : ModelContext {
  int64_t B = 0, T = 0;
  StepCoords coords;
  Tensor inputs, targets;         // (B, T) i32
  Tensor emb;                     // (B, T, C) embedding output, or the chunk's input activation
  std::vector<BlockActs> blocks;  // this chunk's blocks
  Tensor lnf, lnf_rstd;           // (B, T, C), (B, T)   (with the head)
  Tensor logits;                  // (B, T, V_l); backward overwrites it with dlogits
  Tensor losses, lse;             // (B, T)
  Workspace* ws = nullptr;

  int64_t bytes() const override {
    int64_t n =
        int64_t(emb.nbytes() + lnf.nbytes() + lnf_rstd.nbytes() + logits.nbytes() + losses.nbytes() + lse.nbytes());
    for (const BlockActs& a : blocks)
      for (const Tensor* t :
           {&a.ln1, &a.ln1_rstd, &a.qkv, &a.att, &a.atty, &a.res1, &a.ln2, &a.ln2_rstd, &a.gu, &a.act, &a.out})
        n += int64_t(t->nbytes());
    return n;
  }
};

Llama::Llama(const LlamaConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : cfg_(cfg),
      span_(span),
      tp_(tp),
      embed_(tp),
      qkv_({.bias = false}, tp),
      gate_up_({.bias = false}, tp),
      head_({.bias = false}, tp),
      o_proj_({.bias = false}, tp),
      down_proj_({.bias = false}, tp) {
  check_heads(cfg, tp.size());
  LATTICE_CHECK(params.shard().size == tp.size() && params.shard().rank == tp.rank(),
                "llama: parameters sharded for tp rank {} of {}, group '{}' is rank {} of {}", params.shard().rank,
                params.shard().size, tp.name(), tp.rank(), tp.size());
  shard_ = params.shard();
  dims_ = dims_of(cfg, shard_);
  dtype_ = params.dtype();
  device_ = params.values().device();
  if (span_.end_layer < 0) span_.end_layer = cfg.n_layer;
  LATTICE_CHECK(0 <= span_.first_layer && span_.first_layer <= span_.end_layer && span_.end_layer <= cfg.n_layer,
                "llama: chunk layers [{}, {}) outside the model's {}", span_.first_layer, span_.end_layer, cfg.n_layer);
  auto bind = [&](const std::string& name) { return bind_rows(params, {name}); };
  if (span_.embedding) embed_w_ = bind("model.embed_tokens.weight");
  if (span_.head) {
    norm_w_ = bind("model.norm.weight");
    lm_head_ = bind(cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    vocab_start_ = int64_t(tp.rank()) * lm_head_.w.dim(0);
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    const std::string a = h + "self_attn.", m = h + "mlp.";
    layers_.push_back(LayerView{bind(h + "input_layernorm.weight"),
                                bind_rows(params, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}),
                                bind(a + "o_proj.weight"), bind(h + "post_attention_layernorm.weight"),
                                bind_rows(params, {m + "gate_proj.weight", m + "up_proj.weight"}),
                                bind(m + "down_proj.weight")});
  }
}

Llama::~Llama() = default;

// One view over the rows of adjacent entries (the table keeps them adjacent):
// local [q; k; v] is one (W_l, C) weight, [gate; up] one (2 F_l, C).
Llama::P Llama::bind_rows(FlatParams& params, const std::vector<std::string>& names) const {
  const ParamEntry& first = params.entry(names.front());
  Shape shape = first.local_shape;
  int64_t end = first.offset + first.numel;
  for (size_t i = 1; i < names.size(); ++i) {
    const ParamEntry& e = params.entry(names[i]);
    LATTICE_CHECK(e.offset == end && e.local_shape.size() == 2 && e.local_shape[1] == shape[1],
                  "llama: '{}' must follow '{}' in the parameter buffer", names[i], names[i - 1]);
    shape[0] += e.local_shape[0];
    end += e.numel;
  }
  return P{params.values().view(first.offset, shape), params.grads().view(first.offset, shape)};
}

Llama::Dims Llama::dims_of(const LlamaConfig& cfg, const TpShard& shard) {
  Dims d;
  const int tp = shard.size;
  d.C = cfg.d_model;
  d.HS = d.C / cfg.n_head;
  d.NH_l = cfg.n_head / tp;
  d.KV_l = std::max(1, cfg.n_kv_head / tp);
  d.kv_replicas = tp > cfg.n_kv_head ? tp / cfg.n_kv_head : 1;
  d.C_l = d.NH_l * d.HS;
  d.W_l = (d.NH_l + 2 * d.KV_l) * d.HS;
  d.F_l = cfg.d_ff / tp;
  d.V_l = padded_vocab(cfg.vocab_size, shard) / tp;
  return d;
}

Llama::BlockActs Llama::make_block_acts(const MakeTensor& make, const Dims& d, int64_t B, int64_t T, BlockPart part) {
  BlockActs a;
  if (part != BlockPart::scratch) a.out = make({B, T, d.C});
  if (part == BlockPart::output) return a;
  a.ln1 = make({B, T, d.C}), a.ln1_rstd = make({B, T});
  a.qkv = make({B, T, 3 * d.C_l}), a.att = make({B, d.NH_l, T, T}), a.atty = make({B, T, d.C_l});
  a.res1 = make({B, T, d.C});
  a.ln2 = make({B, T, d.C}), a.ln2_rstd = make({B, T});
  a.gu = make({B, T, 2 * d.F_l}), a.act = make({B, T, d.F_l});
  return a;
}

void Llama::make_context_tensors(Context& ctx, const MakeTensor& make, const Dims& d, const LlamaConfig& cfg,
                                 const StageSpan& span, int64_t B, int64_t T) {
  LATTICE_CHECK(T <= cfg.max_seq_len, "llama: sequence length {} exceeds max_seq_len {}", T, cfg.max_seq_len);
  ctx.B = B;
  ctx.T = T;
  if (span.embedding) ctx.emb = make({B, T, d.C});
  for (int i = span.first_layer; i < span.end_layer; ++i)
    ctx.blocks.push_back(
        make_block_acts(make, d, B, T, i - span.first_layer < span.recompute ? BlockPart::output : BlockPart::all));
  if (span.head) {
    ctx.lnf = make({B, T, d.C}), ctx.lnf_rstd = make({B, T});
    ctx.logits = make({B, T, d.V_l});
    ctx.losses = make({B, T}), ctx.lse = make({B, T});
  }
}

void Llama::make_workspace_tensors(Workspace& ws, const MakeTensor& make, const Dims& d, const StageSpan& span,
                                   int64_t B, int64_t T) {
  ws.B = B, ws.T = T;
  ws.c1 = make({B, T, d.C}), ws.c2 = make({B, T, d.C}), ws.c3 = make({B, T, d.C});
  ws.packed = make({B, T, d.W_l});
  ws.f1 = make({B, T, d.F_l}), ws.f2 = make({B, T, 2 * d.F_l});
  ws.qkv_grad = make({B, T, 3 * d.C_l}), ws.att_grad = make({B, d.NH_l, T, T});
  ws.dbuf[0] = make({B, T, d.C}), ws.dbuf[1] = make({B, T, d.C});
  ws.qkv_wgrad = d.kv_replicas > 1 && span.end_layer > span.first_layer ? make({d.W_l, d.C}) : Tensor();
  ws.acts.reset();
  if (span.recompute > 0) ws.acts = std::make_unique<BlockActs>(make_block_acts(make, d, B, T, BlockPart::scratch));
}

Llama::BlockActs& Llama::acts_for(Context& ctx, size_t i) {
  if (int(i) >= span_.recompute) return ctx.blocks[i];
  BlockActs& scratch = *ctx.ws->acts;
  scratch.out = ctx.blocks[i].out;
  return scratch;
}

Llama::Workspace& Llama::workspace(int64_t B, int64_t T) {
  if (ws_.B == B && ws_.T == T) return ws_;
  const MakeTensor alloc = [this](Shape s) { return Tensor::empty(std::move(s), dtype_, device_); };
  make_workspace_tensors(ws_, alloc, dims_, span_, B, T);
  return ws_;
}

std::unique_ptr<ModelContext> Llama::make_context(int64_t B, int64_t T) const {
  auto ctx = std::make_unique<Context>();
  const MakeTensor alloc = [this](Shape s) { return Tensor::empty(std::move(s), dtype_, device_); };
  make_context_tensors(*ctx, alloc, dims_, cfg_, span_, B, T);
  return ctx;
}

ActivationBytes Llama::activation_bytes_of(const LlamaConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
                                           int64_t B, int64_t T) {
  check_heads(cfg, shard.size);
  if (span.end_layer < 0) span.end_layer = cfg.n_layer;
  const Dims d = dims_of(cfg, shard);
  int64_t counted = 0;
  MakeTensor count = [&](Shape s) {  // the allocator takes at least one byte per tensor
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
  // The loss's row max and [sum exp; target logit] (tp/cross_entropy.cpp); the
  // replicated-k/v gradient sum's (KV_l blocks of tp / R) buffer per block.
  if (span.head) out.transient += 3 * B * T * int64_t(dtype_size(dtype));
  if (d.kv_replicas > 1)
    out.transient += 2 * d.KV_l * d.HS * d.C * (shard.size / d.kv_replicas) * int64_t(dtype_size(dtype));
  return out;
}

ActivationBytes Llama::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes_of(cfg_, span_, shard_, dtype_, B, T);
}

void Llama::block_forward(BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer) {
  Workspace& w = *ctx.ws;
  Tensor& tmp = w.c1;                                // (B, T, C)
  const int rotated = int(dims_.NH_l + dims_.KV_l);  // q and k heads lead each packed row
  ops::rmsnorm_forward(a.ln1, a.ln1_rstd, x, p.input_norm.w, cfg_.norm_eps);
  qkv_.forward(w.packed, a.ln1, p.qkv.w, nullptr);
  ops::rope_forward(w.packed, w.packed, rotated, dims_.HS, cfg_.rope_theta);
  ops::repeat_kv_forward(a.qkv, w.packed, int(dims_.NH_l), int(dims_.KV_l));
  ops::attention_forward(a.atty, a.att, a.qkv, int(dims_.NH_l), dropout_at(ctx.coords, cfg_.dropout, layer, kAttnProbs),
                         head_offset());
  o_proj_.forward(tmp, a.atty, p.o.w, nullptr);
  ops::add(a.res1, x, tmp);
  ops::rmsnorm_forward(a.ln2, a.ln2_rstd, a.res1, p.post_norm.w, cfg_.norm_eps);
  gate_up_.forward(a.gu, a.ln2, p.gate_up.w, nullptr);
  ops::swiglu_forward(a.act, a.gu);
  down_proj_.forward(tmp, a.act, p.down.w, nullptr);
  ops::add(a.out, a.res1, tmp);
}

// dout: gradient of the block output; dx: gradient of its input (overwrite).
void Llama::block_backward(Tensor& dx, Tensor& dout, BlockActs& a, const Tensor& x, LayerView& p, Context& ctx,
                           int layer) {
  Workspace& w = *ctx.ws;
  Tensor &c1 = w.c1, &dres1 = w.c2;
  const int rotated = int(dims_.NH_l + dims_.KV_l);
  down_proj_.backward(&w.f1, &p.down.g, nullptr, dout, a.act, p.down.w);
  ops::swiglu_backward(w.f2, w.f1, a.gu);
  gate_up_.backward(&c1, &p.gate_up.g, nullptr, w.f2, a.ln2, p.gate_up.w);
  ops::rmsnorm_backward(dres1, p.post_norm.g, c1, a.res1, p.post_norm.w, a.ln2_rstd);
  ops::add_inplace(dres1, dout);
  Tensor datty = w.c3.view(0, a.atty.shape());  // (B, T, C_l)
  o_proj_.backward(&datty, &p.o.g, nullptr, dres1, a.atty, p.o.w);
  ops::attention_backward(w.qkv_grad, w.att_grad, datty, a.qkv, a.att, int(dims_.NH_l),
                          dropout_at(ctx.coords, cfg_.dropout, layer, kAttnProbs), head_offset());
  ops::repeat_kv_backward(w.packed, w.qkv_grad, int(dims_.NH_l), int(dims_.KV_l));
  ops::rope_backward(w.packed, w.packed, rotated, dims_.HS, cfg_.rope_theta);
  qkv_weight_backward(c1, w.packed, a.ln1, p, w);
  ops::rmsnorm_backward(dx, p.input_norm.g, c1, x, p.input_norm.w, a.ln1_rstd);
  ops::add_inplace(dx, dres1);
}

// The q/k/v matmul's backward. With k/v heads replicated over R ranks each
// rank's k/v weight gradient is its own heads' share: the step's contribution
// is summed over the R ranks before it joins the accumulated gradient.
void Llama::qkv_weight_backward(Tensor& dx, const Tensor& dpacked, const Tensor& x, LayerView& p, Workspace& w) {
  if (dims_.kv_replicas == 1) return qkv_.backward(&dx, &p.qkv.g, nullptr, dpacked, x, p.qkv.w);
  w.qkv_wgrad.zero_();
  qkv_.backward(&dx, &w.qkv_wgrad, nullptr, dpacked, x, p.qkv.w);
  const int64_t C = dims_.C, q_rows = dims_.C_l, kv_rows = 2 * dims_.KV_l * dims_.HS;
  Tensor kv = w.qkv_wgrad.view(q_rows * C, {kv_rows, C});
  tp::sum_over_replicas(kv, dims_.kv_replicas, tp_);
  ops::add_inplace(p.qkv.g, w.qkv_wgrad);
}

double Llama::head_forward(Context& ctx, const Tensor& x, const Tensor& targets) {
  ops::rmsnorm_forward(ctx.lnf, ctx.lnf_rstd, x, norm_w_.w, cfg_.norm_eps);
  head_.forward(ctx.logits, ctx.lnf, lm_head_.w, nullptr);
  tp::vocab_parallel_cross_entropy_forward(ctx.losses, ctx.lse, ctx.logits, targets, vocab_start_, cfg_.vocab_size,
                                           kIgnoreIndex, tp_);
  Tensor host = ctx.losses.device().is_cpu() ? ctx.losses : ctx.losses.to(Device::cpu());
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    sum += host.dtype() == DType::f64 ? host.data<double>()[i] : double(host.data<float>()[i]);
  return sum;
}

Tensor Llama::logits(const ModelContext& base) const {
  LATTICE_CHECK(span_.head, "llama: logits come from the chunk with the head");
  return static_cast<const Context&>(base).logits;
}

double Llama::forward(ModelContext& base, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                      Tensor* output) {
  auto& ctx = static_cast<Context&>(base);
  LATTICE_CHECK(input.numel() == ctx.B * ctx.T * (span_.embedding ? 1 : cfg_.d_model),
                "llama: input {} does not match the context ({}, {})", shape_str(input.shape()), ctx.B, ctx.T);
  ctx.coords = coords;
  ctx.targets = targets;
  ctx.ws = &workspace(ctx.B, ctx.T);
  if (span_.embedding) {
    ctx.inputs = input;
    embed_.forward(ctx.emb, input, embed_w_.w);
  } else {
    ctx.emb = input;  // the previous chunk's activation, alive until backward
  }
  const Tensor* x = &ctx.emb;
  for (size_t i = 0; i < layers_.size(); ++i) {
    block_forward(acts_for(ctx, i), *x, layers_[i], ctx, span_.first_layer + int(i) + 1);
    x = &ctx.blocks[i].out;
  }
  if (span_.head) return head_forward(ctx, *x, targets);
  LATTICE_CHECK(output != nullptr, "llama: a chunk without the head needs an output activation");
  output->copy_from(*x);
  return 0.0;
}

void Llama::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  Workspace& w = *ctx.ws;
  tp::vocab_parallel_cross_entropy_backward(ctx.logits, ctx.logits, ctx.lse, ctx.targets, dloss, vocab_start_,
                                            cfg_.vocab_size, kIgnoreIndex);
  head_.backward(&w.c1, &lm_head_.g, nullptr, ctx.logits, ctx.lnf, lm_head_.w);
  ops::rmsnorm_backward(dx, norm_w_.g, w.c1, x, norm_w_.w, ctx.lnf_rstd);
}

void Llama::backward(ModelContext& base, float dloss, const Tensor* doutput, Tensor* dinput) {
  auto& ctx = static_cast<Context&>(base);
  Workspace& w = *(ctx.ws = &workspace(ctx.B, ctx.T));
  Tensor* dout = &w.dbuf[0];
  Tensor* dx = &w.dbuf[1];
  const Tensor& last = layers_.empty() ? ctx.emb : ctx.blocks.back().out;
  if (span_.head) {
    head_backward(ctx, last, dloss, *dout);
    if (on_grads_ready) on_grads_ready(cfg_.n_layer);
  } else {
    LATTICE_CHECK(doutput != nullptr, "llama: a chunk without the head needs the output gradient");
    dout->copy_from(*doutput);
  }
  for (int i = int(layers_.size()) - 1; i >= 0; --i) {
    const Tensor& x = i > 0 ? ctx.blocks[size_t(i - 1)].out : ctx.emb;
    const int layer = span_.first_layer + i + 1;
    BlockActs& a = acts_for(ctx, size_t(i));
    if (i < span_.recompute) block_forward(a, x, layers_[size_t(i)], ctx, layer);  // same coords, same masks
    block_backward(*dx, *dout, a, x, layers_[size_t(i)], ctx, layer);
    if (on_grads_ready) on_grads_ready(layer - 1);  // the block's ParamSpec layer (RNG ids count from 1)
    std::swap(dout, dx);
  }
  // *dout is now the gradient of the chunk's input.
  if (!span_.embedding) {
    LATTICE_CHECK(dinput != nullptr, "llama: a chunk without the embedding needs an input gradient");
    dinput->copy_from(*dout);
    return;
  }
  embed_.backward(embed_w_.g, *dout, ctx.inputs);
  if (on_grads_ready) on_grads_ready(kEmbeddingLayer);
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
