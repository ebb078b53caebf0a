// The run directory's lock: one job at a time on a log.dir or checkpoint.dir.
// flock locks belong to an open file description, so a second DirLock in
// this process conflicts with the first exactly as a second job would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "booster/run_dir.h"
#include "support/error_text.h"
#include "support/test_support.h"

namespace lattice {
namespace {

namespace fs = std::filesystem;
using test::error_text;

Config tiny(const std::string& dir) {
  return parse_config(
      "model: { arch: gpt2, n_layer: 1, n_head: 1, d_model: 8, vocab_size: 257, max_seq_len: 8 }\n"
      "train: { steps: 1, global_batch: 1, micro_batch: 1, seq_len: 8 }\n"
      "optimizer: { lr: 0.001 }\n"
      "data: { train: x, tokenizer: bytes }\n"
      "log: { dir: " +
          dir + "/run }\n",
      "tiny.yaml");
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

}  // namespace
}  // namespace lattice
