// runtime.precision: bf16 on the CPU (bf16 matmuls, everything else fp32)
// trains the quick start's tiny config (configs/default.yaml, on the license
// texts every Debian machine has) for 200 steps with a loss curve within 1% of
// fp32's at every step, and its validation losses too; the run says it
// measured the bf16 matmul peak. Skips, saying why, on CPUs without
// AVX512-BF16 or builds without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

struct Curve {
  std::vector<double> loss, val_loss;
};

Curve read_curve(const std::string& path) {
  std::ifstream m(path);
  Curve c;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) c.loss.push_back(j["loss"].get<double>());
    if (j.contains("val_loss")) c.val_loss.push_back(j["val_loss"].get<double>());
  }
  return c;
}

TEST(Bf16OnCpu, TinyConfigLossCurveStaysWithinOnePercentOfFp32) {
  std::string why;
  if (!lattice::cpu::bf16_matmul_available(&why)) GTEST_SKIP() << "no bf16 matmuls here: " << why;
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  if (!fs::is_directory("/usr/share/common-licenses")) GTEST_SKIP() << "/usr/share/common-licenses is absent";
  const std::string dir = lattice::test::make_temp_dir("bf16");
  std::string inputs;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file()) inputs += " '" + e.path().string() + "'";
  auto r = lattice::test::run_lattice(
      "data prepare --input" + inputs + " --tokenizer bytes --out d/lic --val-tokens 16384", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string common = std::string("train '") + src +
                             "/configs/default.yaml' train.steps=200 log.every=1 train.eval_every=50 "
                             "data.train=d/lic_train_*.bin data.val=d/lic_val_*.bin checkpoint.every=0";
  auto fp32 = lattice::test::run_lattice(common + " log.dir=fp32 runtime.precision=fp32", dir);
  ASSERT_EQ(fp32.status, 0) << fp32.out;
  auto bf16 = lattice::test::run_lattice(common + " log.dir=bf16 runtime.precision=bf16", dir);
  ASSERT_EQ(bf16.status, 0) << bf16.out;
  EXPECT_NE(bf16.out.find("(bf16 matmul 1024^3)"), std::string::npos) << bf16.out;
  EXPECT_NE(fp32.out.find("(sgemm 1024^3)"), std::string::npos) << fp32.out;

  const Curve a = read_curve(dir + "/fp32/metrics.jsonl"), b = read_curve(dir + "/bf16/metrics.jsonl");
  ASSERT_EQ(a.loss.size(), 200u);
  ASSERT_EQ(b.loss.size(), a.loss.size());
  ASSERT_EQ(a.val_loss.size(), 4u);
  ASSERT_EQ(b.val_loss.size(), a.val_loss.size());
  double worst = 0, differ = 0;
  for (size_t i = 0; i < a.loss.size(); ++i) {
    const double rel = std::fabs(b.loss[i] - a.loss[i]) / a.loss[i];
    worst = std::max(worst, rel);
    differ += b.loss[i] != a.loss[i];
    EXPECT_LT(rel, 0.01) << "step " << i + 1 << ": fp32 " << a.loss[i] << " bf16 " << b.loss[i];
  }
  for (size_t i = 0; i < a.val_loss.size(); ++i)
    EXPECT_LT(std::fabs(b.val_loss[i] - a.val_loss[i]) / a.val_loss[i], 0.01) << "eval " << i;
  EXPECT_GT(differ, 0) << "bf16 gave the fp32 losses exactly: the matmuls did not run in bf16";
  EXPECT_LT(a.loss.back(), 0.6 * a.loss.front());  // it trained
  std::printf("[ bf16     ] worst relative loss difference over 200 steps: %.2e; final fp32 %.4f bf16 %.4f\n", worst,
              a.loss.back(), b.loss.back());
  fs::remove_all(dir);
}

}  // namespace
