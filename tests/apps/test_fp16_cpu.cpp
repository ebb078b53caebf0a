// runtime.precision: fp16 on the CPU (fp16-rounded matmul operands with fp32
// accumulation, dynamic loss scaling; everything else fp32), end to end
// through the lattice binary:
//  - the quick start's tiny config (configs/default.yaml without dropout, one
//    thread, on the license texts every Debian machine has) trains for 200
//    steps next to fp32: the fp16 losses are not the fp32 ones, the loss
//    falls as much, and 20-step windows and the final validation loss stay
//    within 5% of fp32's (the bf16 test's bound, tiny_curves.h says why).
//    Measured on an AMD EPYC (Zen 4), 2 cores: 20-step windows at most 0.07%
//    apart in steps 1-60 and 0.13% after; final val_loss 2.3147 (fp16) vs
//    2.3160 (fp32), 0.06% apart; final train loss 2.3637 vs 2.3619; no step
//    overflowed at the default scale 2^16;
//  - a loss scale of 2^28 overflows fp16 (the LM head's scaled dlogits pass
//    65504): the first steps are skipped, the logged scale halves on each,
//    then training runs normally and the scale grows every growth_interval
//    good steps, exactly as optim::LossScaler's state machine says (measured:
//    7 of 16 steps skipped, the scale settles at 2^23, loss 5.52 -> 5.05);
//  - the same run at (2,1,1), (1,2,1) with GPipe, ZeRO-1 under dp 2, and
//    (2,2,2) skips exactly the same steps at the same scales as the one-rank
//    run, with losses within relative 1e-4 (fp32 sums taken in another
//    order, then rounded to fp16; measured worst 6.9e-7);
//  - a run stopped and resumed gives the uninterrupted run's losses, scales
//    and skipped counts exactly, and the same checkpoint bytes; resuming the
//    fp16 checkpoint with fp32 is one line naming runtime.precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "support/test_support.h"
#include "tiny_curves.h"

namespace fs = std::filesystem;
using lattice::test::CmdResult;

namespace {

struct Line {
  int step = 0;
  double loss = 0, loss_scale = 0;
  int64_t skipped = 0;
};

struct Metrics {
  std::vector<Line> train;
  std::vector<double> val_loss;
};

Metrics read_run(const std::string& run_dir) {
  std::ifstream m(run_dir + "/metrics.jsonl");
  Metrics r;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) r.val_loss.push_back(j["val_loss"].get<double>());
    if (!j.contains("loss")) continue;
    r.train.push_back(
        {j["step"].get<int>(), j["loss"].get<double>(), j.value("loss_scale", 0.0), j["skipped"].get<int64_t>()});
  }
  return r;
}

std::string bytes_of(const std::string& path) {
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  return lattice::test::file_bytes(path);
}

class Fp16 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = lattice::test::make_temp_dir("fp16");
    std::string text;
    for (int i = 0; i < 500; ++i)
      text += "all the world's a stage, and all the men and women " + std::to_string(i % 13) + "\n";
    std::ofstream(dir + "/a.txt") << text;
    CmdResult r = lattice::test::run_lattice("data prepare --input a.txt --tokenizer bytes --out d/t", dir);
    ASSERT_EQ(r.status, 0) << r.out;
    // 2^28 overflows: the LM head's dlogits reach 2^28 / 128 tokens = 2^21 > 65504.
    std::ofstream(dir + "/r.yaml")
        << R"(model: { arch: gpt2, n_layer: 4, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 16,
         dropout: 0.1 }
train: { steps: 16, global_batch: 8, micro_batch: 2, seq_len: 16 }
optimizer: { lr: 0.003, schedule: { warmup_steps: 3, decay: cosine } }
data: { train: "d/t_train_*.bin", tokenizer: bytes }
runtime: { seed: 21, threads: 1, precision: fp16,
           loss_scale: { initial: 268435456, max: 268435456, growth_interval: 3 } }
)";
  }
  void TearDown() override { fs::remove_all(dir); }

  Metrics train(const std::string& log, const std::string& args, int ranks) {
    CmdResult r = lattice::test::run_lattice("train r.yaml log.dir=" + log + " " + args, dir, ranks);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
    return read_run(dir + "/" + log);
  }
  std::string dir;
};

// Every step's scale follows from the previous step's: halved after a skip
// (an overflow), doubled after growth_interval good steps in a row.
TEST_F(Fp16, OverflowSkipsStepsBacksOffTheScaleThenTrains) {
  const Metrics r = train("one", "", 0);
  ASSERT_EQ(r.train.size(), 16u);
  EXPECT_EQ(r.train[0].loss_scale, 268435456.0);
  EXPECT_EQ(r.train[0].skipped, 1);  // 2^28 overflowed at step 1
  int64_t good = 0;
  for (size_t i = 1; i < r.train.size(); ++i) {
    const Line &prev = r.train[i - 1], &cur = r.train[i];
    const bool skipped = prev.skipped > (i >= 2 ? r.train[i - 2].skipped : 0);
    good = skipped ? 0 : good + 1;
    double want = skipped ? prev.loss_scale / 2 : prev.loss_scale;
    if (!skipped && good == 3) want = std::min(want * 2, 268435456.0), good = 0;
    EXPECT_EQ(cur.loss_scale, want) << "step " << cur.step;
  }
  const int64_t skipped = r.train.back().skipped;
  EXPECT_GE(skipped, 2);
  EXPECT_LE(skipped, 8) << "the scale should settle below the overflow within a few steps";
  EXPECT_LT(r.train.back().loss_scale, 268435456.0);
  EXPECT_LT(r.train.back().loss, 0.95 * r.train.front().loss);  // it trained (measured: 5.52 -> 5.05)
  std::printf("[ fp16     ] %ld of 16 steps skipped; scale 2^28 -> 2^%.0f; loss %.4f -> %.4f\n", long(skipped),
              std::log2(r.train.back().loss_scale), r.train.front().loss, r.train.back().loss);
}

TEST_F(Fp16, LayoutsSkipTheSameStepsAndMatchTheOneRankRun) {
  const Metrics ref = train("one", "", 0);
  struct Case {
    std::string tag, layout;
    int ranks;
  };
  double worst = 0;
  for (const Case& c :
       {Case{"tp", "parallel.tp=2", 2}, Case{"pp", "parallel.pp=2 parallel.schedule=gpipe", 2},
        Case{"zero", "parallel.dp=2 parallel.zero=1", 2}, Case{"3d", "parallel.tp=2 parallel.pp=2 parallel.dp=2", 8}}) {
    SCOPED_TRACE(c.layout);
    const Metrics r = train(c.tag, c.layout, c.ranks);
    ASSERT_EQ(r.train.size(), ref.train.size());
    for (size_t i = 0; i < r.train.size(); ++i) {
      EXPECT_EQ(r.train[i].skipped, ref.train[i].skipped) << "step " << i + 1;
      EXPECT_EQ(r.train[i].loss_scale, ref.train[i].loss_scale) << "step " << i + 1;
      EXPECT_NEAR(r.train[i].loss, ref.train[i].loss, 1e-4 * ref.train[i].loss) << "step " << i + 1;
      worst = std::max(worst, std::fabs(r.train[i].loss - ref.train[i].loss) / ref.train[i].loss);
    }
  }
  std::printf("[ fp16     ] layouts against one rank: worst relative loss difference %.2e\n", worst);
}

TEST_F(Fp16, ResumeIsBitIdenticalAndKeepsItsPrecision) {
  const Metrics whole = train("whole", "", 0);
  train("split", "train.stop_at_step=7", 0);
  const std::string step7 = dir + "/split/checkpoints/step_0000007/trainer_state.json";
  const auto state = nlohmann::json::parse(bytes_of(step7));
  ASSERT_TRUE(state.contains("loss_scaler")) << state.dump();
  // The scale after step 7 is the one step 8 uses.
  EXPECT_EQ(state["loss_scaler"]["scale"].get<double>(), whole.train[7].loss_scale);
  // Resuming with another precision: one line naming the key (the config-difference rule).
  std::string fp32 = bytes_of(dir + "/r.yaml");
  fp32 = fp32.substr(0, fp32.find("precision: fp16")) + "precision: fp32 }\n";
  std::ofstream(dir + "/fp32.yaml") << fp32;
  CmdResult bad = lattice::test::run_lattice("train fp32.yaml log.dir=split", dir);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("fp32.yaml:6:"), std::string::npos) << bad.out;  // where the key was set
  EXPECT_NE(bad.out.find("runtime.precision: fp32 here, but checkpoint"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("was written with fp16"), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  const Metrics split = train("split", "", 0);
  ASSERT_EQ(split.train.size(), whole.train.size());
  for (size_t i = 0; i < whole.train.size(); ++i) {
    EXPECT_EQ(split.train[i].loss, whole.train[i].loss) << "step " << i + 1;
    EXPECT_EQ(split.train[i].loss_scale, whole.train[i].loss_scale) << "step " << i + 1;
    EXPECT_EQ(split.train[i].skipped, whole.train[i].skipped) << "step " << i + 1;
  }
  const std::string last = "/checkpoints/step_0000016/";
  for (const auto& e : fs::directory_iterator(dir + "/whole" + last)) {
    const std::string name = e.path().filename().string();
    if (name == "trainer_state.json" || name == "manifest.json") continue;  // they hold log.dir
    EXPECT_EQ(bytes_of(e.path().string()), bytes_of(dir + "/split" + last + name)) << name;
  }
  EXPECT_EQ(nlohmann::json::parse(bytes_of(dir + "/split" + last + "trainer_state.json"))["loss_scaler"],
            nlohmann::json::parse(bytes_of(dir + "/whole" + last + "trainer_state.json"))["loss_scaler"]);
}

TEST(Fp16OnCpu, TinyConfigTrainsLikeFp32) {
  const std::string dir = lattice::test::make_temp_dir("fp16tiny");
  const lattice::test::TinyRuns t = lattice::test::train_tiny_next_to_fp32(dir, "fp16");
  if (!t.skip.empty()) GTEST_SKIP() << t.skip;
  EXPECT_NE(t.other.out.find("(fp16-rounded sgemm 1024^3)"), std::string::npos) << t.other.out;
  EXPECT_NE(t.other.out.find("| activations f16"), std::string::npos) << t.other.out;
  lattice::test::expect_close_to_fp32(t.a, t.b, "fp16");
  const Metrics r = read_run(dir + "/fp16");
  ASSERT_FALSE(r.train.empty());
  EXPECT_EQ(r.train.front().loss_scale, 65536.0);  // the default scale, logged on every line
  for (const Line& l : r.train) EXPECT_GT(l.loss_scale, 0) << "step " << l.step;
  std::printf("[ fp16     ] tiny config: %ld skipped steps, final loss scale %.0f\n", long(r.train.back().skipped),
              r.train.back().loss_scale);
  fs::remove_all(dir);
}

}  // namespace
