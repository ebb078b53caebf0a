// The run directory's lock: one job at a time on a log.dir or checkpoint.dir.
// flock locks belong to an open file description, so a second DirLock in
// this process conflicts with the first exactly as a second job would.
// Also: the config an older Lattice wrote (config.yaml, a checkpoint's
// trainer_state.json) still compares equal to the config it ran.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "booster/checkpointing.h"
#include "booster/run_dir.h"
#include "support/error_text.h"
#include "support/test_support.h"

namespace lattice {
namespace {

namespace fs = std::filesystem;
using test::error_text;

Config tiny(const std::string& dir, const std::vector<std::string>& overrides = {}) {
  return parse_config(
      "model: { arch: gpt2, n_layer: 1, n_head: 1, d_model: 8, vocab_size: 257, max_seq_len: 8 }\n"
      "train: { steps: 1, global_batch: 1, micro_batch: 1, seq_len: 8 }\n"
      "optimizer: { lr: 0.001 }\n"
      "data: { train: x, tokenizer: bytes }\n"
      "log: { dir: " +
          dir + "/run }\n",
      "tiny.yaml", overrides);
}

// to_yaml(cfg) as Lattice wrote it before the optimizer's keys were its own:
// every optimizer key, the other optimizer's at `value`.
std::string older_yaml(const Config& cfg, const std::string& value) {
  std::string y = to_yaml(cfg);
  const size_t at = y.find("  weight_decay:");
  EXPECT_NE(at, std::string::npos) << y;
  if (cfg.optimizer.name == OptimizerName::sgd) {
    y.insert(at, "  betas: [" + value + ", " + value + "]\n  eps: " + value + "\n");
  } else {
    y.insert(y.find('\n', y.find("  grad_clip:", at)) + 1, "  momentum: " + value + "\n");
  }
  return y;
}

TEST(DirLock, ASecondJobOnTheSameDirectoriesIsRefusedUntilTheFirstEnds) {
  const std::string dir = test::make_temp_dir("lock");
  const Config cfg = tiny(dir);
  {
    std::vector<DirLock> first = lock_run_dirs(cfg);
    EXPECT_EQ(first.size(), 2u);  // log.dir and its checkpoints/
    EXPECT_TRUE(fs::exists(dir + "/run/lattice.lock"));
    EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/lattice.lock"));
    const std::string msg = error_text([&] { lock_run_dirs(cfg); });
    EXPECT_HAS(msg, "log.dir: '" + dir + "/run' is in use by a running job (host ");
    EXPECT_HAS(msg, "pid " + std::to_string(::getpid()) + ", since ");
    // Another log.dir on the same checkpoint.dir: refused at checkpoint.dir.
    Config other = cfg;
    other.log.dir = dir + "/other";
    EXPECT_HAS(error_text([&] { lock_run_dirs(other); }),
               "checkpoint.dir: '" + dir + "/run/checkpoints' is in use by a running job");
  }
  EXPECT_NO_THROW(lock_run_dirs(cfg));  // the first job ended: its locks went with it
}

// A checkpoint or run directory an older Lattice wrote holds the other
// optimizer's keys too, at their defaults or at a value the run ignored:
// resuming it, loading its model, or starting its run again is as before.
TEST(OlderRunConfig, TheOtherOptimizersKeysDoNotStopAResume) {
  const std::string dir = test::make_temp_dir("older");
  for (const std::vector<std::string>& o : {std::vector<std::string>{}, {"optimizer.name=sgd"}}) {
    SCOPED_TRACE(testing::PrintToString(o));
    const Config cfg = tiny(dir, o);
    for (const std::string value : {cfg.optimizer.name == OptimizerName::sgd ? "1.0e-08" : "0.9", "0.5"}) {
      TrainerState state;
      state.step = 3;
      state.config = older_yaml(cfg, value);
      EXPECT_NO_THROW(check_resume_config(cfg, state, dir + "/ck/step_0000003")) << state.config;
      EXPECT_NO_THROW(check_checkpoint_model(cfg, state, dir + "/ck/step_0000003")) << state.config;
    }
    // The keys this optimizer reads are still compared.
    TrainerState other;
    other.config = older_yaml(parse_config(to_yaml(cfg), "c.yaml", {"optimizer.weight_decay=0.5"}), "0.5");
    EXPECT_HAS(error_text([&] { check_resume_config(cfg, other, dir + "/ck/step_0000003"); }),
               "optimizer.weight_decay: 0.1 here, but checkpoint " + dir + "/ck/step_0000003 was written with 0.5");
  }
  // The run started again before its first checkpoint: its config.yaml is this config's.
  const Config cfg = tiny(dir);
  fs::create_directories(cfg.log.dir);
  std::ofstream(cfg.log.dir + "/config.yaml") << older_yaml(cfg, "0.9");
  std::ofstream(cfg.log.dir + "/metrics.jsonl") << "{\"step\": 1, \"loss\": 5.0}\n";
  const RunDir r = prepare_run_dir(cfg, RunInfo{});
  EXPECT_HAS(r.note, "wrote no checkpoint; it starts again from step 1");
  EXPECT_TRUE(fs::exists(cfg.log.dir + "/metrics.jsonl.1"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lattice
