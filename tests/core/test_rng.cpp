// Philox known answers (Random123's published kat vectors for philox4x32_10)
// and the layout-invariance properties the rest of Lattice relies on.
#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lattice;

TEST(Rng, Philox4x32_10KnownAnswers) {
  Philox4 a = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  Philox4 b = philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  Philox4 c = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

TEST(Rng, SameCoordinatesSameNumberWhateverTheOrder) {
  RngKey k{.seed = 42, .purpose = RngPurpose::dropout, .step = 3, .layer = 2, .site = 1};
  float forward[64], backward[64];
  for (int e = 0; e < 64; ++e) forward[e] = rng_uniform(k, 5, uint64_t(e));
  for (int e = 63; e >= 0; --e) backward[e] = rng_uniform(k, 5, uint64_t(e));
  for (int e = 0; e < 64; ++e) EXPECT_EQ(forward[e], backward[e]);
}

TEST(Rng, EveryCoordinateChangesTheStream) {
  RngKey base{.seed = 1, .purpose = RngPurpose::dropout, .step = 1, .layer = 1, .site = 0};
  auto differs = [&](RngKey k, uint64_t sample, uint64_t elem) {
    int same = 0;
    for (uint64_t e = 0; e < 32; ++e) same += rng_uniform(base, 0, e) == rng_uniform(k, sample, e + elem);
    return same < 2;
  };
  RngKey k = base;
  k.seed = 2;
  EXPECT_TRUE(differs(k, 0, 0));
  k = base, k.step = 2;
  EXPECT_TRUE(differs(k, 0, 0));
  k = base, k.layer = 2;
  EXPECT_TRUE(differs(k, 0, 0));
  k = base, k.site = 1;
  EXPECT_TRUE(differs(k, 0, 0));
  k = base, k.purpose = RngPurpose::init;
  EXPECT_TRUE(differs(k, 0, 0));
  EXPECT_TRUE(differs(base, 1, 0));   // another sample
  EXPECT_TRUE(differs(base, 0, 32));  // other elements
}

TEST(Rng, UniformAndNormalMoments) {
  RngKey k{.seed = 9};
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    float u = rng_uniform(k, 0, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    double z = rng_normal(k, 1, uint64_t(i));
    sn += z, sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(Rng, InitKeyDependsOnNameAndSeed) {
  EXPECT_NE(rng_normal(init_key(1, "wte.weight"), 0, 7), rng_normal(init_key(1, "wpe.weight"), 0, 7));
  EXPECT_NE(rng_normal(init_key(1, "wte.weight"), 0, 7), rng_normal(init_key(2, "wte.weight"), 0, 7));
  EXPECT_EQ(rng_normal(init_key(1, "wte.weight"), 0, 7), rng_normal(init_key(1, "wte.weight"), 0, 7));
}
