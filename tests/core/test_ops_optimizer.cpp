// Tests of core/kernels/cpu/optimizer.cpp (AdamW, SGD) through core/ops.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

const std::vector<double> kP0 = {1.0, -0.5, 0.25, 2.0};
const std::vector<double> kG1 = {0.5, 0.1, -0.3, 0.0};
const std::vector<double> kG2 = {-0.25, 0.2, -0.1, 1.0};

ops::AdamWStep adam_step(int64_t step, float grad_scale = 1.0f) {
  return {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step = step,
          .grad_scale = grad_scale};
}

// Two AdamW steps by hand in double (decoupled decay, bias-corrected moments).
std::vector<double> adamw_reference(double gs) {
  const ops::AdamWStep s = adam_step(1);
  const double lr = s.lr, b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.weight_decay;
  std::vector<double> p = kP0, m(4, 0.0), v(4, 0.0);
  for (int t = 1; t <= 2; ++t)
    for (size_t i = 0; i < 4; ++i) {
      double g = gs * (t == 1 ? kG1[i] : kG2[i]);
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * (wd * p[i] + mhat / (std::sqrt(vhat) + eps));
    }
  return p;
}

Tensor adamw_two_steps(DType dt, float grad_scale) {
  Tensor p = Tensor::from<double>(kP0, {4}).to(dt), m = Tensor::zeros({4}, dt), v = Tensor::zeros({4}, dt);
  Tensor g1 = Tensor::from<double>(kG1, {4}).to(dt), g2 = Tensor::from<double>(kG2, {4}).to(dt);
  ops::adamw_update(p, g1, m, v, adam_step(1, grad_scale));
  ops::adamw_update(p, g2, m, v, adam_step(2, grad_scale));
  return p;
}

// Two SGD steps by hand: buf = mu buf + g + wd p; p -= lr buf.
std::vector<double> sgd_reference(double lr, double mu, double wd, double gs) {
  std::vector<double> p = kP0, buf(4, 0.0);
  for (int t = 1; t <= 2; ++t)
    for (size_t i = 0; i < 4; ++i) {
      double g = gs * (t == 1 ? kG1[i] : kG2[i]) + wd * p[i];
      buf[i] = mu * buf[i] + g;
      p[i] -= lr * buf[i];
    }
  return p;
}

}  // namespace

TEST(OpsOptimizer, AdamWMatchesTwoStepReference) {
  Tensor p = adamw_two_steps(DType::f64, 1.0f);
  std::vector<double> ref = adamw_reference(1.0);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p.data<double>()[i], ref[i], 1e-12) << i;
  // Step 1 for element 0 worked out on paper: m = 0.05, v = 2.5e-4, mhat = 0.5,
  // vhat = 0.25, so p = 1 - 0.1 * (0.01 + 0.5 / (0.5 + 1e-8)).
  Tensor p1 = Tensor::from<double>(kP0, {4}), m = Tensor::zeros({4}, DType::f64), v = Tensor::zeros({4}, DType::f64);
  ops::adamw_update(p1, Tensor::from<double>(kG1, {4}), m, v, adam_step(1));
  EXPECT_NEAR(p1.data<double>()[0], 1.0 - 0.1 * (0.01 + 0.5 / (0.5 + 1e-8)), 1e-7);  // lr etc. are floats
  EXPECT_NEAR(m.data<double>()[0], 0.05, 1e-7);
  EXPECT_NEAR(v.data<double>()[0], 2.5e-4, 1e-8);
}

TEST(OpsOptimizer, AdamWGradScaleMultipliesTheGradient) {
  Tensor p = adamw_two_steps(DType::f64, 0.5f);
  std::vector<double> ref = adamw_reference(0.5);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(p.data<double>()[i], ref[i], 1e-12) << i;
}

TEST(OpsOptimizer, AdamWF32MatchesF64) {
  expect_f32_matches_f64({adamw_two_steps(DType::f32, 1.0f)}, {adamw_two_steps(DType::f64, 1.0f)});
}

TEST(OpsOptimizer, SgdMatchesTwoStepReference) {
  for (float mu : {0.0f, 0.9f}) {
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor p = Tensor::from<double>(kP0, {4}).to(dt), buf = Tensor::zeros({4}, dt);
      ops::sgd_update(p, Tensor::from<double>(kG1, {4}).to(dt), buf, 0.1f, mu, 0.01f, 0.5f);
      ops::sgd_update(p, Tensor::from<double>(kG2, {4}).to(dt), buf, 0.1f, mu, 0.01f, 0.5f);
      std::vector<double> ref = sgd_reference(0.1, double(mu), 0.01, 0.5);
      Tensor got = to_f64(p);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_NEAR(got.data<double>()[i], ref[i], dt == DType::f64 ? 1e-7 : 1e-6) << "mu " << mu << " i " << i;
    }
  }
  // Without momentum the buffer may be absent; with momentum it is required.
  Tensor p = Tensor::from<double>(kP0, {4}), none;
  ops::sgd_update(p, Tensor::from<double>(kG1, {4}), none, 0.1f, 0.0f, 0.0f);
  EXPECT_NEAR(p.data<double>()[0], 1.0 - 0.1 * 0.5, 1e-7);
  EXPECT_THROW(ops::sgd_update(p, Tensor::from<double>(kG1, {4}), none, 0.1f, 0.9f, 0.0f), Error);
}

TEST(OpsOptimizer, RejectsMismatchedSizes) {
  Tensor p = Tensor::zeros({4}, DType::f32), g = Tensor::zeros({3}, DType::f32), m = Tensor::zeros({4}, DType::f32);
  Tensor v = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(ops::adamw_update(p, g, m, v, adam_step(1)), Error);
  EXPECT_THROW(ops::adamw_update(p, m, m, v, adam_step(0)), Error);
}
