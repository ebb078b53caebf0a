// runtime.precision: bf16 on the CPU (bf16 matmuls, everything else fp32)
// trains the quick start's tiny config next to fp32 (tiny_curves.h: the bf16
// losses are not the fp32 ones, the loss falls as much, and the training loss
// curve stays within 1% of fp32's after the initial drop and on average, 5%
// in the drop and the final validation loss); the run says it measured the
// bf16 matmul peak. The tight numerics are test_ops_matmul_bf16's (bit-exact
// on bf16-exact inputs, fp32 accumulation of the rounded products).
//
// Measured on an AMD EPYC (Zen 4) on this test's data order: 20-step windows
// within 0.43% in steps 1-60 and 0.33% after, the mean over 200 steps 0.22%,
// final val_loss 0.05% apart. On another data order: 3.5% in steps 21-40,
// 0.44% after step 60, final val_loss 0.77% (BENCHMARKS.md).
// Skips, saying why, on CPUs without AVX512-BF16 or without oneDNN.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/kernels/cpu/matmul_bf16.h"
#include "support/test_support.h"
#include "tiny_curves.h"

namespace {

TEST(Bf16OnCpu, TinyConfigTrainsLikeFp32) {
  std::string why;
  if (!lattice::cpu::bf16_matmul_available(&why)) GTEST_SKIP() << "no bf16 matmuls here: " << why;
  const std::string dir = lattice::test::make_temp_dir("bf16");
  const lattice::test::TinyRuns t = lattice::test::train_tiny_next_to_fp32(dir, "bf16");
  if (!t.skip.empty()) GTEST_SKIP() << t.skip;
  EXPECT_NE(t.other.out.find("(bf16 matmul 1024^3)"), std::string::npos) << t.other.out;
  EXPECT_NE(t.fp32.out.find("(sgemm 1024^3)"), std::string::npos) << t.fp32.out;
  EXPECT_NE(t.other.out.find("| activations bf16"), std::string::npos) << t.other.out;
  EXPECT_NE(t.fp32.out.find("| activations f32"), std::string::npos) << t.fp32.out;
  lattice::test::expect_close_to_fp32(t.a, t.b, "bf16");
  std::filesystem::remove_all(dir);
}

}  // namespace
