// Tests of core/kernels/cpu/attention.cpp through ops::attention_*.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/attention_case.h"
#include "support/error_text.h"

using namespace lattice;
using namespace lattice::test;

namespace {

struct Dims {
  int64_t B, T, NH, HS;
  int64_t C() const { return NH * HS; }
};

ops::Dropout dropout(float p) {
  ops::Dropout d;
  d.p = p;
  d.key.seed = 1234;
  d.key.layer = 3;
  d.sample0 = 5;
  return d;
}

// Causal attention with dropout on the probabilities, by definition, in double.
Tensor naive_attention(const Tensor& qkv, const Dims& s, const ops::Dropout& d, int head_offset = 0) {
  Tensor x = to_f64(qkv), out = Tensor::zeros({s.B, s.T, s.C()}, DType::f64);
  const double* p = x.data<double>();
  double* o = out.data<double>();
  const int64_t C = s.C(), C3 = 3 * C;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t i = 0; i < s.T; ++i) {
        std::vector<double> w(size_t(i + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dotqk = 0;
          for (int64_t e = 0; e < s.HS; ++e)
            dotqk += p[(b * s.T + i) * C3 + h * s.HS + e] * p[(b * s.T + j) * C3 + C + h * s.HS + e];
          w[size_t(j)] = dotqk / std::sqrt(double(s.HS));
          mx = std::max(mx, w[size_t(j)]);
        }
        for (double& v : w) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j) {
          uint64_t elem = uint64_t(((head_offset + h) * s.T + i) * s.T + j);
          bool keep = d.p == 0.0f || rng_keep(d.key, uint64_t(d.sample0 + b), elem, d.p);
          double pj = keep ? w[size_t(j)] / sum / (1.0 - double(d.p)) : 0.0;
          for (int64_t e = 0; e < s.HS; ++e)
            o[(b * s.T + i) * C + h * s.HS + e] += pj * p[(b * s.T + j) * C3 + 2 * C + h * s.HS + e];
        }
      }
  return out;
}

// att's shape: (B, NH, T, T), or the CPU's compact state (row statistics).
Shape state_shape(const Dims& s, DType dt, bool compact) {
  return ops::attention_state_shape({.B = s.B, .T = s.T, .NH = s.NH, .HS = s.HS}, dt,
                                    compact ? ops::AttentionState::compact_cpu : ops::AttentionState::full_cpu);
}

// out, att, dqkv of one forward + backward with dout = R.
std::vector<Tensor> run(const Dims& s, DType dt, const ops::Dropout& d, bool compact = false) {
  Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, dt, 41, 1.5), R = random_tensor({s.B, s.T, s.C()}, dt, 42);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}, dt), att = Tensor::zeros(state_shape(s, dt, compact), dt);
  ops::attention_forward(out, att, qkv, int(s.NH), d);
  Tensor dqkv = zeros_like(qkv), scratch = zeros_like(att);
  ops::attention_backward(dqkv, scratch, R, qkv, att, int(s.NH), d);
  return {out, att, dqkv};
}

void check_gradients(const Dims& s, float p, bool compact) {
  SCOPED_TRACE(compact ? "compact state" : "full state");
  ops::Dropout d = dropout(p);
  Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, DType::f64, 41, 1.5);
  Tensor R = random_tensor({s.B, s.T, s.C()}, DType::f64, 42);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}, DType::f64);
  Tensor att = Tensor::zeros(state_shape(s, DType::f64, compact), DType::f64);
  ops::attention_forward(out, att, qkv, int(s.NH), d);
  Tensor dqkv = random_tensor(qkv.shape(), DType::f64, 43), scratch = zeros_like(att);  // dirty: overwritten
  ops::attention_backward(dqkv, scratch, R, qkv, att, int(s.NH), d);
  auto loss = [&] {
    ops::attention_forward(out, att, qkv, int(s.NH), d);
    return dot(out, R);
  };
  expect_gradients(loss, {{&qkv, dqkv}});
}

const Dims kSmall{2, 5, 2, 3};
const Dims kLong{1, 133, 1, 2};   // crosses the kernel's 128-row block boundary
const Dims kMedium{2, 64, 4, 8};  // large enough that (b, h) pairs run on several threads

}  // namespace

TEST(OpsAttention, ForwardMatchesDefinition) {
  for (const Dims& s : {kSmall, kLong, kMedium})
    for (float p : {0.0f, 0.25f}) {
      std::vector<Tensor> r = run(s, DType::f64, dropout(p));
      Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, DType::f64, 41, 1.5);
      EXPECT_TENSOR_NEAR(r[0], naive_attention(qkv, s, dropout(p)), tolerance(DType::f64)) << "T " << s.T << " p " << p;
      // att holds probabilities before dropout: rows sum to 1, zero above the diagonal.
      const double* a = r[1].data<double>();
      for (int64_t bh = 0; bh < s.B * s.NH; ++bh)
        for (int64_t i = 0; i < s.T; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < s.T; ++j) {
            double v = a[(bh * s.T + i) * s.T + j];
            if (j > i) {
              EXPECT_EQ(v, 0.0);
            }
            sum += v;
          }
          EXPECT_NEAR(sum, 1.0, 1e-12);
        }
    }
}

TEST(OpsAttention, Gradcheck) {
  for (bool compact : {false, true}) {
    check_gradients(kSmall, 0.0f, compact);
    check_gradients(kLong, 0.0f, compact);
  }
}

TEST(OpsAttention, GradcheckWithDropout) {
  for (bool compact : {false, true}) {
    check_gradients(kSmall, 0.3f, compact);
    check_gradients(kLong, 0.2f, compact);
  }
}

// The compact state (row statistics; backward computes P again block by
// block) gives the full state's bits, causal and masked, with and without
// dropout, across several row blocks and threads, f32 and f64; the masked
// ops take forward's key mask in backward (a padded sample, one with no
// valid key).
TEST(OpsAttention, CompactStateGivesTheFullStatesBits) {
  const Dims kBlocks{2, 300, 3, 8};  // three row blocks
  for (DType dt : {DType::f32, DType::f64})
    for (const Dims& s : {kSmall, kLong, kMedium, kBlocks})
      for (float p : {0.0f, 0.2f}) {
        SCOPED_TRACE(fmt::format("{} T {} p {}", dtype_name(dt), s.T, p));
        const std::vector<Tensor> full = run(s, dt, dropout(p)), small = run(s, dt, dropout(p), true);
        EXPECT_TRUE(bitwise_equal(small[0], full[0]));
        EXPECT_TRUE(bitwise_equal(small[2], full[2]));
        EXPECT_EQ(small[1].numel(), 2 * s.B * s.NH * s.T);
      }
  for (DType dt : {DType::f32, DType::f64})
    for (const test::AttentionCase& c : {test::AttentionCase{"masked", 3, 11, 2, 8, true, 0.0f, 0},
                                         test::AttentionCase{"masked_blocks_dropout", 3, 260, 2, 5, true, 0.2f, 1}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), c.name));
      const Tensor q = random_tensor({c.B, c.T, 3 * c.C()}, dt, 51, 1.5), g = random_tensor({c.B, c.T, c.C()}, dt, 52);
      const Shape compact = ops::attention_state_shape({.B = c.B, .T = c.T, .NH = c.NH, .HS = c.HS, .causal = false},
                                                       dt, ops::AttentionState::compact_cpu);
      const test::AttentionResults full = test::run_attention(c, q, g),
                                   small = test::run_attention(c, q, g, {}, compact);
      EXPECT_TRUE(bitwise_equal(small.out, full.out));
      EXPECT_TRUE(bitwise_equal(small.dqkv, full.dqkv));
    }
}

TEST(OpsAttention, F32MatchesF64) {
  for (const Dims& s : {kSmall, kLong, kMedium})
    expect_f32_matches_f64(run(s, DType::f32, dropout(0.2f)), run(s, DType::f64, dropout(0.2f)));
}

// Large scores (qkv scaled up) stretch the softmax's exp over its range: the
// f32 kernel (vectorised exp, kernels/cpu/vec_math.h) stays within the f32
// tolerance of f64, forward and backward. (Beyond a scale of about 6 the f32
// rounding of the scores themselves exceeds it, with libm's expf as well.)
TEST(OpsAttention, F32MatchesF64WithLargeScores) {
  const Dims s = kLong;
  auto run_scaled = [&](DType dt) {
    Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, DType::f64, 44, 6.0).to(dt);
    Tensor R = random_tensor({s.B, s.T, s.C()}, dt, 45);
    Tensor out = Tensor::zeros({s.B, s.T, s.C()}, dt), att = Tensor::zeros({s.B, s.NH, s.T, s.T}, dt);
    ops::attention_forward(out, att, qkv, int(s.NH), dropout(0.0f));
    Tensor dqkv = zeros_like(qkv), scratch = zeros_like(att);
    ops::attention_backward(dqkv, scratch, R, qkv, att, int(s.NH), dropout(0.0f));
    return std::vector<Tensor>{out, att, dqkv};
  };
  expect_f32_matches_f64(run_scaled(DType::f32), run_scaled(DType::f64));
}

TEST(OpsAttention, ResultsDoNotDependOnThreadCount) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Tensor> one = run(kMedium, DType::f32, dropout(0.2f));
  omp_set_num_threads(std::max(2, saved));
  std::vector<Tensor> many = run(kMedium, DType::f32, dropout(0.2f));
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], many[i])) << "result " << i;
}

TEST(OpsAttention, CausalFutureTokensDoNotChangeEarlierOutputs) {
  for (const Dims& s : {kSmall, kLong}) {
    ops::Dropout d = dropout(0.1f);
    Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, DType::f32, 41);
    Tensor out = Tensor::zeros({s.B, s.T, s.C()}, DType::f32), att = Tensor::zeros({s.B, s.NH, s.T, s.T}, DType::f32);
    ops::attention_forward(out, att, qkv, int(s.NH), d);
    const int64_t t = s.T - 3, C = s.C();
    Tensor changed = qkv.clone();
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t c = C; c < 3 * C; ++c) changed.data<float>()[(b * s.T + t) * 3 * C + c] += 0.75f;  // k and v of t
    Tensor out2 = zeros_like(out);
    ops::attention_forward(out2, att, changed, int(s.NH), d);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = 0; i < s.T; ++i) {
        bool same = true;
        for (int64_t c = 0; c < C; ++c)
          same &= out.data<float>()[(b * s.T + i) * C + c] == out2.data<float>()[(b * s.T + i) * C + c];
        EXPECT_EQ(same, i < t) << "T " << s.T << " sample " << b << " row " << i;
      }
  }
}

TEST(OpsAttention, HeadSplitGivesTheSameMasksAndGradients) {
  // Two heads in one call versus one head per call with head_offset (tp shards).
  const Dims full{2, 6, 2, 3};
  ops::Dropout d = dropout(0.3f);
  std::vector<Tensor> r = run(full, DType::f64, d);
  Tensor qkv = random_tensor({2, 6, 18}, DType::f64, 41, 1.5), R = random_tensor({2, 6, 6}, DType::f64, 42);
  for (int h = 0; h < 2; ++h) {
    Tensor q1 = Tensor::zeros({2, 6, 9}, DType::f64), R1 = Tensor::zeros({2, 6, 3}, DType::f64);
    for (int64_t n = 0; n < 12; ++n)
      for (int64_t e = 0; e < 3; ++e) {
        for (int part = 0; part < 3; ++part)
          q1.data<double>()[n * 9 + part * 3 + e] = qkv.data<double>()[n * 18 + part * 6 + h * 3 + e];
        R1.data<double>()[n * 3 + e] = R.data<double>()[n * 6 + h * 3 + e];
      }
    Tensor out = Tensor::zeros({2, 6, 3}, DType::f64), att = Tensor::zeros({2, 1, 6, 6}, DType::f64);
    ops::attention_forward(out, att, q1, 1, d, h);
    Tensor dq1 = zeros_like(q1), scratch = zeros_like(att);
    ops::attention_backward(dq1, scratch, R1, q1, att, 1, d, h);
    for (int64_t n = 0; n < 12; ++n)
      for (int64_t e = 0; e < 3; ++e) {
        EXPECT_NEAR(out.data<double>()[n * 3 + e], r[0].data<double>()[n * 6 + h * 3 + e], 1e-13);
        for (int part = 0; part < 3; ++part)
          EXPECT_NEAR(dq1.data<double>()[n * 9 + part * 3 + e], r[2].data<double>()[n * 18 + part * 6 + h * 3 + e],
                      1e-13);
      }
  }
}

TEST(OpsAttention, RejectsBadShapes) {
  Tensor qkv = Tensor::zeros({2, 5, 17}, DType::f64), out = Tensor::zeros({2, 5, 6}, DType::f64);
  Tensor att = Tensor::zeros({2, 2, 5, 5}, DType::f64);
  EXPECT_THROW(ops::attention_forward(out, att, qkv, 2, dropout(0.0f)), Error);
  Tensor qkv2 = Tensor::zeros({2, 5, 18}, DType::f64), att_small = Tensor::zeros({2, 2, 5, 4}, DType::f64);
  EXPECT_THROW(ops::attention_forward(out, att_small, qkv2, 2, dropout(0.0f)), Error);
  EXPECT_THROW(ops::attention_forward(out, att, qkv2, 2, dropout(1.0f)), Error);
}

// The CPU kernels never read backward's scratch, so models give them an
// empty one (ops::attention_scratch_shape): the same bits as with a scratch
// of att's shape, full or compact state, causal or masked. Any other size is
// still refused, with a line that says what the scratch may be.
TEST(OpsAttention, CpuBackwardTakesAnEmptyScratch) {
  const Dims s{2, 37, 2, 4};
  const DType dt = DType::f32;
  for (bool compact : {false, true})
    for (bool masked : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", compact ? "compact" : "full", masked ? "masked" : "causal"));
      const ops::Dropout d = dropout(0.2f);
      Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, dt, 61, 1.5), R = random_tensor({s.B, s.T, s.C()}, dt, 62);
      Tensor mask = Tensor::zeros({s.B, s.T}, DType::i32);
      for (int64_t i = 0; i < s.B * s.T; ++i) mask.data<int32_t>()[i] = i % 5 != 3;
      Tensor out = Tensor::zeros({s.B, s.T, s.C()}, dt), att = Tensor::zeros(state_shape(s, dt, compact), dt);
      auto backward = [&](Tensor& scratch) {
        Tensor dqkv = zeros_like(qkv);
        if (masked)
          ops::attention_masked_backward(dqkv, scratch, R, qkv, att, &mask, int(s.NH), d);
        else
          ops::attention_backward(dqkv, scratch, R, qkv, att, int(s.NH), d);
        return dqkv;
      };
      if (masked)
        ops::attention_masked_forward(out, att, qkv, &mask, int(s.NH), d);
      else
        ops::attention_forward(out, att, qkv, int(s.NH), d);
      const ops::AttentionState where = compact ? ops::AttentionState::compact_cpu : ops::AttentionState::full_cpu;
      Tensor empty = Tensor::zeros(
          ops::attention_scratch_shape({.B = s.B, .T = s.T, .NH = s.NH, .HS = s.HS, .causal = !masked}, dt, where), dt);
      EXPECT_EQ(empty.numel(), 0);
      Tensor sized = zeros_like(att), odd = Tensor::zeros({att.numel() + 1}, dt);
      EXPECT_TRUE(bitwise_equal(backward(empty), backward(sized)));
      const std::string msg = error_text([&] { backward(odd); });
      EXPECT_HAS(msg, "scratch");
      EXPECT_HAS(msg, "or empty on the CPU");
    }
}

// attention_probs: att as the forward leaves it, bit for bit, with no output
// (parallel.recompute_attention), causal and masked, with dropout, in every
// storage type the CPU takes (bf16 and f16 with matmuls in that type); a
// compact state has no probabilities to give, one line.
TEST(OpsAttention, ProbsAloneAreTheForwardsState) {
  const Dims s{2, 150, 2, 4};  // two row blocks
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (bool masked : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), masked ? "masked" : "causal"));
      struct MatmulsIn {  // the matmuls in dt for 16-bit storage, f32 again at the end of the pass
        explicit MatmulsIn(DType t) { cpu::set_matmul_dtype(is_16bit(t) ? t : DType::f32); }
        ~MatmulsIn() { cpu::set_matmul_dtype(DType::f32); }
      } matmuls(dt);
      const ops::Dropout d = dropout(0.2f);
      Tensor qkv = random_tensor({s.B, s.T, 3 * s.C()}, dt, 71, 1.5);
      Tensor mask = Tensor::zeros({s.B, s.T}, DType::i32);
      for (int64_t i = 0; i < s.B * s.T; ++i) mask.data<int32_t>()[i] = i % 7 != 2;
      Tensor out = Tensor::zeros({s.B, s.T, s.C()}, dt), att = Tensor::zeros(state_shape(s, dt, false), dt);
      Tensor again = random_tensor(att.shape(), dt, 72);  // dirty: every element is written
      if (masked) {
        ops::attention_masked_forward(out, att, qkv, &mask, int(s.NH), d, 1);
        ops::attention_masked_probs(again, qkv, &mask, int(s.NH), d, 1);
      } else {
        ops::attention_forward(out, att, qkv, int(s.NH), d, 1);
        ops::attention_probs(again, qkv, int(s.NH), d, 1);
      }
      EXPECT_TRUE(bitwise_equal(again, att));
      Tensor compact = Tensor::zeros(state_shape(s, dt, true), dt);
      const std::string msg = error_text([&] {
        if (masked)
          ops::attention_masked_probs(compact, qkv, &mask, int(s.NH), d);
        else
          ops::attention_probs(compact, qkv, int(s.NH), d);
      });
      EXPECT_HAS(msg, "full (B, NH, T, T) state");
    }
}

// What a model allocates for att and backward's scratch
// (ops::attention_state_shape, attention_scratch_shape): (B, NH, T, T) for
// the full states; the CPU's
// compact state, two compute values per row; on CUDA, (B, NH, T, T) unless
// cuDNN's fused attention may take the calls and its rules do, then its
// compact state: Stats (B, NH, T) f32 and O (B, T, C) 16-bit, plus alignment.
TEST(OpsAttention, StateShapes) {
  const ops::AttentionCalls c{.B = 2, .T = 256, .NH = 4, .HS = 64};
  const Shape full{2, 4, 256, 256};
  for (ops::AttentionState where : {ops::AttentionState::full_cpu, ops::AttentionState::full_cuda})
    EXPECT_EQ(ops::attention_state_shape(c, DType::f32, where), full);
  // Backward's scratch: nothing on the CPU (its kernels never read it), the state's shape on CUDA.
  for (ops::AttentionState where : {ops::AttentionState::full_cpu, ops::AttentionState::compact_cpu})
    EXPECT_EQ(ops::attention_scratch_shape(c, DType::f32, where), Shape({0}));
  for (ops::AttentionState where : {ops::AttentionState::full_cuda, ops::AttentionState::fused_cuda})
    for (DType act : {DType::f32, DType::bf16})
      EXPECT_EQ(ops::attention_scratch_shape(c, act, where), ops::attention_state_shape(c, act, where));
  // The CPU's: any calls (causal or masked, dropout or not), fp32 statistics (f64 for f64).
  for (DType act : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const int64_t k = act == DType::bf16 || act == DType::f16 ? 2 : 1;
    for (ops::AttentionCalls d :
         {c, ops::AttentionCalls{.B = 2, .T = 256, .NH = 4, .HS = 64, .causal = false, .key_mask = true, .p = 0.1f}})
      EXPECT_EQ(ops::attention_state_shape(d, act, ops::AttentionState::compact_cpu), Shape({2 * 2 * 4 * 256 * k}))
          << dtype_name(act);
  }
  EXPECT_EQ(ops::attention_state_on(Device::cpu()), ops::AttentionState::compact_cpu);  // the default
  ops::set_cpu_attention_compact(false);
  EXPECT_EQ(ops::attention_state_on(Device::cpu()), ops::AttentionState::full_cpu);
  ops::set_cpu_attention_compact(true);
  const int64_t need = 2 * 4 * 256 * 4 + 2 * 256 * 4 * 64 * 2;  // Stats and O bytes
  for (DType act : {DType::f32, DType::bf16, DType::f16}) {
    const Shape s = ops::attention_state_shape(c, act, ops::AttentionState::fused_cuda);
    ASSERT_EQ(s.size(), 1u) << dtype_name(act);
    const int64_t bytes = s[0] * int64_t(dtype_size(act));
    EXPECT_GE(bytes, need) << dtype_name(act);
    EXPECT_LE(bytes, need + 16 + 256) << dtype_name(act);
  }
  auto with = [&](auto edit) {
    ops::AttentionCalls d = c;
    edit(d);
    return ops::attention_state_shape(d, DType::bf16, ops::AttentionState::fused_cuda);
  };
  // Calls the fused path does not take keep the plain path's buffer.
  EXPECT_EQ(with([](ops::AttentionCalls& d) { d.p = 0.1f; }), full);
  EXPECT_EQ(with([](ops::AttentionCalls& d) { d.causal = false, d.key_mask = true; }), full);
  EXPECT_EQ(with([](ops::AttentionCalls& d) { d.causal = false; }), full);  // only the causal ops take it
  EXPECT_EQ(with([](ops::AttentionCalls& d) { d.HS = 12; }), full);
  EXPECT_EQ(with([](ops::AttentionCalls& d) { d.T = 8; }), Shape({2, 4, 8, 8}));  // too short: P is smaller
  EXPECT_THROW(with([](ops::AttentionCalls& d) { d.NH = 0; }), Error);
}

// The CPU takes its own two states only: CUDA's compact state is a shape
// error there, and the message names what a model should allocate.
TEST(OpsAttention, CpuTakesItsOwnStatesOnly) {
  const int64_t B = 2, T = 256, NH = 4, HS = 64;
  const Shape compact =
      ops::attention_state_shape({.B = B, .T = T, .NH = NH, .HS = HS}, DType::f32, ops::AttentionState::fused_cuda);
  ASSERT_EQ(compact.size(), 1u);
  Tensor qkv = Tensor::zeros({B, T, 3 * NH * HS}, DType::f32), out = Tensor::zeros({B, T, NH * HS}, DType::f32);
  Tensor att = Tensor::zeros(compact, DType::f32);
  const std::string msg = error_text([&] { ops::attention_forward(out, att, qkv, int(NH), dropout(0.0f)); });
  EXPECT_HAS(msg, "attention_state_shape");
  EXPECT_HAS(msg, "(B, NH, T, T)");
  // The CPU's compact count in another shape is refused too (it is read as row statistics only when 1-D).
  Tensor flat4 = Tensor::zeros({B, NH, T, 2}, DType::f32);
  EXPECT_HAS(error_text([&] { ops::attention_forward(out, flat4, qkv, int(NH), dropout(0.0f)); }),
             "ops::attention_forward");
}

// ---- attention_cached: incremental decoding over a key/value cache ----------

namespace {

// The sequence of kernel `s` run through the cache in pieces of `pieces`
// positions (their sum is s.T), each piece's output against the rows of one
// attention_forward of the whole sequence, and the cache against qkv's k, v.
// KV < s.NH: grouped queries, qkv's k and v heads repeated as repeat_kv
// leaves them (each head a copy of its group's first), one head per group
// cached.
void check_cached(const Dims& s, DType dt, const std::vector<int64_t>& pieces, Tolerance tol, int64_t KV = 0) {
  if (KV == 0) KV = s.NH;
  const int64_t C = s.C(), capacity = s.T + 3, group = s.NH / KV, KVC = KV * s.HS;
  Tensor qkv = random_tensor({s.B, s.T, 3 * C}, dt, 41, 1.5);
  for (int64_t r = 0; r < s.B * s.T; ++r)  // every head of a group a copy of its first
    for (int64_t part = 1; part <= 2; ++part)
      for (int64_t h = 0; h < s.NH; ++h)
        if (h % group != 0)
          ops::copy_rows(qkv, r * 3 * C + part * C + h * s.HS, 0, qkv, r * 3 * C + part * C + (h - h % group) * s.HS, 0,
                         1, s.HS);
  Tensor whole = Tensor::zeros({s.B, s.T, C}, dt), att = Tensor::zeros(state_shape(s, dt, true), dt);
  ops::attention_forward(whole, att, qkv, int(s.NH), ops::Dropout{});
  Tensor cache = random_tensor({s.B, capacity, 2 * KVC}, dt, 9);  // dirty: rows are written before they are read
  int64_t pos0 = 0;
  for (int64_t n : pieces) {
    Tensor out = random_tensor({s.B, n, C}, dt, 10);  // dirty: overwritten
    ops::attention_cached(out, cache, positions_of(qkv, pos0, n), int(s.NH), pos0, int(KV));
    EXPECT_TENSOR_NEAR(out, positions_of(whole, pos0, n), tol)
        << "T " << s.T << " KV " << KV << " positions " << pos0 << " + " << n;
    pos0 += n;
  }
  ASSERT_EQ(pos0, s.T);
  // Each position's k then v heads, one per group, exactly as qkv holds them.
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t g = 0; g < KV; ++g) {
          Tensor kv = Tensor::zeros({s.HS}, dt), want = Tensor::zeros({s.HS}, dt);
          ops::copy_rows(kv, 0, 0, cache, (b * capacity + t) * 2 * KVC + part * KVC + g * s.HS, 0, 1, s.HS);
          ops::copy_rows(want, 0, 0, qkv, (b * s.T + t) * 3 * C + (1 + part) * C + g * group * s.HS, 0, 1, s.HS);
          EXPECT_TRUE(bitwise_equal(kv, want))
              << "sample " << b << " position " << t << " part " << part << " head " << g;
        }
}

}  // namespace

TEST(OpsAttention, CachedRowsMatchTheWholeSequence) {
  for (DType dt : {DType::f64, DType::f32}) {
    const Tolerance tol = dt == DType::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-6, 2e-6};
    SCOPED_TRACE(dtype_name(dt));
    check_cached(kSmall, dt, {5}, tol);              // the prompt at once
    check_cached(kSmall, dt, {1, 1, 1, 1, 1}, tol);  // one position at a time from the start
    check_cached(kSmall, dt, {3, 1, 1}, tol);        // a prompt, then single tokens
    check_cached(kLong, dt, {100, 1, 30, 2}, tol);   // rows past the kernel's 64-row block
    check_cached(kMedium, dt, {40, 1, 23}, tol);     // several samples and heads, over threads
    check_cached(kMedium, dt, {40, 1, 23}, tol, 2);  // grouped queries: 4 heads over 2 k/v heads
    check_cached(kMedium, dt, {7, 1, 56}, tol, 1);   // one k/v head
  }
}

TEST(OpsAttention, CachedBadArgumentsAreOneLine) {
  const int64_t C = 4;
  Tensor qkv = Tensor::zeros({2, 3, 3 * C}, DType::f32), out = Tensor::zeros({2, 3, C}, DType::f32);
  Tensor cache = Tensor::zeros({2, 5, 2 * C}, DType::f32);
  EXPECT_HAS(error_text([&] { ops::attention_cached(out, cache, qkv, 2, 3); }), "positions [3, 6) do not fit");
  EXPECT_HAS(error_text([&] { ops::attention_cached(out, cache, qkv, 3, 0); }), "divisible by n_head 3");
  Tensor small = Tensor::zeros({2, 5, C}, DType::f32);
  EXPECT_HAS(error_text([&] { ops::attention_cached(out, small, qkv, 2, 0); }),
             "cache (2, 5, 4) must be (2, capacity, 8)");
  EXPECT_HAS(error_text([&] { ops::attention_cached(out, cache, qkv, 2, 0, 3); }),
             "n_head 2 is not a multiple of n_kv_head 3");
  Tensor q16 = qkv.to(DType::bf16), o16 = out.to(DType::bf16), c16 = cache.to(DType::bf16);
  EXPECT_HAS(error_text([&] { ops::attention_cached(o16, c16, q16, 2, 0); }), "attention_cached");
}
