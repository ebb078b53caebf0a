// FlatParams: one flat buffer of named views, laid out from the table, with
// initial values keyed by (seed, name, logical element) — independent of the
// table's order and of which other parameters exist. The 16-bit shadow: the
// values rounded (dtype.h's rounding) in the same padded layout; a read
// through a ShadowView after a write that was not followed by a refresh, or
// before the first refresh, is one error naming the parameter and the fix,
// also after the FlatParams has moved; init marks the values written.
#include "core/param.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/error_text.h"

using namespace lattice;

namespace {
ParamSpec normal(std::string name, Shape shape, float std) {
  return ParamSpec{.name = std::move(name), .shape = std::move(shape), .weight_decay = true,
                   .init = InitKind::normal, .init_std = std};
}
}  // namespace

TEST(FlatParams, LayoutViewsAndGradients) {
  ParamSpec b{.name = "b", .shape = {3}, .init = InitKind::ones};
  FlatParams p({normal("w", {2, 3}, 0.02f), b}, DType::f32);
  EXPECT_EQ(p.numel(), 9);
  EXPECT_EQ(p.entry("b").offset, 6);
  EXPECT_EQ(p.value("w").shape(), (Shape{2, 3}));
  EXPECT_TRUE(p.value("b").same_storage(p.values()));
  p.grad("b").data<float>()[1] = 4.0f;
  EXPECT_EQ(p.grads().data<float>()[7], 4.0f);
  p.zero_grad();
  EXPECT_EQ(p.grads().data<float>()[7], 0.0f);
  EXPECT_THROW(p.value("nope"), Error);
  EXPECT_THROW(FlatParams({b, b}, DType::f32), Error);
}

TEST(FlatParams, InitDependsOnNameSeedAndElementOnly) {
  FlatParams a({normal("x", {64}, 0.5f), normal("y", {4, 8}, 1.0f)}, DType::f32);
  FlatParams b({normal("y", {4, 8}, 1.0f)}, DType::f64);  // other order, other dtype, no "x"
  a.init(5);
  b.init(5);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a.value("y").data<float>()[i], float(b.value("y").data<double>()[i]));
  FlatParams c({normal("y", {4, 8}, 1.0f)}, DType::f64);
  c.init(6);
  EXPECT_NE(c.value("y").data<double>()[0], b.value("y").data<double>()[0]);
  double sum2 = 0;
  for (int i = 0; i < 64; ++i) sum2 += std::pow(a.value("x").data<float>()[i], 2);
  EXPECT_NEAR(std::sqrt(sum2 / 64), 0.5, 0.15);
}

TEST(TpShard, EveryLogicalElementLivesOnExactlyOneRank) {
  ParamSpec qkv{.name = "qkv", .shape = {3 * 8, 5}, .placement = Placement::column, .n_fused = 3};
  ParamSpec row{.name = "proj", .shape = {6, 8}, .placement = Placement::row};
  ParamSpec vocab{.name = "wte", .shape = {50, 4}, .placement = Placement::vocab};
  ParamSpec bias{.name = "b", .shape = {3 * 8}, .placement = Placement::column, .n_fused = 3};
  for (const ParamSpec& s : {qkv, row, vocab, bias}) {
    for (int tp : {1, 2, 4}) {
      std::vector<int> seen(size_t(shape_numel(s.shape)), 0);
      int64_t padding = 0;
      for (int r = 0; r < tp; ++r) {
        TpShard shard{.rank = r, .size = tp, .vocab_multiple = 8};
        Shape ls = local_shape(s, shard);
        for (int64_t i = 0; i < shape_numel(ls); ++i) {
          int64_t g = local_to_logical(s, shard, i);
          if (g < 0) {
            ++padding;
            continue;
          }
          ASSERT_LT(g, int64_t(seen.size()));
          seen[size_t(g)]++;
        }
      }
      for (int c : seen) ASSERT_EQ(c, 1) << s.name << " tp=" << tp;
      if (s.placement == Placement::vocab) {
        EXPECT_EQ(padding, (padded_vocab(50, {0, tp, 8}) - 50) * 4);
      }
    }
  }
}

TEST(TpShard, FusedColumnKeepsEachPartsRowsTogether) {
  // QKV with 8 rows per part at tp = 2: rank 1 holds rows 4..7 of q, then of k, then of v.
  ParamSpec qkv{.name = "qkv", .shape = {24, 1}, .placement = Placement::column, .n_fused = 3};
  TpShard r1{.rank = 1, .size = 2};
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 12; ++i) rows.push_back(local_to_logical(qkv, r1, i));
  EXPECT_EQ(rows, (std::vector<int64_t>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
  ParamSpec odd{.name = "w", .shape = {9, 2}, .placement = Placement::column, .n_fused = 3};
  EXPECT_THROW(local_shape(odd, r1), Error);  // 3 rows per part do not split over 2
}

TEST(FlatParams, ShardedInitIsTheSliceOfTheLogicalInit) {
  std::vector<ParamSpec> specs = {
      ParamSpec{.name = "w", .shape = {8, 6}, .placement = Placement::column, .n_fused = 2,
                .init = InitKind::xavier_uniform},
      ParamSpec{.name = "e", .shape = {10, 3}, .placement = Placement::vocab, .init = InitKind::normal,
                .init_std = 0.1f},
      ParamSpec{.name = "p", .shape = {4, 6}, .placement = Placement::row, .init = InitKind::kaiming_normal}};
  FlatParams full(specs, DType::f32);
  full.init(3);
  for (int r = 0; r < 2; ++r) {
    TpShard shard{.rank = r, .size = 2, .vocab_multiple = 4};
    FlatParams part(specs, DType::f32, Device::cpu(), shard);
    part.init(3);
    for (const ParamEntry& e : part.entries()) {
      const float* local = part.value(e).data<float>();
      const float* logical = full.value(e.spec.name).data<float>();
      for (int64_t i = 0; i < e.numel; ++i) {
        int64_t g = local_to_logical(e.spec, shard, i);
        ASSERT_EQ(local[i], g < 0 ? 0.0f : logical[g]) << e.spec.name << " rank " << r << " elem " << i;
      }
    }
  }
}

namespace {
std::vector<ParamSpec> two_matrices() { return {normal("a.weight", {5, 7}, 0.5f), normal("b.weight", {3, 7}, 2.0f)}; }
}  // namespace

TEST(FlatParamsShadow, IsTheRoundedValuesInTheSameLayout) {
  for (DType t : {DType::bf16, DType::f16}) {
    FlatParams p(two_matrices(), DType::f32, Device::cpu(), {}, /*pad_multiple=*/4);
    p.enable_shadow(t);
    p.init(7);
    p.value("b.weight").data<float>()[0] = 1e6f;  // beyond fp16's range: inf there
    p.mark_written();
    p.refresh_shadow();
    ASSERT_TRUE(p.has_shadow());
    EXPECT_EQ(p.shadow_dtype(), t);
    EXPECT_EQ(p.shadow().numel(), p.padded_numel());
    EXPECT_EQ(p.padded_numel(), 56);  // 35 + 21 = 56 is already a multiple of 4
    const uint16_t* h = static_cast<const uint16_t*>(p.shadow().raw());
    const float* v = p.padded_values().data<float>();
    for (int64_t i = 0; i < p.padded_numel(); ++i)
      ASSERT_EQ(h[i], t == DType::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i])) << dtype_name(t) << " element " << i;
    for (const ParamEntry& e : p.entries()) {
      const ShadowView sv = p.shadow_view(e);
      const Tensor& view = sv.get();
      EXPECT_EQ(view.shape(), e.local_shape);
      EXPECT_EQ(static_cast<const uint16_t*>(view.raw()), h + e.offset) << e.spec.name;
    }
  }
  FlatParams padded(two_matrices(), DType::f32, Device::cpu(), {}, 5);  // 56 -> 60: the padding stays zero
  padded.enable_shadow(DType::bf16);
  padded.init(1);
  padded.refresh_shadow();
  for (int64_t i = padded.numel(); i < padded.padded_numel(); ++i)
    EXPECT_EQ(static_cast<const uint16_t*>(padded.shadow().raw())[i], 0);
}

TEST(FlatParamsShadow, AStaleReadIsOneErrorNamingTheParameter) {
  FlatParams p(two_matrices(), DType::f32);
  p.enable_shadow(DType::bf16);
  ShadowView a = p.shadow_view(p.entry("a.weight"));
  EXPECT_HAS(test::error_text([&] { a.get(); }), "'a.weight': its bf16 copy has never been rounded");
  p.init(3);  // a writer: marks the values written
  EXPECT_FALSE(p.shadow_current());
  p.refresh_shadow();
  EXPECT_TRUE(p.shadow_current());
  EXPECT_NO_THROW(a.get());
  // A write that is marked but not followed by a refresh: every view refuses.
  const uint64_t v = p.values_version();
  p.value("b.weight").data<float>()[2] += 1.0f;
  p.mark_written();
  EXPECT_EQ(p.values_version(), v + 1);
  ShadowView fused = p.shadow_view(0, {8, 7}, "a.weight + b.weight");
  const std::string msg = test::error_text([&] { fused.get(); });
  EXPECT_HAS(msg, "'a.weight + b.weight'");
  EXPECT_HAS(msg, "FlatParams::refresh_shadow()");
  // The check survives a move of the FlatParams (the plugin assigns its params once).
  FlatParams moved = std::move(p);
  EXPECT_THROW(a.get(), Error);
  moved.refresh_shadow();
  EXPECT_NO_THROW(a.get());
  EXPECT_EQ(bf16_to_f32(static_cast<const uint16_t*>(fused.get().raw())[35 + 2]),
            bf16_to_f32(f32_to_bf16(moved.value("b.weight").data<float>()[2])));
}

TEST(FlatParamsShadow, OnlyF32ParametersHaveOneOfA16BitType) {
  FlatParams f64(two_matrices(), DType::f64);
  EXPECT_HAS(test::error_text([&] { f64.enable_shadow(DType::bf16); }), "only f32 parameters");
  FlatParams p(two_matrices(), DType::f32);
  EXPECT_HAS(test::error_text([&] { p.enable_shadow(DType::f32); }), "bf16 or f16");
  EXPECT_HAS(test::error_text([&] { p.shadow_view(p.entry("a.weight")); }), "no shadow");
  p.refresh_shadow();  // nothing to do without one
  EXPECT_FALSE(p.has_shadow());
  p.enable_shadow(DType::f16);
  EXPECT_HAS(test::error_text([&] { p.enable_shadow(DType::f16); }), "already enabled");
}
