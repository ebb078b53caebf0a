// AdamW and SGD over a FlatParams: weight decay only where the table says so,
// against a scalar reference computed here in double; each step marks the
// values written once (the 16-bit shadow's staleness check, core/param.h).
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lattice;

namespace {
std::vector<ParamSpec> two_params() {
  ParamSpec w{.name = "w", .shape = {3}, .weight_decay = true};
  ParamSpec b{.name = "b", .shape = {2}, .weight_decay = false};
  return {w, b};
}
}  // namespace

TEST(Optimizer, AdamWMatchesScalarReferenceAndDecaysOnlyMatrices) {
  FlatParams p(two_params(), DType::f64);
  double* v = p.values().data<double>();
  double* g = p.grads().data<double>();
  for (int i = 0; i < 5; ++i) v[i] = 0.5 + i, g[i] = 0.1 * (i + 1) - 0.2;
  std::vector<double> ref(v, v + 5), m(5, 0), s(5, 0);
  optim::OptimizerOptions o{.name = "adamw", .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  auto opt = optim::make_optimizer(o, p);
  const double lr = 0.01, scale = 0.5;
  for (int step = 1; step <= 3; ++step) {
    const uint64_t version = p.values_version();
    opt->step(p, lr, step, float(scale));
    EXPECT_EQ(p.values_version(), version + 1) << "a step marks the values written (core/param.h)";
    for (int i = 0; i < 5; ++i) {
      double gi = g[i] * scale, wd = i < 3 ? 0.1 : 0.0;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      s[i] = 0.99 * s[i] + 0.01 * gi * gi;
      double mh = m[i] / (1 - std::pow(0.9, step)), vh = s[i] / (1 - std::pow(0.99, step));
      ref[i] -= lr * (wd * ref[i] + mh / (std::sqrt(vh) + 1e-8));
      EXPECT_NEAR(v[i], ref[i], 1e-6) << "step " << step << " element " << i;
    }
  }
  EXPECT_EQ(opt->state().size(), 2u);
}

TEST(Optimizer, SgdMomentumMatchesPyTorchSemantics) {
  FlatParams p(two_params(), DType::f64);
  double* v = p.values().data<double>();
  double* g = p.grads().data<double>();
  for (int i = 0; i < 5; ++i) v[i] = 1.0, g[i] = 0.5;
  auto opt = optim::make_optimizer({.name = "sgd", .weight_decay = 0.01, .momentum = 0.9}, p);
  opt->step(p, 0.1, 1, 1.0f);
  EXPECT_EQ(p.values_version(), 1u);  // marked written
  // buf = g + wd p (first step), p -= lr buf
  EXPECT_NEAR(v[0], 1.0 - 0.1 * (0.5 + 0.01), 1e-6);
  EXPECT_NEAR(v[4], 1.0 - 0.1 * 0.5, 1e-6);
  opt->step(p, 0.1, 2, 1.0f);
  double b0 = 0.9 * (0.5 + 0.01) + 0.5 + 0.01 * (1.0 - 0.1 * 0.51);
  EXPECT_NEAR(v[0], 1.0 - 0.1 * 0.51 - 0.1 * b0, 1e-6);
  EXPECT_THROW(optim::make_optimizer({.name = "lamb"}, p), Error);
}
