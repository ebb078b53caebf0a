// runtime.precision: bf16 on the CPU (bf16 matmuls, everything else fp32)
// trains the quick start's tiny config next to fp32 (tiny_curves.h: the bf16
// losses are not the fp32 ones, the loss falls as much, and the curve
// averaged over 20-step windows and the final validation loss stay within 5%
// of fp32's); the run says it measured the bf16 matmul peak. The tight
// numerics are test_ops_matmul_bf16's (bit-exact on bf16-exact inputs, fp32
// accumulation of the rounded products).
//
// Measured on an AMD EPYC (Zen 4): bf16 against fp32 on one thread ended
// 0.77% apart on one data order and 2-3% on another (BENCHMARKS.md).
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
  lattice::test::expect_close_to_fp32(t.a, t.b, "bf16");
  std::filesystem::remove_all(dir);
}

}  // namespace
