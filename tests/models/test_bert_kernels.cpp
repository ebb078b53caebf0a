// The kernels BERT adds to core: bidirectional attention with a key padding
// mask (against a direct formula, and its gradient against finite
// differences) and GELU with erf (reference values and finite differences).
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

ops::Dropout dropout(float p) {
  ops::Dropout d;
  d.p = p;
  d.key.seed = 77;
  d.key.step = 3;
  d.key.layer = 2;
  d.sample0 = 5;
  return d;
}

// out (B, T, NH * HS) by the textbook formula, one score at a time.
Tensor reference_attention(const Tensor& qkv, const std::vector<int32_t>& mask, int NH, const ops::Dropout& d,
                           int head_offset) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3, HS = C / NH;
  Tensor out = Tensor::zeros({B, T, C}, DType::f64);
  const double* x = qkv.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(size_t(T), 0.0);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          if (!mask.empty() && !mask[size_t(b * T + j)]) continue;
          double dot = 0;
          for (int64_t e = 0; e < HS; ++e)
            dot += x[(b * T + i) * 3 * C + h * HS + e] * x[(b * T + j) * 3 * C + C + h * HS + e];
          s[size_t(j)] = dot / std::sqrt(double(HS));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (int64_t j = 0; j < T; ++j) {
          bool valid = mask.empty() || mask[size_t(b * T + j)];
          s[size_t(j)] = valid ? std::exp(s[size_t(j)] - mx) : 0.0;
          sum += s[size_t(j)];
        }
        for (int64_t j = 0; j < T; ++j) {
          double p = s[size_t(j)] / sum;
          uint64_t elem = uint64_t(((head_offset + h) * T + i) * T + j);
          if (d.p > 0) p = rng_keep(d.key, uint64_t(d.sample0 + b), elem, d.p) ? p / (1.0 - d.p) : 0.0;
          for (int64_t e = 0; e < HS; ++e)
            out.data<double>()[(b * T + i) * C + h * HS + e] += p * x[(b * T + j) * 3 * C + 2 * C + h * HS + e];
        }
      }
  return out;
}

}  // namespace

TEST(AttentionMasked, MatchesTheDirectFormula) {
  const int64_t B = 2, T = 7, NH = 3, HS = 4, C = NH * HS;
  Tensor qkv = test::random_tensor({B, T, 3 * C}, DType::f64, 1);
  std::vector<int32_t> mask = {1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1};
  Tensor key_mask = Tensor::from(mask, {B, T});
  for (float p : {0.0f, 0.3f})
    for (const Tensor* m : {static_cast<const Tensor*>(&key_mask), static_cast<const Tensor*>(nullptr)}) {
      Tensor out = Tensor::empty({B, T, C}, DType::f64), att = Tensor::empty({B, NH, T, T}, DType::f64);
      ops::attention_masked_forward(out, att, qkv, m, int(NH), dropout(p), 2);
      Tensor want = reference_attention(qkv, m ? mask : std::vector<int32_t>{}, int(NH), dropout(p), 2);
      EXPECT_TENSOR_NEAR(out, want, test::tolerance(DType::f64)) << "p=" << p << " mask=" << (m != nullptr);
      // Masked keys get exactly zero probability; rows sum to one.
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
          for (int64_t i = 0; i < T; ++i) {
            double sum = 0;
            for (int64_t j = 0; j < T; ++j) {
              double pr = att.data<double>()[((b * NH + h) * T + i) * T + j];
              if (m && !mask[size_t(b * T + j)]) {
                EXPECT_EQ(pr, 0.0);
              }
              sum += pr;
            }
            EXPECT_NEAR(sum, 1.0, 1e-12);
          }
    }
}

TEST(AttentionMasked, AttendsToTheFutureUnlikeTheCausalKernel) {
  const int64_t B = 1, T = 5, NH = 1, C = 4;
  Tensor qkv = test::random_tensor({B, T, 3 * C}, DType::f64, 2);
  Tensor a = Tensor::empty({B, T, C}, DType::f64), b = Tensor::empty({B, T, C}, DType::f64);
  Tensor att = Tensor::empty({B, NH, T, T}, DType::f64);
  ops::attention_forward(a, att, qkv, int(NH), dropout(0));
  ops::attention_masked_forward(b, att, qkv, nullptr, int(NH), dropout(0));
  // The last query sees every key in both; the first sees only itself causally.
  for (int64_t e = 0; e < C; ++e) {
    EXPECT_NEAR(a.data<double>()[(T - 1) * C + e], b.data<double>()[(T - 1) * C + e], 1e-12);
    EXPECT_GT(std::fabs(a.data<double>()[e] - b.data<double>()[e]), 1e-6);
  }
  EXPECT_GT(att.data<double>()[T - 1], 0.0);  // P[0, T-1]: a future key
}

TEST(AttentionMasked, GradientMatchesFiniteDifferences) {
  const int64_t B = 2, T = 6, NH = 2, HS = 3, C = NH * HS;
  Tensor key_mask = Tensor::from(std::vector<int32_t>{1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1}, {B, T});
  for (float p : {0.0f, 0.25f}) {
    Tensor qkv = test::random_tensor({B, T, 3 * C}, DType::f64, 3);
    Tensor w = test::random_tensor({B, T, C}, DType::f64, 4);  // loss = sum(w * out)
    Tensor out = Tensor::empty({B, T, C}, DType::f64), att = Tensor::empty({B, NH, T, T}, DType::f64);
    auto loss = [&] {
      ops::attention_masked_forward(out, att, qkv, &key_mask, int(NH), dropout(p), 1);
      double s = 0;
      for (int64_t i = 0; i < out.numel(); ++i) s += out.data<double>()[i] * w.data<double>()[i];
      return s;
    };
    loss();
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::f64), scratch = Tensor::empty(att.shape(), DType::f64);
    ops::attention_masked_backward(dqkv, scratch, w, qkv, att, &key_mask, int(NH), dropout(p), 1);
    EXPECT_LT(test::gradcheck(loss, qkv, dqkv), 1e-6) << "p=" << p;
  }
}

TEST(AttentionMasked, Fp32MatchesFp64) {
  const int64_t B = 2, T = 9, NH = 2, C = 8;
  Tensor qkv = test::random_tensor({B, T, 3 * C}, DType::f64, 5);
  Tensor key_mask = Tensor::from(std::vector<int32_t>(size_t(B * T), 1), {B, T});
  key_mask.data<int32_t>()[4] = 0;
  Tensor o64 = Tensor::empty({B, T, C}, DType::f64), a64 = Tensor::empty({B, NH, T, T}, DType::f64);
  Tensor o32 = Tensor::empty({B, T, C}, DType::f32), a32 = Tensor::empty({B, NH, T, T}, DType::f32);
  ops::attention_masked_forward(o64, a64, qkv, &key_mask, int(NH), dropout(0.1f));
  ops::attention_masked_forward(o32, a32, qkv.to(DType::f32), &key_mask, int(NH), dropout(0.1f));
  EXPECT_TENSOR_NEAR(o32, o64, test::tolerance(DType::f32));
}

TEST(AttentionMasked, RejectsAMaskOfTheWrongShape) {
  Tensor qkv = test::random_tensor({1, 4, 6}, DType::f64, 6);
  Tensor out = Tensor::empty({1, 4, 2}, DType::f64), att = Tensor::empty({1, 1, 4, 4}, DType::f64);
  Tensor bad = Tensor::from(std::vector<int32_t>{1, 1, 1}, {1, 3});
  EXPECT_THROW(ops::attention_masked_forward(out, att, qkv, &bad, 1, dropout(0)), Error);
}

TEST(GeluErf, MatchesReferenceValuesAndFiniteDifferences) {
  // PyTorch's nn.GELU() (approximate='none') values.
  Tensor x = Tensor::from(std::vector<double>{-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0}, {7});
  const double want[] = {-0.0040496941, -0.1586552539, -0.1542687694, 0.0, 0.3457312306, 0.8413447461, 1.9544997361};
  Tensor y = Tensor::empty({7}, DType::f64);
  ops::gelu_erf_forward(y, x);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 1e-9) << i;

  Tensor in = test::random_tensor({3, 5}, DType::f64, 7, 2.0);
  Tensor w = test::random_tensor({3, 5}, DType::f64, 8);
  Tensor out = Tensor::empty({3, 5}, DType::f64), din = Tensor::empty({3, 5}, DType::f64);
  auto loss = [&] {
    ops::gelu_erf_forward(out, in);
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += out.data<double>()[i] * w.data<double>()[i];
    return s;
  };
  ops::gelu_erf_backward(din, w, in);
  EXPECT_LT(test::gradcheck(loss, in, din), 1e-7);
  // It is not the tanh approximation.
  Tensor tanh_y = Tensor::empty({7}, DType::f64);
  ops::gelu_forward(tanh_y, x);
  EXPECT_GT(std::fabs(tanh_y.data<double>()[0] - y.data<double>()[0]), 1e-5);
}
