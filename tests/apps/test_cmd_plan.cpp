// `lattice plan` as a user meets it: a dry run in one process (no mpirun, no
// data) that prints the report, and that fails with exactly the line
// `lattice train` prints under mpirun for the same config and rank count.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

using lattice::test::CmdResult;
CmdResult run(const std::string& args, const std::string& cwd, int ranks = 0) {
  return lattice::test::run_lattice(args, cwd, ranks);
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Under MPI an Error's line names the rank after the host ("host rank 0: ");
// plan has no rank.
std::string without_rank(const std::string& line) {
  return std::regex_replace(line, std::regex("^(lattice: error: [^ :]+) rank [0-9]+: "), "$1: ");
}

class CmdPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = lattice::test::make_temp_dir("cmdplan");
    std::ofstream(dir + "/tiny.yaml")
        << R"(model: { arch: gpt2, n_layer: 4, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 32 }
train: { steps: 10, global_batch: 8, micro_batch: 2, seq_len: 32 }
optimizer: { name: adamw, lr: 0.01 }
data: { train: "d/none_train_*.bin", tokenizer: bytes }
runtime: { seed: 7, threads: 1 }
)";
  }
  void TearDown() override { fs::remove_all(dir); }
  void expect_one_line_error(const CmdResult& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    for (const auto& n : needles) EXPECT_TRUE(has(r.out, n)) << "missing '" << n << "' in: " << r.out;
  }
  std::string dir;
};

}  // namespace

TEST_F(CmdPlan, PrintsTheReportWithoutMpiOrData) {
  CmdResult r = run("plan tiny.yaml", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s : {"on 1 rank(s)", "1 ranks: tp=1 pp=1 dp=1", "rank map", "groups (world ranks)",
                        "layer-to-stage map", "tie groups", "schedule table (1f1b)", "memory per rank"})
    EXPECT_TRUE(has(r.out, s)) << s << " missing in\n" << r.out;
  // The world: --world, or tp * pp * dp from the config (tp * pp when dp is derived).
  CmdResult w = run("plan tiny.yaml --world 8 parallel.tp=2 parallel.pp=2", dir);
  ASSERT_EQ(w.status, 0) << w.out;
  EXPECT_TRUE(has(w.out, "8 ranks: tp=2 pp=2 dp=2")) << w.out;
  EXPECT_TRUE(has(w.out, "\n  7        1   1   1\n")) << w.out;  // the last rank's coordinates
  CmdResult d = run("plan tiny.yaml parallel.pp=2 parallel.dp=2 --world=4", dir);
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_TRUE(has(d.out, "4 ranks: tp=1 pp=2 dp=2")) << d.out;
  EXPECT_TRUE(has(run("plan tiny.yaml parallel.pp=2", dir).out, "2 ranks: tp=1 pp=2 dp=1"));
  EXPECT_TRUE(has(run("plan tiny.yaml parallel.dp=2", dir).out, "2 ranks: tp=1 pp=1 dp=2"));
  // The model row: the MLP width, and grouped-query attention's key/value heads.
  EXPECT_TRUE(has(r.out, "4 layers, d_model 32, d_ff 128, 2 heads, vocabulary 260")) << r.out;
  CmdResult g = run("plan tiny.yaml model.arch=llama model.n_head=4 model.n_kv_head=2 model.d_ff=96", dir);
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_TRUE(has(g.out, "d_model 32, d_ff 96, 4 heads (2 key/value), vocabulary 260")) << g.out;
}

TEST_F(CmdPlan, PredictsGpt2SmallInGiB) {
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  CmdResult r = run(std::string("plan '") + src + "/configs/gpt2-small.yaml' parallel.pp=2", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "124,439,808 parameters")) << r.out;
  EXPECT_TRUE(has(r.out, "stage 1: layers 6-11 (6) + head, loss")) << r.out;
  EXPECT_TRUE(has(r.out, " GiB\n")) << r.out;
}

TEST_F(CmdPlan, BadArgumentsOneLine) {
  expect_one_line_error(run("plan", dir), {"no config file"});
  expect_one_line_error(run("plan tiny.yaml --world", dir), {"--world"});
  expect_one_line_error(run("plan tiny.yaml --world none", dir), {"--world", "none"});
  expect_one_line_error(run("plan tiny.yaml --world 0", dir), {"--world", "0"});
  // Above the bound: the message gives the range, not "positive" for a positive count.
  expect_one_line_error(run("plan tiny.yaml --world 16777217", dir), {"--world", "in [1, 16777216]", "16777217"});
  expect_one_line_error(run("plan tiny.yaml --fast", dir), {"--fast"});
  expect_one_line_error(run("plan nope.yaml", dir), {"nope.yaml"});
  expect_one_line_error(run("plan tiny.yaml model.n_layr=3", dir), {"model.n_layr"});
}

// The same config and rank count: plan's line is train's line under mpirun.
TEST_F(CmdPlan, LayoutErrorsAreTheLinesOfTrain) {
  struct Case {
    std::string overrides;
    int ranks;
    std::vector<std::string> needles;
  };
  for (const Case& c : std::vector<Case>{
           {"parallel.tp=2", 3, {"3 ranks", "tp (2)"}},
           {"parallel.dp=3", 2, {"parallel.dp", "dp (3)", "2 ranks"}},
           {"parallel.pp=2 parallel.microbatches=3", 2, {"global_batch", "microbatches (3)"}},
           {"parallel.pp=2 model.n_layer=6 parallel.schedule=interleaved parallel.virtual_stages=2", 2, {"n_layer"}},
           {"parallel.tp=2 model.n_head=1", 2, {"n_head", "tp"}}}) {
    SCOPED_TRACE(c.overrides);
    CmdResult plan = run("plan tiny.yaml --world " + std::to_string(c.ranks) + " " + c.overrides, dir);
    expect_one_line_error(plan, c.needles);
    CmdResult train = run("train tiny.yaml " + c.overrides, dir, c.ranks);
    EXPECT_EQ(plan.out, without_rank(train.out));
  }
}
