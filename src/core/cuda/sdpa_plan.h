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
// The graphs (each op's inputs and output by uid, in graph order):
//   forward:  S = Q K^T; S *= scale; [causal: row = index(S, 2),
//             col = index(S, 3), keep = row >= col, S = keep ? S : mask];
//             M = rowmax(S); E = exp(S - M); Z = rowsum(E);
//             Stats = M + log(Z); P = E / Z; O = P V.
//   backward: S as above; P = exp(S - Stats); dV = P^T dO; dP = dO V^T;
//             D = rowsum(dO * O); dS = P (dP - D) scale; dQ = dS K;
//             dK = dS^T Q.
// Masked scores take the most negative finite float, not -inf, so no
// intermediate is inf - inf.
//
// The saved state: forward's `att` buffer, (B, NH, T, T) of the activation
// type on the plain path (f32, or the io type under act16), holds Stats and
// the io-typed O when the fused path runs (backward needs both, and nothing
// else; an f32 qkv is converted again, which gives the same bits). Their
// offsets come from the buffer's real address (sdpa_saved_layout);
// sdpa_supported checks that they fit for any address aligned as an element
// of the buffer (4 bytes, or 2 under act16), so the plain path's
// (B, NH, T, T) accounting holds. Under act16 the buffer has half the bytes:
// T must be about HS + 2 or more, against HS / 2 + 2 for f32.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lattice::cuda {

enum class SdpaDType { bf16, fp16 };  // the io type of Q, K, V, O, dO, dQ, dK, dV
enum class SdpaPass { forward, backward };

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
  none,        // virtual: never in memory
  qkv,         // io copy of qkv (B, T, 3C)
  out,         // io O (B, T, C), in the saved buffer
  dout,        // io copy of dout (B, T, C)
  dqkv,        // io dqkv (B, T, 3C)
  stats,       // f32 (B, NH, T), in the saved buffer
  scale,       // by value: f32 scale
  mask_value,  // by value: f32 score of a masked entry
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
  bool by_value() const { return buffer == SdpaBuffer::scale || buffer == SdpaBuffer::mask_value; }
};

enum class SdpaOpKind { matmul, pointwise, reduction, reshape };
enum class SdpaPw { add, sub, mul, div, exp, log, cmp_ge, binary_select, gen_index };
enum class SdpaReduce { add, max };

// y = op(x [, b] [, t]). matmul: y = x b; pointwise binary_select: y = t ? x : b;
// gen_index: y = the index of each element of x along `axis`; reduction: over
// the dims where y has extent 1; reshape: y is x in y's dims and strides.
struct SdpaOp {
  SdpaOpKind kind = SdpaOpKind::pointwise;
  SdpaPw pw = SdpaPw::add;
  SdpaReduce reduce = SdpaReduce::add;
  int64_t axis = 0;
  int64_t x = 0, b = 0, t = 0, y = 0;  // uids; 0 = unused
};

struct SdpaGraph {
  std::vector<SdpaTensor> tensors;  // uids 1, 2, ... in order
  std::vector<SdpaOp> ops;
  const SdpaTensor& tensor(int64_t uid) const { return tensors.at(size_t(uid - 1)); }
};

// The graph of one pass. The shape must be supported.
inline SdpaGraph sdpa_graph(const SdpaShape& s, SdpaPass pass);

// Byte offsets of Stats and O inside the saved buffer at address `att`.
struct SdpaSavedLayout {
  uint64_t stats = 0, out = 0, end = 0;  // end: one past O
};
inline SdpaSavedLayout sdpa_saved_layout(const SdpaShape& s, uint64_t att);

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
// then cuDNN's workspace of `workspace` bytes.
struct SdpaScratchLayout {
  uint64_t qkv = 0, dout = 0, dqkv = 0, workspace = 0, end = 0;
};
inline SdpaScratchLayout sdpa_scratch_layout(const SdpaShape& s, const SdpaStaging& staged, int64_t workspace);

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
inline bool saved_fits(const SdpaShape& s) {
  const uint64_t elem = saved_elem_bytes(s);
  const uint64_t stats = uint64_t(s.B * s.NH * s.T) * 4, o = uint64_t(sdpa_out_elems(s) * io_bytes(s.dtype));
  const uint64_t capacity = uint64_t(s.B * s.NH * s.T) * uint64_t(s.T) * elem;
  return (kSdpaStatsAlign - elem) + stats + (kSdpaIoAlign - 4) + o <= capacity;
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
  // y: x (b, h, s, s) transposed in its last two dims, io-typed (a matmul operand).
  int64_t transposed(int64_t x, const char* name) {
    const Dims d = g.tensor(x).dims;
    const int64_t y = tensor(name, {d[0], d[1], d[3], d[2]}, {d[1] * d[2] * d[3], d[2] * d[3], 1, d[3]}, SdpaElem::io);
    op({.kind = SdpaOpKind::reshape, .x = x, .y = y});
    return y;
  }
  // S = scale Q K^T with the causal mask: the scores both passes start from.
  int64_t scores(const SdpaShape& s, int64_t q, int64_t kt) {
    const int64_t S = temp("S", {s.B, s.NH, s.T, s.T});
    matmul(q, kt, S);
    const int64_t scaled = pw(SdpaPw::mul, S, scalar("scale", SdpaBuffer::scale), "S*scale");
    if (!s.causal) return scaled;
    const int64_t row = temp("row", g.tensor(scaled).dims, SdpaElem::i32);
    pointwise(SdpaPw::gen_index, scaled, 0, row, 0, 2);
    const int64_t col = temp("col", g.tensor(scaled).dims, SdpaElem::i32);
    pointwise(SdpaPw::gen_index, scaled, 0, col, 0, 3);
    const int64_t keep = pw(SdpaPw::cmp_ge, row, col, "row>=col", SdpaElem::boolean);
    const int64_t masked = temp("S masked", g.tensor(scaled).dims);
    pointwise(SdpaPw::binary_select, scaled, scalar("mask value", SdpaBuffer::mask_value), masked, keep);
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

inline SdpaGraph sdpa_graph(const SdpaShape& s, SdpaPass pass) {
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
    const int64_t S = g.scores(s, q, kt);
    const int64_t M = g.reduce(SdpaReduce::max, S, "rowmax");
    const int64_t E = g.pw(SdpaPw::exp, g.pw(SdpaPw::sub, S, M, "S-M"), 0, "exp");
    const int64_t Z = g.reduce(SdpaReduce::add, E, "rowsum");
    const int64_t stats = g.tensor("Stats", row, row_strides, SdpaElem::f32, B::stats);
    g.pointwise(SdpaPw::add, M, g.pw(SdpaPw::log, Z, 0, "log"), stats);
    const int64_t P = g.pw(SdpaPw::div, E, Z, "P", io);
    g.matmul(P, v, g.tensor("O", bhsd, in1, io, B::out, 0));
    return g.g;
  }
  const int64_t k = g.tensor("K", bhsd, in3, io, B::qkv, C);
  const int64_t vt = g.tensor("V^T", bhds, in3_t, io, B::qkv, 2 * C);
  const int64_t o = g.tensor("O", bhsd, in1, io, B::out, 0);
  const int64_t dO = g.tensor("dO", bhsd, in1, io, B::dout, 0);
  const int64_t stats = g.tensor("Stats", row, row_strides, SdpaElem::f32, B::stats);
  const int64_t dQ = g.tensor("dQ", bhsd, in3, io, B::dqkv, 0);
  const int64_t dK = g.tensor("dK", bhsd, in3, io, B::dqkv, C);
  const int64_t dV = g.tensor("dV", bhsd, in3, io, B::dqkv, 2 * C);
  const int64_t S = g.scores(s, q, kt);
  const int64_t P = g.pw(SdpaPw::exp, g.pw(SdpaPw::sub, S, stats, "S-Stats"), 0, "P");
  g.matmul(g.transposed(P, "P^T"), dO, dV);
  const int64_t dP = g.temp("dP", {s.B, s.NH, T, T});
  g.matmul(dO, vt, dP);
  const int64_t D = g.reduce(SdpaReduce::add, g.pw(SdpaPw::mul, dO, o, "dO*O"), "rowsum(dO*O)");
  const int64_t dS0 = g.pw(SdpaPw::mul, P, g.pw(SdpaPw::sub, dP, D, "dP-D"), "P(dP-D)");
  const int64_t dS = g.pw(SdpaPw::mul, dS0, g.scalar("scale", B::scale), "dS", io);
  g.matmul(dS, k, dQ);
  g.matmul(g.transposed(dS, "dS^T"), q, dK);
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

inline SdpaStaging sdpa_staging(const SdpaShape& s, SdpaPass pass, uint64_t qkv, uint64_t dout, uint64_t dqkv) {
  auto staged = [&](uint64_t address) { return !s.act16 || address % kSdpaIoTensorAlign != 0; };
  SdpaStaging st;
  st.qkv = staged(qkv);
  if (pass == SdpaPass::backward) st.dout = staged(dout), st.dqkv = staged(dqkv);
  return st;
}

inline SdpaScratchLayout sdpa_scratch_layout(const SdpaShape& s, const SdpaStaging& staged, int64_t workspace) {
  using sdpa_detail::align_up;
  const uint64_t io = uint64_t(sdpa_detail::io_bytes(s.dtype));
  const uint64_t qkv = align_up(uint64_t(sdpa_qkv_elems(s)) * io, kSdpaIoAlign);
  const uint64_t out = align_up(uint64_t(sdpa_out_elems(s)) * io, kSdpaIoAlign);
  SdpaScratchLayout l;
  l.dout = staged.qkv ? qkv : 0;
  l.dqkv = l.dout + (staged.dout ? out : 0);
  l.workspace = l.dqkv + (staged.dqkv ? qkv : 0);
  l.end = l.workspace + uint64_t(workspace);
  return l;
}

}  // namespace lattice::cuda
