// The chunk walk and memory bookkeeping shared by every model (see chunk_model.h).
#include "models/chunk_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "tp/cross_entropy.h"

namespace lattice {

ops::Dropout dropout_at(const StepCoords& c, float p, int layer_id, uint32_t site) {
  ops::Dropout d;
  d.p = c.train ? p : 0.0f;
  d.key.seed = c.seed;
  d.key.purpose = RngPurpose::dropout;
  d.key.step = uint32_t(c.step);
  d.key.layer = uint32_t(layer_id);
  d.key.site = site;
  d.sample0 = c.sample0;
  return d;
}

std::unique_ptr<SavedTensors> ChunkActivations::embedding(const MakeTensor&, int64_t, int64_t) const { return nullptr; }

namespace {

// Whether tp partial sums are reduced in fp32 temporaries (tp/linear.cpp).
bool fp32_partial_sums(const ChunkActivations& a, DType activation) { return is_16bit(activation) && a.tp > 1; }

bool has_blocks(const StageSpan& span, int n_layer) {
  return (span.end_layer < 0 ? n_layer : span.end_layer) > span.first_layer;
}

}  // namespace

int64_t ChunkActivations::transient_bytes(const StageSpan& span, int64_t B, int64_t T, DType activation) const {
  const int64_t f32 = int64_t(dtype_size(master_dtype(activation))), rows = head_rows(span, B * T);
  const bool sums = fp32_partial_sums(*this, activation);
  int64_t n = span.head ? 3 * rows * f32 : 0;
  if (span.head && span.head_chunk > 0 && sums) n = std::max(n, rows * C * f32);  // the head's backward, in forward
  if (sums && has_blocks(span, n_layer)) n = std::max(n, B * T * C * f32);
  return n;
}

int64_t ChunkActivations::backward_transient_bytes(const StageSpan& span, int64_t B, int64_t T,
                                                   DType activation) const {
  const bool head = span.head && span.head_chunk == 0;  // a chunked head's backward ran in forward
  const int64_t f32 = int64_t(dtype_size(master_dtype(activation)));
  return fp32_partial_sums(*this, activation) && (head || has_blocks(span, n_layer)) ? B * T * C * f32 : 0;
}

ChunkModel::ChunkModel(std::unique_ptr<ChunkActivations> acts, FlatParams& params, comm::Group& tp, StageSpan span)
    : span_(span), tp_(tp), acts_(std::move(acts)) {
  const std::string& a = acts_->arch;
  LATTICE_CHECK(params.shard().size == tp.size() && params.shard().rank == tp.rank(),
                "{}: parameters sharded for tp rank {} of {}, group '{}' is rank {} of {}", a, params.shard().rank,
                params.shard().size, tp.name(), tp.rank(), tp.size());
  LATTICE_CHECK(acts_->tp == tp.size(), "{}: ChunkActivations::tp is {}, the tp group '{}' has {} ranks", a, acts_->tp,
                tp.name(), tp.size());
  shard_ = params.shard();
  dtype_ = params.dtype();
  act_dtype_ = dtype_;
  device_ = params.values().device();
  if (span_.end_layer < 0) span_.end_layer = acts_->n_layer;
  LATTICE_CHECK(0 <= span_.first_layer && span_.first_layer <= span_.end_layer && span_.end_layer <= acts_->n_layer,
                "{}: chunk layers [{}, {}) outside the model's {}", a, span_.first_layer, span_.end_layer,
                acts_->n_layer);
}

ChunkModel::~ChunkModel() = default;

void ChunkModel::set_activation_dtype(DType dtype) {
  LATTICE_CHECK(dtype == dtype_ || (is_16bit(dtype) && dtype_ == DType::f32),
                "{}: activations in {} beside {} parameters; they take the parameters' dtype, or bf16/f16 beside f32",
                acts_->arch, dtype_name(dtype), dtype_name(dtype_));
  if (dtype != act_dtype_) ws_ = Workspace(), shared_att_ = Tensor();  // reallocated in the new dtype on the next use
  act_dtype_ = dtype;
}

// With a shadow, a matmul weight (ParamSpec::matmul_weight) is bound without
// its fp32 view: forward and backward read it through mm() only, and under
// ZeRO-1 its fp32 values outside this rank's shard are stale (core/param.h).
ParamView ChunkModel::bind(FlatParams& params, const std::string& name) const {
  const ParamEntry& e = params.entry(name);
  if (!params.has_shadow()) return ParamView{params.value(e), params.grad(e), ShadowView()};
  return ParamView{e.spec.matmul_weight ? Tensor() : params.value(e), params.grad(e), params.shadow_view(e)};
}

ParamView ChunkModel::bind_rows(FlatParams& params, const std::vector<std::string>& names) const {
  const ParamEntry& first = params.entry(names.front());
  Shape shape = first.local_shape;
  int64_t end = first.offset + first.numel;
  for (size_t i = 1; i < names.size(); ++i) {
    const ParamEntry& e = params.entry(names[i]);
    const bool same_cols = e.local_shape.size() == shape.size() && (shape.size() == 1 || e.local_shape[1] == shape[1]);
    LATTICE_CHECK(e.offset == end && same_cols,
                  "{}: '{}' must follow '{}' in the parameter buffer with as many columns", acts_->arch, names[i],
                  names[i - 1]);
    shape[0] += e.local_shape[0];
    end += e.numel;
  }
  std::string what = names.front();
  for (size_t i = 1; i < names.size(); ++i) what += " + " + names[i];
  ShadowView w16 = params.has_shadow() ? params.shadow_view(first.offset, shape, what) : ShadowView();
  bool matmul_only = params.has_shadow();
  for (const std::string& n : names) matmul_only = matmul_only && params.entry(n).spec.matmul_weight;
  Tensor w = matmul_only ? Tensor() : params.values().view(first.offset, shape);
  return ParamView{std::move(w), params.grads().view(first.offset, shape), std::move(w16)};
}

void ChunkModel::fill_context(Context& ctx, const ChunkActivations& acts, const StageSpan& span, const MakeTensor& make,
                              const Tensor& shared_att, int64_t B, int64_t T) {
  LATTICE_CHECK(T <= acts.max_seq_len, "{}: sequence length {} exceeds max_seq_len {}", acts.arch, T, acts.max_seq_len);
  ctx.B = B;
  ctx.T = T;
  if (span.embedding) {
    ctx.emb = make({B, T, acts.C});  // otherwise the previous chunk's activation
    ctx.embed = acts.embedding(make, B, T);
  }
  ctx.attention_shared = shares_attention(acts, span, make, B, T);
  const MakeTensor block_make = ctx.attention_shared ? make.sharing_attention(shared_att) : make;
  for (int i = span.first_layer; i < span.end_layer; ++i) {
    ctx.out.push_back(make({B, T, acts.C}));
    const bool recomputed = i - span.first_layer < span.recompute;
    ctx.saved.push_back(recomputed ? nullptr : acts.block(block_make, B, T));
  }
  if (span.head) {
    ctx.head = acts.head(make, B, T);
    if (span.head_chunk == 0)
      ctx.head->logits = make({B, T, acts.V_l});  // else one chunk's, in the workspace
    else
      ctx.head->dfeat = make({B, T, acts.C});  // the head's gradients computed in forward
    ctx.head->losses = make.master({B, T}), ctx.head->lse = make.master({B, T});
  }
}

void ChunkModel::fill_workspace(Workspace& ws, const ChunkActivations& acts, const StageSpan& span,
                                const MakeTensor& make, const Tensor& shared_att, int64_t B, int64_t T) {
  ws.B = B, ws.T = T;
  ws.dbuf[0] = make({B, T, acts.C}), ws.dbuf[1] = make({B, T, acts.C});
  ws.scratch = acts.scratch(make, span, B, T);
  // sharing_attention hands out shared_att only for a full state (shares_attention).
  const MakeTensor block_make = span.recompute_attention ? make.sharing_attention(shared_att) : make;
  ws.recomputed = span.recompute > 0 ? acts.block(block_make, B, T) : nullptr;
  if (span.head && span.head_chunk > 0) ws.head_logits = make({ChunkActivations::head_rows(span, B * T), acts.V_l});
}

ChunkModel::Workspace& ChunkModel::workspace(int64_t B, int64_t T) {
  const ops::AttentionState state = attention_state();
  if (ws_.B == B && ws_.T == T && ws_.attention == state) return ws_;
  const MakeTensor alloc([this](Shape s, DType t) { return Tensor::zeros(std::move(s), t, device_); }, act_dtype_,
                         state);
  fill_workspace(ws_, *acts_, span_, alloc, shared_attention(alloc, B, T), B, T);
  ws_.attention = state;
  return ws_;
}

Tensor ChunkModel::shared_attention(const MakeTensor& make, int64_t B, int64_t T) const {
  if (!shares_attention(*acts_, span_, make, B, T)) return Tensor();
  const Shape shape = make.attention_shape(acts_->attention_at(B, T));
  // set_activation_dtype drops it; the device is the parameters' for good.
  if (!shared_att_.defined() || shared_att_.shape() != shape) shared_att_ = Tensor::zeros(shape, act_dtype_, device_);
  return shared_att_;
}

void ChunkModel::recompute_attention(const Context& ctx, int i, Tensor& att, const Tensor& qkv, const ops::Dropout& d,
                                     const Tensor* key_mask) const {
  if (!ctx.attention_shared || i < span_.recompute) return;
  const ops::AttentionCalls& a = acts_->attention;
  if (a.causal)
    ops::attention_probs(att, qkv, int(a.NH), d, head_offset());
  else
    ops::attention_masked_probs(att, qkv, key_mask, int(a.NH), d, head_offset());
}

void ChunkModel::attend(Context& ctx, int i, Tensor& out, Tensor& att, const Tensor& qkv, const ops::Dropout& d) const {
  const int NH = int(acts_->attention.NH);
  if (ctx.kv == nullptr) return ops::attention_forward(out, att, qkv, NH, d, head_offset());
  LATTICE_CHECK(d.p == 0.0f, "{}: decoding with a key/value cache runs without dropout", acts_->arch);
  ops::attention_cached(out, ctx.kv->layers[size_t(i)], qkv, NH, ctx.pos0, int(acts_->kv_heads));
  ctx.kv->filled[size_t(i)] = ctx.pos0 + ctx.T;
}

std::string ChunkModel::kv_cache_refusal() const {
  const std::string& a = acts_->arch;
  if (!kv_cache_ready()) return a + ": this model does not decode with a key/value cache";
  if (!acts_->attention.causal) return a + ": a key/value cache needs causal attention";
  if (!device_.is_cpu() || (act_dtype_ != DType::f32 && act_dtype_ != DType::f64))
    return fmt::format("{}: a key/value cache runs on the CPU with f32 or f64 activations, not {} on {}", a,
                       dtype_name(act_dtype_), device_.str());
  return "";
}

ChunkModel::KvCache ChunkModel::make_kv_cache(int64_t B, int64_t capacity) const {
  const std::string& a = acts_->arch;
  const std::string refusal = kv_cache_refusal();
  LATTICE_CHECK(refusal.empty(), "{}", refusal);
  LATTICE_CHECK(B >= 1 && capacity >= 1 && capacity <= acts_->max_seq_len,
                "{}: a key/value cache of {} samples and {} positions (1 to max_seq_len {})", a, B, capacity,
                acts_->max_seq_len);
  KvCache c;
  c.B = B, c.capacity = capacity;
  const int64_t width = 2 * (acts_->kv_heads > 0 ? acts_->kv_heads : acts_->attention.NH) * acts_->attention.HS;
  for (int i = 0; i < n_blocks(); ++i) c.layers.push_back(Tensor::zeros({B, capacity, width}, act_dtype_, device_));
  c.filled.assign(size_t(n_blocks()), 0);
  return c;
}

double ChunkModel::forward_cached(ModelContext& base, KvCache& cache, const Tensor& input, const Tensor& targets,
                                  Tensor* output) {
  auto& ctx = static_cast<Context&>(base);
  const std::string& a = acts_->arch;
  LATTICE_CHECK(cache.layers.size() == size_t(n_blocks()) && cache.B == ctx.B,
                "{}: the key/value cache ({} samples, {} blocks) is not this chunk's ({} samples, {} blocks)", a,
                cache.B, cache.layers.size(), ctx.B, n_blocks());
  LATTICE_CHECK(cache.length + ctx.T <= cache.capacity,
                "{}: positions [{}, {}) do not fit the key/value cache of {} positions", a, cache.length,
                cache.length + ctx.T, cache.capacity);
  struct Reset {  // the context is an ordinary one again afterwards, whatever happens
    Context& c;
    ~Reset() { c.kv = nullptr, c.pos0 = 0; }
  } reset{ctx};
  ctx.kv = &cache, ctx.pos0 = cache.length;
  std::fill(cache.filled.begin(), cache.filled.end(), -1);
  const double loss = forward(ctx, input, targets, {.train = false}, output);
  for (int i = 0; i < n_blocks(); ++i)
    LATTICE_CHECK(cache.filled[size_t(i)] == cache.length + ctx.T,
                  "{}: block {} did not attend through the key/value cache (its block_forward must call attend())", a,
                  layer_of(i));
  cache.length += ctx.T;
  return loss;
}

std::unique_ptr<ModelContext> ChunkModel::make_context(int64_t B, int64_t T) const {
  auto ctx = std::make_unique<Context>();
  Context& c = *ctx;
  const MakeTensor alloc(
      [this, &c](Shape s, DType dtype) {
        Tensor t = Tensor::empty(std::move(s), dtype, device_);
        c.bytes_ += int64_t(t.nbytes());
        return t;
      },
      act_dtype_, attention_state());
  fill_context(c, *acts_, span_, alloc, shared_attention(alloc, B, T), B, T);  // the shared buffer is not c's
  return ctx;
}

ActivationBytes ChunkModel::activation_bytes_of(const ChunkActivations& acts, StageSpan span, DType activation,
                                                int64_t B, int64_t T, ops::AttentionState attention) {
  if (span.end_layer < 0) span.end_layer = acts.n_layer;
  int64_t counted = 0;
  // The allocator takes at least one byte per tensor (core/allocator.cpp).
  const MakeTensor count(
      [&](Shape s, DType dtype) {
        counted += std::max<int64_t>(1, shape_numel(s) * int64_t(dtype_size(dtype)));
        return Tensor();
      },
      activation, attention);
  ActivationBytes out;
  Context ctx;
  fill_context(ctx, acts, span, count, Tensor(), B, T);
  out.context = std::exchange(counted, 0);
  Workspace ws;
  fill_workspace(ws, acts, span, count, Tensor(), B, T);
  if (ctx.attention_shared) count.attention(acts.attention_at(B, T));  // the shared buffer, with the workspace
  out.workspace = std::exchange(counted, 0);
  out.transient = acts.transient_bytes(span, B, T, activation);
  out.backward_transient = acts.backward_transient_bytes(span, B, T, activation);
  return out;
}

ActivationBytes ChunkModel::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes_of(*acts_, span_, act_dtype_, B, T, attention_state());
}

ops::AttentionState ChunkModel::attention_state() const { return ops::attention_state_on(device_); }

// A recomputed block's tensors live in the workspace, shared by every context.
SavedTensors& ChunkModel::saved_for(Context& ctx, int i) {
  return i < span_.recompute ? *ws_.recomputed : *ctx.saved[size_t(i)];
}

Tensor ChunkModel::logits(const ModelContext& base) const {
  LATTICE_CHECK(span_.head, "{}: logits come from the chunk with the head", acts_->arch);
  LATTICE_CHECK(span_.head_chunk == 0, "{}: a head run in chunks of {} rows keeps no logits", acts_->arch,
                span_.head_chunk);
  return static_cast<const Context&>(base).head->logits;
}

std::unique_ptr<LmHeadTensors> ChunkActivations::layernorm_head(const MakeTensor& make, int64_t B, int64_t T) const {
  auto h = std::make_unique<LayerNormHeadTensors>();
  h->lnf = make({B, T, C}), h->lnf_mean = make.master({B, T}), h->lnf_rstd = make.master({B, T});
  return h;
}

double ChunkModel::layernorm_head_forward(Context& ctx, const Tensor& x, LayerNormHead& p,
                                          tp::ColumnParallelLinear& head) {
  auto& h = head_of<LayerNormHeadTensors>(ctx);
  ops::layernorm_forward(h.lnf, h.lnf_mean, h.lnf_rstd, x, p.norm_w.w, p.norm_b.w, p.eps);
  return lm_head_forward(ctx, h.lnf, {.linear = head, .weight = p.head_w, .vocab_size = p.vocab_size});
}

void ChunkModel::layernorm_head_backward(Context& ctx, const Tensor& x, float dloss, LayerNormHead& p,
                                         tp::ColumnParallelLinear& head, Tensor& scratch, Tensor& dx) {
  auto& h = head_of<LayerNormHeadTensors>(ctx);
  lm_head_backward(ctx, h.lnf, dloss, {.linear = head, .weight = p.head_w, .vocab_size = p.vocab_size}, scratch);
  ops::layernorm_backward(dx, p.norm_w.g, p.norm_b.g, scratch, x, p.norm_w.w, h.lnf_mean, h.lnf_rstd);
}

namespace {

// Rows [r0, r1) of t viewed as (n, numel / n): a whole (B, T, ...) tensor when
// they are all n rows, so the unchunked head passes the tensors as they are.
Tensor row_range(const Tensor& t, int64_t n, int64_t r0, int64_t r1) {
  if (r0 == 0 && r1 == n) return t;
  return t.reshape({n, t.numel() / n}).slice_rows(r0, r1);
}

// logits = feat @ weight^T (+ bias): one chunk's forward, and backward's recompute of it.
void head_logits_forward(Tensor& logits, const Tensor& feat, const LmHead& head) {
  head.linear.forward(logits, feat, head.weight.mm(), nullptr);
  if (head.bias) ops::add_bias_forward(logits, *head.bias);
}

// dlogits in place of logits, then the gradients of the head's input (dfeat,
// overwritten), weight and bias (accumulated): one chunk's backward.
void head_chunk_backward(Tensor& logits, const Tensor& feat, const Tensor& lse, const Tensor& targets, float dloss,
                         int64_t vocab_start, const LmHead& head, Tensor& dfeat) {
  tp::vocab_parallel_cross_entropy_backward(logits, logits, lse, targets, dloss, vocab_start, head.vocab_size,
                                            kIgnoreIndex);
  if (head.dbias) ops::add_bias_backward(*head.dbias, logits);
  head.linear.backward(&dfeat, &head.weight.g, nullptr, logits, feat, head.weight.mm());
}

}  // namespace

Tensor ChunkModel::head_logits(Context& ctx, int64_t r0, int64_t r1) {
  const int64_t n = ctx.B * ctx.T;
  if (span_.head_chunk == 0) return row_range(ctx.head->logits, n, r0, r1);
  return workspace(ctx.B, ctx.T).head_logits.slice_rows(0, r1 - r0);
}

double ChunkModel::lm_head_forward(Context& ctx, const Tensor& feat, const LmHead& head) {
  LmHeadTensors& h = *ctx.head;
  const int64_t n = ctx.B * ctx.T, rows = ChunkActivations::head_rows(span_, n);
  const int64_t vocab_start = int64_t(tp_.rank()) * acts_->V_l;
  // In chunks, a training forward that knows backward's dloss does the head's backward now.
  h.forward_dloss.reset();
  if (span_.head_chunk > 0 && ctx.coords.train) h.forward_dloss = loss_weight_;  // forward_cached: train false
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    Tensor logits = head_logits(ctx, r0, r1), losses = row_range(h.losses, n, r0, r1);
    Tensor lse = row_range(h.lse, n, r0, r1);
    const Tensor feat_rows = row_range(feat, n, r0, r1), targets = row_range(ctx.targets, n, r0, r1);
    head_logits_forward(logits, feat_rows, head);
    tp::vocab_parallel_cross_entropy_forward(losses, lse, logits, targets, vocab_start, head.vocab_size, kIgnoreIndex,
                                             tp_);
    if (h.forward_dloss) {
      Tensor dfeat_rows = row_range(h.dfeat, n, r0, r1);
      head_chunk_backward(logits, feat_rows, lse, targets, *h.forward_dloss, vocab_start, head, dfeat_rows);
    }
  }
  if (loss_sum_) {  // added where the losses lie; the caller reads it once (set_loss_sum)
    ops::sum_into(*loss_sum_, h.losses);
    return 0.0;
  }
  const Tensor host = h.losses.on_host();
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    sum += host.dtype() == DType::f64 ? host.data<double>()[i] : double(host.data<float>()[i]);
  return sum;
}

void ChunkModel::lm_head_backward(Context& ctx, const Tensor& feat, float dloss, const LmHead& head, Tensor& dfeat) {
  LmHeadTensors& h = *ctx.head;
  if (h.forward_dloss) {  // forward did it (set_loss_weight)
    LATTICE_CHECK(*h.forward_dloss == dloss,
                  "{}: backward's dloss {} is not the loss weight {} that forward computed the head's gradients with",
                  acts_->arch, dloss, *h.forward_dloss);
    dfeat.copy_from(h.dfeat);
    h.forward_dloss.reset();
    return;
  }
  const int64_t n = ctx.B * ctx.T, rows = ChunkActivations::head_rows(span_, n);
  const int64_t vocab_start = int64_t(tp_.rank()) * acts_->V_l;
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    Tensor logits = head_logits(ctx, r0, r1), dfeat_rows = row_range(dfeat, n, r0, r1);
    const Tensor feat_rows = row_range(feat, n, r0, r1);
    if (span_.head_chunk > 0) {
      head_logits_forward(logits, feat_rows, head);
      head_rows_recomputed_ += r1 - r0;
    }
    head_chunk_backward(logits, feat_rows, row_range(h.lse, n, r0, r1), row_range(ctx.targets, n, r0, r1), dloss,
                        vocab_start, head, dfeat_rows);
  }
}

double ChunkModel::forward(ModelContext& base, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                           Tensor* output) {
  auto& ctx = static_cast<Context&>(base);
  const std::string& a = acts_->arch;
  LATTICE_CHECK(input.numel() == ctx.B * ctx.T * (span_.embedding ? 1 : acts_->C),
                "{}: input {} does not match the context ({}, {})", a, shape_str(input.shape()), ctx.B, ctx.T);
  ctx.coords = coords;
  ctx.targets = targets;
  ctx.decoded = ctx.kv != nullptr;
  ctx.scratch = workspace(ctx.B, ctx.T).scratch.get();
  if (span_.embedding) {
    ctx.inputs = input;
    embed_forward(ctx, input);
  } else {
    ctx.emb = input;  // the previous chunk's activation, alive until backward
  }
  const Tensor* x = &ctx.emb;
  for (int i = 0; i < n_blocks(); ++i) {
    block_forward(ctx, i, *x, ctx.out[size_t(i)], saved_for(ctx, i));
    x = &ctx.out[size_t(i)];
  }
  if (span_.head) return head_forward(ctx, *x);
  LATTICE_CHECK(output != nullptr, "{}: a chunk without the head needs an output activation", a);
  output->copy_from(*x);
  return 0.0;
}

void ChunkModel::backward(ModelContext& base, float dloss, const Tensor* doutput, Tensor* dinput) {
  auto& ctx = static_cast<Context&>(base);
  const std::string& a = acts_->arch;
  LATTICE_CHECK(!ctx.decoded, "{}: a context whose last forward was forward_cached saved nothing for backward", a);
  Workspace& w = workspace(ctx.B, ctx.T);
  ctx.scratch = w.scratch.get();
  Tensor* dout = &w.dbuf[0];
  Tensor* dx = &w.dbuf[1];
  const Tensor& last = n_blocks() == 0 ? ctx.emb : ctx.out.back();
  if (span_.head) {
    head_backward(ctx, last, dloss, *dout);
    if (on_grads_ready) on_grads_ready(acts_->n_layer);
  } else {
    LATTICE_CHECK(doutput != nullptr, "{}: a chunk without the head needs the output gradient", a);
    dout->copy_from(*doutput);
  }
  for (int i = n_blocks() - 1; i >= 0; --i) {
    const Tensor& x = i > 0 ? ctx.out[size_t(i - 1)] : ctx.emb;
    SavedTensors& saved = saved_for(ctx, i);
    if (i < span_.recompute) block_forward(ctx, i, x, ctx.out[size_t(i)], saved);  // same coords, same masks
    block_backward(ctx, i, x, *dout, *dx, saved);
    if (on_grads_ready) on_grads_ready(layer_of(i));
    std::swap(dout, dx);
  }
  // *dout is now the gradient of the chunk's input.
  if (!span_.embedding) {
    LATTICE_CHECK(dinput != nullptr, "{}: a chunk without the embedding needs an input gradient", a);
    dinput->copy_from(*dout);
    ctx.emb = Tensor();  // the received input: a pooled context must not keep it alive until its next forward
    return;
  }
  embed_backward(ctx, *dout, *dx);
  if (on_grads_ready) on_grads_ready(kEmbeddingLayer);
}

}  // namespace lattice
