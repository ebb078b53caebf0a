// The host-side description of attention through cuDNN's fused scaled
// dot-product attention (the flash-attention patterns of the cuDNN graph
// API), as plain C++ with no CUDA or cuDNN header, so the CPU tests check it
// (tests/core/cuda/test_sdpa_plan.cpp). sdpa_cudnn.cpp turns a graph into
// cuDNN backend descriptors one for one and runs it.
//
// Buffers (core/cuda/attention.h has the math; C = NH * HS):
//   qkv (B, T, 3C) interleaved q | k | v per token, dqkv likewise;
//   out and dout (B, T, C); Stats (B, NH, T) f32, the log-sum-exp of each
//   row of scale q k^T over its allowed keys (max + log of the sum).
// The fused path reads and writes them in the io type (bf16 or fp16), in
// these layouts: where the activations are f32, io-typed copies in scratch;
// where they are already of the io type (16-bit activations, act16), the
// buffers themselves, staged through a same-type copy in scratch only when
// one is not aligned as the tensor descriptors say (sdpa_staging). cuDNN names every tensor (b, h, s, d), so head h of
// token t of sample b, element e, sits at b T 3C + t 3C + h HS + e in qkv: strides (T 3C, HS, 3C, 1), plus C for K and
// 2C for V (offset). A transposed operand (K^T, V^T) is the same memory with the last two dims and strides swapped; a
// transposed virtual tensor (P^T, dS^T) is a reshape op.
//
// The graphs (each op's inputs and output by uid, in graph order) are the
// ones cudnn-frontend 1.16-1.18 emits for this attention (its
// CompositeSDPANode and CompositeSDPABackwardNode, read 2026-11-24), node for
// node, since cuDNN's fused-attention engines recognise graphs by their form:
//   forward:  S = Q K^T; S *= scale; [causal: row = index(S, 2),
//             col = index(S, 3), keep = row >= col, S = keep ? S : mask];
//             M = rowmax(S); E = exp(S - M); Z = rowsum(E);
//             Stats = M + log(Z); P = E / Z; O = P V.
//   backward: D = rowsum(dO * O) * 1 into softmax_sum (f32, in scratch);
//             S = Q K^T; S *= scale; S -= Stats; [causal mask as above];
//             E = exp(S); dV = E^T dO; dP = dO V^T; dS = (dP - D) E scale
//             (f32); dK = dS^T Q; then, K a reshape of K^T, either
//             dQ = dS K (SdpaDq::direct: the frontend's deterministic form,
//             set_deterministic_algorithm) or dQ_accum = dS K (f32, in
//             scratch) and dQ = identity(dQ_accum) (SdpaDq::accumulated: its
//             default, where dQ is summed with atomics, so not bitwise
//             repeatable). Lattice asks for the direct form first and takes
//             the accumulated one only where cuDNN refuses it.
// The scale is one by-value tensor, read by every multiply that needs it.
// Masked scores take -inf where cuDNN is 9.10 or newer, the most negative
// finite float before (sdpa_mask_value, as cudnn-frontend): the mask comes
// after the row maximum's operand in the forward (each row keeps its
// diagonal, so the maximum is finite) and after Stats is subtracted in the
// backward, so no intermediate is inf - inf.
//
// The saved state: forward's `att` buffer, (B, NH, T, T) of the activation
// type on the plain path (f32, or the io type under act16), holds Stats and
// the io-typed O when the fused path runs (backward needs both, and nothing
// else; an f32 qkv is converted again, which gives the same bits). Their
// offsets come from the buffer's real address (sdpa_saved_layout);
// sdpa_supported checks that they fit for any address aligned as an element
// of the buffer (4 bytes, or 2 under act16), so a (B, NH, T, T) buffer
// serves either path. Under act16 the buffer has half the bytes: T must be
// about HS + 2 or more, against HS / 2 + 2 for f32. Models allocate only
// sdpa_saved_elems where these rules take their calls (the compact state of
// ops::attention_state_shape, linear in T); the plain path then keeps one
// sample's P in a temporary of the backend's.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lattice::cuda {

enum class SdpaDType { bf16, fp16 };  // the io type of Q, K, V, O, dO, dQ, dK, dV
enum class SdpaPass { forward, backward };
enum class SdpaDq { direct, accumulated };  // how the backward writes dQ (see "The graphs" above)

// One attention call as the fused path sees it.
struct SdpaShape {
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  bool causal = true;
  bool key_mask = false;  // a (B, T) key-padding flag array
  float p = 0.0f;         // dropout on the probabilities
  SdpaDType dtype = SdpaDType::bf16;
  // The activations (qkv, out, dout, dqkv, the saved buffer) are of the io
  // type, not f32. The graphs do not depend on it; the saved buffer's size
  // and the staging do.
  bool act16 = false;
};

// Limits of cuDNN 9's flash-attention engines for fprop and bprop on sm80
// and sm90: head dim a multiple of 8 and at most 128 (strides of 16 bytes).
constexpr int64_t kSdpaMaxHeadDim = 128;
constexpr int64_t kSdpaHeadDimMultiple = 8;
constexpr uint64_t kSdpaIoAlign = 256;       // bytes: every io buffer Lattice places (copies, saved O)
constexpr uint64_t kSdpaIoTensorAlign = 16;  // bytes: what the io tensor descriptors declare
constexpr uint64_t kSdpaStatsAlign = 16;     // bytes

// Whether the fused path takes this call; `why` (if given) says why not.
inline bool sdpa_supported(const SdpaShape& s, std::string* why);

// Where the buffers the graph sees live.
enum class SdpaBuffer {
  none,         // virtual: never in memory
  qkv,          // io copy of qkv (B, T, 3C)
  out,          // io O (B, T, C), in the saved buffer
  dout,         // io copy of dout (B, T, C)
  dqkv,         // io dqkv (B, T, 3C)
  stats,        // f32 (B, NH, T), in the saved buffer
  softmax_sum,  // f32 (B, NH, T) rowsum(dO * O), in the backward's scratch
  dq_accum,     // f32 (B, NH, T, HS) dQ before its rounding, in the backward's scratch (zeroed before each run)
  scale,        // by value: f32 scale
  mask_value,   // by value: f32 score of a masked entry (sdpa_mask_value)
  one,          // by value: f32 1
};
enum class SdpaElem { io, f32, i32, boolean };

struct SdpaTensor {
  int64_t uid = 0;
  const char* name = "";
  std::array<int64_t, 4> dims{}, strides{};
  SdpaElem elem = SdpaElem::f32;
  SdpaBuffer buffer = SdpaBuffer::none;
  int64_t offset = 0;  // elements from the buffer's start
  bool is_virtual() const { return buffer == SdpaBuffer::none; }
  bool by_value() const {
    return buffer == SdpaBuffer::scale || buffer == SdpaBuffer::mask_value || buffer == SdpaBuffer::one;
  }
};

enum class SdpaOpKind { matmul, pointwise, reduction, reshape };
enum class SdpaPw { add, sub, mul, div, exp, log, cmp_ge, binary_select, gen_index, identity };
enum class SdpaReduce { add, max };

// y = op(x [, b] [, t]). matmul: y = x b; pointwise binary_select: y = t ? x : b;
// gen_index: y = the index of each element of x along `axis`; reduction: over
// the dims where y has extent 1; reshape: y is x in y's dims and strides.
// A pointwise op computes in `math` (f32, or boolean for a comparison).
struct SdpaOp {
  SdpaOpKind kind = SdpaOpKind::pointwise;
  SdpaPw pw = SdpaPw::add;
  SdpaReduce reduce = SdpaReduce::add;
  int64_t axis = 0;
  int64_t x = 0, b = 0, t = 0, y = 0;  // uids; 0 = unused
  SdpaElem math = SdpaElem::f32;
};

struct SdpaGraph {
  std::vector<SdpaTensor> tensors;  // uids 1, 2, ... in order
  std::vector<SdpaOp> ops;
  const SdpaTensor& tensor(int64_t uid) const { return tensors.at(size_t(uid - 1)); }
};

// The graph of one pass (`dq`: the backward's form). The shape must be supported.
inline SdpaGraph sdpa_graph(const SdpaShape& s, SdpaPass pass, SdpaDq dq = SdpaDq::direct);

// Byte offsets of Stats and O inside the saved buffer at address `att`.
struct SdpaSavedLayout {
  uint64_t stats = 0, out = 0, end = 0;  // end: one past O
};
inline SdpaSavedLayout sdpa_saved_layout(const SdpaShape& s, uint64_t att);
// Elements (of the saved buffer's type: f32, or the io type under act16)
// that hold Stats and O at any address aligned as one element: the size of
// a compact saved buffer (ops::attention_state_shape), linear in T, where the
// plain path's is B NH T T.
inline int64_t sdpa_saved_elems(const SdpaShape& s);

// Elements of the io copies: qkv and dqkv (B, T, 3C), out and dout (B, T, C).
inline int64_t sdpa_qkv_elems(const SdpaShape& s) { return s.B * s.T * 3 * s.NH * s.HS; }
inline int64_t sdpa_out_elems(const SdpaShape& s) { return s.B * s.T * s.NH * s.HS; }

// Which of a pass's io buffers go through an io-typed copy in scratch: all
// it uses for f32 activations (converted there); under act16 only those
// whose address is not a multiple of kSdpaIoTensorAlign (copied there as
// they are). qkv: both passes; dout and dqkv: backward.
struct SdpaStaging {
  bool qkv = false, dout = false, dqkv = false;
  bool operator==(const SdpaStaging&) const = default;
};
inline SdpaStaging sdpa_staging(const SdpaShape& s, SdpaPass pass, uint64_t qkv, uint64_t dout, uint64_t dqkv);

// Byte offsets in a pass's scratch (at a kSdpaIoAlign-aligned address): the
// staged copies, each kSdpaIoAlign-aligned and present only when staged,
// then the backward's f32 dQ_accum (accumulated form only) and softmax_sum,
// then cuDNN's workspace of `workspace` bytes.
struct SdpaScratchLayout {
  uint64_t qkv = 0, dout = 0, dqkv = 0, dq_accum = 0, softmax_sum = 0, workspace = 0, end = 0;
};
inline SdpaScratchLayout sdpa_scratch_layout(const SdpaShape& s, SdpaPass pass, SdpaDq dq, const SdpaStaging& staged,
                                             int64_t workspace);
inline uint64_t sdpa_dq_accum_bytes(const SdpaShape& s) { return uint64_t(s.B * s.NH * s.T * s.HS) * 4; }

// What depends on the cuDNN library the process runs with (cudnnGetVersion,
// e.g. 91900 for 9.19.0). The masked score: -inf from 9.10, the most
// negative finite float before. Why that library cannot take the shape, ""
// when it can: 9.10.0 and 9.10.1 not at all (cudnn-frontend's support
// surface refuses fp16/bf16 SDPA forward and backward there, "due to known
// bugs"); up to 9.15.0 the backward needs T a multiple of 128
// (cudnn-frontend adds a padding mask for it there; Lattice takes the plain
// path instead).
inline float sdpa_mask_value(int64_t cudnn_version);
inline std::string cudnn_version_name(int64_t cudnn_version);  // 91500 -> "9.15.0"
inline std::string sdpa_version_refusal(int64_t cudnn_version, const SdpaShape& s);

// An engine chosen instead of cuDNN's heuristics: its global index and knob
// choices (engine < 0: none, the heuristics choose). cudnn-frontend 1.18
// pins one for its deterministic backward on compute capability 10.x
// (datacenter Blackwell) from cuDNN 9.18 (override_heuristics_query: engine
// 5, KERNEL_CFG 31, STAGES 2); there the heuristics' own choice for the
// direct form need not be repeatable. The frontend pins nothing elsewhere
// (Hopper's direct form is deterministic whatever the engine; 12.x has no
// such rule), so neither does Lattice. sdpa_cudnn.cpp falls back to the
// heuristics, with one stderr line, where cuDNN does not take the pin.
enum class SdpaKnob { kernel_cfg, stages };
struct SdpaEngine {
  int64_t engine = -1;
  std::vector<std::pair<SdpaKnob, int64_t>> knobs;
};
inline SdpaEngine sdpa_pinned_engine(int64_t cudnn_version, int cc_major, SdpaPass pass, SdpaDq dq);

// Whether a backward of form `dq` may not be bitwise repeatable from run to
// run: the accumulated form always (atomics), the direct one on compute
// capability 10.x unless it runs on the pinned engine.
inline bool sdpa_backward_may_vary(int cc_major, SdpaDq dq, bool pinned) {
  return dq == SdpaDq::accumulated || (cc_major == 10 && !pinned);
}

// What the built graphs of a call depend on: the device and the shape (a
// supported shape has no dropout and no key mask), the key of the backend's
// graph cache and of its refusals.
struct SdpaKey {
  int dev = 0;
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  bool causal = true;
  SdpaDType dtype = SdpaDType::bf16;
  auto operator<=>(const SdpaKey&) const = default;
};
inline SdpaKey sdpa_key(int dev, const SdpaShape& s) { return {dev, s.B, s.T, s.NH, s.HS, s.causal, s.dtype}; }

// The shapes cuDNN refused, each with its own reason, so that a question
// about one shape (CudaBackend::attention_plain_reason) is answered with that
// shape's reason, whatever was refused since. Also whether a refusal has been
// logged: one stderr line per process. Not thread-safe (the caller's lock).
class SdpaRefusals {
 public:
  // Remembers why `key` was refused. Returns the line to print on stderr for
  // the first refusal of the process, "" for every later one.
  std::string record(const SdpaKey& key, const std::string& what) {
    std::string& reason = reasons_[key];
    reason = "cuDNN refused the fused attention graph for B " + std::to_string(key.B) + " T " + std::to_string(key.T) +
             " NH " + std::to_string(key.NH) + " HS " + std::to_string(key.HS) + ": " + what;
    if (logged_) return "";
    logged_ = true;
    return "lattice: cuda attention: " + reason + "; such shapes take the plain path";
  }
  // Why `key` was refused; "" when it was not (built, or never asked for).
  std::string reason(const SdpaKey& key) const {
    auto it = reasons_.find(key);
    return it == reasons_.end() ? std::string() : it->second;
  }

 private:
  std::map<SdpaKey, std::string> reasons_;
  bool logged_ = false;
};

// ---- implementation ----------------------------------------------------

namespace sdpa_detail {

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline int64_t io_bytes(SdpaDType) { return 2; }  // bf16 and fp16 alike

// Bytes of one element of the saved (B, NH, T, T) buffer: the least its
// address is aligned to.
inline uint64_t saved_elem_bytes(const SdpaShape& s) { return s.act16 ? uint64_t(io_bytes(s.dtype)) : 4; }

// Saved bytes needed in the worst case: att only element-aligned, so up to
// kSdpaStatsAlign - elem bytes before Stats; Stats ends 4-byte aligned, so
// up to kSdpaIoAlign - 4 before O.
inline uint64_t saved_bytes(const SdpaShape& s) {
  const uint64_t stats = uint64_t(s.B * s.NH * s.T) * 4, o = uint64_t(sdpa_out_elems(s) * io_bytes(s.dtype));
  return (kSdpaStatsAlign - saved_elem_bytes(s)) + stats + (kSdpaIoAlign - 4) + o;
}

// Stats and O fit in the plain path's (B, NH, T, T) buffer.
inline bool saved_fits(const SdpaShape& s) {
  return uint64_t(sdpa_saved_elems(s)) <= uint64_t(s.B * s.NH * s.T) * uint64_t(s.T);
}

using Dims = std::array<int64_t, 4>;

inline Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// Appends tensors (uids 1, 2, ...) and ops.
struct Builder {
  SdpaGraph g;

  int64_t tensor(const char* name, const Dims& dims, const Dims& strides, SdpaElem elem,
                 SdpaBuffer buffer = SdpaBuffer::none, int64_t offset = 0) {
    SdpaTensor t;
    t.uid = int64_t(g.tensors.size()) + 1;
    t.name = name;
    t.dims = dims;
    t.strides = strides;
    t.elem = elem;
    t.buffer = buffer;
    t.offset = offset;
    g.tensors.push_back(t);
    return t.uid;
  }
  int64_t scalar(const char* name, SdpaBuffer buffer) {
    return tensor(name, {1, 1, 1, 1}, {1, 1, 1, 1}, SdpaElem::f32, buffer);
  }
  int64_t temp(const char* name, const Dims& dims, SdpaElem elem = SdpaElem::f32) {
    return tensor(name, dims, packed(dims), elem);
  }
  void op(SdpaOp o) { g.ops.push_back(o); }
  void matmul(int64_t a, int64_t b, int64_t y) { op({.kind = SdpaOpKind::matmul, .x = a, .b = b, .y = y}); }
  void pointwise(SdpaPw mode, int64_t x, int64_t b, int64_t y, int64_t t = 0, int64_t axis = 0) {
    op({.kind = SdpaOpKind::pointwise, .pw = mode, .axis = axis, .x = x, .b = b, .t = t, .y = y});
  }
  int64_t pw(SdpaPw mode, int64_t x, int64_t b, const char* name, SdpaElem elem = SdpaElem::f32) {
    const int64_t y = temp(name, g.tensor(x).dims, elem);
    pointwise(mode, x, b, y);
    return y;
  }
  int64_t reduce(SdpaReduce mode, int64_t x, const char* name) {
    Dims d = g.tensor(x).dims;
    d[3] = 1;
    const int64_t y = temp(name, d);
    op({.kind = SdpaOpKind::reduction, .reduce = mode, .x = x, .y = y});
    return y;
  }
  // y: x in new dims and strides (a reshape op).
  int64_t reshape(int64_t x, const char* name, const Dims& dims, const Dims& strides, SdpaElem elem) {
    const int64_t y = tensor(name, dims, strides, elem);
    op({.kind = SdpaOpKind::reshape, .x = x, .y = y});
    return y;
  }
  // y: x (b, h, s, s) transposed in its last two dims, io-typed (a matmul operand).
  int64_t transposed(int64_t x, const char* name) {
    const Dims d = g.tensor(x).dims;
    return reshape(x, name, {d[0], d[1], d[3], d[2]}, {d[1] * d[2] * d[3], d[2] * d[3], 1, d[3]}, SdpaElem::io);
  }
  // S = scale Q K^T: the scores both passes start from.
  int64_t scaled_scores(const SdpaShape& s, int64_t q, int64_t kt, int64_t scale) {
    const int64_t S = temp("S", {s.B, s.NH, s.T, s.T});
    matmul(q, kt, S);
    return pw(SdpaPw::mul, S, scale, "S*scale");
  }
  // x where row >= column, the mask value elsewhere (causal); x itself otherwise.
  int64_t causal_mask(const SdpaShape& s, int64_t x) {
    if (!s.causal) return x;
    const int64_t row = temp("row", g.tensor(x).dims, SdpaElem::i32);
    pointwise(SdpaPw::gen_index, x, 0, row, 0, 2);
    const int64_t col = temp("col", g.tensor(x).dims, SdpaElem::i32);
    pointwise(SdpaPw::gen_index, x, 0, col, 0, 3);
    const int64_t keep = temp("row>=col", g.tensor(x).dims, SdpaElem::boolean);
    op({.kind = SdpaOpKind::pointwise, .pw = SdpaPw::cmp_ge, .x = row, .b = col, .y = keep, .math = SdpaElem::boolean});
    const int64_t masked = temp("masked", g.tensor(x).dims);
    pointwise(SdpaPw::binary_select, x, scalar("mask value", SdpaBuffer::mask_value), masked, keep);
    return masked;
  }
};

}  // namespace sdpa_detail

inline bool sdpa_supported(const SdpaShape& s, std::string* why) {
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (s.B <= 0 || s.T <= 0 || s.NH <= 0 || s.HS <= 0) return no("empty shape");
  if (s.p != 0.0f)
    return no("dropout p = " + std::to_string(s.p) +
              " > 0: Lattice's dropout draws its own Philox counters, as on the CPU, which cuDNN's does not");
  if (s.key_mask)
    return no(
        "a key-padding mask: cuDNN's padding mask takes per-sample sequence lengths, Lattice's key mask is "
        "an arbitrary (B, T) flag array");
  if (s.HS % kSdpaHeadDimMultiple != 0 || s.HS > kSdpaMaxHeadDim)
    return no("head size " + std::to_string(s.HS) + ": the flash-attention engines take multiples of " +
              std::to_string(kSdpaHeadDimMultiple) + " up to " + std::to_string(kSdpaMaxHeadDim));
  if (!sdpa_detail::saved_fits(s))
    return no("T = " + std::to_string(s.T) + " is too short for Stats and O in the (B, NH, T, T) " +
              (s.act16 ? "16-bit" : "f32") + " saved buffer");
  if (why) why->clear();
  return true;
}

inline SdpaGraph sdpa_graph(const SdpaShape& s, SdpaPass pass, SdpaDq dq) {
  using B = SdpaBuffer;
  const int64_t C = s.NH * s.HS, T = s.T;
  const sdpa_detail::Dims bhsd{s.B, s.NH, T, s.HS}, bhds{s.B, s.NH, s.HS, T};
  const sdpa_detail::Dims in3{T * 3 * C, s.HS, 3 * C, 1}, in3_t{T * 3 * C, s.HS, 1, 3 * C};  // qkv, dqkv
  const sdpa_detail::Dims in1{T * C, s.HS, C, 1};                                            // out, dout
  const sdpa_detail::Dims row{s.B, s.NH, T, 1}, row_strides{s.NH * T, T, 1, 1};
  const SdpaElem io = SdpaElem::io;
  sdpa_detail::Builder g;
  const int64_t q = g.tensor("Q", bhsd, in3, io, B::qkv, 0);
  const int64_t kt = g.tensor("K^T", bhds, in3_t, io, B::qkv, C);
  if (pass == SdpaPass::forward) {
    const int64_t v = g.tensor("V", bhsd, in3, io, B::qkv, 2 * C);
    const int64_t S = g.causal_mask(s, g.scaled_scores(s, q, kt, g.scalar("scale", B::scale)));
    const int64_t M = g.reduce(SdpaReduce::max, S, "rowmax");
    const int64_t E = g.pw(SdpaPw::exp, g.pw(SdpaPw::sub, S, M, "S-M"), 0, "exp");
    const int64_t Z = g.reduce(SdpaReduce::add, E, "rowsum");
    const int64_t stats = g.tensor("Stats", row, row_strides, SdpaElem::f32, B::stats);
    g.pointwise(SdpaPw::add, M, g.pw(SdpaPw::log, Z, 0, "log"), stats);
    const int64_t P = g.pw(SdpaPw::div, E, Z, "P", io);
    g.matmul(P, v, g.tensor("O", bhsd, in1, io, B::out, 0));
    return g.g;
  }
  const int64_t vt = g.tensor("V^T", bhds, in3_t, io, B::qkv, 2 * C);
  const int64_t o = g.tensor("O", bhsd, in1, io, B::out, 0);
  const int64_t dO = g.tensor("dO", bhsd, in1, io, B::dout, 0);
  const int64_t stats = g.tensor("Stats", row, row_strides, SdpaElem::f32, B::stats);
  const int64_t dQ = g.tensor("dQ", bhsd, in3, io, B::dqkv, 0);
  const int64_t dK = g.tensor("dK", bhsd, in3, io, B::dqkv, C);
  const int64_t dV = g.tensor("dV", bhsd, in3, io, B::dqkv, 2 * C);
  const int64_t scale = g.scalar("scale", B::scale);
  // D = rowsum(dO * O), kept in memory. The virtual product has cudnn-frontend's dims and strides, (b, h, s, d)
  // and (h s d, s d, h d, 1) (its mul_dO_O in scaled_dot_product_flash_attention.h), unusual as they are.
  const int64_t dOO = g.tensor("dO*O", bhsd, {s.NH * T * s.HS, T * s.HS, s.NH * s.HS, 1}, SdpaElem::f32);
  g.pointwise(SdpaPw::mul, dO, o, dOO);
  const int64_t rowsum = g.reduce(SdpaReduce::add, dOO, "rowsum(dO*O)");
  const int64_t D = g.tensor("softmax_sum", row, row_strides, SdpaElem::f32, B::softmax_sum);
  g.pointwise(SdpaPw::mul, rowsum, g.scalar("one", B::one), D);
  // E = exp(scale S - Stats), masked: the forward's probabilities.
  const int64_t S = g.pw(SdpaPw::sub, g.scaled_scores(s, q, kt, scale), stats, "S-Stats");
  const int64_t E = g.pw(SdpaPw::exp, g.causal_mask(s, S), 0, "exp");
  g.matmul(g.transposed(E, "P^T"), dO, dV);
  const int64_t dP = g.temp("dP", {s.B, s.NH, T, T});
  g.matmul(dO, vt, dP);
  const int64_t dS0 = g.pw(SdpaPw::mul, g.pw(SdpaPw::sub, dP, D, "dP-D"), E, "(dP-D)E");
  const int64_t dS = g.pw(SdpaPw::mul, dS0, scale, "dS");
  g.matmul(g.transposed(dS, "dS^T"), q, dK);
  const int64_t k = g.reshape(kt, "K", bhsd, in3, SdpaElem::f32);  // f32: what the frontend's type inference gives
  if (dq == SdpaDq::direct) {
    g.matmul(dS, k, dQ);
    return g.g;
  }
  const int64_t dq_accum = g.tensor("dQ_accum", bhsd, sdpa_detail::packed(bhsd), SdpaElem::f32, B::dq_accum);
  g.matmul(dS, k, dq_accum);
  g.pointwise(SdpaPw::identity, dq_accum, 0, dQ);
  return g.g;
}

inline SdpaSavedLayout sdpa_saved_layout(const SdpaShape& s, uint64_t att) {
  using sdpa_detail::align_up;
  SdpaSavedLayout l;
  l.stats = align_up(att, kSdpaStatsAlign) - att;
  const uint64_t stats_end = att + l.stats + uint64_t(s.B * s.NH * s.T) * 4;
  l.out = align_up(stats_end, kSdpaIoAlign) - att;
  l.end = l.out + uint64_t(sdpa_out_elems(s) * sdpa_detail::io_bytes(s.dtype));
  return l;
}

inline int64_t sdpa_saved_elems(const SdpaShape& s) {
  const uint64_t elem = sdpa_detail::saved_elem_bytes(s);
  return int64_t((sdpa_detail::saved_bytes(s) + elem - 1) / elem);
}

inline SdpaStaging sdpa_staging(const SdpaShape& s, SdpaPass pass, uint64_t qkv, uint64_t dout, uint64_t dqkv) {
  auto staged = [&](uint64_t address) { return !s.act16 || address % kSdpaIoTensorAlign != 0; };
  SdpaStaging st;
  st.qkv = staged(qkv);
  if (pass == SdpaPass::backward) st.dout = staged(dout), st.dqkv = staged(dqkv);
  return st;
}

inline SdpaScratchLayout sdpa_scratch_layout(const SdpaShape& s, SdpaPass pass, SdpaDq dq, const SdpaStaging& staged,
                                             int64_t workspace) {
  using sdpa_detail::align_up;
  const uint64_t io = uint64_t(sdpa_detail::io_bytes(s.dtype));
  const uint64_t qkv = align_up(uint64_t(sdpa_qkv_elems(s)) * io, kSdpaIoAlign);
  const uint64_t out = align_up(uint64_t(sdpa_out_elems(s)) * io, kSdpaIoAlign);
  const bool bwd = pass == SdpaPass::backward;
  SdpaScratchLayout l;
  l.dout = staged.qkv ? qkv : 0;
  l.dqkv = l.dout + (staged.dout ? out : 0);
  l.dq_accum = l.dqkv + (staged.dqkv ? qkv : 0);
  const bool accum = bwd && dq == SdpaDq::accumulated;
  l.softmax_sum = l.dq_accum + (accum ? align_up(sdpa_dq_accum_bytes(s), kSdpaIoAlign) : 0);
  l.workspace = l.softmax_sum + (bwd ? align_up(uint64_t(s.B * s.NH * s.T) * 4, kSdpaIoAlign) : 0);
  l.end = l.workspace + uint64_t(workspace);
  return l;
}

inline float sdpa_mask_value(int64_t cudnn_version) {
  return cudnn_version >= 91000 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::lowest();
}

inline SdpaEngine sdpa_pinned_engine(int64_t cudnn_version, int cc_major, SdpaPass pass, SdpaDq dq) {
  if (pass != SdpaPass::backward || dq != SdpaDq::direct || cc_major != 10 || cudnn_version < 91800) return {};
  return {5, {{SdpaKnob::kernel_cfg, 31}, {SdpaKnob::stages, 2}}};
}

inline std::string cudnn_version_name(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

inline std::string sdpa_version_refusal(int64_t cudnn_version, const SdpaShape& s) {
  if (cudnn_version == 91000 || cudnn_version == 91001)
    return "cuDNN " + cudnn_version_name(cudnn_version) +
           "'s fp16/bf16 fused attention has known bugs (cudnn-frontend refuses 9.10.0 and 9.10.1); "
           "cuDNN 9.10.2 and newer take it";
  if (cudnn_version > 91500 || s.T % 128 == 0) return "";
  return "cuDNN " + cudnn_version_name(cudnn_version) +
         "'s attention backward needs T a multiple of 128 (T = " + std::to_string(s.T) +
         "); cuDNN 9.15.1 and newer take any T";
}

}  // namespace lattice::cuda
