// ZeroOptimizer under mpirun with the world as the dp group. Every rank also
// runs the plain optimizer on the whole buffer with the dp-summed gradients
// (a function of the rank count only) and checks, after several steps of
// AdamW and of SGD, that its all-gathered parameters match that reference,
// for a parameter count (31) that no dp size above 1 divides; that the
// reduce-scatter leaves the exact dp sum in this rank's shard; that the shard
// norms sum to the full norm; and that the optimizer state is this rank's
// 1/dp shard (tensor sizes and the allocator's live bytes).
#include "optim/zero.h"

#include <gtest/gtest.h>

#include <cmath>

#include "comm/mpi_communicator.h"
#include "core/allocator.h"
#include "optim/grad_clip.h"

using namespace lattice;

namespace {

constexpr int kSteps = 5;

std::vector<ParamSpec> specs() {  // 15 + 7 + 8 + 1 = 31 elements
  return {ParamSpec{.name = "a", .shape = {5, 3}, .weight_decay = true, .init = InitKind::normal, .init_std = 0.5f},
          ParamSpec{.name = "b", .shape = {7}, .init = InitKind::uniform, .init_std = 0.3f},
          ParamSpec{.name = "c", .shape = {2, 4}, .weight_decay = true, .init = InitKind::kaiming_uniform},
          ParamSpec{.name = "d", .shape = {1}, .init = InitKind::ones}};
}

// Rank r's local gradient of element i at `step`: multiples of 1/16, so dp sums are exact in any order.
float local_grad(int r, int64_t i, int step) { return float((i * 7 + r * 3 + step * 5) % 17 - 8) / 16.0f; }

void check_against_reference(const optim::OptimizerOptions& opts) {
  comm::Group dp(comm::make_world_communicator(60));
  const int D = dp.size(), r = dp.rank();
  FlatParams p(specs(), DType::f32, Device::cpu(), {}, D), ref(specs(), DType::f32);
  p.init(7);
  ref.init(7);
  const int64_t N = p.numel(), S = (N + D - 1) / D;
  ASSERT_EQ(N, 31);
  ASSERT_EQ(p.padded_numel(), D * S);

  const int64_t live0 = memory_stats(Device::cpu()).live_bytes;
  optim::ZeroOptimizer zero(opts, p, dp);
  const int64_t zero_bytes = memory_stats(Device::cpu()).live_bytes - live0;
  auto plain = optim::make_optimizer(opts, ref);
  const int64_t plain_bytes = memory_stats(Device::cpu()).live_bytes - live0 - zero_bytes;
  const int64_t buffers = int64_t(plain->state().size());
  // State: S elements per buffer (plus the S-element reduce-scatter staging when dp > 1) against N per buffer.
  EXPECT_EQ(zero.shard_begin(), r * S);
  EXPECT_EQ(zero.shard_numel(), S);
  for (auto& [name, t] : zero.state()) EXPECT_EQ(t->numel(), S) << name;
  EXPECT_EQ(zero_bytes, (buffers + (D > 1)) * S * int64_t(sizeof(float)));
  EXPECT_EQ(plain_bytes, buffers * N * int64_t(sizeof(float)));

  for (int step = 1; step <= kSteps; ++step) {
    float* g = p.grads().data<float>();
    float* rg = ref.grads().data<float>();
    for (int64_t i = 0; i < N; ++i) {
      g[i] = local_grad(r, i, step);
      rg[i] = 0;
      for (int q = 0; q < D; ++q) rg[i] += local_grad(q, i, step);
    }
    zero.reduce_scatter_grads(p);
    for (int64_t i = r * S; i < std::min(N, (r + 1) * S); ++i) ASSERT_EQ(g[i], rg[i]) << "summed grad " << i;
    Tensor sq = Tensor::from<double>({zero.shard_grad_squares(p, 1)}, {1});
    dp.all_reduce(sq)->wait();
    EXPECT_NEAR(sq.data<double>()[0], optim::weighted_grad_squares(ref, 1, 0, N), 1e-12 * sq.data<double>()[0]);

    const double lr = 0.01 * step;
    const float scale = 0.75f;
    const uint64_t version = p.values_version(), ref_version = ref.values_version();
    zero.step(p, lr, step, scale);
    plain->step(ref, lr, step, scale);
    EXPECT_EQ(p.values_version(), version + 1) << "a step (update and all-gather) marks the values written once";
    EXPECT_EQ(ref.values_version(), ref_version + 1);
    const float* v = p.values().data<float>();
    const float* rv = ref.values().data<float>();
    for (int64_t i = 0; i < N; ++i)
      ASSERT_NEAR(v[i], rv[i], 1e-6 * std::max(1.0f, std::fabs(rv[i]))) << "step " << step << " element " << i;
    for (int64_t i = N; i < p.padded_numel(); ++i) EXPECT_EQ(p.padded_values().data<float>()[i], 0.0f) << "padding";
  }
}

}  // namespace

TEST(Zero, AdamWShardsMatchTheFullOptimizer) {
  check_against_reference({.name = "adamw", .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
}

TEST(Zero, SgdShardsMatchTheFullOptimizer) {
  check_against_reference({.name = "sgd", .weight_decay = 0.1, .momentum = 0.9});
}

TEST(Zero, RefusesAnUnpaddedBuffer) {
  comm::Group dp(comm::make_world_communicator(60));
  if (dp.size() == 1) GTEST_SKIP() << "needs more than one rank";
  FlatParams p(specs(), DType::f32);  // 31 elements, no padding
  EXPECT_THROW(optim::ZeroOptimizer({}, p, dp), Error);
}
