// ChunkModel: the pipeline-chunk skeleton every model in the zoo shares, so a
// model file holds only its own math.
//
// A chunk (StageSpan) runs: the embedding (first chunk), blocks [first_layer,
// end_layer), the head and loss (last chunk). ChunkModel owns the walk:
//   forward:  embed_forward | take the input activation -> block_forward for
//             each block -> head_forward | copy the output activation;
//   backward: head_backward | take doutput -> block_backward from the last
//             block to the first (recomputing the forward of the first
//             span.recompute blocks) -> embed_backward | write dinput,
//   calling on_grads_ready after the head, each block and the embedding;
// and the memory: a context per in-flight microbatch (each block's output
// plus what the model saves), one workspace per chunk (the model's backward
// scratch, the two gradient ping-pong buffers and the saved tensors of the
// block being recomputed), both made through a MakeTensor that either
// allocates or only counts, so `lattice plan` predicts what training holds.
//
// A model supplies two classes:
//   - a ChunkActivations: which tensors its embedding, one block, the head
//     and the backward scratch hold (shapes only: no parameters, so the
//     registry can count them for a layout without building anything);
//   - a ChunkModel subclass: binds its parameter views and implements the six
//     hooks below on those tensors.
// Invariants: block i's input is the embedding output (i = 0) or block
// i - 1's output, each (B, T, C); hooks never keep pointers into a context
// past the call. Shapes: B, T, C as in core/shapes.h.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/ops.h"
#include "core/param.h"
#include "models/model.h"
#include "tp/linear.h"

namespace lattice {

// One parameter's value and gradient views, and the weight its matmuls read.
struct ParamView {
  Tensor w;  // the fp32 values; undefined for a matmul weight when there is a shadow (bind)
  Tensor g;
  ShadowView w16;  // its view of the 16-bit shadow, when the parameters have one
  // The weight as a matmul operand (linear layers, the LM head): the 16-bit
  // shadow under runtime.precision bf16/fp16 (checked current on every call),
  // else w. Everything that is not a matmul (norms, embedding lookups) reads w.
  const Tensor& mm() const { return w16.defined() ? w16.get() : w; }
};

// Tensors one part of a chunk saves (the embedding, a block, the head) or the
// model's scratch; each model derives its own structs from it.
struct SavedTensors {
  virtual ~SavedTensors() = default;
};

// The head's tensors every model shares: this rank's vocabulary slice of the
// logits and the per-token loss (tp/cross_entropy.h). A model's head() makes
// the rest of its head's tensors; ChunkModel makes these.
struct LmHeadTensors : SavedTensors {
  Tensor logits;       // (B, T, V_l), backward overwrites it with dlogits; undefined
                       // with StageSpan::head_chunk (the workspace holds one chunk's)
  Tensor losses, lse;  // (B, T)
  // With head_chunk: the head input's gradient (B, T, C), when forward computed
  // the head's gradients (set_loss_weight), and the dloss it used.
  Tensor dfeat;
  std::optional<float> forward_dloss;
};

// The LM head every model's head ends in (ChunkModel::lm_head_forward): the
// column-parallel linear, its weight, and optionally a vocabulary bias (this
// rank's (V_l) slice) and where its gradient accumulates ((V_l), +=).
struct LmHead {
  tp::ColumnParallelLinear& linear;
  ParamView& weight;
  const Tensor* bias = nullptr;
  Tensor* dbias = nullptr;
  int vocab_size = 0;
};

// The head of the LayerNorm models (GPT-2, GPT-NeoX): final LayerNorm (its
// output and statistics saved), then the LM head.
struct LayerNormHeadTensors : LmHeadTensors {
  Tensor lnf, lnf_mean, lnf_rstd;  // (B, T, C), (B, T), (B, T)
};

// Makes the tensors of a chunk: allocates each, or only counts its bytes.
// make(shape) is an activation (or an activation's gradient) in the chunk's
// activation dtype: bf16 or f16 under runtime.precision bf16/fp16, else the
// parameters' dtype. make.master(shape) is a tensor that stays in the master
// dtype beside 16-bit activations (core/dtype.h master_dtype): saved
// statistics (norm mean/rstd), losses and lse, parameter-gradient scratch.
// make.attention(calls) is one layer's attention state (att) in the
// activation dtype: (B, NH, T, T), or compact, as the device's `attention`
// state gives (ops::attention_state_shape: the CPU kernels' row statistics;
// on CUDA with 16-bit matmuls, where the fused path takes the calls, its
// Stats and O). make.attention_scratch(calls) is backward's scratch for
// those calls: att's shape on CUDA, empty on the CPU, whose kernels never
// read it (ops::attention_scratch_shape). A MakeTensor made by
// sharing_attention(t) hands out `t` for every full (B, NH, T, T) state
// instead of making one (the chunk's shared probabilities under
// parallel.recompute_attention; t undefined when only counting).
class MakeTensor {
 public:
  using Fn = std::function<Tensor(Shape, DType)>;
  MakeTensor(Fn fn, DType activation, ops::AttentionState attention)
      : fn_(std::move(fn)), act_(activation), master_(master_dtype(activation)), attention_(attention) {}
  Tensor operator()(Shape s) const { return fn_(std::move(s), act_); }
  Tensor master(Shape s) const { return fn_(std::move(s), master_); }
  Tensor attention(const ops::AttentionCalls& calls) const {
    Shape s = attention_shape(calls);
    if (share_attention_ && full_attention_state(s)) return shared_attention_;
    return fn_(std::move(s), act_);
  }
  Shape attention_shape(const ops::AttentionCalls& calls) const {
    return ops::attention_state_shape(calls, act_, attention_);
  }
  Tensor attention_scratch(const ops::AttentionCalls& calls) const {
    return fn_(ops::attention_scratch_shape(calls, act_, attention_), act_);
  }
  // (B, NH, T, T) probabilities, as opposed to a compact state.
  static bool full_attention_state(const Shape& s) { return s.size() == 4; }
  MakeTensor sharing_attention(Tensor shared) const {
    MakeTensor m = *this;
    m.share_attention_ = true, m.shared_attention_ = std::move(shared);
    return m;
  }

 private:
  Fn fn_;
  DType act_, master_;
  ops::AttentionState attention_;
  bool share_attention_ = false;
  Tensor shared_attention_;
};

// What a chunk of one model allocates, from its config and tp shard alone.
class ChunkActivations {
 public:
  virtual ~ChunkActivations() = default;
  // The embedding's saved tensors besides its output; none by default.
  virtual std::unique_ptr<SavedTensors> embedding(const MakeTensor& make, int64_t B, int64_t T) const;
  // One block's saved tensors besides its output (which the context holds).
  virtual std::unique_ptr<SavedTensors> block(const MakeTensor& make, int64_t B, int64_t T) const = 0;
  // The head's tensors besides logits, losses and lse (LmHeadTensors).
  virtual std::unique_ptr<LmHeadTensors> head(const MakeTensor& make, int64_t B, int64_t T) const = 0;
  // LayerNormHeadTensors of width C (for head()).
  std::unique_ptr<LmHeadTensors> layernorm_head(const MakeTensor& make, int64_t B, int64_t T) const;
  // Backward scratch shared by the chunk's contexts (not saved state).
  virtual std::unique_ptr<SavedTensors> scratch(const MakeTensor& make, const StageSpan& span, int64_t B,
                                                int64_t T) const = 0;
  // Bytes allocated and freed again inside one forward; by default the most
  // of: the loss's row max and [sum exp; target logit] (tp/cross_entropy.cpp)
  // for one head chunk's rows, and with 16-bit activations at tp > 1 the fp32
  // partial sums of a row-parallel output (tp/linear.cpp), (B * T, C) in a
  // block, and (rows, C) of the head's input gradient when forward computes it.
  virtual int64_t transient_bytes(const StageSpan& span, int64_t B, int64_t T, DType activation) const;
  // The same inside one backward; by default, with 16-bit activations at
  // tp > 1, a column-parallel input gradient's fp32 partial sums (B * T, C).
  virtual int64_t backward_transient_bytes(const StageSpan& span, int64_t B, int64_t T, DType activation) const;
  // Rows of the B * T = n the head runs at once (StageSpan::head_chunk).
  static int64_t head_rows(const StageSpan& span, int64_t n) {
    return span.head_chunk > 0 ? std::min(span.head_chunk, n) : n;
  }

  // One layer's attention calls at (B, T): this rank's heads, their size,
  // the mask and the training dropout (set in the constructor, B and T 0),
  // for make.attention.
  ops::AttentionCalls attention_at(int64_t B, int64_t T) const {
    ops::AttentionCalls c = attention;
    c.B = B, c.T = T;
    return c;
  }

  std::string arch;  // for messages
  int64_t C = 0;     // width of the activation between blocks and chunks
  int tp = 1;        // the tp group's size
  int n_layer = 0, max_seq_len = 0;
  int64_t V_l = 0;  // this rank's columns of the padded vocabulary: the head's logits
  ops::AttentionCalls attention;
  // This rank's key/value heads when fewer than attention.NH (grouped
  // queries, their k/v repeated to the query heads before attention); 0:
  // attention.NH. The key/value cache keeps one head per group.
  int64_t kv_heads = 0;
};

class ChunkModel : public LanguageModel {
 public:
  ~ChunkModel() override;
  std::string arch() const final { return acts_->arch; }
  std::unique_ptr<ModelContext> make_context(int64_t B, int64_t T) const final;
  ActivationBytes activation_bytes(int64_t B, int64_t T) const final;
  double forward(ModelContext& ctx, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                 Tensor* output = nullptr) final;
  void backward(ModelContext& ctx, float dloss, const Tensor* doutput = nullptr, Tensor* dinput = nullptr) final;
  // The logits (B, T, V_l) of the last forward on `ctx` (a chunk with the
  // head, whose span has no head_chunk): this rank's padded vocabulary rows.
  // Read them before backward, which overwrites them with dlogits.
  Tensor logits(const ModelContext& ctx) const;

  // Incremental decoding (lattice sample, models/sampling.h): each block's
  // keys and values of the positions already run, so a forward runs only the
  // new positions. `layers[i]` is block i of the chunk: (B, capacity,
  // 2 KV_l HS), each position's keys then values for this rank's key/value
  // heads (ChunkActivations::kv_heads; the layout ops::attention_cached
  // takes).
  struct KvCache {
    int64_t B = 0, capacity = 0;
    int64_t length = 0;  // positions [0, length) are held
    std::vector<Tensor> layers;
    std::vector<int64_t> filled;  // per block: positions its last forward_cached wrote (the walk's check)
  };
  // Whether the model decodes with a cache: its blocks attend through
  // attend() and place rows at position ctx.pos0 + t (position embeddings,
  // RoPE). A model opts in by overriding this; false by default.
  virtual bool kv_cache_ready() const { return false; }
  // Why this chunk cannot decode with a cache now, or "" when it can: the
  // model opted in, its attention is causal, and it runs on the CPU with f32
  // or f64 activations (ops::attention_cached).
  std::string kv_cache_refusal() const;
  // An empty cache for B samples of up to `capacity` (<= max_seq_len)
  // positions; kv_cache_refusal() is the error when there is one.
  KvCache make_kv_cache(int64_t B, int64_t capacity) const;
  // forward() of the next ctx.T positions [cache.length, cache.length + T)
  // of each sample, in evaluation mode (no dropout; `ctx` takes no backward):
  // input is their token ids (B, T) or, without the embedding, the previous
  // chunk's (B, T, C) at those positions; attention reads the cache for the
  // earlier positions and appends these. Equals the rows a forward() of the
  // whole sequence gives for them, up to rounding. `ctx` is any make_context
  // of (cache.B, T); pp chunks each keep their own cache.
  double forward_cached(ModelContext& ctx, KvCache& cache, const Tensor& input, const Tensor& targets,
                        Tensor* output = nullptr);

  DType activation_dtype() const final { return act_dtype_; }
  void set_activation_dtype(DType dtype) final;
  void set_loss_weight(std::optional<float> dloss) final { loss_weight_ = dloss; }
  void set_loss_sum(Tensor* acc) final { loss_sum_ = acc; }
  // Rows whose logits backward has computed again so far (lm_head_backward):
  // none when forward computes the head's gradients.
  int64_t head_rows_recomputed() const { return head_rows_recomputed_; }

  // What chunk `span` of a model with these activations holds at (B, T) with
  // activations in `activation` (statistics in its master dtype), counted
  // without allocating (lattice plan); `attention` as MakeTensor's.
  static ActivationBytes activation_bytes_of(const ChunkActivations& acts, StageSpan span, DType activation, int64_t B,
                                             int64_t T, ops::AttentionState attention);

 protected:
  // One in-flight microbatch.
  struct Context final : ModelContext {
    int64_t B = 0, T = 0;
    StepCoords coords;
    Tensor inputs, targets;                            // (B, T) i32 (inputs: with the embedding)
    Tensor emb;                                        // (B, T, C) embedding output, or the chunk's input
    std::unique_ptr<SavedTensors> embed;               // the embedding's other tensors (may be null)
    std::vector<Tensor> out;                           // (B, T, C) each block's output
    std::vector<std::unique_ptr<SavedTensors>> saved;  // each block's tensors; null when recomputed
    bool attention_shared = false;                     // their att is the chunk's shared buffer
    std::unique_ptr<LmHeadTensors> head;               // with the head
    SavedTensors* scratch = nullptr;                   // the chunk's backward scratch
    KvCache* kv = nullptr;                             // set by forward_cached only
    int64_t pos0 = 0;                                  // position of row 0: nonzero only when kv is set
    bool decoded = false;                              // the last forward was forward_cached: no backward
    int64_t bytes_ = 0;
    int64_t bytes() const override { return bytes_; }
  };

  // `params` holds the chunk's entries (select_stage_params) sharded for this
  // rank of `tp`; `acts` describes the chunk's tensors.
  ChunkModel(std::unique_ptr<ChunkActivations> acts, FlatParams& params, comm::Group& tp, StageSpan span);

  // The hooks. Layer numbers: block i of the chunk is model layer
  // layer_of(i); RNG layer ids are that + 1 (0 is the embedding).
  // ids (B, T) i32 -> ctx.emb.
  virtual void embed_forward(Context& ctx, const Tensor& ids) = 0;
  // demb: gradient of ctx.emb (may be overwritten); scratch: a free (B, T, C).
  virtual void embed_backward(Context& ctx, Tensor& demb, Tensor& scratch) = 0;
  // x (B, T, C) -> out (B, T, C), saving into `saved`.
  virtual void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors& saved) = 0;
  // dout (read only) -> dx (overwritten); accumulates the block's parameter gradients.
  virtual void block_backward(Context& ctx, int i, const Tensor& x, const Tensor& dout, Tensor& dx,
                              SavedTensors& saved) = 0;
  // x: the last block's output. Returns the sum of the token losses.
  virtual double head_forward(Context& ctx, const Tensor& x) = 0;
  // From the loss (each valid token weighted by dloss) to dx (overwritten).
  virtual void head_backward(Context& ctx, const Tensor& x, float dloss, Tensor& dx) = 0;

  // Helpers for the hooks.
  int layer_of(int i) const { return span_.first_layer + i; }
  // The global index of this rank's first attention head (its heads are
  // attention.NH consecutive ones): the dropout masks of attention key on it.
  int head_offset() const { return int(acts_->attention.NH) * tp_.rank(); }
  // Binds a parameter's views (with its 16-bit view when `params` has a shadow,
  // which must be enabled before the model is built).
  ParamView bind(FlatParams& params, const std::string& name) const;
  // One (sum of rows, cols) view over adjacent 2-D entries, or 1-D ones (sum of
  // lengths): the parameter table keeps e.g. q, k, v next to each other, so
  // their local shards read as one fused weight.
  ParamView bind_rows(FlatParams& params, const std::vector<std::string>& names) const;
  // This rank's logits = feat (B, T, C) @ weight (V_l, C)^T (+ bias), then
  // the vocab-parallel cross-entropy against ctx.targets into h.losses and
  // h.lse. Returns the loss sum. With StageSpan::head_chunk it runs chunk by
  // chunk of rows through one chunk's logits in the workspace and keeps none;
  // in a training forward with a loss weight (set_loss_weight) it then also
  // turns each chunk's logits into dlogits and accumulates the weight and bias
  // gradients and h.dfeat, as backward would (h.forward_dloss says so).
  double lm_head_forward(Context& ctx, const Tensor& feat, const LmHead& head);
  // From the loss (each valid token weighted by dloss) to dfeat (B, T, C,
  // overwritten); accumulates the weight and bias gradients. With head_chunk
  // it computes each chunk's logits again first (the same weight and bias as
  // forward's), unless forward computed the gradients already: then it copies
  // h.dfeat (dloss must be forward's).
  void lm_head_backward(Context& ctx, const Tensor& feat, float dloss, const LmHead& head, Tensor& dfeat);
  // The whole head of a LayerNorm model (ctx.head a LayerNormHeadTensors):
  // LayerNorm of x with (norm_w, norm_b), logits through `head` with weight
  // head_w, and the loss; backward from the loss to dx, with `scratch` a free
  // (B, T, C).
  struct LayerNormHead {
    ParamView norm_w, norm_b, head_w;
    float eps = 1e-5f;
    int vocab_size = 0;
  };
  double layernorm_head_forward(Context& ctx, const Tensor& x, LayerNormHead& p, tp::ColumnParallelLinear& head);
  void layernorm_head_backward(Context& ctx, const Tensor& x, float dloss, LayerNormHead& p,
                               tp::ColumnParallelLinear& head, Tensor& scratch, Tensor& dx);
  template <class S>
  static S& as(SavedTensors& s) {
    return static_cast<S&>(s);
  }
  template <class S>
  static const S* as_ptr(const SavedTensors* s) {
    return static_cast<const S*>(s);
  }
  template <class S>
  static S& scratch_of(Context& ctx) {
    return static_cast<S&>(*ctx.scratch);
  }
  template <class S>
  static S& head_of(Context& ctx) {
    return static_cast<S&>(*ctx.head);
  }
  // Block i's causal attention over qkv (B, T, 3 C_l) into out (B, T, C_l),
  // saving att for backward: ops::attention_forward with this rank's heads
  // and head offset, or, in forward_cached, ops::attention_cached over the
  // cache (att untouched). Models that opt into kv_cache_ready call this
  // instead of ops::attention_forward.
  void attend(Context& ctx, int i, Tensor& out, Tensor& att, const Tensor& qkv, const ops::Dropout& d) const;
  // The attention state the device takes now (ops::attention_state_on): compact on the CPU by default, and on
  // CUDA with 16-bit matmuls where the fused path takes the calls (MakeTensor).
  ops::AttentionState attention_state() const;
  // Call in block_backward just before the attention backward of block i,
  // with the forward's att, qkv, dropout and key mask (the key_mask ops:
  // ChunkActivations::attention.causal false). Under
  // parallel.recompute_attention (span.recompute_attention) the blocks' full
  // (B, NH, T, T) att is one buffer per chunk, which every later block and
  // microbatch overwrites (a compact state is kept as usual); this computes
  // the probabilities again into it (ops::attention_probs: the forward's P
  // bit for bit, without the output and its P @ V product). Otherwise (and
  // for a block recomputed whole, whose forward just wrote att) it does
  // nothing.
  void recompute_attention(const Context& ctx, int i, Tensor& att, const Tensor& qkv, const ops::Dropout& d,
                           const Tensor* key_mask = nullptr) const;

  StageSpan span_;
  comm::Group& tp_;
  TpShard shard_;
  DType dtype_ = DType::f32;      // the parameters'
  DType act_dtype_ = DType::f32;  // the activations' (set_activation_dtype)
  Device device_;

 private:
  struct Workspace {
    int64_t B = 0, T = 0;
    ops::AttentionState attention{};           // its attention scratch's state (MakeTensor)
    Tensor dbuf[2];                            // (B, T, C) gradient ping-pong
    std::unique_ptr<SavedTensors> scratch;     // the model's
    std::unique_ptr<SavedTensors> recomputed;  // tensors of the block being recomputed
    Tensor head_logits;                        // (head rows, V_l): one head chunk's, with head_chunk
  };
  // Rows [r0, r1) of the logits: the context's, or the workspace's chunk.
  Tensor head_logits(Context& ctx, int64_t r0, int64_t r1);
  // `shared_att`: the chunk's shared attention probabilities where
  // shares_attention (undefined when only counting).
  static void fill_context(Context& ctx, const ChunkActivations& acts, const StageSpan& span, const MakeTensor& make,
                           const Tensor& shared_att, int64_t B, int64_t T);
  static void fill_workspace(Workspace& ws, const ChunkActivations& acts, const StageSpan& span, const MakeTensor& make,
                             const Tensor& shared_att, int64_t B, int64_t T);
  static bool shares_attention(const ChunkActivations& acts, const StageSpan& span, const MakeTensor& make, int64_t B,
                               int64_t T) {
    return span.recompute_attention && MakeTensor::full_attention_state(make.attention_shape(acts.attention_at(B, T)));
  }
  Workspace& workspace(int64_t B, int64_t T);
  // The shared buffer for (B, T) in the activation dtype (allocated on first
  // use, counted with the workspace); undefined where the blocks keep their own.
  Tensor shared_attention(const MakeTensor& make, int64_t B, int64_t T) const;
  SavedTensors& saved_for(Context& ctx, int i);
  int n_blocks() const { return span_.end_layer - span_.first_layer; }

  std::unique_ptr<ChunkActivations> acts_;
  Workspace ws_;
  std::optional<float> loss_weight_;  // set_loss_weight's
  Tensor* loss_sum_ = nullptr;        // set_loss_sum's
  int64_t head_rows_recomputed_ = 0;
  mutable Tensor shared_att_;  // shared_attention's; contexts made before a change of shape keep theirs
};

// A dropout op keyed as ARCHITECTURE.md §2 says: (seed, dropout, step, layer
// id, site), counter (sample0 + row, ...); p = 0 outside training.
ops::Dropout dropout_at(const StepCoords& c, float p, int layer_id, uint32_t site);

}  // namespace lattice
