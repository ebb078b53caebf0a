// Tests of src/tp/linear.cpp: ColumnParallelLinear and RowParallelLinear
// against the full single-rank layer that every rank builds itself
// (CONVENTIONS.md §12): output, input gradient, this rank's weight- and
// bias-gradient slice, and the weights after one AdamW step.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "tp/linear.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr uint64_t kSeed = 1234;
constexpr int64_t kN = 3, kC = 6;

// Full (tp = 1) and sharded parameters of one table, initialised alike.
struct Params {
  FlatParams full, sharded;
};
Params make_params(const std::vector<ParamSpec>& specs, DType dt, const TpShard& shard) {
  Params p{FlatParams(specs, dt, Device::cpu(), TpShard{}), FlatParams(specs, dt, Device::cpu(), shard)};
  p.full.init(kSeed);
  p.sharded.init(kSeed);
  return p;
}

struct ColumnCase {
  bool gather_output;
  int n_fused;
};

void check_column(comm::Group& tp, DType dt, ColumnCase c) {
  const int p = tp.size(), r = tp.rank();
  const int64_t OC = c.n_fused * 2 * p;  // parts of 2 rows per rank
  const std::string what = fmt::format("column tp {} rank {} {} gather_output {} n_fused {}", p, r, dtype_name(dt),
                                       c.gather_output, c.n_fused);
  SCOPED_TRACE(what);
  std::vector<ParamSpec> specs = {
      decayed(fused(param_spec("w", {OC, kC}, Placement::column, InitKind::normal, 0.5f), c.n_fused)),
      fused(param_spec("b", {OC}, Placement::column, InitKind::uniform, 0.3f), c.n_fused)};
  Params ps = make_params(specs, dt, shard_of(tp));
  const Tolerance tol = tolerance(dt);
  expect_values_are_shards(ps.full, ps.sharded, kExact, "initial values");

  Tensor inp = random_tensor({kN, kC}, dt, 11), dout = random_tensor({kN, OC}, dt, 12);
  Tensor w = ps.full.value("w"), b = ps.full.value("b"), gw = ps.full.grad("w"), gb = ps.full.grad("b");
  Tensor out_ref = Tensor::zeros({kN, OC}, dt), dinp_ref = Tensor::zeros({kN, kC}, dt);
  ops::linear_forward(out_ref, inp, w, &b);
  ops::linear_backward(&dinp_ref, &gw, &gb, dout, inp, w);

  tp::ColumnParallelLinear layer({.bias = true, .gather_output = c.gather_output, .n_fused = c.n_fused}, tp);
  Tensor lw = ps.sharded.value("w"), lb = ps.sharded.value("b"), lgw = ps.sharded.grad("w"), lgb = ps.sharded.grad("b");
  const int64_t out_cols = c.gather_output ? OC : OC / p;
  Tensor out = Tensor::zeros({kN, out_cols}, dt), dinp = random_tensor({kN, kC}, dt, 13);  // dinp overwritten
  layer.forward(out, inp, lw, &lb);
  EXPECT_TENSOR_NEAR(out, c.gather_output ? out_ref : slice_last_dim(out_ref, r, p, c.n_fused), tol) << "output";
  Tensor dout_local = c.gather_output ? dout : slice_last_dim(dout, r, p, c.n_fused);
  layer.backward(&dinp, &lgw, &lgb, dout_local, inp, lw);
  EXPECT_TENSOR_NEAR(dinp, dinp_ref, tol) << "input gradient";
  expect_grads_are_shards(ps.full, ps.sharded, tol, "gradient slice");
  expect_adamw_step_matches(ps.full, ps.sharded, tol, "after one AdamW step");
}

struct RowCase {
  bool input_is_parallel, bias;
};

void check_row(comm::Group& tp, DType dt, RowCase c) {
  const int p = tp.size(), r = tp.rank();
  const int64_t OC = 5, C = 2 * p;
  SCOPED_TRACE(fmt::format("row tp {} rank {} {} input_is_parallel {} bias {}", p, r, dtype_name(dt),
                           c.input_is_parallel, c.bias));
  std::vector<ParamSpec> specs = {decayed(param_spec("w", {OC, C}, Placement::row, InitKind::xavier_uniform))};
  if (c.bias) specs.push_back(param_spec("b", {OC}, Placement::replicated, InitKind::normal, 0.2f));
  Params ps = make_params(specs, dt, shard_of(tp));
  const Tolerance tol = tolerance(dt);
  expect_values_are_shards(ps.full, ps.sharded, kExact, "initial values");

  Tensor inp = random_tensor({kN, C}, dt, 21), dout = random_tensor({kN, OC}, dt, 22);
  Tensor w = ps.full.value("w"), gw = ps.full.grad("w");
  Tensor b = c.bias ? ps.full.value("b") : Tensor(), gb = c.bias ? ps.full.grad("b") : Tensor();
  Tensor out_ref = Tensor::zeros({kN, OC}, dt), dinp_ref = Tensor::zeros({kN, C}, dt);
  ops::linear_forward(out_ref, inp, w, c.bias ? &b : nullptr);
  ops::linear_backward(&dinp_ref, &gw, c.bias ? &gb : nullptr, dout, inp, w);

  tp::RowParallelLinear layer({.bias = c.bias, .input_is_parallel = c.input_is_parallel}, tp);
  Tensor lw = ps.sharded.value("w"), lgw = ps.sharded.grad("w");
  Tensor lb = c.bias ? ps.sharded.value("b") : Tensor(), lgb = c.bias ? ps.sharded.grad("b") : Tensor();
  Tensor x = c.input_is_parallel ? slice_last_dim(inp, r, p) : inp;
  Tensor out = random_tensor({kN, OC}, dt, 23), dinp = random_tensor(x.shape(), dt, 24);  // both overwritten
  layer.forward(out, x, lw, c.bias ? &lb : nullptr);
  EXPECT_TENSOR_NEAR(out, out_ref, tol) << "output";
  layer.backward(&dinp, &lgw, c.bias ? &lgb : nullptr, dout, x, lw);
  EXPECT_TENSOR_NEAR(dinp, c.input_is_parallel ? slice_last_dim(dinp_ref, r, p) : dinp_ref, tol) << "input gradient";
  expect_grads_are_shards(ps.full, ps.sharded, tol, "gradient slice");  // bias: the full gradient on every rank
  expect_adamw_step_matches(ps.full, ps.sharded, tol, "after one AdamW step");
}

}  // namespace

TEST(TpLinear, ColumnParallelMatchesFullLayer) {
  for (comm::Group& tp : tp_test_groups())
    for (DType dt : {DType::f32, DType::f64})
      for (ColumnCase c : {ColumnCase{false, 1}, ColumnCase{true, 1}, ColumnCase{false, 3}, ColumnCase{true, 3}})
        check_column(tp, dt, c);
}

TEST(TpLinear, RowParallelMatchesFullLayer) {
  for (comm::Group& tp : tp_test_groups())
    for (DType dt : {DType::f32, DType::f64})
      for (RowCase c : {RowCase{true, true}, RowCase{false, true}, RowCase{true, false}}) check_row(tp, dt, c);
}

TEST(TpLinear, ColumnThenRowIsTheFullMlp) {
  // The Megatron MLP: column (no gather) -> row (input parallel); one all-reduce each way.
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    const int64_t F = 2 * p;
    std::vector<ParamSpec> specs = {param_spec("fc.w", {F, kC}, Placement::column, InitKind::kaiming_uniform),
                                    param_spec("fc.b", {F}, Placement::column, InitKind::normal, 0.1f),
                                    param_spec("proj.w", {kC, F}, Placement::row, InitKind::kaiming_normal),
                                    param_spec("proj.b", {kC}, Placement::replicated, InitKind::normal, 0.1f)};
    Params ps = make_params(specs, DType::f64, shard_of(tp));
    Tensor inp = random_tensor({kN, kC}, DType::f64, 31), dout = random_tensor({kN, kC}, DType::f64, 32);
    auto run = [&](FlatParams& fp, comm::Group* group, Tensor& out, Tensor& dinp) {
      const int64_t f = fp.value("fc.b").numel();
      Tensor h = Tensor::zeros({kN, f}, DType::f64), dh = Tensor::zeros({kN, f}, DType::f64);
      Tensor fcw = fp.value("fc.w"), fcb = fp.value("fc.b"), pw = fp.value("proj.w"), pb = fp.value("proj.b");
      Tensor gfw = fp.grad("fc.w"), gfb = fp.grad("fc.b"), gpw = fp.grad("proj.w"), gpb = fp.grad("proj.b");
      if (!group) {
        ops::linear_forward(h, inp, fcw, &fcb);
        ops::linear_forward(out, h, pw, &pb);
        ops::linear_backward(&dh, &gpw, &gpb, dout, h, pw);
        ops::linear_backward(&dinp, &gfw, &gfb, dh, inp, fcw);
        return;
      }
      tp::ColumnParallelLinear fc({}, *group);
      tp::RowParallelLinear proj({}, *group);
      fc.forward(h, inp, fcw, &fcb);
      proj.forward(out, h, pw, &pb);
      proj.backward(&dh, &gpw, &gpb, dout, h, pw);
      fc.backward(&dinp, &gfw, &gfb, dh, inp, fcw);
    };
    Tensor out_ref = Tensor::zeros({kN, kC}, DType::f64), dinp_ref = out_ref.clone();
    Tensor out = out_ref.clone(), dinp = out_ref.clone();
    run(ps.full, nullptr, out_ref, dinp_ref);
    run(ps.sharded, &tp, out, dinp);
    SCOPED_TRACE(fmt::format("mlp tp {} rank {}", p, r));
    EXPECT_TENSOR_NEAR(out, out_ref, tolerance(DType::f64));
    EXPECT_TENSOR_NEAR(dinp, dinp_ref, tolerance(DType::f64));
    expect_grads_are_shards(ps.full, ps.sharded, tolerance(DType::f64), "mlp gradient slice");
  }
}

TEST(TpLinear, BiasMustMatchTheOptions) {
  for (comm::Group& tp : tp_test_groups()) {
    Tensor w = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({2}, DType::f32);
    Tensor inp = Tensor::zeros({1, 3}, DType::f32), out = Tensor::zeros({1, 2}, DType::f32);
    tp::ColumnParallelLinear no_bias({.bias = false}, tp);
    EXPECT_THROW(no_bias.forward(out, inp, w, &b), Error);
    tp::ColumnParallelLinear with_bias({}, tp);
    EXPECT_THROW(with_bias.forward(out, inp, w, nullptr), Error);
  }
}
