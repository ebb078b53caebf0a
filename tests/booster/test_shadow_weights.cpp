// runtime.precision bf16 and fp16 with the parameters' 16-bit shadow
// (core/param.h) against the same training with the fp32 weights rounded on
// every call (HalfWeights::rounded_per_call, the path before the shadow):
//  - the same losses, gradient norms, loss scales and skips, and in the end the
//    same values, bit for bit, for every model of the layout suite over steps
//    with dropout (fp16 from an overflowing loss scale, so the first steps are
//    skipped and write nothing); after init and every step the shadow is
//    exactly the rounding of the values. At 2 ranks the layouts tp 2, pp 2 and
//    ZeRO-1 over dp 2 run too. There the shadow arrives by a 16-bit all-gather
//    and only the entries read in fp32 by an fp32 one (optim/zero.h), while
//    the per-call run gathers every fp32 value: the shadow and those entries
//    match the per-call run every step, the rest after gather_values();
//  - a run resumed from a checkpoint refreshes the shadow from the loaded
//    values and continues bit for bit;
//  - a write the driver did not refresh after stops the next forward with one
//    error naming the parameter (a forgotten refresh cannot pass silently).
// A writer that forgot to mark the values written would leave a shadow that
// is current by its version but wrong: the bit-for-bit comparisons catch it.
// bf16 runs skip, saying why, without AVX512-BF16 or oneDNN.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "layout_harness.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::layout_test;

namespace {

constexpr int64_t kShadowSteps = 5;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The precisions this machine runs; fp16 starts at a loss scale that overflows
// (the first steps are skipped), as test_fp16_cpu does.
std::vector<std::vector<std::string>> precisions() { return half_precisions("268435456", 2); }

std::vector<LayoutCase> layouts(int world) {
  if (world == 1) return {{1, 1, 1}};
  if (world == 2) return {{2, 1, 1}, {1, 2, 1}, {.tp = 1, .pp = 1, .dp = 2, .zero = 1}};
  return {};
}

mesh::ProcessGroupMesh world_mesh(const LayoutCase& l) {
  if (l.tp * l.pp * l.dp == 1) return mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});
  return mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {l.tp, l.pp, l.dp});
}

// Rank 0's s on every rank.
std::string rank0s(const std::string& s) {
  std::vector<char> buf(s.begin(), s.end());
  buf.resize(4096, '\0');
  MPI_Bcast(buf.data(), int(buf.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf.data();
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every element of p's shadow (padding included) is the rounding of its
// value in `values` (p's own, or those of a run whose values are complete:
// after a ZeRO-1 step p's fp32 matmul weights outside its shard are stale).
void expect_shadow_is_the_rounded_values(FlatParams& p, FlatParams& values, const std::string& when) {
  ASSERT_TRUE(p.has_shadow()) << when;
  EXPECT_TRUE(p.shadow_current()) << when;
  ASSERT_FALSE(values.values_partial()) << when;
  ASSERT_EQ(values.padded_numel(), p.padded_numel()) << when;
  const float* v = values.padded_values().data<float>();
  const uint16_t* h = static_cast<const uint16_t*>(p.shadow().raw());
  const bool bf16 = p.shadow_dtype() == DType::bf16;
  for (int64_t i = 0; i < p.padded_numel(); ++i)
    ASSERT_EQ(h[i], bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i])) << when << ": element " << i;
}
void expect_shadow_is_the_rounded_values(FlatParams& p, const std::string& when) {
  expect_shadow_is_the_rounded_values(p, p, when);
}

// The fp32 values of every entry that is not a matmul weight are the same
// bits in both (the 16-bit ZeRO-1 gather moves those in fp32).
void expect_same_fp32_read_values(FlatParams& a, FlatParams& b, const std::string& when) {
  for (const ParamEntry& e : a.entries()) {
    if (e.spec.matmul_weight) continue;
    EXPECT_EQ(std::memcmp(a.value(e).raw(), b.value(e).raw(), a.value(e).nbytes()), 0) << when << ": " << e.spec.name;
  }
}

}  // namespace

TEST(ShadowWeights, SameBitsAsRoundingTheWeightsPerCall) {
  const std::string glob = make_data();
  for (const std::vector<std::string>& precision : precisions())
    for (const ModelCase& model : models())
      for (const LayoutCase& l : layouts(world_size())) {
        SCOPED_TRACE(testing::Message() << precision[0] << " " << model.name << " tp=" << l.tp << " pp=" << l.pp
                                        << " dp=" << l.dp << " zero " << l.zero);
        const Config cfg = config(glob, l, model, precision);
        auto mesh_a = world_mesh(l), mesh_b = world_mesh(l);
        HybridParallelPlugin shadow(cfg, mesh_a), per_call(cfg, mesh_b, std::nullopt, HalfWeights::rounded_per_call);
        ASSERT_FALSE(per_call.params().has_shadow());
        if (l.zero == 1) {  // the banner says what the ZeRO-1 gather moves
          EXPECT_NE(shadow.describe().find("ZeRO-1 gathers"), std::string::npos) << shadow.describe();
          EXPECT_NE(shadow.describe().find("shadow + fp32 norms, biases, embeddings"), std::string::npos)
              << shadow.describe();
          EXPECT_NE(per_call.describe().find("(fp32 values)"), std::string::npos) << per_call.describe();
        }
        expect_shadow_is_the_rounded_values(shadow.params(), "after init");
        int64_t skipped = 0;
        for (int64_t step = 1; step <= kShadowSteps; ++step) {
          const StepStats a = shadow.execute_pipeline(step), b = per_call.execute_pipeline(step);
          EXPECT_TRUE(same_bits(a.loss_sum, b.loss_sum))
              << "step " << step << ": " << a.loss_sum << " vs " << b.loss_sum;
          const double lr = 0.003;
          const UpdateStats ua = shadow.optimizer_step(step, lr), ub = per_call.optimizer_step(step, lr);
          EXPECT_EQ(ua.skipped, ub.skipped) << "step " << step;
          EXPECT_TRUE(same_bits(ua.loss_scale, ub.loss_scale)) << "step " << step;
          if (!ua.skipped) {
            EXPECT_TRUE(same_bits(ua.grad_norm, ub.grad_norm)) << "step " << step;
          }
          skipped += ua.skipped;
          const std::string when = "after step " + std::to_string(step);
          // ZeRO-1 gathers the shadow and the fp32-read entries only (optim/zero.h).
          EXPECT_EQ(shadow.params().values_partial(), l.zero == 1 && l.dp > 1 && skipped < step) << when;
          EXPECT_FALSE(per_call.params().values_partial()) << when;
          expect_shadow_is_the_rounded_values(shadow.params(), per_call.params(), when);
          expect_same_fp32_read_values(shadow.params(), per_call.params(), when);
        }
        shadow.gather_values();
        EXPECT_FALSE(shadow.params().values_partial());
        expect_shadow_is_the_rounded_values(shadow.params(), "after gather_values");
        EXPECT_EQ(std::memcmp(shadow.params().values().raw(), per_call.params().values().raw(),
                              shadow.params().values().nbytes()),
                  0)
            << "the values after " << kShadowSteps << " steps";
        if (precision[0] == "runtime.precision=fp16") {
          EXPECT_GE(skipped, 1) << "the overflow should skip a step";
        }
        if (HasFailure()) return;  // one failing case is enough to read
      }
}

TEST(ShadowWeights, ResumeRefreshesFromTheLoadedValues) {
  // Rank 0's data and directory for every rank: the checkpoint is one, written
  // collectively, and a resume checks the config it was written with.
  const std::string own_dir = test::make_temp_dir("shadow_resume");
  const std::string glob = rank0s(make_data()), ckpt = rank0s(own_dir) + "/step_0000002";
  const int world = world_size();
  const LayoutCase l = world == 2 ? LayoutCase{.tp = 1, .pp = 1, .dp = 2, .zero = 1} : LayoutCase{1, 1, 1};
  const Config cfg = config(glob, l, models().front(), precisions().front());
  auto mesh_a = world_mesh(l), mesh_b = world_mesh(l);
  HybridParallelPlugin a(cfg, mesh_a);
  std::vector<double> losses;
  for (int64_t step = 1; step <= 4; ++step) {
    losses.push_back(a.execute_pipeline(step).loss_sum);
    a.optimizer_step(step, 0.003);
    if (step == 2) a.save_checkpoint(ckpt, 2, 0);
  }
  HybridParallelPlugin b(cfg, mesh_b);
  b.load_checkpoint(ckpt);
  expect_shadow_is_the_rounded_values(b.params(), "after the load");
  for (int64_t step = 3; step <= 4; ++step) {
    EXPECT_TRUE(same_bits(b.execute_pipeline(step).loss_sum, losses[size_t(step - 1)])) << "step " << step;
    b.optimizer_step(step, 0.003);
  }
  a.gather_values();  // ZeRO-1 at dp 2 left them partial
  b.gather_values();
  EXPECT_EQ(std::memcmp(a.params().values().raw(), b.params().values().raw(), a.params().values().nbytes()), 0);
  std::filesystem::remove_all(own_dir);  // rank 0's holds the checkpoint, which every rank has loaded by now
}

TEST(ShadowWeights, AWriteNotFollowedByARefreshStopsTheNextForward) {
  const std::string glob = make_data();
  auto mesh = mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});  // each rank alone
  HybridParallelPlugin p(config(glob, {1, 1, 1}, models().front(), precisions().front()), mesh);
  p.execute_pipeline(1);
  p.optimizer_step(1, 0.003);
  p.params().value(p.params().entries().front()).data<float>()[0] += 1.0f;  // a new writer that marks ...
  p.params().mark_written();                                                // ... and forgets the refresh
  const std::string msg = test::error_text([&] { p.execute_pipeline(2); });
  EXPECT_HAS(msg, "FlatParams::refresh_shadow()");
  EXPECT_HAS(msg, "parameter 'h.0.");  // the first matmul weight read: block 0's
}
