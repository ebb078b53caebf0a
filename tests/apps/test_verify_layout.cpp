// `lattice verify-layout` on every layout the Booster issue names: (tp, pp, dp)
// = (2,1,1), (1,2,1), (1,1,2), (2,2,1), (1,2,2), (2,1,2), (2,2,2), with 1F1B
// and interleaved 1F1B where pp > 1 and with ZeRO-1 where dp > 1, each under
// mpirun with its world size: a tiny GPT-2 (dropout on, tied embeddings)
// trains 20 steps against the single-rank reference and must PASS (relative
// loss difference <= 1e-5 at every step). The dp runs use small buckets, so
// the overlapped dp all-reduce is what is checked. Under fp16 (16-bit
// activations) at (2,2,1) the default tolerance is the 16-bit one (1e-3).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using lattice::test::CmdResult;

namespace {

struct Case {
  int tp, pp, dp;
  std::string schedule = "1f1b";
  int zero = 0;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const int layouts[][3] = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {1, 2, 2}, {2, 1, 2}, {2, 2, 2}};
  for (const auto& l : layouts)
    for (const char* schedule : {"1f1b", "interleaved"}) {
      if (std::string(schedule) == "interleaved" && l[1] == 1) continue;
      for (int zero : {0, 1}) {
        if (zero == 1 && l[2] == 1) continue;
        out.push_back({l[0], l[1], l[2], schedule, zero});
      }
    }
  return out;
}

}  // namespace

TEST(VerifyLayout, PassesOnEveryLayoutOfTheIssue) {
  const std::string dir = lattice::test::make_temp_dir("verify");
  std::string text;
  for (int i = 0; i < 600; ++i) text += "to be or not to be, that is the question " + std::to_string(i % 11) + "\n";
  std::ofstream(dir + "/a.txt") << text;
  CmdResult prep = lattice::test::run_lattice("data prepare --input a.txt --tokenizer bytes --out d/t", dir);
  ASSERT_EQ(prep.status, 0) << prep.out;
  std::ofstream(dir + "/v.yaml")
      << R"(model: { arch: gpt2, n_layer: 4, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 16,
         dropout: 0.1, tie_embeddings: true }
parallel: { dp_bucket_mb: 0.01 }
train: { steps: 20, global_batch: 8, micro_batch: 1, seq_len: 16 }
optimizer: { lr: 0.003, schedule: { warmup_steps: 3 } }
data: { train: "d/t_train_*.bin", tokenizer: bytes }
runtime: { seed: 11, threads: 1 }
)";
  for (const Case& c : cases()) {
    const std::string args = "verify-layout v.yaml parallel.tp=" + std::to_string(c.tp) +
                             " parallel.pp=" + std::to_string(c.pp) + " parallel.dp=" + std::to_string(c.dp) +
                             " parallel.schedule=" + c.schedule + " parallel.zero=" + std::to_string(c.zero) +
                             (c.schedule == "interleaved" ? " parallel.virtual_stages=2" : "");
    CmdResult r = lattice::test::run_lattice(args, dir, c.tp * c.pp * c.dp);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("   20 "), std::string::npos) << args << ": a row per step\n" << r.out;
  }
  // fp16 (16-bit activations) at tp 2 x pp 2: the default tolerance is the
  // 16-bit contract's, and the line says which it used.
  const std::string half = "verify-layout v.yaml parallel.tp=2 parallel.pp=2 runtime.precision=fp16";
  CmdResult r = lattice::test::run_lattice(half, dir, 4);
  EXPECT_EQ(r.status, 0) << half << "\n" << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(tolerance 1e-03)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  skipped\n"), std::string::npos) << "fp16 tables say which run skipped a step\n" << r.out;
  // A loss scale of 2^40 overflows the fp16 gradients of step 1 in both runs;
  // the backoff to 2^12 lets step 2 on. The table marks step 1 "both".
  const std::string overflow = half +
                               " train.steps=4 runtime.loss_scale.max=1.2e12 runtime.loss_scale.initial=1099511627776 "
                               "runtime.loss_scale.backoff_factor=3.7252902984619140625e-09";
  r = lattice::test::run_lattice(overflow, dir, 4);
  EXPECT_EQ(r.status, 0) << overflow << "\n" << r.out;
  EXPECT_NE(r.out.find("     both\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("skipped by one run only"), std::string::npos) << r.out;
  fs::remove_all(dir);
}
