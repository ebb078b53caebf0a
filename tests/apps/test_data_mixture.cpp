// A weighted data mixture (data.train as a list of {path, weight}) through the
// lattice binary: the same losses in every layout under mpirun (the deal of
// samples to sources depends on the sample index only), the start line's
// per-source summary, exact resume, and a changed mixture or source refused
// on resume with one line naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using lattice::test::CmdResult;

namespace {

CmdResult run(const std::string& args, const std::string& cwd, int ranks = 0) {
  return lattice::test::run_lattice(args, cwd, ranks);
}

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// "LINE:COL" (1-based) of the first `needle` in `text`.
std::string line_col(const std::string& text, const std::string& needle) {
  const size_t pos = text.find(needle);
  const size_t line_start = text.rfind('\n', pos) + 1;  // npos + 1 = 0 on the first line
  return std::to_string(1 + std::count(text.begin(), text.begin() + long(pos), '\n')) + ":" +
         std::to_string(pos - line_start + 1);
}

// Source 0: prose (about 560 windows of 33 tokens); source 1: digits, 300
// bytes (9 windows), so its share of 6 steps (12 samples) reads it for more
// than an epoch.
constexpr size_t kDigits = 300;
// Dropout on: its masks are keyed by the global sample index too.
const char* kConfig =
    R"(model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 32, dropout: 0.1 }
train: { steps: 6, global_batch: 8, micro_batch: 2, seq_len: 32 }
optimizer: { name: adamw, lr: 0.01, schedule: { warmup_steps: 2 } }
data:
  train:
    - { path: "d/a_train_*.bin", weight: 3 }
    - { path: "d/b_train_*.bin", weight: 1 }
  tokenizer: bytes
runtime: { seed: 11, threads: 1 }
)";

class Mixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = lattice::test::make_temp_dir("mixture_cli");
    std::string prose, digits;
    for (int i = 0; i < 400; ++i)
      prose += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
    for (int i = 0; digits.size() < kDigits; ++i) digits += std::to_string(i * 7919 % 1000) + " ";
    digits.resize(kDigits);
    std::ofstream(dir + "/a.txt") << prose;
    std::ofstream(dir + "/b.txt") << digits;
    for (const char* s : {"a", "b"}) {
      CmdResult r = run(std::string("data prepare --input ") + s + ".txt --tokenizer bytes --out d/" + s, dir);
      ASSERT_EQ(r.status, 0) << r.out;
    }
    std::ofstream(dir + "/mix.yaml") << kConfig;
  }
  void TearDown() override { fs::remove_all(dir); }

  std::vector<double> losses(const std::string& run_dir) const {
    std::vector<double> out;
    std::ifstream m(dir + "/" + run_dir + "/metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j["loss"].get<double>());
    }
    return out;
  }
  std::string dir;
};

}  // namespace

TEST_F(Mixture, EveryLayoutTrainsOnTheSameSamples) {
  CmdResult one = run("train mix.yaml log.dir=one", dir);
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_NE(one.out.find("data.train[0] 'd/a_train_*.bin': weight 3 (75%)"), std::string::npos) << one.out;
  // 6 steps x 8 samples x 1/4, over (300 - 1) / 32 windows.
  const int64_t windows = (int64_t(kDigits) - 1) / 32;
  char epochs[32];
  std::snprintf(epochs, sizeof epochs, "%.3g", 6 * 8 * 0.25 / double(windows));
  const std::string summary = "data.train[1] 'd/b_train_*.bin': weight 1 (25%), " + std::to_string(kDigits) +
                              " tokens, " + std::to_string(windows) + " windows, " + epochs + " epochs";
  EXPECT_NE(one.out.find(summary), std::string::npos) << summary << " not in " << one.out;
  // Two layouts of 2 ranks: dp splits each step's samples, tp splits the model.
  for (const std::string layout : {"parallel.dp=2", "parallel.tp=2"}) {
    CmdResult two = run("train mix.yaml log.dir=two " + layout, dir, 2);
    ASSERT_EQ(two.status, 0) << two.out;
    const std::vector<double> a = losses("one"), b = losses("two");
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << layout << " step " << i + 1;
    fs::remove_all(dir + "/two");
  }
  // The mixture is not source 0 alone.
  CmdResult plain = run("train mix.yaml log.dir=plain data.train=d/a_train_*.bin", dir);
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_NE(losses("plain"), losses("one"));
}

TEST_F(Mixture, ResumesExactlyAndRefusesAnotherMixture) {
  ASSERT_EQ(run("train mix.yaml log.dir=full", dir).status, 0);
  CmdResult part = run("train mix.yaml log.dir=part train.stop_at_step=3", dir);
  ASSERT_EQ(part.status, 0) << part.out;
  std::ifstream state_file(dir + "/part/checkpoints/step_0000003/trainer_state.json");
  const auto state = nlohmann::json::parse(state_file);
  ASSERT_EQ(state["data_train"].size(), 2u);
  EXPECT_EQ(state["data_train"][1]["file"], "b_train_000000.bin");
  EXPECT_EQ(state["data_train"][1]["source"], 1);

  auto refused = [&](const std::string& overrides, const std::vector<std::string>& needles) {
    CmdResult r = run("train mix.yaml log.dir=part " + overrides, dir);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    for (const auto& n : needles) EXPECT_NE(r.out.find(n), std::string::npos) << "missing '" << n << "' in " << r.out;
  };
  refused("'data.train=[{path: d/a_train_*.bin, weight: 3}, {path: d/b_train_*.bin, weight: 2}]'",
          {"data.train: ", "weight: 2", "here, but checkpoint", "weight: 3"});
  refused("data.train=d/a_train_*.bin",
          {"data.train: d/a_train_*.bin here, but checkpoint part/checkpoints/step_0000003 was written with [{path: "
           "d/a_train_*.bin, weight: 3}, {path: d/b_train_*.bin, weight: 1}]"});
  // Source 1 prepared again from other text: its shard is not the one trained on.
  const std::string shard = dir + "/d/b_train_000000.bin", kept = lattice::test::file_bytes(shard);
  std::ofstream(dir + "/b.txt") << std::string(300, '7');
  ASSERT_EQ(run("data prepare --input b.txt --tokenizer bytes --out d/b", dir).status, 0);
  refused("", {"data.train[1].path: the shards matching 'd/b_train_*.bin' are not the ones checkpoint",
               "'b_train_000000.bin' holds other tokens"});
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << kept;

  CmdResult resumed = run("train mix.yaml log.dir=part", dir);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resuming from"), std::string::npos) << resumed.out;
  const std::vector<double> want = losses("full"), got = losses("part");
  ASSERT_EQ(want.size(), 6u);
  EXPECT_EQ(got, want);  // the same layout: bit for bit
}

TEST_F(Mixture, BadSourcesAreOneLine) {
  std::string text = kConfig;
  text.replace(text.find("weight: 1 }"), 11, "weight: 0 }");
  std::ofstream(dir + "/bad.yaml") << text;
  CmdResult r = run("train bad.yaml", dir);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  const std::string want = "lattice: error: bad.yaml:" + line_col(text, "weight: 0") +
                           ": data.train[1].weight: must be a number > 0 (got 0)";
  EXPECT_EQ(r.out.rfind(want, 0), 0u) << want << " vs " << r.out;
  r = run("train mix.yaml 'data.train=[{path: d/a_train_*.bin, weight: 3}, {path: d/c_train_*.bin, weight: 1}]'", dir);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("data.train[1].path: no file matches 'd/c_train_*.bin'"), std::string::npos) << r.out;
}
