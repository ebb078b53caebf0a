// core/blas_core.h: which OpenBLAS kernel set lattice restarts with.
#include "core/blas_core.h"

#include <gtest/gtest.h>

namespace lattice {
namespace {

CpuIsa avx512() { return {true, true, true, true, true, true, true, true}; }

TEST(BlasCore, APreAvxSetOnANewerCpuIsReplacedByTheBestItRuns) {
  EXPECT_EQ(better_blas_core("Prescott", avx512()), "SkylakeX");  // Sapphire/Emerald Rapids under OpenBLAS 0.3.21
  EXPECT_EQ(better_blas_core("Core2", avx512()), "SkylakeX");
  CpuIsa avx2{.avx = true, .avx2 = true, .fma = true};
  EXPECT_EQ(better_blas_core("Prescott", avx2), "Haswell");
  EXPECT_EQ(better_blas_core("Nehalem", CpuIsa{.avx = true}), "Sandybridge");
  CpuIsa partial = avx512();
  partial.avx512vl = false;  // SkylakeX's kernels need all five AVX-512 subsets
  EXPECT_EQ(better_blas_core("Prescott", partial), "Haswell");
  CpuIsa avx2_no_fma{.avx = true, .avx2 = true};
  EXPECT_EQ(better_blas_core("Prescott", avx2_no_fma), "Sandybridge");
}

TEST(BlasCore, ASetThatFitsIsKept) {
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids", "Haswell", "Zen", "Sandybridge"})
    EXPECT_EQ(better_blas_core(core, avx512()), "") << core;  // OpenBLAS knew the CPU (Haswell on Zen 5 too)
  EXPECT_EQ(better_blas_core("Prescott", CpuIsa{}), "");      // an SSE-only CPU: nothing better
  EXPECT_EQ(better_blas_core("ARMV8", avx512()), "");         // not an x86 set
}

TEST(BlasCore, PreAvxSetsAreNamed) {
  for (const char* core : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Nano", "Barcelona"})
    EXPECT_TRUE(blas_core_is_pre_avx(core)) << core;
  for (const char* core : {"Sandybridge", "Haswell", "SkylakeX", "Zen", "Bulldozer", "prescott"})
    EXPECT_FALSE(blas_core_is_pre_avx(core)) << core;
}

TEST(BlasCore, NoRestartNoteInAProcessThatDidNotRestart) { EXPECT_EQ(blas_core_restart_note(), ""); }

}  // namespace
}  // namespace lattice
