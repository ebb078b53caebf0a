// ZeroOptimizer under mpirun with the world as the dp group. Every rank also
// runs the plain optimizer on the whole buffer with the dp-summed gradients
// (a function of the rank count only) and checks, after several steps of
// AdamW and of SGD, that its all-gathered parameters match that reference,
// for a parameter count (31) that no dp size above 1 divides; that the
// reduce-scatter leaves the exact dp sum in this rank's shard; that the shard
// norms sum to the full norm; and that the optimizer state is this rank's
// 1/dp shard (tensor sizes and the allocator's live bytes).
// With a bf16 shadow, the 16-bit gather (the shadow, plus the entries that are
// not matmul weights in fp32) against the fp32 gather of every value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm/mpi_communicator.h"
#include "core/allocator.h"
#include "optim/grad_clip.h"
#include "optim/zero.h"
#include "support/error_text.h"

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
  // State: S elements per buffer against N per buffer; the first reduce-scatter
  // adds its S-element staging (dp buckets, which all-reduce in place, never call it).
  EXPECT_EQ(zero.shard_begin(), r * S);
  EXPECT_EQ(zero.shard_numel(), S);
  for (auto& [name, t] : zero.state()) EXPECT_EQ(t->numel(), S) << name;
  EXPECT_EQ(zero_bytes, buffers * S * int64_t(sizeof(float)));
  EXPECT_EQ(plain_bytes, buffers * N * int64_t(sizeof(float)));
  const int64_t before_staging = memory_stats(Device::cpu()).live_bytes;

  for (int step = 1; step <= kSteps; ++step) {
    float* g = p.grads().data<float>();
    float* rg = ref.grads().data<float>();
    for (int64_t i = 0; i < N; ++i) {
      g[i] = local_grad(r, i, step);
      rg[i] = 0;
      for (int q = 0; q < D; ++q) rg[i] += local_grad(q, i, step);
    }
    zero.reduce_scatter_grads(p);
    if (step == 1) {
      EXPECT_EQ(memory_stats(Device::cpu()).live_bytes - before_staging, (D > 1) * S * int64_t(sizeof(float)));
    }
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

namespace {

// Matmul weights (w*) between entries read in fp32 (b, n): 30 + 7 + 12 + 5 + 9 = 63 elements.
std::vector<ParamSpec> mixed_specs() {
  auto w = [](std::string name, Shape shape) {
    return ParamSpec{.name = std::move(name),
                     .shape = std::move(shape),
                     .weight_decay = true,
                     .init = InitKind::normal,
                     .init_std = 0.5f,
                     .matmul_weight = true};
  };
  return {w("w1", {6, 5}), ParamSpec{.name = "b", .shape = {7}, .init = InitKind::uniform, .init_std = 0.3f},
          w("w2", {4, 3}), ParamSpec{.name = "n", .shape = {5}, .init = InitKind::ones}, w("w3", {3, 3})};
}

// Two copies of the same parameters with a bf16 shadow take the same steps,
// one gathering the 16-bit shadow and the fp32-read entries, the other every
// fp32 value (set_half_gather(false)) and refreshing its shadow whole. The
// fp32-read pieces go packed (the default: all are short here) or each in
// place (in_place_min 1).
void check_half_gather(int64_t in_place_min) {
  comm::Group dp(comm::make_world_communicator(60));
  const int D = dp.size(), r = dp.rank();
  FlatParams half(mixed_specs(), DType::f32, Device::cpu(), {}, D),
      full(mixed_specs(), DType::f32, Device::cpu(), {}, D);
  for (FlatParams* p : {&half, &full}) {
    p->enable_shadow(DType::bf16);
    p->init(11);
    p->refresh_shadow();
  }
  const Tensor init = half.values().clone();
  const int64_t N = half.numel(), S = half.padded_numel() / D;
  ASSERT_EQ(N, 63);
  const optim::OptimizerOptions opts{.name = "adamw", .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  optim::ZeroOptimizer zh(opts, half, dp, in_place_min), zf(opts, full, dp);
  zf.set_half_gather(false);
  const int64_t pieces = 3;  // dp 2: [30, 32) | [32, 37), [49, 54); dp 4: none | [30, 32) | [32, 37) | [49, 54)
  const optim::HalfGatherPlan& plan = zh.half_gather_plan();
  int64_t in_place = 0, packed = 0;
  for (int q = 0; q < D; ++q) in_place += int64_t(plan.in_place[size_t(q)].size());
  for (int q = 0; q < D; ++q) packed += int64_t(plan.packed[size_t(q)].size());
  EXPECT_EQ(in_place, in_place_min == 1 ? pieces : 0);
  EXPECT_EQ(packed, in_place_min == 1 ? 0 : pieces);
  // Each rank's count of fp32-read elements (b: [30, 37), n: [49, 54)) in its shard:
  // dp 2: [0, 32) 2, [32, 64) 5 + 5; dp 4: [0, 16) none, [16, 32) 2, [32, 48) 5, [48, 64) 5.
  ASSERT_TRUE(D == 2 || D == 4) << "the expected counts are for 2 and 4 ranks";
  const std::vector<int64_t> counts = D == 2 ? std::vector<int64_t>{2, 10} : std::vector<int64_t>{0, 2, 5, 5};
  EXPECT_EQ(plan.fp32_counts, counts);
  EXPECT_EQ(plan.fp32_total(), 12);

  auto in_shard = [&](int64_t i) { return i >= r * S && i < (r + 1) * S; };
  for (int step = 1; step <= kSteps; ++step) {
    for (FlatParams* p : {&half, &full}) {
      float* g = p->grads().data<float>();
      for (int64_t i = 0; i < N; ++i) g[i] = local_grad(r, i, step);
    }
    zh.reduce_scatter_grads(half);
    zf.reduce_scatter_grads(full);
    zh.step(half, 0.01, step, 1.0f);
    zf.step(full, 0.01, step, 1.0f);
    full.refresh_shadow();
    EXPECT_EQ(half.values_partial(), D > 1) << "step " << step;
    EXPECT_FALSE(full.values_partial());
    EXPECT_TRUE(half.shadow_current());
    EXPECT_EQ(std::memcmp(half.shadow().raw(), full.shadow().raw(), half.shadow().nbytes()), 0)
        << "step " << step << ": the gathered shadow is the whole refresh's";
    const float* hv = half.values().data<float>();
    const float* fv = full.values().data<float>();
    const float* iv = init.data<float>();
    for (const ParamEntry& e : half.entries())
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i) {
        // Matmul weights outside the shard are never gathered in fp32: still the initial values.
        const float want = !e.spec.matmul_weight || in_shard(i) ? fv[i] : iv[i];
        ASSERT_EQ(hv[i], want) << "step " << step << ": " << e.spec.name << " element " << i;
      }
  }
  if (D > 1) {  // rounding partial values again is refused
    half.mark_written();
    const std::string text = test::error_text([&] { half.refresh_shadow(); });
    for (const char* part : {"ZeRO-1", "stale", "gather_values"}) EXPECT_HAS(text, part);
    half.mark_shadow_gathered();  // back as it was: the shadow is current, the values partial
  }
  zh.gather_values(half);
  EXPECT_FALSE(half.values_partial());
  EXPECT_EQ(std::memcmp(half.values().raw(), full.values().raw(), half.values().nbytes()), 0);
}

}  // namespace

TEST(Zero, HalfGatherPacksShortPieces) { check_half_gather(optim::ZeroOptimizer::kInPlaceBroadcast); }
TEST(Zero, HalfGatherBroadcastsLongPiecesInPlace) { check_half_gather(1); }

// When the entries read in fp32 are half the parameters or more (here a
// 60-element vector and a 5-element one beside 51 matmul elements), the
// 16-bit gather would move more bytes than the fp32 one: step gathers every
// fp32 value instead, and the values stay complete.
TEST(Zero, HalfGatherOnlyWhereItMovesFewerBytes) {
  comm::Group dp(comm::make_world_communicator(60));
  const int D = dp.size();
  std::vector<ParamSpec> specs = mixed_specs();
  specs[1].shape = {60};  // "b": fp32-read
  FlatParams p(specs, DType::f32, Device::cpu(), {}, D);
  p.enable_shadow(DType::bf16);
  p.init(3);
  p.refresh_shadow();
  optim::ZeroOptimizer zero({.name = "adamw"}, p, dp);
  const int64_t P = p.padded_numel(), F = zero.half_gather_plan().fp32_total();
  ASSERT_EQ(F, 65);  // b 60 + n 5 of 116: 2 * 116 + 4 * 65 = 492 bytes against 464
  EXPECT_FALSE(zero.gathers_half(p));
  EXPECT_EQ(zero.gather_bytes(p), 4 * P);
  EXPECT_GE(zero.half_gather_plan().bytes(P), 4 * P);
  for (int64_t i = 0; i < p.numel(); ++i) p.grads().data<float>()[i] = local_grad(dp.rank(), i, 1);
  zero.reduce_scatter_grads(p);
  zero.step(p, 0.01, 1, 1.0f);
  EXPECT_FALSE(p.values_partial());
  p.refresh_shadow();  // a whole refresh, as after any fp32 gather
  EXPECT_TRUE(p.shadow_current());

  FlatParams q(mixed_specs(), DType::f32, Device::cpu(), {}, D);  // 12 of 63 read in fp32
  q.enable_shadow(DType::bf16);
  optim::ZeroOptimizer zq({.name = "adamw"}, q, dp);
  EXPECT_TRUE(zq.gathers_half(q));
  EXPECT_EQ(zq.gather_bytes(q), 2 * q.padded_numel() + 4 * 12);
}
