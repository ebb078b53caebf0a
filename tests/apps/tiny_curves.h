// The quick start's tiny config (configs/default.yaml without dropout, one
// thread, 200 steps, on the license texts every Debian machine has) trained
// at a precision next to fp32, for the reduced-precision tests
// (test_bf16_cpu, test_fp16_cpu): the two loss curves must differ (the
// precision ran), fall as much, and the training loss curve stay within 1% of
// fp32's: its mean over the 200 steps and every 20-step window after step 60.
// Looser, 5%, where this tiny run is chaotic: the windows of the fast initial
// drop (steps 1-60: a drop that comes one step later is several percent off
// for a few steps) and the final validation loss; on an AMD EPYC (Zen 4) fp32
// on one thread and on two (another summation order in the matmuls) end 4.6%
// apart in val_loss.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace lattice::test {

struct Curve {
  std::vector<double> loss, val_loss;
};

inline Curve read_curve(const std::string& path) {
  std::ifstream m(path);
  Curve c;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) c.loss.push_back(j["loss"].get<double>());
    if (j.contains("val_loss")) c.val_loss.push_back(j["val_loss"].get<double>());
  }
  return c;
}

struct TinyRuns {
  std::string skip;  // non-empty: why the runs cannot happen here
  CmdResult fp32, other;
  Curve a, b;  // fp32's and the other precision's
};

// Prepares the data in `dir` and trains runs fp32/ and `precision`/ there.
inline TinyRuns train_tiny_next_to_fp32(const std::string& dir, const std::string& precision) {
  TinyRuns t;
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  if (!src) {
    t.skip = "LATTICE_SOURCE_DIR is not set";
    return t;
  }
  namespace fs = std::filesystem;
  if (!fs::is_directory("/usr/share/common-licenses")) {
    t.skip = "/usr/share/common-licenses is absent";
    return t;
  }
  std::vector<std::string> files;  // sorted, as scripts/quickstart.sh feeds them
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::string inputs;
  for (const std::string& f : files) inputs += " '" + f + "'";
  CmdResult r = run_lattice("data prepare --input" + inputs + " --tokenizer bytes --out d/lic --val-tokens 16384", dir);
  EXPECT_EQ(r.status, 0) << r.out;
  const std::string common =
      std::string("train '") + src +
      "/configs/default.yaml' train.steps=200 log.every=1 train.eval_every=50 model.dropout=0 runtime.threads=1 "
      "data.train=d/lic_train_*.bin data.val=d/lic_val_*.bin checkpoint.every=0";
  t.fp32 = run_lattice(common + " log.dir=fp32 runtime.precision=fp32", dir);
  EXPECT_EQ(t.fp32.status, 0) << t.fp32.out;
  t.other = run_lattice(common + " log.dir=" + precision + " runtime.precision=" + precision, dir);
  EXPECT_EQ(t.other.status, 0) << t.other.out;
  t.a = read_curve(dir + "/fp32/metrics.jsonl");
  t.b = read_curve(dir + "/" + precision + "/metrics.jsonl");
  return t;
}

// The checks of the header; prints the gaps (measured numbers for the tests' headers).
inline void expect_close_to_fp32(const Curve& a, const Curve& b, const std::string& precision) {
  ASSERT_EQ(a.loss.size(), 200u);
  ASSERT_EQ(b.loss.size(), a.loss.size());
  ASSERT_EQ(a.val_loss.size(), 4u);
  ASSERT_EQ(b.val_loss.size(), a.val_loss.size());
  int differ = 0;
  for (size_t i = 0; i < a.loss.size(); ++i) differ += b.loss[i] != a.loss[i];
  EXPECT_GT(differ, 0) << precision << " gave the fp32 losses exactly: the matmuls did not run in " << precision;
  constexpr size_t kWindow = 20, kSettled = 60;
  double worst_early = 0, worst_late = 0, all_a = 0, all_b = 0;
  for (size_t w = 0; w + kWindow <= a.loss.size(); w += kWindow) {
    double sa = 0, sb = 0;
    for (size_t i = w; i < w + kWindow; ++i) sa += a.loss[i], sb += b.loss[i];
    all_a += sa, all_b += sb;
    const double rel = std::fabs(sb - sa) / sa;
    double& worst = w < kSettled ? worst_early : worst_late;
    worst = std::max(worst, rel);
    EXPECT_LT(rel, w < kSettled ? 0.05 : 0.01) << "steps " << w + 1 << "-" << w + kWindow;
  }
  const double mean_rel = std::fabs(all_b - all_a) / all_a;
  EXPECT_LT(mean_rel, 0.01) << "mean training loss over the 200 steps";
  const double val_rel = std::fabs(b.val_loss.back() - a.val_loss.back()) / a.val_loss.back();
  EXPECT_LT(val_rel, 0.05) << "final val_loss: fp32 " << a.val_loss.back() << " " << precision << " "
                           << b.val_loss.back();
  EXPECT_LT(a.loss.back(), 0.6 * a.loss.front());  // both trained
  EXPECT_LT(b.loss.back(), 0.6 * b.loss.front());
  std::printf(
      "[ %-8s ] 20-step windows: worst %.2f%% in steps 1-60, %.2f%% after; mean over 200 steps %.2f%%; final "
      "val_loss %.4f vs fp32 %.4f (%.2f%% off); final loss %.4f vs %.4f\n",
      precision.c_str(), 100 * worst_early, 100 * worst_late, 100 * mean_rel, b.val_loss.back(), a.val_loss.back(),
      100 * val_rel, b.loss.back(), a.loss.back());
}

}  // namespace lattice::test
