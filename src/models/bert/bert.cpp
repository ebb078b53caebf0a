// BERT forward and backward (see bert.h). One post-LN block reads like the
// diagram: qkv matmul, attention, proj matmul, dropout + residual, norm, fc
// matmul, GELU, proj matmul, dropout + residual, norm; backward makes the same
// calls in reverse.
#include "models/bert/bert.h"

#include <algorithm>
#include <utility>

#include "core/ops.h"
#include "tp/cross_entropy.h"
#include "tp/mappings.h"

namespace lattice::bert {

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

void check_heads(const BertConfig& cfg, int tp) {
  LATTICE_CHECK(cfg.d_model % cfg.n_head == 0, "bert: d_model {} is not divisible by n_head {}", cfg.d_model,
                cfg.n_head);
  LATTICE_CHECK(cfg.n_head % tp == 0, "bert: n_head {} is not divisible by tp {}", cfg.n_head, tp);
  LATTICE_CHECK(cfg.d_ff % tp == 0, "bert: d_ff {} is not divisible by tp {}", cfg.d_ff, tp);
}

double sum_of(const Tensor& losses) {
  Tensor host = losses.device().is_cpu() ? losses : losses.to(Device::cpu());
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    sum += host.dtype() == DType::f64 ? host.data<double>()[i] : double(host.data<float>()[i]);
  return sum;
}

}  // namespace

// Saved activations of one block, all of the model dtype.
struct Bert::BlockActs {
  Tensor qkv;                          // (B, T, 3 C_l): this rank's heads of q, k, v
  Tensor att;                          // (B, NH_l, T, T) probabilities before dropout
  Tensor atty;                         // (B, T, C_l) attention output before attention.output.dense
  Tensor res1;                         // (B, T, C) x + attention branch
  Tensor h1, h1_mean, h1_rstd;         // (B, T, C), (B, T), (B, T): attention.output.LayerNorm
  Tensor fch, fch_gelu;                // (B, T, F_l)
  Tensor res2;                         // (B, T, C) h1 + MLP branch
  Tensor out, out_mean, out_rstd;      // (B, T, C), (B, T), (B, T): output.LayerNorm = block output
};

struct Bert::Context final : ModelContext {
  int64_t B = 0, T = 0;
  StepCoords coords;
  Tensor inputs, targets;              // (B, T) i32
  Tensor key_mask;                     // (B, T) i32, defined only when the inputs hold [PAD]
  Tensor emb_sum;                      // (B, T, C) word + position + type, before LayerNorm
  Tensor emb, emb_mean, emb_rstd;      // (B, T, C) embedding output, or the chunk's input activation
  std::vector<BlockActs> blocks;
  Tensor tr, tr_gelu;                  // (B, T, C) transform dense, its GELU      (with the head)
  Tensor tr_ln, tr_mean, tr_rstd;      // (B, T, C), (B, T), (B, T)
  Tensor logits;                       // (B, T, V_l); backward overwrites it with dlogits
  Tensor losses, lse;                  // (B, T)
  Workspace* ws = nullptr;

  int64_t bytes() const override {
    int64_t n = 0;
    for (const Tensor* t : {&key_mask, &emb_sum, &emb, &emb_mean, &emb_rstd, &tr, &tr_gelu, &tr_ln, &tr_mean,
                            &tr_rstd, &logits, &losses, &lse})
      n += int64_t(t->nbytes());
    for (const BlockActs& a : blocks)
      for (const Tensor* t : {&a.qkv, &a.att, &a.atty, &a.res1, &a.h1, &a.h1_mean, &a.h1_rstd, &a.fch, &a.fch_gelu,
                              &a.res2, &a.out, &a.out_mean, &a.out_rstd})
        n += int64_t(t->nbytes());
    return n;
  }
};

Bert::Bert(const BertConfig& cfg, FlatParams& params, comm::Group& tp, StageSpan span)
    : cfg_(cfg), span_(span), tp_(tp), ids_(special_ids(cfg.vocab_size)), embed_(tp), qkv_({.bias = true}, tp),
      fc_({.bias = true}, tp), decoder_head_({.bias = false}, tp), attn_out_({.bias = true}, tp),
      mlp_out_({.bias = true}, tp) {
  check_heads(cfg, tp.size());
  LATTICE_CHECK(params.shard().size == tp.size() && params.shard().rank == tp.rank(),
                "bert: parameters sharded for tp rank {} of {}, group '{}' is rank {} of {}", params.shard().rank,
                params.shard().size, tp.name(), tp.rank(), tp.size());
  heads_l_ = cfg.n_head / tp.size();
  shard_ = params.shard();
  dims_ = dims_of(cfg, shard_);
  dtype_ = params.dtype();
  device_ = params.values().device();
  if (span_.end_layer < 0) span_.end_layer = cfg.n_layer;
  LATTICE_CHECK(0 <= span_.first_layer && span_.first_layer <= span_.end_layer && span_.end_layer <= cfg.n_layer,
                "bert: chunk layers [{}, {}) outside the model's {}", span_.first_layer, span_.end_layer, cfg.n_layer);
  auto bind = [&](const std::string& name) { return P{params.value(name), params.grad(name)}; };
  const std::string e = "bert.embeddings.";
  if (span_.embedding) {
    word_ = bind(e + "word_embeddings.weight");
    pos_ = bind(e + "position_embeddings.weight");
    type_ = bind(e + "token_type_embeddings.weight");
    emb_ln_w_ = bind(e + "LayerNorm.weight");
    emb_ln_b_ = bind(e + "LayerNorm.bias");
  }
  if (span_.head) {
    const std::string c = "cls.predictions.";
    tr_w_ = bind(c + "transform.dense.weight");
    tr_b_ = bind(c + "transform.dense.bias");
    tr_ln_w_ = bind(c + "transform.LayerNorm.weight");
    tr_ln_b_ = bind(c + "transform.LayerNorm.bias");
    decoder_ = bind(cfg.tie_embeddings ? e + "word_embeddings.weight" : c + "decoder.weight");
    decoder_bias_ = bind(c + "bias");
    vocab_start_ = int64_t(tp.rank()) * decoder_.w.dim(0);
  }
  for (int i = span_.first_layer; i < span_.end_layer; ++i) {
    const std::string h = "bert.encoder.layer." + std::to_string(i) + ".";
    layers_.push_back(LayerView{fused(params, h, "weight"), fused(params, h, "bias"),
                                bind(h + "attention.output.dense.weight"), bind(h + "attention.output.dense.bias"),
                                bind(h + "attention.output.LayerNorm.weight"),
                                bind(h + "attention.output.LayerNorm.bias"), bind(h + "intermediate.dense.weight"),
                                bind(h + "intermediate.dense.bias"), bind(h + "output.dense.weight"),
                                bind(h + "output.dense.bias"), bind(h + "output.LayerNorm.weight"),
                                bind(h + "output.LayerNorm.bias")});
  }
}

Bert::~Bert() = default;

// One view over the adjacent local shards of query, key and value ("weight":
// (3 C_l, C), "bias": (3 C_l)): the fused [q | k | v] layout the attention reads.
Bert::P Bert::fused(FlatParams& params, const std::string& prefix, const std::string& kind) {
  const ParamEntry& q = params.entry(prefix + "attention.self.query." + kind);
  const ParamEntry& k = params.entry(prefix + "attention.self.key." + kind);
  const ParamEntry& v = params.entry(prefix + "attention.self.value." + kind);
  LATTICE_CHECK(k.offset == q.offset + q.numel && v.offset == k.offset + k.numel,
                "bert: {}attention.self.{{query,key,value}}.{} are not adjacent in the flat parameters", prefix, kind);
  Shape s = q.local_shape;
  s[0] *= 3;
  return P{params.values().view(q.offset, s), params.grads().view(q.offset, s)};
}

Bert::Dims Bert::dims_of(const BertConfig& cfg, const TpShard& shard) {
  Dims d;
  d.C = cfg.d_model;
  d.NH_l = cfg.n_head / shard.size;
  d.C_l = d.C / shard.size;
  d.F_l = cfg.d_ff / shard.size;
  d.V_pad = padded_vocab(cfg.vocab_size, shard);
  d.V_l = d.V_pad / shard.size;
  return d;
}

Bert::BlockActs Bert::make_block_acts(const MakeTensor& make, const Dims& d, int64_t B, int64_t T, BlockPart part) {
  BlockActs a;
  if (part != BlockPart::scratch) a.out = make({B, T, d.C});
  if (part == BlockPart::output) return a;
  a.qkv = make({B, T, 3 * d.C_l}), a.att = make({B, d.NH_l, T, T}), a.atty = make({B, T, d.C_l});
  a.res1 = make({B, T, d.C}), a.h1 = make({B, T, d.C}), a.h1_mean = make({B, T}), a.h1_rstd = make({B, T});
  a.fch = make({B, T, d.F_l}), a.fch_gelu = make({B, T, d.F_l});
  a.res2 = make({B, T, d.C}), a.out_mean = make({B, T}), a.out_rstd = make({B, T});
  return a;
}

void Bert::make_context_tensors(Context& ctx, const MakeTensor& make, const Dims& d, const BertConfig& cfg,
                                const StageSpan& span, int64_t B, int64_t T) {
  LATTICE_CHECK(T <= cfg.max_seq_len, "bert: sequence length {} exceeds max_seq_len {}", T, cfg.max_seq_len);
  ctx.B = B;
  ctx.T = T;
  if (span.embedding) {
    ctx.emb_sum = make({B, T, d.C});
    ctx.emb = make({B, T, d.C}), ctx.emb_mean = make({B, T}), ctx.emb_rstd = make({B, T});
  }
  for (int i = span.first_layer; i < span.end_layer; ++i)
    ctx.blocks.push_back(
        make_block_acts(make, d, B, T, i - span.first_layer < span.recompute ? BlockPart::output : BlockPart::all));
  if (span.head) {
    ctx.tr = make({B, T, d.C}), ctx.tr_gelu = make({B, T, d.C});
    ctx.tr_ln = make({B, T, d.C}), ctx.tr_mean = make({B, T}), ctx.tr_rstd = make({B, T});
    ctx.logits = make({B, T, d.V_l});
    ctx.losses = make({B, T}), ctx.lse = make({B, T});
  }
}

void Bert::make_workspace_tensors(Workspace& ws, const MakeTensor& make, const Dims& d, const StageSpan& span,
                                  int64_t B, int64_t T) {
  ws.B = B, ws.T = T;
  ws.c1 = make({B, T, d.C}), ws.c2 = make({B, T, d.C}), ws.c3 = make({B, T, d.C});
  ws.f1 = make({B, T, d.F_l}), ws.f2 = make({B, T, d.F_l});
  ws.qkv_grad = make({B, T, 3 * d.C_l}), ws.att_grad = make({B, d.NH_l, T, T});
  ws.qkv_bias_grad = make({3 * d.C_l});
  ws.dbuf[0] = make({B, T, d.C}), ws.dbuf[1] = make({B, T, d.C});
  if (span.head) ws.bias_full = make({1, d.V_pad}), ws.bias_l = make({1, d.V_l});
  ws.acts.reset();
  if (span.recompute > 0) ws.acts = std::make_unique<BlockActs>(make_block_acts(make, d, B, T, BlockPart::scratch));
}

Bert::BlockActs& Bert::acts_for(Context& ctx, size_t i) {
  if (int(i) >= span_.recompute) return ctx.blocks[i];
  BlockActs& scratch = *ctx.ws->acts;
  scratch.out = ctx.blocks[i].out;  // the one tensor a recomputed block keeps
  return scratch;
}

Bert::Workspace& Bert::workspace(int64_t B, int64_t T) {
  if (ws_.B == B && ws_.T == T) return ws_;
  const MakeTensor alloc = [this](Shape s) { return Tensor::zeros(std::move(s), dtype_, device_); };
  make_workspace_tensors(ws_, alloc, dims_, span_, B, T);
  return ws_;
}

std::unique_ptr<ModelContext> Bert::make_context(int64_t B, int64_t T) const {
  auto ctx = std::make_unique<Context>();
  const MakeTensor alloc = [this](Shape s) { return Tensor::empty(std::move(s), dtype_, device_); };
  make_context_tensors(*ctx, alloc, dims_, cfg_, span_, B, T);
  return ctx;
}

ActivationBytes Bert::activation_bytes_of(const BertConfig& cfg, StageSpan span, const TpShard& shard, DType dtype,
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

ActivationBytes Bert::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes_of(cfg_, span_, shard_, dtype_, B, T);
}

bool Bert::whole_model() const {
  return span_.embedding && span_.head && span_.first_layer == 0 && span_.end_layer == cfg_.n_layer;
}

void Bert::block_forward(BlockActs& a, const Tensor& x, LayerView& p, Context& ctx, int layer) {
  const StepCoords& c = ctx.coords;
  const Tensor* mask = ctx.key_mask.defined() ? &ctx.key_mask : nullptr;
  Tensor& tmp = ctx.ws->c1;  // (B, T, C)
  qkv_.forward(a.qkv, x, p.qkv_w.w, &p.qkv_b.w);
  ops::attention_masked_forward(a.atty, a.att, a.qkv, mask, int(heads_l_),
                                dropout_at(c, cfg_.dropout, layer, kAttnProbs), head_offset());
  attn_out_.forward(tmp, a.atty, p.attn_out_w.w, &p.attn_out_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  ops::add(a.res1, x, tmp);
  ops::layernorm_forward(a.h1, a.h1_mean, a.h1_rstd, a.res1, p.attn_ln_w.w, p.attn_ln_b.w, cfg_.norm_eps);
  fc_.forward(a.fch, a.h1, p.fc_w.w, &p.fc_b.w);
  ops::gelu_erf_forward(a.fch_gelu, a.fch);
  mlp_out_.forward(tmp, a.fch_gelu, p.out_w.w, &p.out_b.w);
  ops::dropout_forward(tmp, tmp, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  ops::add(a.res2, a.h1, tmp);
  ops::layernorm_forward(a.out, a.out_mean, a.out_rstd, a.res2, p.out_ln_w.w, p.out_ln_b.w, cfg_.norm_eps);
}

// dout: gradient of the block output (read only); dx: gradient of its input (overwrite).
void Bert::block_backward(Tensor& dx, Tensor& dout, BlockActs& a, const Tensor& x, LayerView& p, Context& ctx,
                          int layer) {
  const StepCoords& c = ctx.coords;
  Workspace& w = *ctx.ws;
  Tensor &c1 = w.c1, &dres = w.c2, &c3 = w.c3;
  ops::layernorm_backward(dres, p.out_ln_w.g, p.out_ln_b.g, dout, a.res2, p.out_ln_w.w, a.out_mean, a.out_rstd);
  ops::dropout_backward(c1, dres, dropout_at(c, cfg_.dropout, layer, kMlpResid));
  mlp_out_.backward(&w.f1, &p.out_w.g, &p.out_b.g, c1, a.fch_gelu, p.out_w.w);
  ops::gelu_erf_backward(w.f2, w.f1, a.fch);
  fc_.backward(&c1, &p.fc_w.g, &p.fc_b.g, w.f2, a.h1, p.fc_w.w);
  ops::add_inplace(c1, dres);  // dh1: the MLP branch plus the residual
  ops::layernorm_backward(dres, p.attn_ln_w.g, p.attn_ln_b.g, c1, a.res1, p.attn_ln_w.w, a.h1_mean, a.h1_rstd);
  ops::dropout_backward(c1, dres, dropout_at(c, cfg_.dropout, layer, kAttnResid));
  Tensor datty = c3.view(0, a.atty.shape());  // (B, T, C_l)
  attn_out_.backward(&datty, &p.attn_out_w.g, &p.attn_out_b.g, c1, a.atty, p.attn_out_w.w);
  ops::attention_masked_backward(w.qkv_grad, w.att_grad, datty, a.qkv, a.att, int(heads_l_),
                                 dropout_at(c, cfg_.dropout, layer, kAttnProbs), head_offset());
  w.qkv_bias_grad.zero_();
  qkv_.backward(&dx, &p.qkv_w.g, &w.qkv_bias_grad, w.qkv_grad, x, p.qkv_w.w);
  qkv_bias_backward(p.qkv_b.g, w.qkv_bias_grad);
  ops::add_inplace(dx, dres);
}

// The query and value bias gradients from dbias_qkv = [dq | dk | dv] column
// sums (3 C_l). The key bias shifts every score of a query row by the same
// q_i . b_k, which the softmax ignores, so its exact gradient is zero: it
// stays exactly zero instead of accumulating rounding noise (which differs
// between layouts, and which Adam would turn into full-size steps).
void Bert::qkv_bias_backward(Tensor& dbias, const Tensor& dbias_qkv) {
  const int64_t C_l = dims_.C_l;
  for (int64_t part : {0, 2}) {
    Tensor acc = dbias.view(part * C_l, {C_l});
    ops::add_inplace(acc, dbias_qkv.view(part * C_l, {C_l}));
  }
}

void Bert::embed_forward(Context& ctx, const Tensor& ids) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  // The key padding mask, only when some id is [PAD] (loader windows never are).
  const Tensor host = ids.device().is_cpu() ? ids : ids.to(Device::cpu());
  const int32_t* id = host.data<int32_t>();
  const bool padded = std::any_of(id, id + B * T, [&](int32_t v) { return v == ids_.pad; });
  LATTICE_CHECK(!padded || whole_model(),
                "bert: the inputs hold [PAD] but the model is split into pipeline chunks, whose later chunks "
                "cannot see the padding mask — use parallel.pp = 1 for padded batches");
  ctx.key_mask = Tensor();
  if (padded) {
    Tensor mask = Tensor::empty({B, T}, DType::i32);
    for (int64_t i = 0; i < B * T; ++i) mask.data<int32_t>()[i] = id[i] != ids_.pad;
    ctx.key_mask = ids.device().is_cpu() ? mask : mask.to(ids.device());
  }
  // Word + position (rows 0..T-1) + token type 0, then LayerNorm and dropout.
  embed_.forward(ctx.emb_sum, ids, word_.w);
  Tensor pos = pos_.w.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = ctx.emb_sum.view(b * T * C, {T, C});
    ops::add_inplace(row, pos);
  }
  ops::add_bias_forward(ctx.emb_sum, type_.w.view(0, {C}));
  ops::layernorm_forward(ctx.emb, ctx.emb_mean, ctx.emb_rstd, ctx.emb_sum, emb_ln_w_.w, emb_ln_b_.w, cfg_.norm_eps);
  ops::dropout_forward(ctx.emb, ctx.emb, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
}

// dout: gradient of the embedding output; scratch: (B, T, C) workspace.
void Bert::embed_backward(Context& ctx, Tensor& dout, Tensor& scratch) {
  const int64_t B = ctx.B, T = ctx.T, C = cfg_.d_model;
  ops::dropout_backward(dout, dout, dropout_at(ctx.coords, cfg_.dropout, 0, kEmbed));
  ops::layernorm_backward(scratch, emb_ln_w_.g, emb_ln_b_.g, dout, ctx.emb_sum, emb_ln_w_.w, ctx.emb_mean,
                          ctx.emb_rstd);
  embed_.backward(word_.g, scratch, ctx.inputs);
  Tensor dpos = pos_.g.view(0, {T, C});
  for (int64_t b = 0; b < B; ++b) ops::add_inplace(dpos, scratch.view(b * T * C, {T, C}));
  Tensor dtype0 = type_.g.view(0, {C});
  ops::add_bias_backward(dtype0, scratch);
}

double Bert::head_forward(Context& ctx, const Tensor& x, const Tensor& targets) {
  Workspace& w = *ctx.ws;
  const int64_t V = cfg_.vocab_size;
  ops::linear_forward(ctx.tr, x, tr_w_.w, &tr_b_.w);
  ops::gelu_erf_forward(ctx.tr_gelu, ctx.tr);
  ops::layernorm_forward(ctx.tr_ln, ctx.tr_mean, ctx.tr_rstd, ctx.tr_gelu, tr_ln_w_.w, tr_ln_b_.w, cfg_.norm_eps);
  decoder_head_.forward(ctx.logits, ctx.tr_ln, decoder_.w, nullptr);
  // The decoder bias, padded to the padded vocabulary; this rank adds its slice.
  w.bias_full.zero_();
  w.bias_full.view(0, {V}).copy_from(decoder_bias_.w);
  tp::scatter_to_tp_region_forward(w.bias_l, w.bias_full, tp_);
  ops::add_bias_forward(ctx.logits, w.bias_l.view(0, {dims_.V_l}));
  tp::vocab_parallel_cross_entropy_forward(ctx.losses, ctx.lse, ctx.logits, targets, vocab_start_, int(V),
                                           kIgnoreIndex, tp_);
  return sum_of(ctx.losses);
}

Tensor Bert::logits(const ModelContext& base) const {
  LATTICE_CHECK(span_.head, "bert: logits come from the chunk with the head");
  return static_cast<const Context&>(base).logits;
}

double Bert::forward(ModelContext& base, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                     Tensor* output) {
  auto& ctx = static_cast<Context&>(base);
  LATTICE_CHECK(input.numel() == ctx.B * ctx.T * (span_.embedding ? 1 : cfg_.d_model),
                "bert: input {} does not match the context ({}, {})", shape_str(input.shape()), ctx.B, ctx.T);
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
  LATTICE_CHECK(output != nullptr, "bert: a chunk without the head needs an output activation");
  output->copy_from(*x);
  return 0.0;
}

void Bert::head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) {
  Workspace& w = *ctx.ws;
  const int64_t V = cfg_.vocab_size;
  tp::vocab_parallel_cross_entropy_backward(ctx.logits, ctx.logits, ctx.lse, ctx.targets, dloss, vocab_start_, int(V),
                                            kIgnoreIndex);
  // Decoder bias: this rank's slice of the gradient, all-gathered into the whole vector.
  w.bias_l.zero_();
  Tensor dbias_l = w.bias_l.view(0, {dims_.V_l});
  ops::add_bias_backward(dbias_l, ctx.logits);
  tp::scatter_to_tp_region_backward(w.bias_full, w.bias_l, tp_);
  ops::add_inplace(decoder_bias_.g, w.bias_full.view(0, {V}));
  decoder_head_.backward(&w.c1, &decoder_.g, nullptr, ctx.logits, ctx.tr_ln, decoder_.w);
  ops::layernorm_backward(w.c2, tr_ln_w_.g, tr_ln_b_.g, w.c1, ctx.tr_gelu, tr_ln_w_.w, ctx.tr_mean, ctx.tr_rstd);
  ops::gelu_erf_backward(w.c1, w.c2, ctx.tr);
  ops::linear_backward(&dx, &tr_w_.g, &tr_b_.g, w.c1, x, tr_w_.w);
}

void Bert::backward(ModelContext& base, float dloss, const Tensor* doutput, Tensor* dinput) {
  auto& ctx = static_cast<Context&>(base);
  Workspace& w = *(ctx.ws = &workspace(ctx.B, ctx.T));
  Tensor* dout = &w.dbuf[0];
  Tensor* dx = &w.dbuf[1];
  const Tensor& last = layers_.empty() ? ctx.emb : ctx.blocks.back().out;
  if (span_.head) {
    head_backward(ctx, last, dloss, *dout);
    if (on_grads_ready) on_grads_ready(cfg_.n_layer);
  } else {
    LATTICE_CHECK(doutput != nullptr, "bert: a chunk without the head needs the output gradient");
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
    LATTICE_CHECK(dinput != nullptr, "bert: a chunk without the embedding needs an input gradient");
    dinput->copy_from(*dout);
    return;
  }
  embed_backward(ctx, *dout, *dx);
  if (on_grads_ready) on_grads_ready(kEmbeddingLayer);
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
