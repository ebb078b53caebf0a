// Tests of core/kernels/cpu/activation.cpp (GELU, SwiGLU, softmax) through core/ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

// An op as (forward, backward) on (inp, out) / (dinp, dout, saved).
struct Act {
  Shape in_shape, out_shape;
  std::function<void(Tensor&, const Tensor&)> forward;
  std::function<void(Tensor&, const Tensor&, const Tensor& inp, const Tensor& out)> backward;
};

Act gelu() {
  return {{3, 5},
          {3, 5},
          [](Tensor& y, const Tensor& x) { ops::gelu_forward(y, x); },
          [](Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor&) { ops::gelu_backward(dx, dy, x); }};
}
Act swiglu() {
  return {{4, 6},
          {4, 3},
          [](Tensor& y, const Tensor& x) { ops::swiglu_forward(y, x); },
          [](Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor&) { ops::swiglu_backward(dx, dy, x); }};
}
Act softmax() {
  return {{4, 5},
          {4, 5},
          [](Tensor& y, const Tensor& x) { ops::softmax_forward(y, x); },
          [](Tensor& dx, const Tensor& dy, const Tensor&, const Tensor& y) { ops::softmax_backward(dx, dy, y); }};
}

// out, dinp for inputs scaled to cover the interesting range of each function.
std::vector<Tensor> run(const Act& a, DType dt) {
  Tensor x = random_tensor(a.in_shape, dt, 31, 3.0), R = random_tensor(a.out_shape, dt, 32);
  Tensor y = Tensor::zeros(a.out_shape, dt), dx = Tensor::zeros(a.in_shape, dt);
  a.forward(y, x);
  a.backward(dx, R, x, y);
  return {y, dx};
}

void check_gradients(const Act& a) {
  Tensor x = random_tensor(a.in_shape, DType::f64, 31, 3.0), R = random_tensor(a.out_shape, DType::f64, 32);
  Tensor y = Tensor::zeros(a.out_shape, DType::f64), dx = Tensor::zeros(a.in_shape, DType::f64);
  a.forward(y, x);
  a.backward(dx, R, x, y);
  Tensor y2 = zeros_like(y);
  auto loss = [&] {
    a.forward(y2, x);
    return dot(y2, R);
  };
  expect_gradients(loss, {{&x, dx}});
  // Overwrite semantics: a second backward into a dirty buffer gives the same result.
  Tensor dx2 = random_tensor(a.in_shape, DType::f64, 33);
  a.backward(dx2, R, x, y);
  EXPECT_TRUE(bitwise_equal(dx, dx2));
}

}  // namespace

TEST(OpsActivation, GeluGradcheckAndOverwrite) { check_gradients(gelu()); }
TEST(OpsActivation, SwigluGradcheckAndOverwrite) { check_gradients(swiglu()); }
TEST(OpsActivation, SoftmaxGradcheckAndOverwrite) { check_gradients(softmax()); }

TEST(OpsActivation, F32MatchesF64) {
  for (const Act& a : {gelu(), swiglu(), softmax()}) expect_f32_matches_f64(run(a, DType::f32), run(a, DType::f64));
}

TEST(OpsActivation, ForwardValues) {
  Tensor x = Tensor::from<double>({-1.0, 0.0, 2.0}, {3}), y = Tensor::zeros({3}, DType::f64);
  ops::gelu_forward(y, x);
  for (int i = 0; i < 3; ++i) {
    double v = x.data<double>()[i];
    double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y.data<double>()[i], ref, 1e-14);
  }
  Tensor gu = Tensor::from<double>({1.5, -2.0, 3.0, 0.5}, {1, 4}), s = Tensor::zeros({1, 2}, DType::f64);
  ops::swiglu_forward(s, gu);  // gate [1.5, -2], up [3, 0.5]
  EXPECT_NEAR(s.data<double>()[0], 1.5 / (1 + std::exp(-1.5)) * 3.0, 1e-14);
  EXPECT_NEAR(s.data<double>()[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-14);
  Tensor sx = random_tensor({3, 6}, DType::f64, 5, 50.0), sy = zeros_like(sx);  // large logits: needs max-subtraction
  ops::softmax_forward(sy, sx);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int k = 0; k < 6; ++k) sum += sy.data<double>()[r * 6 + k];
    EXPECT_NEAR(sum, 1.0, 1e-14);
    double ratio = std::exp(sx.data<double>()[r * 6 + 1] - sx.data<double>()[r * 6]);
    EXPECT_NEAR(sy.data<double>()[r * 6 + 1] / sy.data<double>()[r * 6], ratio, 1e-12 * ratio);
  }
}

// The f32 GELUs run a vectorisable exp (kernels/cpu/activation.cpp,
// gelu_erf.cpp), the f64 ones libm's: over [-12, 12] and at the extremes the
// f32 forward and backward stay within 1e-5 relative of f64, the left tail
// included (where the output is tiny and 0.5 x (1 + tanh u) in float kept
// only a few bits), plus a floor where the backward crosses zero (x near
// -0.75) and where both underflow. The tanh form (GPT-2) and the erf form
// (BERT, NeoX); the erf form's forward within 2e-5 (measured 1.4e-5 at
// x = -12, 6.9e-6 by x = -10: exp(-x^2 / 2) amplifies the rounding of its
// argument, on outputs below 1e-22).
using GeluFwd = void (*)(Tensor&, const Tensor&);
using GeluBwd = void (*)(Tensor&, const Tensor&, const Tensor&);
void expect_f32_gelu_close_to_f64(GeluFwd forward, GeluBwd backward, double forward_rel) {
  const int64_t n = 48001;
  Tensor x32 = Tensor::empty({n}, DType::f32), x64 = Tensor::empty({n}, DType::f64);
  for (int64_t i = 0; i < n; ++i) {
    const float v = i == 0 ? -1e4f : i == n - 1 ? 1e4f : -12.0f + 24.0f * float(i) / float(n - 1);
    x32.data<float>()[i] = v;
    x64.data<double>()[i] = v;
  }
  Tensor y32 = Tensor::empty({n}, DType::f32), y64 = Tensor::empty({n}, DType::f64);
  Tensor ones32 = Tensor::empty({n}, DType::f32), ones64 = Tensor::empty({n}, DType::f64);
  for (int64_t i = 0; i < n; ++i) ones32.data<float>()[i] = 1.0f, ones64.data<double>()[i] = 1.0;
  Tensor g32 = Tensor::empty({n}, DType::f32), g64 = Tensor::empty({n}, DType::f64);
  forward(y32, x32);
  forward(y64, x64);
  backward(g32, ones32, x32);
  backward(g64, ones64, x64);
  for (int64_t i = 0; i < n; ++i) {
    const double x = x64.data<double>()[i];
    const double y = y64.data<double>()[i], g = g64.data<double>()[i];
    ASSERT_NEAR(y32.data<float>()[i], y, forward_rel * std::fabs(y) + 3e-38 * std::max(1.0, std::fabs(x)))
        << "x = " << x;
    ASSERT_NEAR(g32.data<float>()[i], g, 1e-5 * std::fabs(g) + 1e-7) << "x = " << x;
  }
}

TEST(OpsActivation, F32GeluIsCloseToF64AcrossTheRange) {
  expect_f32_gelu_close_to_f64(ops::gelu_forward, ops::gelu_backward, 1e-5);
}

TEST(OpsActivation, F32ErfGeluIsCloseToF64AcrossTheRange) {
  expect_f32_gelu_close_to_f64(ops::gelu_erf_forward, ops::gelu_erf_backward, 2e-5);
}

// The f32 softmax takes a vectorised exp (kernels/cpu/vec_math.h): on wide
// rows of logits spread over +-60 (outputs down to exp underflow) it stays
// within the f32 tolerance of f64, forward and backward.
TEST(OpsActivation, F32SoftmaxMatchesF64OnWideRows) {
  auto run = [](DType dt) {
    Tensor x = random_tensor({5, 3001}, DType::f64, 34, 120.0).to(dt), dy = random_tensor({5, 3001}, dt, 35);
    Tensor y = zeros_like(x), dx = zeros_like(x);
    ops::softmax_forward(y, x);
    ops::softmax_backward(dx, dy, y);
    return std::vector<Tensor>{y, dx};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsActivation, RejectsBadShapes) {
  Tensor x = Tensor::zeros({4, 5}, DType::f64), y = Tensor::zeros({4, 2}, DType::f64);
  EXPECT_THROW(ops::swiglu_forward(y, x), Error);  // odd width
  Tensor z = Tensor::zeros({4, 4}, DType::f64);
  EXPECT_THROW(ops::gelu_forward(z, x), Error);
}

// bf16/f16 activations: GELU (tanh and erf) and SwiGLU are per-element fp32
// formulas on widened inputs, rounded once on store: bitwise the f32 kernels
// on the same values, rounded.
TEST(OpsActivation, Act16MatchesRoundedF32Bitwise) {
  const int64_t N = 67, C = 1030;  // beyond the kernels' parallel threshold
  for (DType dt : kAct16)
    for (const Act16Activation& c : kAct16Activations) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << c.name);
      const Shape out_shape{N, c.glu ? C / 2 : C};
      Tensor x = act16({N, C}, dt, 33, 5.0), dy = act16(out_shape, dt, 34);
      Tensor x32 = as_f32(x), dy32 = as_f32(dy);
      Tensor y = Tensor::zeros(out_shape, dt), y32 = Tensor::zeros(out_shape, DType::f32);
      c.forward(y, x);
      c.forward(y32, x32);
      expect_rounded_equal(y, y32);
      Tensor dx = zeros_like(x), dx32 = zeros_like(x32);
      c.backward(dx, dy, x);
      c.backward(dx32, dy32, x32);
      expect_rounded_equal(dx, dx32);
    }
}

// Row softmax on bf16/f16: the same exps (exp_f32 of the widened values) and
// fp32 sums, but the 16-bit kernel sums in its own loop (its vector lanes may
// add in another order) and scales recomputed exps: within 1 ulp of the
// rounded f32 result. Backward: the fp32 dot product likewise, 1 ulp.
TEST(OpsActivation, SoftmaxAct16WithinOneUlpOfRoundedF32) {
  const int64_t N = 37, K = 1030;
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({N, K}, dt, 35, 6.0), dy = act16({N, K}, dt, 36);
    Tensor y = zeros_like(x), y32 = zeros_like(as_f32(x));
    ops::softmax_forward(y, x);
    ops::softmax_forward(y32, as_f32(x));
    expect_rounded_equal(y, y32, 1);
    Tensor dx = zeros_like(x), dx32 = zeros_like(y32);
    ops::softmax_backward(dx, dy, y);
    ops::softmax_backward(dx32, as_f32(dy), as_f32(y));
    expect_rounded_equal(dx, dx32, 1);
    Tensor z = x.clone();  // in place
    ops::softmax_forward(z, z);
    EXPECT_TRUE(bitwise_equal(z, y));
  }
}
