// Tests src/core/cuda/sdpa_plan.h, the host-side description of cuDNN's
// fused attention, on the CPU: every tensor's dims and strides against an
// independent index computation over the interleaved buffers (element by
// element, for several shapes), that the views cover their buffers exactly
// once, the ops of both graphs and their shapes, when the fused path is
// supported and why not, and where Stats and O sit in the saved buffer. Runs
// without a device. That the graphs compute attention is checked on a GPU by
// test_cuda_sdpa.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/cuda/sdpa_plan.h"

namespace lattice::cuda {
namespace {

struct Case {
  int64_t B, T, NH, HS;
};
const std::vector<Case> kShapes = {{1, 1, 1, 8}, {2, 5, 3, 16}, {3, 7, 2, 24}, {2, 33, 4, 8}};

SdpaShape shape(const Case& c, bool causal = true) {
  return SdpaShape{.B = c.B, .T = c.T, .NH = c.NH, .HS = c.HS, .causal = causal};
}

// The element of `buffer` that cuDNN's (i0, i1, i2, i3) of tensor `name`
// means, computed from the layouts directly: qkv and dqkv (B, T, 3C) with
// q | k | v, out and dout (B, T, C), Stats and softmax_sum (B, NH, T),
// dQ_accum (B, NH, T, HS).
int64_t expected_index(const std::string& name, const Case& c, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t C = c.NH * c.HS;
  auto qkv = [&](int64_t part, int64_t b, int64_t h, int64_t t, int64_t e) {
    return (b * c.T + t) * 3 * C + part * C + h * c.HS + e;
  };
  if (name == "Q" || name == "dQ") return qkv(0, i0, i1, i2, i3);
  if (name == "K" || name == "dK") return qkv(1, i0, i1, i2, i3);
  if (name == "V" || name == "dV") return qkv(2, i0, i1, i2, i3);
  if (name == "K^T") return qkv(1, i0, i1, i3, i2);  // (b, h, e, t)
  if (name == "V^T") return qkv(2, i0, i1, i3, i2);
  if (name == "O" || name == "dO") return (i0 * c.T + i2) * C + i1 * c.HS + i3;
  if (name == "Stats" || name == "softmax_sum") return (i0 * c.NH + i1) * c.T + i2;
  if (name == "dQ_accum") return ((i0 * c.NH + i1) * c.T + i2) * c.HS + i3;
  ADD_FAILURE() << "no layout for " << name;
  return -1;
}

std::array<int64_t, 4> expected_dims(const std::string& name, const Case& c) {
  if (name == "K^T" || name == "V^T") return {c.B, c.NH, c.HS, c.T};
  if (name == "Stats" || name == "softmax_sum") return {c.B, c.NH, c.T, 1};
  return {c.B, c.NH, c.T, c.HS};
}

int64_t buffer_elems(SdpaBuffer b, const SdpaShape& s) {
  switch (b) {
    case SdpaBuffer::qkv:
    case SdpaBuffer::dqkv:
      return sdpa_qkv_elems(s);
    case SdpaBuffer::out:
    case SdpaBuffer::dout:
      return sdpa_out_elems(s);
    case SdpaBuffer::stats:
    case SdpaBuffer::softmax_sum:
      return s.B * s.NH * s.T;
    case SdpaBuffer::dq_accum:
      return s.B * s.NH * s.T * s.HS;
    default:
      return 1;
  }
}

// Calls f(i0, i1, i2, i3, element) for every index of `t`, with the buffer
// element its offset and strides give.
template <typename F>
void for_each_element(const SdpaTensor& t, F f) {
  for (int64_t i0 = 0; i0 < t.dims[0]; ++i0)
    for (int64_t i1 = 0; i1 < t.dims[1]; ++i1)
      for (int64_t i2 = 0; i2 < t.dims[2]; ++i2)
        for (int64_t i3 = 0; i3 < t.dims[3]; ++i3)
          f(i0, i1, i2, i3, t.offset + i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3]);
}

TEST(SdpaPlan, EveryTensorIndexesItsBufferAsTheLayoutSays) {
  for (const Case& c : kShapes)
    for (SdpaPass pass : {SdpaPass::forward, SdpaPass::backward}) {
      const SdpaShape s = shape(c);
      const SdpaGraph g = sdpa_graph(s, pass, SdpaDq::accumulated);  // the form with every buffer
      for (const SdpaTensor& t : g.tensors) {
        if (t.is_virtual() || t.by_value()) continue;
        SCOPED_TRACE(testing::Message() << "B " << c.B << " T " << c.T << " NH " << c.NH << " HS " << c.HS << " "
                                        << t.name << (pass == SdpaPass::forward ? " fwd" : " bwd"));
        EXPECT_EQ(t.dims, expected_dims(t.name, c));
        int64_t wrong = 0;
        for_each_element(t, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t at) {
          wrong += at != expected_index(t.name, c, i0, i1, i2, i3);
        });
        EXPECT_EQ(wrong, 0);
      }
    }
}

// Q, K, V cover qkv exactly once (forward as Q, K^T, V; backward as Q, K^T,
// V^T: its K is a reshape of K^T, not a second view); dQ, dK, dV cover dqkv;
// O, dO, Stats, softmax_sum and (the accumulating backward's) dQ_accum cover
// theirs.
TEST(SdpaPlan, ViewsCoverTheirBuffersOnce) {
  for (const Case& c : kShapes)
    for (const auto& [pass, dq] :
         {std::pair{SdpaPass::forward, SdpaDq::direct}, std::pair{SdpaPass::backward, SdpaDq::direct},
          std::pair{SdpaPass::backward, SdpaDq::accumulated}}) {
      const SdpaShape s = shape(c);
      std::map<SdpaBuffer, std::vector<int>> hits;
      for (const SdpaTensor& t : sdpa_graph(s, pass, dq).tensors) {
        if (t.is_virtual() || t.by_value()) continue;
        std::vector<int>& h = hits[t.buffer];
        h.resize(size_t(buffer_elems(t.buffer, s)));
        for_each_element(t, [&](int64_t, int64_t, int64_t, int64_t, int64_t at) {
          if (at >= 0 && at < int64_t(h.size()))
            ++h[size_t(at)];
          else
            ADD_FAILURE() << t.name << " reaches element " << at << " outside its buffer";
        });
      }
      for (const auto& [buffer, h] : hits)
        for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(h[i], 1) << "buffer " << int(buffer) << " element " << i;
    }
}

std::vector<SdpaPw> pointwise_modes(const SdpaGraph& g) {
  std::vector<SdpaPw> m;
  for (const SdpaOp& o : g.ops)
    if (o.kind == SdpaOpKind::pointwise) m.push_back(o.pw);
  return m;
}

TEST(SdpaPlan, ForwardIsScaledMaskedSoftmaxWithStats) {
  const SdpaShape s = shape({2, 5, 3, 16});
  const SdpaGraph g = sdpa_graph(s, SdpaPass::forward);
  using P = SdpaPw;
  EXPECT_EQ(pointwise_modes(g), (std::vector<SdpaPw>{P::mul, P::gen_index, P::gen_index, P::cmp_ge, P::binary_select,
                                                     P::sub, P::exp, P::log, P::add, P::div}));
  ASSERT_EQ(g.ops.front().kind, SdpaOpKind::matmul);
  EXPECT_EQ(g.tensor(g.ops.front().x).name, std::string("Q"));
  EXPECT_EQ(g.tensor(g.ops.front().b).name, std::string("K^T"));
  EXPECT_EQ(g.tensor(g.ops.back().y).name, std::string("O"));
  // gen_index: row index (axis 2) >= column index (axis 3) keeps the score.
  EXPECT_EQ(g.ops[2].axis, 2);
  EXPECT_EQ(g.ops[3].axis, 3);
  EXPECT_EQ(g.ops[4].x, g.ops[2].y);
  EXPECT_EQ(g.ops[4].b, g.ops[3].y);
  // Without the causal mask the four mask ops go.
  EXPECT_EQ(sdpa_graph(shape({2, 5, 3, 16}, false), SdpaPass::forward).ops.size(), g.ops.size() - 4);
}

// The backward in cudnn-frontend's form (CompositeSDPABackwardNode), op for
// op: the ops' kinds and modes in order, what each reads, and the types the
// matcher looks at (sdpa_plan.h, "The graphs").
TEST(SdpaPlan, BackwardIsTheFrontendsGraph) {
  for (SdpaDq dq : {SdpaDq::direct, SdpaDq::accumulated})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "no mask") + (dq == SdpaDq::direct ? ", direct" : ", accumulated"));
      const SdpaGraph g = sdpa_graph(shape({2, 5, 3, 16}, causal), SdpaPass::backward, dq);
      auto name = [&](int64_t uid) { return uid ? std::string(g.tensor(uid).name) : std::string(); };
      std::vector<std::string> seen;
      for (const SdpaOp& o : g.ops) {
        std::string op;
        switch (o.kind) {
          case SdpaOpKind::matmul:
            op = "matmul";
            break;
          case SdpaOpKind::reshape:
            op = "reshape";
            break;
          case SdpaOpKind::reduction:
            op = o.reduce == SdpaReduce::add ? "sum" : "max";
            break;
          case SdpaOpKind::pointwise: {
            const char* modes[] = {"add", "sub", "mul", "div", "exp", "log", "cmp_ge", "select", "index", "identity"};
            static_assert(std::size(modes) == size_t(SdpaPw::identity) + 1, "a name for every SdpaPw, in order");
            op = modes[int(o.pw)];
            break;
          }
        }
        std::string line = op + "(" + name(o.x);
        for (int64_t in : {o.b, o.t})
          if (in) line += ", " + name(in);
        seen.push_back(line + ") -> " + name(o.y));
      }
      std::vector<std::string> want = {
          "mul(dO, O) -> dO*O",  "sum(dO*O) -> rowsum(dO*O)", "mul(rowsum(dO*O), one) -> softmax_sum",
          "matmul(Q, K^T) -> S", "mul(S, scale) -> S*scale",  "sub(S*scale, Stats) -> S-Stats",
      };
      if (causal)
        want.insert(want.end(), {"index(S-Stats) -> row", "index(S-Stats) -> col", "cmp_ge(row, col) -> row>=col",
                                 "select(S-Stats, mask value, row>=col) -> masked"});
      const std::string scores = causal ? "masked" : "S-Stats";
      want.insert(want.end(), {
                                  "exp(" + scores + ") -> exp",
                                  "reshape(exp) -> P^T",
                                  "matmul(P^T, dO) -> dV",
                                  "matmul(dO, V^T) -> dP",
                                  "sub(dP, softmax_sum) -> dP-D",
                                  "mul(dP-D, exp) -> (dP-D)E",
                                  "mul((dP-D)E, scale) -> dS",
                                  "reshape(dS) -> dS^T",
                                  "matmul(dS^T, Q) -> dK",
                                  "reshape(K^T) -> K",
                              });
      if (dq == SdpaDq::direct)
        want.push_back("matmul(dS, K) -> dQ");  // the deterministic form: no accumulator
      else
        want.insert(want.end(), {"matmul(dS, K) -> dQ_accum", "identity(dQ_accum) -> dQ"});
      EXPECT_EQ(seen, want);

      std::map<std::string, const SdpaTensor*> by_name;
      int scales = 0;
      for (const SdpaTensor& t : g.tensors) {
        by_name[t.name] = &t;
        scales += t.buffer == SdpaBuffer::scale;
      }
      EXPECT_EQ(scales, 1) << "one scale tensor serves both multiplies";
      EXPECT_EQ(by_name.count("K"), 1u);
      EXPECT_TRUE(by_name["K"]->is_virtual()) << "K is a reshape of K^T, not a second view of qkv";
      EXPECT_EQ(by_name["K"]->elem, SdpaElem::f32);
      EXPECT_EQ(by_name["dS"]->elem, SdpaElem::f32) << "dQ's matmul reads the f32 dS";
      EXPECT_EQ(by_name["dS^T"]->elem, SdpaElem::io);
      EXPECT_EQ(by_name["P^T"]->elem, SdpaElem::io);
      EXPECT_EQ(by_name["softmax_sum"]->buffer, SdpaBuffer::softmax_sum);
      EXPECT_EQ(by_name.count("dQ_accum"), dq == SdpaDq::accumulated ? 1u : 0u);
      if (dq == SdpaDq::accumulated) {
        EXPECT_EQ(by_name["dQ_accum"]->buffer, SdpaBuffer::dq_accum);
        EXPECT_EQ(by_name["dQ_accum"]->elem, SdpaElem::f32);
      }
      for (const SdpaOp& o : g.ops)
        EXPECT_EQ(o.math,
                  o.kind == SdpaOpKind::pointwise && o.pw == SdpaPw::cmp_ge ? SdpaElem::boolean : SdpaElem::f32);
    }
}

// Every op reads tensors that exist by then, every virtual tensor is written
// once before it is read, and the shapes agree: matmul (m, k) (k, n) -> (m, n),
// reductions keep dims but the last, pointwise inputs broadcast to the output.
TEST(SdpaPlan, GraphsAreWellFormed) {
  for (const Case& c : kShapes)
    for (bool causal : {true, false})
      for (auto [pass, dq] :
           {std::pair{SdpaPass::forward, SdpaDq::direct}, std::pair{SdpaPass::backward, SdpaDq::direct},
            std::pair{SdpaPass::backward, SdpaDq::accumulated}}) {
        const SdpaGraph g = sdpa_graph(shape(c, causal), pass, dq);
        for (size_t i = 0; i < g.tensors.size(); ++i) ASSERT_EQ(g.tensors[i].uid, int64_t(i + 1));
        std::set<int64_t> ready;
        for (const SdpaTensor& t : g.tensors)
          if (!t.is_virtual() && t.buffer != SdpaBuffer::out && t.buffer != SdpaBuffer::dqkv &&
              t.buffer != SdpaBuffer::softmax_sum && t.buffer != SdpaBuffer::dq_accum &&
              !(t.buffer == SdpaBuffer::stats && pass == SdpaPass::forward))
            ready.insert(t.uid);
        if (pass == SdpaPass::backward)
          for (const SdpaTensor& t : g.tensors)
            if (t.buffer == SdpaBuffer::out) ready.insert(t.uid);  // O is an input of backward
        for (const SdpaOp& o : g.ops) {
          for (int64_t in : {o.x, o.b, o.t})
            if (in) {
              ASSERT_TRUE(ready.count(in)) << g.tensor(in).name << " read before it is written";
            }
          ASSERT_FALSE(ready.count(o.y)) << g.tensor(o.y).name << " written twice";
          ready.insert(o.y);
          const auto &x = g.tensor(o.x).dims, &y = g.tensor(o.y).dims;
          switch (o.kind) {
            case SdpaOpKind::matmul: {
              const auto& b = g.tensor(o.b).dims;
              EXPECT_EQ(x[3], b[2]);
              EXPECT_EQ(y, (std::array<int64_t, 4>{x[0], x[1], x[2], b[3]}));
              break;
            }
            case SdpaOpKind::reduction:
              EXPECT_EQ(y, (std::array<int64_t, 4>{x[0], x[1], x[2], 1}));
              break;
            case SdpaOpKind::reshape:
              EXPECT_EQ(y, (std::array<int64_t, 4>{x[0], x[1], x[3], x[2]}));
              break;
            case SdpaOpKind::pointwise:
              EXPECT_EQ(x, y);
              for (int64_t in : {o.b, o.t}) {
                if (!in) continue;
                for (int d = 0; d < 4; ++d) {
                  EXPECT_TRUE(g.tensor(in).dims[d] == y[d] || g.tensor(in).dims[d] == 1);
                }
              }
              break;
          }
        }
        for (const SdpaTensor& t : g.tensors) EXPECT_TRUE(ready.count(t.uid) || t.by_value()) << t.name << " unused";
      }
}

TEST(SdpaPlan, SupportedShapesAndWhyNot) {
  std::string why;
  SdpaShape s{.B = 2, .T = 64, .NH = 4, .HS = 64};
  EXPECT_TRUE(sdpa_supported(s, &why)) << why;
  EXPECT_TRUE(why.empty());
  s.dtype = SdpaDType::fp16;
  EXPECT_TRUE(sdpa_supported(s, &why)) << why;
  auto refused = [&](SdpaShape bad, const std::string& text) {
    EXPECT_FALSE(sdpa_supported(bad, &why));
    EXPECT_NE(why.find(text), std::string::npos) << why;
  };
  SdpaShape d = s;
  d.p = 0.1f;
  refused(d, "Philox");
  SdpaShape m = s;
  m.causal = false, m.key_mask = true;
  refused(m, "per-sample sequence lengths");
  for (int64_t hs : {4, 12, 136, 256}) {
    SdpaShape h = s;
    h.HS = hs;
    refused(h, "head size " + std::to_string(hs));
  }
  SdpaShape t = s;
  t.T = 16;  // (B, NH, 16, 16) f32 cannot hold Stats and a bf16 O of head size 64
  refused(t, "too short");
  // cudnn-frontend's backward support surface refuses s_q = s_kv = 1: no T = 1 passes the fit test.
  for (bool act16 : {false, true}) refused(SdpaShape{.B = 64, .T = 1, .NH = 64, .HS = 8, .act16 = act16}, "too short");
  refused(SdpaShape{.B = 0, .T = 4, .NH = 1, .HS = 8}, "empty");
  SdpaShape bidirectional = s;
  bidirectional.causal = false;  // no key mask: every key, which the graph takes without the mask ops
  EXPECT_TRUE(sdpa_supported(bidirectional, &why)) << why;
}

// Stats and O stay inside the (B, NH, T, T) saved buffer (f32, or 16-bit
// under act16) at any address aligned as its element whenever the shape is
// supported, aligned as the descriptors say, without overlapping; and the
// fit test is tight within the padding.
TEST(SdpaPlan, SavedStateFitsThePlainPathsBuffer) {
  for (bool act16 : {false, true})
    for (int64_t HS : {8, 64, 128})
      for (int64_t T = 1; T <= 200; ++T) {
        const SdpaShape s{.B = 2, .T = T, .NH = 3, .HS = HS, .act16 = act16};
        const uint64_t elem = act16 ? 2 : 4;
        const uint64_t capacity = uint64_t(s.B * s.NH * T * T) * elem, stats_bytes = uint64_t(s.B * s.NH * T) * 4;
        const uint64_t o_bytes = uint64_t(sdpa_out_elems(s)) * 2;
        if (!sdpa_supported(s, nullptr)) {
          EXPECT_GT((kSdpaStatsAlign - elem) + stats_bytes + (kSdpaIoAlign - 4) + o_bytes, capacity) << "T " << T;
          continue;
        }
        for (uint64_t att = 4096; att < 4096 + 512; att += elem) {
          const SdpaSavedLayout l = sdpa_saved_layout(s, att);
          ASSERT_EQ((att + l.stats) % kSdpaStatsAlign, 0u);
          ASSERT_EQ((att + l.out) % kSdpaIoAlign, 0u);
          ASSERT_GE(l.out, l.stats + stats_bytes);
          ASSERT_EQ(l.end, l.out + o_bytes);
          ASSERT_LE(l.end, capacity) << "T " << T << " HS " << HS << " att " << att << " act16 " << act16;
        }
      }
}

// The compact saved buffer (sdpa_saved_elems) holds Stats and O at any
// address aligned as one element, wastes less than the alignment padding,
// and decides the fit test: a shape is supported exactly when it needs no
// more than the plain path's (B, NH, T, T). Linear in T: at LLaMA-1B's
// training shape it is 31 times smaller than the plain path's buffer.
TEST(SdpaPlan, CompactSavedBufferHoldsStatsAndOAtEveryAlignment) {
  for (bool act16 : {false, true})
    for (int64_t HS : {8, 64, 128})
      for (int64_t T : {1, 7, 40, 129, 1000}) {
        const SdpaShape s{.B = 2, .T = T, .NH = 3, .HS = HS, .act16 = act16};
        const uint64_t elem = act16 ? 2 : 4, elems = uint64_t(sdpa_saved_elems(s));
        const uint64_t stats_bytes = uint64_t(s.B * s.NH * T) * 4, o_bytes = uint64_t(s.B * T * s.NH * HS) * 2;
        for (uint64_t att = 4096; att < 4096 + 512; att += elem)
          ASSERT_LE(sdpa_saved_layout(s, att).end, elems * elem) << "T " << T << " HS " << HS << " att " << att;
        EXPECT_LT(elems * elem, stats_bytes + o_bytes + kSdpaStatsAlign + kSdpaIoAlign) << "T " << T << " HS " << HS;
        EXPECT_EQ(sdpa_supported(s, nullptr), elems <= uint64_t(s.B * s.NH * T * T)) << "T " << T << " HS " << HS;
      }
  const SdpaShape llama{.B = 8, .T = 2048, .NH = 32, .HS = 64, .act16 = true};
  EXPECT_LT(sdpa_saved_elems(llama) * 30, llama.B * llama.NH * llama.T * llama.T);  // 66 MiB against 2 GiB
}

// Half the saved bytes under act16: the shortest supported T is about HS + 2
// instead of HS / 2 + 2, and the reason names the 16-bit buffer.
TEST(SdpaPlan, SixteenBitSavedBufferNeedsLongerT) {
  auto shortest = [](bool act16, int64_t HS) {
    for (int64_t T = 1;; ++T)
      if (sdpa_supported({.B = 4, .T = T, .NH = 12, .HS = HS, .act16 = act16}, nullptr)) return T;
  };
  for (int64_t HS : {32, 64, 128}) {
    EXPECT_NEAR(double(shortest(false, HS)), double(HS) / 2 + 2, 3) << "HS " << HS;
    EXPECT_NEAR(double(shortest(true, HS)), double(HS) + 2, 3) << "HS " << HS;
  }
  std::string why;
  EXPECT_TRUE(sdpa_supported({.B = 2, .T = 40, .NH = 4, .HS = 64}, &why)) << why;
  EXPECT_FALSE(sdpa_supported({.B = 2, .T = 40, .NH = 4, .HS = 64, .act16 = true}, &why));
  EXPECT_NE(why.find("16-bit saved buffer"), std::string::npos) << why;
}

// f32 activations go through io copies of every buffer a pass uses; 16-bit
// ones only when a buffer is less aligned than the descriptors declare.
TEST(SdpaPlan, StagingCopiesWhatTheGraphCannotReadInPlace) {
  const SdpaShape f32{.B = 2, .T = 64, .NH = 4, .HS = 64};
  SdpaShape half = f32;
  half.act16 = true;
  using P = SdpaPass;
  EXPECT_EQ(sdpa_staging(f32, P::forward, 4096, 0, 0), (SdpaStaging{.qkv = true}));
  EXPECT_EQ(sdpa_staging(f32, P::backward, 4096, 4096, 4096), (SdpaStaging{true, true, true}));
  EXPECT_EQ(sdpa_staging(half, P::forward, 4096, 2, 2), SdpaStaging{});
  EXPECT_EQ(sdpa_staging(half, P::backward, 4096, 4096 + 16, 4096 + 32), SdpaStaging{});
  EXPECT_EQ(sdpa_staging(half, P::forward, 4096 + 8, 0, 0), (SdpaStaging{.qkv = true}));
  EXPECT_EQ(sdpa_staging(half, P::backward, 4096, 4096 + 2, 4096), (SdpaStaging{.dout = true}));
  EXPECT_EQ(sdpa_staging(half, P::backward, 4096, 4096, 4096 + 6), (SdpaStaging{.dqkv = true}));
}

// The scratch holds exactly the staged copies, then the backward's f32
// dQ_accum and softmax_sum, each 256-byte aligned, then cuDNN's workspace.
TEST(SdpaPlan, ScratchHoldsTheStagedCopiesThenTheWorkspace) {
  const SdpaShape s{.B = 2, .T = 33, .NH = 3, .HS = 8, .act16 = true};
  const uint64_t qkv = sdpa_detail::align_up(uint64_t(sdpa_qkv_elems(s)) * 2, kSdpaIoAlign);
  const uint64_t out = sdpa_detail::align_up(uint64_t(sdpa_out_elems(s)) * 2, kSdpaIoAlign);
  const uint64_t accum = sdpa_detail::align_up(uint64_t(2 * 3 * 33 * 8) * 4, kSdpaIoAlign);
  const uint64_t sums = sdpa_detail::align_up(uint64_t(2 * 3 * 33) * 4, kSdpaIoAlign);
  EXPECT_EQ(sdpa_dq_accum_bytes(s), uint64_t(2 * 3 * 33 * 8) * 4);
  using P = SdpaPass;
  const SdpaScratchLayout none = sdpa_scratch_layout(s, P::forward, SdpaDq::direct, {}, 1000);
  EXPECT_EQ(none.workspace, 0u);
  EXPECT_EQ(none.end, 1000u);
  const SdpaScratchLayout fwd = sdpa_scratch_layout(s, P::forward, SdpaDq::direct, {.qkv = true}, 1000);
  EXPECT_EQ(fwd.workspace, qkv);
  EXPECT_EQ(fwd.end, qkv + 1000);
  const SdpaScratchLayout all = sdpa_scratch_layout(s, P::backward, SdpaDq::accumulated, {true, true, true}, 1000);
  EXPECT_EQ(all.qkv, 0u);
  EXPECT_EQ(all.dout, qkv);
  EXPECT_EQ(all.dqkv, qkv + out);
  EXPECT_EQ(all.dq_accum, 2 * qkv + out);
  EXPECT_EQ(all.softmax_sum, 2 * qkv + out + accum);
  EXPECT_EQ(all.workspace, 2 * qkv + out + accum + sums);
  EXPECT_EQ(all.end, 2 * qkv + out + accum + sums + 1000);
  const SdpaScratchLayout dqkv_only = sdpa_scratch_layout(s, P::backward, SdpaDq::accumulated, {.dqkv = true}, 0);
  EXPECT_EQ(dqkv_only.dqkv, 0u);
  EXPECT_EQ(dqkv_only.dq_accum, qkv);
  EXPECT_EQ(dqkv_only.end, qkv + accum + sums);
  const SdpaScratchLayout in_place = sdpa_scratch_layout(s, P::backward, SdpaDq::accumulated, {}, 0);
  EXPECT_EQ(in_place.dq_accum, 0u);
  EXPECT_EQ(in_place.end, accum + sums);
  const SdpaScratchLayout direct = sdpa_scratch_layout(s, P::backward, SdpaDq::direct, {.dqkv = true}, 1000);
  EXPECT_EQ(direct.softmax_sum, qkv) << "the direct form has no dQ_accum";
  EXPECT_EQ(direct.workspace, qkv + sums);
  EXPECT_EQ(direct.end, qkv + sums + 1000);
  for (const SdpaScratchLayout& l : {none, fwd, all, dqkv_only, in_place, direct})
    for (uint64_t off : {l.qkv, l.dout, l.dqkv, l.dq_accum, l.softmax_sum, l.workspace})
      EXPECT_EQ(off % kSdpaIoAlign, 0u);
}

// What depends on the cuDNN the process runs with: -inf for masked scores
// from 9.10 (the finite lowest before), no fused path on 9.10.0 and 9.10.1,
// and the backward's T multiple of 128 up to 9.15.0.
TEST(SdpaPlan, TheRunningCudnnVersionDecidesMaskValueAndShortT) {
  EXPECT_EQ(sdpa_mask_value(91900), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sdpa_mask_value(91000), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sdpa_mask_value(90900), std::numeric_limits<float>::lowest());
  const SdpaShape odd{.B = 2, .T = 100, .NH = 4, .HS = 64}, even{.B = 2, .T = 256, .NH = 4, .HS = 64};
  EXPECT_EQ(sdpa_version_refusal(91900, odd), "");
  EXPECT_EQ(sdpa_version_refusal(91501, odd), "");
  EXPECT_EQ(sdpa_version_refusal(91500, even), "");
  const std::string why = sdpa_version_refusal(91500, odd);
  EXPECT_NE(why.find("multiple of 128 (T = 100)"), std::string::npos) << why;
  EXPECT_EQ(why.rfind("cuDNN 9.15.0's", 0), 0u) << why;
  // cudnn-frontend's support surface refuses fp16/bf16 SDPA, both passes, on
  // 9.10.0 and 9.10.1 ("known bugs"), whatever the shape; 9.10.2 is taken.
  for (int64_t v : {91000, 91001}) {
    const std::string buggy = sdpa_version_refusal(v, even);
    EXPECT_NE(buggy.find("known bugs"), std::string::npos) << buggy;
    EXPECT_EQ(buggy.rfind("cuDNN " + cudnn_version_name(v) + "'s", 0), 0u) << buggy;
  }
  EXPECT_EQ(sdpa_version_refusal(91002, even), "");
  EXPECT_EQ(sdpa_version_refusal(90900, even), "");
  EXPECT_EQ(cudnn_version_name(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_name(91701), "9.17.1");
}

// The engine pinned instead of the heuristics: cudnn-frontend 1.18's for its
// deterministic backward, only on compute capability 10.x from cuDNN 9.18,
// and only for the direct form. Which backwards may vary from run to run.
TEST(SdpaPlan, BlackwellsDeterministicBackwardPinsTheFrontendsEngine) {
  const SdpaEngine pin = sdpa_pinned_engine(91800, 10, SdpaPass::backward, SdpaDq::direct);
  EXPECT_EQ(pin.engine, 5);
  const std::vector<std::pair<SdpaKnob, int64_t>> knobs{{SdpaKnob::kernel_cfg, 31}, {SdpaKnob::stages, 2}};
  EXPECT_EQ(pin.knobs, knobs);
  EXPECT_EQ(sdpa_pinned_engine(91900, 10, SdpaPass::backward, SdpaDq::direct).engine, 5);
  EXPECT_LT(sdpa_pinned_engine(91701, 10, SdpaPass::backward, SdpaDq::direct).engine, 0);  // before 9.18
  EXPECT_LT(sdpa_pinned_engine(91900, 9, SdpaPass::backward, SdpaDq::direct).engine, 0);   // Hopper
  EXPECT_LT(sdpa_pinned_engine(91900, 12, SdpaPass::backward, SdpaDq::direct).engine, 0);  // no rule for 12.x
  EXPECT_LT(sdpa_pinned_engine(91900, 10, SdpaPass::backward, SdpaDq::accumulated).engine, 0);
  EXPECT_LT(sdpa_pinned_engine(91900, 10, SdpaPass::forward, SdpaDq::direct).engine, 0);
  EXPECT_TRUE(sdpa_pinned_engine(91900, 9, SdpaPass::backward, SdpaDq::direct).knobs.empty());

  EXPECT_FALSE(sdpa_backward_may_vary(9, SdpaDq::direct, false));
  EXPECT_FALSE(sdpa_backward_may_vary(12, SdpaDq::direct, false));
  EXPECT_FALSE(sdpa_backward_may_vary(10, SdpaDq::direct, true));
  EXPECT_TRUE(sdpa_backward_may_vary(10, SdpaDq::direct, false));
  for (int cc : {8, 9, 10, 12}) EXPECT_TRUE(sdpa_backward_may_vary(cc, SdpaDq::accumulated, false)) << cc;
}

// The graph cache's key: every field the graphs depend on tells shapes apart.
TEST(SdpaPlan, KeysDifferInEveryField) {
  const SdpaShape s{.B = 2, .T = 64, .NH = 4, .HS = 64};
  const SdpaKey k = sdpa_key(0, s);
  EXPECT_EQ(k, sdpa_key(0, s));
  std::set<SdpaKey> keys{k, sdpa_key(1, s)};
  auto with = [&](auto change) {
    SdpaShape t = s;
    change(t);
    keys.insert(sdpa_key(0, t));
  };
  with([](SdpaShape& t) { t.B = 3; });
  with([](SdpaShape& t) { t.T = 65; });
  with([](SdpaShape& t) { t.NH = 8; });
  with([](SdpaShape& t) { t.HS = 32; });
  with([](SdpaShape& t) { t.causal = false; });
  with([](SdpaShape& t) { t.dtype = SdpaDType::fp16; });
  EXPECT_EQ(keys.size(), 8u);
}

// The key holds everything the built graphs depend on: a supported shape's
// other field (act16: the activations' type, which decides only the staging
// and the saved buffer's size) leaves both graphs, both backward forms, the
// same tensor for tensor and op for op.
TEST(SdpaPlan, TheKeyHoldsEverythingTheGraphsDependOn) {
  auto same = [](const SdpaGraph& a, const SdpaGraph& b) {
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      const SdpaTensor &x = a.tensors[i], &y = b.tensors[i];
      EXPECT_EQ(std::string(x.name), std::string(y.name));
      EXPECT_TRUE(x.uid == y.uid && x.dims == y.dims && x.strides == y.strides && x.elem == y.elem &&
                  x.buffer == y.buffer && x.offset == y.offset)
          << x.name;
    }
    ASSERT_EQ(a.ops.size(), b.ops.size());
    for (size_t i = 0; i < a.ops.size(); ++i) {
      const SdpaOp &x = a.ops[i], &y = b.ops[i];
      EXPECT_TRUE(x.kind == y.kind && x.pw == y.pw && x.reduce == y.reduce && x.axis == y.axis && x.x == y.x &&
                  x.b == y.b && x.t == y.t && x.y == y.y && x.math == y.math)
          << "op " << i;
    }
  };
  for (bool causal : {true, false}) {
    const SdpaShape f32{.B = 2, .T = 256, .NH = 4, .HS = 64, .causal = causal}, act16 = [&] {
      SdpaShape t = f32;
      t.act16 = true;
      return t;
    }();
    ASSERT_TRUE(sdpa_supported(f32, nullptr) && sdpa_supported(act16, nullptr));
    ASSERT_EQ(sdpa_key(0, f32), sdpa_key(0, act16));
    same(sdpa_graph(f32, SdpaPass::forward), sdpa_graph(act16, SdpaPass::forward));
    for (SdpaDq dq : {SdpaDq::direct, SdpaDq::accumulated})
      same(sdpa_graph(f32, SdpaPass::backward, dq), sdpa_graph(act16, SdpaPass::backward, dq));
  }
}

// attention_plain_reason asks about one shape: the answer is that shape's
// refusal, not the last one recorded; a shape never refused has none; only
// the first refusal of the process is logged.
TEST(SdpaPlan, RefusalsAreRememberedPerShape) {
  SdpaRefusals r;
  const SdpaKey a = sdpa_key(0, {.B = 2, .T = 64, .NH = 4, .HS = 64});
  const SdpaKey b = sdpa_key(0, {.B = 1, .T = 96, .NH = 2, .HS = 128});
  const SdpaKey a_on_1 = sdpa_key(1, {.B = 2, .T = 64, .NH = 4, .HS = 64});
  EXPECT_EQ(r.reason(a), "");
  const std::string line = r.record(a, "no engine for a");
  EXPECT_NE(line.find("cuDNN refused the fused attention graph for B 2 T 64 NH 4 HS 64: no engine for a"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(r.record(b, "plan b does not finalize"), "");  // logged once per process
  EXPECT_EQ(r.reason(a), "cuDNN refused the fused attention graph for B 2 T 64 NH 4 HS 64: no engine for a");
  EXPECT_EQ(r.reason(b), "cuDNN refused the fused attention graph for B 1 T 96 NH 2 HS 128: plan b does not finalize");
  EXPECT_EQ(r.reason(a_on_1), "");  // the same shape on another device was not refused
}

}  // namespace
}  // namespace lattice::cuda
