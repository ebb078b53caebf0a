// The lattice binary as a user meets it: bad input gets one line naming the
// key or file and a non-zero exit; a small job trains end to end and writes
// the run directory of ARCHITECTURE.md §5.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/sysinfo.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "core/blas_core.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

using lattice::test::CmdResult;
std::string bin() { return lattice::test::lattice_bin(); }
CmdResult run(const std::string& args, const std::string& cwd, int ranks = 0) {
  return lattice::test::run_lattice(args, cwd, ranks);
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// A tiny job over shards under `dir` (bytes tokenizer).
std::string tiny_config(const std::string& extra = "") {
  return R"(model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 32 }
train: { steps: 40, global_batch: 8, micro_batch: 4, seq_len: 32, eval_every: 20, eval_steps: 2 }
optimizer: { name: adamw, lr: 0.01, schedule: { warmup_steps: 5 } }
data: { train: "d/t_train_*.bin", val: "d/t_val_*.bin", tokenizer: bytes }
runtime: { seed: 7, threads: 1 }
)" + extra;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = lattice::test::make_temp_dir("cli");
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
    write(dir + "/a.txt", text);
    write(dir + "/b.txt", text.substr(0, 4000));
    CmdResult r = run("data prepare --input a.txt b.txt --tokenizer bytes --out d/t --val-tokens 2000", dir);
    ASSERT_EQ(r.status, 0) << r.out;
    write(dir + "/tiny.yaml", tiny_config());
  }
  void TearDown() override { fs::remove_all(dir); }
  // Expect a failure with exactly one line that contains every `needle`.
  void expect_one_line_error(const CmdResult& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    for (const auto& n : needles) EXPECT_NE(r.out.find(n), std::string::npos) << "missing '" << n << "' in: " << r.out;
  }
  std::string dir;
};

}  // namespace

// data prepare into a prefix that holds an earlier prepare's shards replaces
// them (design.md); it says so, where before it printed nothing about it.
TEST_F(Cli, APrepareOverAnEarlierOneSaysSo) {
  CmdResult fresh = run("data prepare --input a.txt --tokenizer bytes --out d/new --val-tokens 2000", dir);
  ASSERT_EQ(fresh.status, 0) << fresh.out;
  EXPECT_EQ(fresh.out.find("note:"), std::string::npos) << fresh.out;
  CmdResult again = run("data prepare --input a.txt --tokenizer bytes --out d/new --val-tokens 2000", dir);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("note: d/new had shards of an earlier prepare: 2 replaced, 0 removed"), std::string::npos)
      << again.out;
  CmdResult no_val = run("data prepare --input a.txt --tokenizer bytes --out d/new", dir);  // no val shard now
  ASSERT_EQ(no_val.status, 0) << no_val.out;
  EXPECT_NE(no_val.out.find("1 replaced, 1 removed"), std::string::npos) << no_val.out;
  EXPECT_FALSE(fs::exists(dir + "/d/new_val_000000.bin"));
}

TEST_F(Cli, MissingConfigFile) { expect_one_line_error(run("train nope.yaml", dir), {"nope.yaml"}); }

TEST_F(Cli, UnknownKeyNamesKeyAndLine) {
  write(dir + "/bad.yaml", tiny_config("log: { evry: 5 }\n"));
  expect_one_line_error(run("train bad.yaml", dir), {"bad.yaml:6", "log.evry", "every"});
}

TEST_F(Cli, WrongTypeNamesKey) {
  expect_one_line_error(run("train tiny.yaml train.steps=many", dir), {"train.steps", "many"});
}

// The shards record their tokenizer (lattice data prepare): training them
// under another data.tokenizer is one line with both fixes.
TEST_F(Cli, ShardsOfAnotherTokenizerAreRefused) {
  expect_one_line_error(run("train tiny.yaml data.tokenizer=gpt2 model.vocab_size=50304", dir),
                        {"data.train: shard d/t_train_000000.bin holds bytes tokens", "data.tokenizer is gpt2",
                         "set data.tokenizer: bytes, or prepare the data again with --tokenizer gpt2"});
}

TEST_F(Cli, MissingDataFile) {
  expect_one_line_error(run("train tiny.yaml data.train=d/nothing_*.bin", dir), {"data.train", "d/nothing_*.bin"});
  EXPECT_FALSE(fs::exists(dir + "/runs/tiny/metrics.jsonl"));
}

TEST_F(Cli, ShardWithBadMagic) {
  std::string shard = dir + "/d/t_train_000000.bin";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  int32_t bad = 12345;
  f.write(reinterpret_cast<const char*>(&bad), 4);
  f.close();
  expect_one_line_error(run("train tiny.yaml", dir), {"t_train_000000.bin", "magic"});
}

TEST_F(Cli, TokenIdBeyondVocab) {
  // Bytes go up to 255 and <|endoftext|> is 256: a vocabulary of 200 cannot hold them.
  expect_one_line_error(run("train tiny.yaml model.vocab_size=200", dir), {"vocab_size", "200"});
}

TEST_F(Cli, UnknownCommandAndOption) {
  expect_one_line_error(run("trian tiny.yaml", dir), {"trian"});
  expect_one_line_error(run("train tiny.yaml --fast", dir), {"--fast"});
  expect_one_line_error(run("data prepare --input a.txt --tokenizer klingon --out d/x", dir), {"klingon"});
  expect_one_line_error(run("data prepare --input missing.txt --tokenizer bytes --out d/x", dir), {"missing.txt"});
}

// --help (or -h) after any command prints the usage and exits 0, as it does alone.
TEST_F(Cli, HelpAfterACommandIsTheUsage) {
  for (const char* args : {"--help", "train --help", "sample -h", "data prepare --help", "plan tiny.yaml --help"}) {
    CmdResult r = run(args, dir);
    EXPECT_EQ(r.status, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find("usage: lattice COMMAND"), std::string::npos) << args << ": " << r.out;
  }
}

TEST_F(Cli, PrintConfigIsTheEffectiveConfig) {
  CmdResult r = run("train tiny.yaml train.steps=7 --print-config", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("steps: 7"), std::string::npos) << r.out;
  write(dir + "/again.yaml", r.out);
  CmdResult r2 = run("train again.yaml --print-config", dir);
  auto body = [](const std::string& s) { return s.substr(s.find('\n')); };  // past the header comment
  EXPECT_EQ(body(r2.out), body(r.out));
}

TEST_F(Cli, TrainsAndWritesTheRunDirectory) {
  CmdResult r = run("train tiny.yaml", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("step 40/40"), std::string::npos) << r.out;
  const std::string run_dir = dir + "/runs/tiny";
  ASSERT_TRUE(fs::exists(run_dir + "/config.yaml"));
  std::ifstream info_file(run_dir + "/run_info.json");
  auto info = nlohmann::json::parse(info_file);
  for (const char* k : {"version", "git_commit", "build", "blas", "mpi", "layout"}) EXPECT_TRUE(info.contains(k)) << k;

  std::ifstream m(run_dir + "/metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> train, eval;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    (j.contains("val_loss") ? eval : train).push_back(j);
  }
  ASSERT_EQ(train.size(), 40u);  // log.every defaults to 1
  for (const char* k :
       {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms", "mfu", "peak_mem_bytes", "skipped"})
    EXPECT_TRUE(train[0].contains(k)) << k;
  EXPECT_EQ(train[0]["step"], 1);
  EXPECT_EQ(train[0]["tokens"], 8 * 32);
  EXPECT_LT(train.back()["loss"].get<double>(), train[0]["loss"].get<double>() - 1.0);
  ASSERT_EQ(eval.size(), 2u);  // steps 20 and 40
  EXPECT_FALSE(eval[0].contains("loss"));
  EXPECT_LT(eval[1]["val_loss"].get<double>(), eval[0]["val_loss"].get<double>() + 0.5);

  // The run ended with a checkpoint of step 40; the same command again resumes
  // it and finds nothing left to do, and with resume: never its checkpoints
  // are refused. Nothing in it is touched either way.
  EXPECT_TRUE(fs::exists(run_dir + "/checkpoints/step_0000040/manifest.json"));
  auto size = fs::file_size(run_dir + "/metrics.jsonl");
  CmdResult again = run("train tiny.yaml", dir);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  EXPECT_EQ(fs::file_size(run_dir + "/metrics.jsonl"), size);
  expect_one_line_error(run("train tiny.yaml checkpoint.resume=never", dir),
                        {"checkpoint.dir", "already holds the checkpoints of another run"});
  EXPECT_EQ(fs::file_size(run_dir + "/metrics.jsonl"), size);
}

// lattice eval scores a checkpoint on data.val as the training run's own
// evaluation did: the same number on one rank, within the layout contract's
// tolerance in another layout under mpirun; it writes nothing, and a
// checkpoint of another model is one line naming the key.
TEST_F(Cli, EvalScoresACheckpointAsTrainingDid) {
  CmdResult r = run("train tiny.yaml train.steps=20", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string run_dir = dir + "/runs/tiny";
  double trained = -1;
  {
    std::ifstream m(run_dir + "/metrics.jsonl");
    for (std::string line; std::getline(m, line);)
      if (auto j = nlohmann::json::parse(line); j.contains("val_loss")) trained = j["val_loss"].get<double>();
  }
  ASSERT_GT(trained, 0);
  const auto size = fs::file_size(run_dir + "/metrics.jsonl");
  auto val_loss = [](const CmdResult& e) {
    const size_t at = e.out.find("val_loss ");
    return at == std::string::npos ? -1.0 : std::stod(e.out.substr(at + 9));
  };
  CmdResult one = run("eval tiny.yaml train.steps=20", dir);
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_NE(one.out.find("checkpoint runs/tiny/checkpoints/step_0000020 (step 20)"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("2 batch(es) of 8 x 32 tokens"), std::string::npos) << one.out;
  EXPECT_NEAR(val_loss(one), trained, 1e-6 * trained) << one.out;  // metrics.jsonl rounds to 8 digits
  // Any layout: tp=2 under mpirun, from the run directory given as --checkpoint.
  CmdResult tp = run("eval tiny.yaml parallel.tp=2 --checkpoint runs/tiny", dir, 2);
  ASSERT_EQ(tp.status, 0) << tp.out;
  EXPECT_NEAR(val_loss(tp), val_loss(one), 1e-5 * val_loss(one)) << tp.out;
  // Only data.val is read: a machine without the training shards evaluates too.
  CmdResult no_train = run("eval tiny.yaml data.train=nowhere/x_*.bin", dir);
  ASSERT_EQ(no_train.status, 0) << no_train.out;
  EXPECT_EQ(val_loss(no_train), val_loss(one)) << no_train.out;
  // --batches 1 scores less of the set: another number.
  CmdResult b1 = run("eval tiny.yaml --batches 1", dir);
  ASSERT_EQ(b1.status, 0) << b1.out;
  EXPECT_NE(val_loss(b1), val_loss(one)) << b1.out;
  // data.val's 2000 tokens are 62 windows of 32 + 1: 7 batches of 8 read 56 of
  // them; --batches 8 reads 64, wrapping around to windows 0 and 1 (only
  // --batches 0 masks the rows past the end), and says so, as 9 does (they
  // printed "N batch(es)" alone, and 8 was said to read the whole set once).
  CmdResult b7 = run("eval tiny.yaml --batches 7", dir), b8 = run("eval tiny.yaml --batches 8", dir);
  ASSERT_EQ(b7.status, 0) << b7.out;
  ASSERT_EQ(b8.status, 0) << b8.out;
  EXPECT_EQ(b7.out.find("note: --batches"), std::string::npos) << b7.out;
  EXPECT_NE(b8.out.find("note: --batches 8 x global batch 8 windows, but data.val holds 62: the evaluation wraps "
                        "around and reads some of them more than once — --batches 0 reads each window once (7 batches "
                        "read none twice)"),
            std::string::npos)
      << b8.out;
  EXPECT_NE(val_loss(b8), val_loss(one)) << b8.out;
  EXPECT_EQ(fs::file_size(run_dir + "/metrics.jsonl"), size);  // nothing written
  expect_one_line_error(run("eval tiny.yaml model.n_layer=3", dir),
                        {"model.n_layer: 3 here, but the model in checkpoint", "has 2"});
  expect_one_line_error(run("eval tiny.yaml log.dir=elsewhere", dir),
                        {"checkpoint.dir: 'elsewhere/checkpoints' holds no complete checkpoint", "--checkpoint PATH"});
  expect_one_line_error(run("eval tiny.yaml --batches -1", dir), {"--batches", "'-1'"});
  // an empty --checkpoint (an unset shell variable) is not "no --checkpoint": it scored the newest one
  expect_one_line_error(run("eval tiny.yaml --checkpoint=", dir), {"eval: --checkpoint expects a path, got ''"});
  // eval's own checks, not train.eval_every's: an empty data.val is named as
  // eval's need, and train.eval_steps=0 is the whole set, as documented.
  expect_one_line_error(run("eval tiny.yaml data.val=", dir),
                        {"data.val: is empty: eval scores the validation shards"});
  CmdResult all = run("eval tiny.yaml train.eval_steps=0", dir);
  ASSERT_EQ(all.status, 0) << all.out;
  EXPECT_NE(all.out.find("(the whole set of data.val"), std::string::npos) << all.out;
}

// checkpoint.init_from starts a new run from another run's weights with its
// own settings (here another learning rate): a fresh optimizer from step 1,
// in any layout; started again it resumes its own checkpoint instead.
TEST_F(Cli, InitFromStartsANewRunFromAnotherRunsWeights) {
  ASSERT_EQ(run("train tiny.yaml train.steps=20", dir).status, 0);
  auto first_loss = [&](const std::string& run_dir) {
    std::ifstream m(dir + "/" + run_dir + "/metrics.jsonl");
    std::string line;
    std::getline(m, line);
    auto j = nlohmann::json::parse(line.empty() ? "{}" : line);
    return j.contains("loss") && j["step"] == 1 ? j["loss"].get<double>() : -1.0;
  };
  const std::string ft = "train tiny.yaml train.steps=6 optimizer.lr=0.001 checkpoint.init_from=runs/tiny";
  ASSERT_EQ(run("train tiny.yaml train.steps=6 optimizer.lr=0.001 log.dir=fresh", dir).status, 0);
  CmdResult r = run(ft + " log.dir=ft", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("initialized from runs/tiny/checkpoints/step_0000020 (checkpoint.init_from; step 20"),
            std::string::npos)
      << r.out;
  const double fresh = first_loss("fresh"), init = first_loss("ft");
  ASSERT_GT(init, 0);
  EXPECT_LT(init, fresh - 0.5) << "step 1 from the trained weights: " << init << ", from scratch: " << fresh;
  CmdResult pp = run(ft + " log.dir=ft_pp parallel.pp=2", dir, 2);
  ASSERT_EQ(pp.status, 0) << pp.out;
  EXPECT_NEAR(first_loss("ft_pp"), init, 1e-5 * init) << pp.out;
  CmdResult again = run(ft + " log.dir=ft", dir);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("initialized from"), std::string::npos) << again.out;
  expect_one_line_error(run(ft + " log.dir=ft_bad model.n_head=1", dir),
                        {"model.n_head: 1 here, but the model in checkpoint", "has 2"});
  expect_one_line_error(run(ft + " log.dir=ft_bad checkpoint.init_from=nope", dir),
                        {"checkpoint.init_from", "'nope' does not exist"});
  // verify-layout checks the layout from the same weights (it started from
  // fresh ones without a word): both runs' step 1 is ft's.
  CmdResult v =
      run("verify-layout tiny.yaml train.steps=6 optimizer.lr=0.001 checkpoint.init_from=runs/tiny "
          "parallel.tp=2 runtime.threads=1",
          dir, 2);
  ASSERT_EQ(v.status, 0) << v.out;
  EXPECT_NE(v.out.find("both from the weights of runs/tiny/checkpoints/step_0000020 (checkpoint.init_from)"),
            std::string::npos)
      << v.out;
  std::smatch row;
  ASSERT_TRUE(std::regex_search(v.out, row, std::regex(R"(\n\s+1\s+(\S+)\s+(\S+))"))) << v.out;
  EXPECT_NEAR(std::stod(row[1]), init, 1e-6 * init) << v.out;  // the one-rank run
  EXPECT_NEAR(std::stod(row[2]), init, 1e-5 * init) << v.out;  // the layout
}

// A checkpoint that does not verify is one line saying why, for every command
// that loads one: eval --checkpoint and checkpoint.init_from loaded a step
// directory with a corrupted file as whatever bytes it held (val_loss nan, a
// run of skipped steps), and a run directory whose only checkpoint is damaged
// was said to hold "no complete checkpoint", without the reason.
TEST_F(Cli, ACheckpointThatDoesNotVerifyIsOneLineEverywhere) {
  ASSERT_EQ(run("train tiny.yaml train.steps=6", dir).status, 0);
  const std::string step = "runs/tiny/checkpoints/step_0000006";
  {
    std::fstream f(dir + "/" + step + "/model-00001-of-00001.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-16, std::ios::end);
    f.write("\x7f\x7f\x7f\x7f", 4);
  }
  const std::string corrupted = "model-00001-of-00001.safetensors: checksum";
  expect_one_line_error(run("eval tiny.yaml --checkpoint " + step, dir), {"eval --checkpoint", corrupted});
  expect_one_line_error(run("train tiny.yaml log.dir=ft checkpoint.init_from=" + step, dir),
                        {"checkpoint.init_from", corrupted});
  EXPECT_FALSE(fs::exists(dir + "/ft/metrics.jsonl"));
  expect_one_line_error(run("sample runs/tiny --tokens 2", dir), {"runs/tiny holds no intact checkpoint", corrupted});
  expect_one_line_error(run("eval tiny.yaml --checkpoint runs/tiny", dir), {"holds no intact checkpoint", corrupted});
  fs::remove(dir + "/" + step + "/manifest.json");
  expect_one_line_error(run("convert --to-hf " + step + " hf", dir), {"manifest.json: missing"});
}

// checkpoint.at_end=false (benchmarks): no checkpoint at train.steps, the
// periodic ones still; started again, the run resumes the newest and trains
// the last steps again, its metrics cut back to that checkpoint.
TEST_F(Cli, CheckpointAtEndFalseSkipsOnlyTheFinalCheckpoint) {
  const std::string cmd = "train tiny.yaml train.steps=7 checkpoint.every=3 checkpoint.at_end=false log.dir=noend";
  CmdResult r = run(cmd, dir);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string ckpts = dir + "/noend/checkpoints/";
  EXPECT_TRUE(fs::exists(ckpts + "step_0000003/manifest.json"));
  EXPECT_TRUE(fs::exists(ckpts + "step_0000006/manifest.json"));
  EXPECT_FALSE(fs::exists(ckpts + "step_0000007"));
  CmdResult again = run(cmd, dir);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("resuming from noend/checkpoints/step_0000006"), std::string::npos) << again.out;
  std::ifstream m(dir + "/noend/metrics.jsonl");
  int step7 = 0;
  for (std::string line; std::getline(m, line);) step7 += nlohmann::json::parse(line)["step"] == 7;
  EXPECT_EQ(step7, 2) << "step 7's train and eval lines, once each";
  // An early end (stop_at_step) still writes its checkpoint: the run must resume.
  ASSERT_EQ(run(cmd + " log.dir=early train.stop_at_step=5", dir).status, 0);
  EXPECT_TRUE(fs::exists(dir + "/early/checkpoints/step_0000005/manifest.json"));
}

// A run whose every step was skipped (fp16 overflow at a loss scale that
// cannot back off) did not train: it says so, after the summary.
TEST_F(Cli, ARunThatSkippedEveryStepSaysSo) {
  const std::string fp16 = " train.eval_every=0 optimizer.schedule.warmup_steps=0 runtime.precision=fp16 ";
  CmdResult r = run("train tiny.yaml train.steps=3 log.dir=allskip" + fp16 +
                        "runtime.loss_scale.initial=1e38 runtime.loss_scale.max=1e38 runtime.loss_scale.min=1e38",
                    dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("warning: all 3 step(s) this run ran were skipped"), std::string::npos) << r.out;
  CmdResult ok = run("train tiny.yaml train.steps=3 log.dir=noskip" + fp16, dir);
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(ok.out.find("warning: all"), std::string::npos) << ok.out;
}

// peak_mem_bytes is training's: the start-up measurement of the CPU's peak
// FLOP/s (runtime.peak_flops 0, three 1024 x 1024 matrices, more than this
// model) is not in it, so it equals a run that skips the measurement.
TEST_F(Cli, PeakMemoryLeavesOutThePeakFlopsMeasurement) {
  std::vector<int64_t> peaks;
  for (const char* flops : {"0", "1e11"}) {
    const std::string log = std::string("pf") + flops;
    CmdResult r =
        run("train tiny.yaml train.steps=6 train.eval_every=0 log.dir=" + log + " runtime.peak_flops=" + flops, dir);
    ASSERT_EQ(r.status, 0) << r.out;
    std::ifstream m(dir + "/" + log + "/metrics.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(m, line));
    peaks.push_back(nlohmann::json::parse(line)["peak_mem_bytes"].get<int64_t>());
  }
  EXPECT_EQ(peaks[0], peaks[1]);
  EXPECT_LT(peaks[0], 3 * 1024 * 1024 * 4);
}

// runtime.threads 0 is the OpenMP default: OMP_NUM_THREADS when it is set
// (as `mpirun -x OMP_NUM_THREADS=1` sets it for every rank), not every core.
TEST_F(Cli, ThreadsZeroTakesOmpNumThreads) {
  const std::string one_step = "train tiny.yaml train.steps=1 optimizer.schedule.warmup_steps=0 train.eval_every=0 ";
  for (const std::string n : {"1", "2"}) {
    CmdResult r =
        lattice::test::run_lattice(one_step + "runtime.threads=0 log.dir=t" + n, dir, 0, "OMP_NUM_THREADS=" + n);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("1 rank(s) x " + n + " thread(s)"), std::string::npos) << r.out;
  }
  CmdResult r = lattice::test::run_lattice(one_step + "runtime.threads=2 log.dir=t3", dir, 0, "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 rank(s) x 2 thread(s)"), std::string::npos) << r.out;  // the key wins
}

// OpenBLAS releases that do not know a CPU run their SSE3 kernels on it
// (Debian 12's on Sapphire and Emerald Rapids); lattice restarts with the set
// the CPU's instructions allow, unless OPENBLAS_CORETYPE says otherwise.
TEST_F(Cli, RunsTheOpenBlasKernelsTheCpuAllows) {
  const std::string one_step =
      "train tiny.yaml train.steps=1 optimizer.schedule.warmup_steps=0 train.eval_every=0 log.dir=";
  auto info = [&](const std::string& d) {
    return nlohmann::json::parse(std::ifstream(dir + "/" + d + "/run_info.json"));
  };
  CmdResult a = lattice::test::run_lattice(one_step + "auto", dir, 0, "-u OPENBLAS_CORETYPE");
  ASSERT_EQ(a.status, 0) << a.out;
  const std::string core = info("auto")["blas_core"], note = info("auto")["blas_core_note"];
  const std::string best = lattice::better_blas_core("Prescott", lattice::host_cpu_isa());  // "" without AVX
  if (!best.empty()) {
    EXPECT_FALSE(lattice::blas_core_is_pre_avx(core)) << core << " on a CPU that runs " << best;
  }
  EXPECT_EQ(note.empty(), a.out.find("blas: OpenBLAS picked its") == std::string::npos) << a.out;
  if (!note.empty()) {
    EXPECT_NE(note.find("OPENBLAS_CORETYPE=" + core), std::string::npos) << note;
  }

  CmdResult b = lattice::test::run_lattice(one_step + "user", dir, 0, "OPENBLAS_CORETYPE=Prescott");  // the user's
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_EQ(info("user")["blas_core"], "Prescott");
  EXPECT_EQ(info("user")["blas_core_note"], "");
  EXPECT_EQ(b.out.find("blas:"), std::string::npos) << b.out;
}

// More threads than the host has processors ran several times slower
// without a word (runtime.threads is capped at 64, not at the cores).
TEST_F(Cli, MoreThreadsThanProcessorsAreNoted) {
  const std::string one_step = "train tiny.yaml train.steps=1 optimizer.schedule.warmup_steps=0 train.eval_every=0 ";
  const int procs = get_nprocs();
  if (procs >= 64) GTEST_SKIP() << procs << " processors: 64 threads fit";
  CmdResult many = run(one_step + "runtime.threads=64 log.dir=t64", dir);
  ASSERT_EQ(many.status, 0) << many.out;
  EXPECT_NE(many.out.find(fmt::format("runs 64 threads on {} processors", procs)), std::string::npos) << many.out;
  CmdResult one = run(one_step + "runtime.threads=1 log.dir=t1", dir);
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_EQ(one.out.find("note: host"), std::string::npos) << one.out;
}

TEST_F(Cli, SameConfigIsBitwiseReproducible) {
  CmdResult a = run("train tiny.yaml train.steps=5 log.dir=ra", dir);
  CmdResult b = run("train tiny.yaml train.steps=5 log.dir=rb", dir);
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  auto losses = [&](const std::string& d) {
    std::ifstream m(dir + "/" + d + "/metrics.jsonl");
    std::string line, out;
    while (std::getline(m, line)) out += nlohmann::json::parse(line)["loss"].dump() + " ";
    return out;
  };
  EXPECT_EQ(losses("ra"), losses("rb"));
}

// Under mpirun: the layout errors of the tensor-parallel issue, one line each.
TEST_F(Cli, LayoutErrorsUnderMpirun) {
  expect_one_line_error(run("train tiny.yaml parallel.tp=2 model.n_head=1", dir, 2), {"n_head", "tp"});
  expect_one_line_error(run("train tiny.yaml parallel.tp=2", dir, 3), {"3 ranks", "tp (2)"});
  expect_one_line_error(run("train tiny.yaml parallel.order=[tp,xp,pp]", dir, 2), {"parallel.order", "xp"});
  expect_one_line_error(run("train tiny.yaml parallel.order=[tp,tp,pp]", dir, 2), {"parallel.order", "tp"});
}

// Ranks started with different configs (per-host files, an MPMD launch) are
// refused before anything runs: before, a different learning rate trained
// silently wrong and a different model shape crashed in MPI.
TEST_F(Cli, RanksWithDifferentConfigsAreRefused) {
  write(dir + "/other.yaml", tiny_config());
  for (const std::string& cmd : {std::string("train"), std::string("verify-layout")}) {
    const std::string common = cmd + " tiny.yaml parallel.tp=2 log.dir=mpmd";
    // rank 0 as given, rank 1 with one key changed (run_lattice puts `-np 1 BIN` before the args)
    CmdResult r = run(common + " : -np 1 '" + bin() + "' " + common + " optimizer.lr=0.001", dir, 1);
    expect_one_line_error(
        r, {"tiny.yaml:3:", "optimizer.lr: 0.01 on rank 0 but 0.001 on rank 1", "every rank must run the same config"});
    r = run(common + " : -np 1 '" + bin() + "' " + common + " model.n_layer=3", dir, 1);
    expect_one_line_error(r, {"model.n_layer: 2 on rank 0 but 3 on rank 1"});
  }
  EXPECT_FALSE(fs::exists(dir + "/mpmd"));  // nothing written
  // The same settings from another file are the same config.
  CmdResult same = run("train tiny.yaml parallel.tp=2 train.steps=6 log.dir=same : -np 1 '" + bin() +
                           "' train other.yaml parallel.tp=2 train.steps=6 log.dir=same",
                       dir, 1);
  EXPECT_EQ(same.status, 0) << same.out;
}

// A rank that never joins MPI's start (here it stops itself before it starts
// lattice) kept the others in MPI_Init for ever; runtime.comm_timeout_s bounds it.
TEST_F(Cli, ARankThatNeverStartsEndsTheJobAtTheTimeout) {
  const std::string args = "train tiny.yaml parallel.tp=2 runtime.comm_timeout_s=3 log.dir=stalled";
  const auto start = std::chrono::steady_clock::now();
  CmdResult r = run(args + " : -np 1 sh -c \"kill -STOP \\$\\$; exec '" + bin() + "' " + args + "\"", dir, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_one_line_error(r, {"rank 0: MPI start-up did not complete within 3 s (runtime.comm_timeout_s)"});
  EXPECT_LT(seconds, 60) << r.out;
}

// A limit past 1e9 s means "no limit" for every wait; the start's watchdog
// converted it to nanoseconds itself, overflowed, and ended every job with
// runtime.comm_timeout_s=1e10 at once ("did not complete within 1e+10 s").
TEST_F(Cli, AHugeCommTimeoutNeverFiresAtTheStart) {
  CmdResult r =
      run("train tiny.yaml parallel.tp=2 train.steps=1 optimizer.schedule.warmup_steps=0 train.eval_every=0 "
          "runtime.comm_timeout_s=1e10 log.dir=patient",
          dir, 2);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("did not complete"), std::string::npos) << r.out;
}

// `sh -c "...` that starts lattice as this rank and stops it (SIGSTOP) once
// the run's first step is logged in LOG_DIR/metrics.jsonl, so the stop comes
// mid-run however slowly the job starts (the watcher gives up after 60 s).
// The stopped rank's output goes to LOG_DIR.stopped.out: when the job ends,
// Open MPI resumes it (SIGCONT before SIGTERM), and for that moment its
// shared-memory transport may read from a rank already gone and print
// "[host:pid] Read -1, expected N, errno = 3" (Open MPI's line, not ours),
// which made the one-line check flaky. The report under test is the others'.
std::string stopped_after_step_1(const std::string& log_dir) {
  return "sh -c \"exec >" + log_dir + ".stopped.out 2>&1; (n=0; while [ ! -s " + log_dir +
         "/metrics.jsonl ] && [ \\$n -lt 600 ]; do n=\\$((n + 1)); " +
         "sleep 0.1; done; kill -STOP \\$\\$) >/dev/null 2>&1 & exec '" + bin() + "' ";
}

// Runs `train ARGS log.dir=LOG_DIR` on `ranks` + 1 ranks, the last one stopped
// after step 1; the job must fail: returns its output from the error line on.
std::string error_with_last_rank_stopped(const std::string& dir, const std::string& args, const std::string& log_dir,
                                         int ranks) {
  const std::string a = "train tiny.yaml " + args +
                        " train.steps=100000 runtime.comm_timeout_s=3 "
                        "runtime.peak_flops=1e9 log.dir=" +
                        log_dir;
  CmdResult r = run(a + " : -np 1 " + stopped_after_step_1(log_dir) + a + "\"", dir, ranks);
  EXPECT_NE(r.status, 0) << r.out;
  return r.out.substr(std::min(r.out.size(), r.out.find("lattice: error:")));
}

// A rank stopped mid-run left the others' report naming only the group; the
// roll call names the rank that does not answer (comm/roll_call.h).
TEST_F(Cli, ACollectiveTimeoutNamesTheStoppedRank) {
  const std::string error = error_with_last_rank_stopped(dir, "parallel.dp=2", "stopped", 1);
  EXPECT_EQ(lines(error), 1) << error;
  // Which collective rank 0 waits in depends on where rank 1 stopped: mostly
  // the dp gradient all-reduce, under load sometimes a world one (the step's
  // metrics), whose group holds the same two ranks.
  EXPECT_TRUE(std::regex_search(
      error, std::regex(R"(rank 0: all_reduce on group (dp|world) \(world ranks 0,1\) timed out after 3 s)")))
      << error;
  for (const char* s : {"roll call (2 s): no answer from world rank 1 (stopped, or busy outside communication)"})
    EXPECT_NE(error.find(s), std::string::npos) << "missing '" << s << "' in: " << error;
}

// tp=2 x dp=2 with world rank 3 stopped: rank 0's dp all_reduce times out
// waiting for rank 2, which answers the roll call from its tp all_reduce with
// rank 3. The report named only rank 2 ("waiting in all_reduce on group tp");
// when every rank asked answers, the other ranks are asked too.
TEST_F(Cli, ACollectiveTimeoutNamesAStoppedRankOutsideTheGroup) {
  const std::string error = error_with_last_rank_stopped(dir, "parallel.tp=2 parallel.dp=2", "stopped4", 3);
  EXPECT_NE(error.find("no answer from world rank 3 (stopped, or busy outside communication)"), std::string::npos)
      << error;
}

// checkpoint.dir on node-local scratch (here: a relative path read in two
// working directories) trained to the first checkpoint and then failed in a
// write; it is refused at start-up, naming the rank that sees another directory.
TEST_F(Cli, ACheckpointDirNotSharedByEveryRankIsRefused) {
  fs::create_directories(dir + "/hostA");
  fs::create_directories(dir + "/hostB");
  const std::string args = "train " + dir + "/tiny.yaml parallel.pp=2 data.train=" + dir +
                           "/d/t_train_*.bin data.val=" + dir + "/d/t_val_*.bin log.dir=run";
  const std::string rank = " -np 1 -wdir ";
  CmdResult r = lattice::test::run_command(
      lattice::test::mpirun() + rank + "hostA '" + bin() + "' " + args + " :" + rank + "hostB '" + bin() + "' " + args,
      dir);
  expect_one_line_error(r, {"checkpoint.dir: 'run/checkpoints' is not one directory for the whole job: rank 1",
                            "/hostB", "put it on a file system all ranks share"});
  EXPECT_FALSE(fs::exists(dir + "/hostA/run/metrics.jsonl"));  // nothing trained
}

TEST_F(Cli, TensorParallelRunMatchesOneRank) {
  CmdResult one = run("train tiny.yaml train.steps=6 log.dir=r1", dir);
  CmdResult two = run("train tiny.yaml train.steps=6 log.dir=r2 parallel.tp=2 runtime.threads=1", dir, 2);
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(two.status, 0) << two.out;
  auto losses = [&](const std::string& d) {
    std::ifstream m(dir + "/" + d + "/metrics.jsonl");
    std::string line;
    std::vector<double> out;
    while (std::getline(m, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j["loss"].get<double>());
    }
    return out;
  };
  std::vector<double> a = losses("r1"), b = losses("r2");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
  std::ifstream info_file(dir + "/r2/run_info.json");
  auto info = nlohmann::json::parse(info_file);
  EXPECT_EQ(info["layout"]["tp"], 2);
  EXPECT_EQ(info["layout"]["world"], 2);
}

// The MPI progress thread (LATTICE_MPI_PROGRESS_US) only drives MPI's progress
// engine: a dp run with small buckets (several all-reduces open during each
// backward) gives the same losses, gradient norms and checkpoint bytes with it
// as without it. The start line and run_info.json say whether it ran.
TEST_F(Cli, MpiProgressThreadChangesNoBitOfADpRun) {
  const std::string args =
      "train tiny.yaml train.steps=6 train.eval_every=0 model.dropout=0.1 parallel.dp=2 parallel.dp_bucket_mb=0.01 "
      "checkpoint.every=0 log.dir=";
  CmdResult off = lattice::test::run_lattice(args + "off", dir, 2, "LATTICE_MPI_PROGRESS_US=0");
  CmdResult on = lattice::test::run_lattice(args + "on", dir, 2, "LATTICE_MPI_PROGRESS_US=50");
  ASSERT_EQ(off.status, 0) << off.out;
  ASSERT_EQ(on.status, 0) << on.out;
  EXPECT_EQ(off.out.find("MPI progress thread"), std::string::npos) << off.out;
  EXPECT_NE(on.out.find("| MPI progress thread every 50 us |"), std::string::npos) << on.out;
  auto info = [&](const std::string& d) {
    std::ifstream f(dir + "/" + d + "/run_info.json");
    return nlohmann::json::parse(f);
  };
  EXPECT_EQ(info("off")["mpi_progress_us"], 0);
  EXPECT_EQ(info("on")["mpi_progress_us"], 50);
  auto steps = [&](const std::string& d) {
    std::ifstream m(dir + "/" + d + "/metrics.jsonl");
    std::string line, out;
    while (std::getline(m, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out += j["loss"].dump() + " " + j["grad_norm"].dump() + "\n";
    }
    return out;
  };
  EXPECT_EQ(lines(steps("off")), 6);
  EXPECT_EQ(steps("on"), steps("off"));
  const std::string last = "/checkpoints/step_0000006/";
  int compared = 0;
  for (const auto& e : fs::directory_iterator(dir + "/off" + last)) {
    const std::string name = e.path().filename().string();
    if (name == "trainer_state.json" || name == "manifest.json") continue;  // they hold log.dir
    EXPECT_EQ(lattice::test::file_bytes(e.path().string()), lattice::test::file_bytes(dir + "/on" + last + name))
        << name;
    ++compared;
  }
  EXPECT_GE(compared, 2) << "no model and optimizer files in " << dir + "/off" + last;
}

// Under mpirun: the pipeline layout errors, one line each naming the key.
TEST_F(Cli, PipelineErrorsUnderMpirun) {
  const std::string pp2 = "train tiny.yaml parallel.pp=2 ";
  expect_one_line_error(run(pp2 + "parallel.layers_per_stage=[1,2]", dir, 2), {"layers_per_stage", "n_layer"});
  expect_one_line_error(run(pp2 + "parallel.layers_per_stage=[1,1,0]", dir, 2), {"layers_per_stage"});
  expect_one_line_error(run("train tiny.yaml parallel.pp=4 model.n_layer=3 parallel.microbatches=2 "
                            "train.micro_batch=2",
                            dir, 4),
                        {"n_layer"});
  expect_one_line_error(run(pp2 + "model.n_layer=4 parallel.schedule=interleaved parallel.virtual_stages=2 "
                                  "train.micro_batch=8 parallel.microbatches=1",
                            dir, 2),
                        {"microbatches"});
  expect_one_line_error(run(pp2 + "parallel.virtual_stages=2", dir, 2), {"virtual_stages", "interleaved"});
  expect_one_line_error(run(pp2 + "model.n_layer=3 parallel.schedule=interleaved parallel.virtual_stages=2", dir, 2),
                        {"n_layer"});
}

TEST_F(Cli, PipelineRunMatchesOneRankAndWritesItsTimeline) {
  CmdResult one = run("train tiny.yaml train.steps=6 log.dir=p1", dir);
  CmdResult two =
      run("train tiny.yaml train.steps=6 log.dir=p2 parallel.pp=2 runtime.threads=1 log.trace=true", dir, 2);
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(two.status, 0) << two.out;
  auto lines = [&](const std::string& d) {
    std::ifstream m(dir + "/" + d + "/metrics.jsonl");
    std::string line;
    std::vector<nlohmann::json> out;
    while (std::getline(m, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  std::vector<nlohmann::json> a = lines("p1"), b = lines("p2");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].contains("loss")) continue;
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-5 * a[i]["loss"].get<double>());
    EXPECT_TRUE(b[i].contains("bubble") && b[i].contains("bubble_theory")) << b[i].dump();
    EXPECT_FALSE(a[i].contains("bubble"));
  }
  for (int r = 0; r < 2; ++r) {
    std::ifstream t(dir + "/p2/trace/rank_0000" + std::to_string(r) + ".json");
    ASSERT_TRUE(t.good()) << "no timeline for rank " << r;
    EXPECT_FALSE(nlohmann::json::parse(t)["traceEvents"].empty());
  }
  // A run resumed past the traced steps (here: with nothing left to do) traces none and leaves that timeline alone.
  const std::string timeline = dir + "/p2/trace/rank_00000.json";
  const auto size = std::filesystem::file_size(timeline);
  CmdResult resumed =
      run("train tiny.yaml train.steps=6 log.dir=p2 parallel.pp=2 runtime.threads=1 log.trace=true", dir, 2);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("log.trace: this run traced no step (it resumed after step 6)"), std::string::npos)
      << resumed.out;
  EXPECT_EQ(std::filesystem::file_size(timeline), size);
}

TEST_F(Cli, VerifyLayoutPassesFailsAndChecksTheWorld) {
  CmdResult ok = run("verify-layout tiny.yaml train.steps=6 parallel.tp=2 runtime.threads=1", dir, 2);
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("PASS"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("    6 "), std::string::npos) << ok.out;  // a row per step
  // A tolerance no fp32 run can meet: the same comparison must fail.
  CmdResult strict =
      run("verify-layout tiny.yaml train.steps=6 parallel.tp=2 runtime.threads=1 --tolerance 1e-30", dir, 2);
  EXPECT_EQ(strict.status, 1) << strict.out;
  EXPECT_NE(strict.out.find("FAIL"), std::string::npos) << strict.out;
  expect_one_line_error(run("verify-layout tiny.yaml parallel.tp=2", dir, 3), {"3 ranks", "tp (2)"});
  // Runs that diverge to NaN on both sides compare nothing: FAIL (std::max dropped the NaN rows: PASS).
  CmdResult nan =
      run("verify-layout tiny.yaml train.steps=3 parallel.tp=2 runtime.threads=1 optimizer.lr=1e12 "
          "optimizer.grad_clip=0 optimizer.schedule.warmup_steps=0",
          dir, 2);
  EXPECT_EQ(nan.status, 1) << nan.out;
  EXPECT_NE(nan.out.find("FAIL: largest relative loss difference nan"), std::string::npos) << nan.out;
  EXPECT_NE(nan.out.find("not finite"), std::string::npos) << nan.out;
  // The table prints what is not finite as '-' (it printed "-nan" and "nan").
  EXPECT_EQ(nan.out.find("nan  "), std::string::npos) << nan.out;
  EXPECT_NE(nan.out.find("              -"), std::string::npos) << nan.out;
  // Its data paths are checked as train's are: located at the key.
  expect_one_line_error(run("verify-layout tiny.yaml data.train=nope_*.bin", dir),
                        {"override 'data.train=nope_*.bin'", "no file matches"});
}

// SIGUSR1 to a verify-layout job ended it with no output (exit 138); it now
// stops after the step in progress, runs the reference as far and compares
// those steps. Each rank ignores SIGUSR1 until lattice installs its handler
// (`trap '' USR1` is inherited across exec, and the handler replaces it), and
// the signal is sent to mpirun (which forwards it) every 0.5 s until the job
// ends, so one comes mid-run however slowly the job starts.
TEST_F(Cli, VerifyLayoutStoppedBySignalComparesTheStepsItRan) {
  const std::string launch = "timeout 120 " + std::string(LATTICE_MPIEXEC) +
                             " -q --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2 sh -c \"trap '' USR1; "
                             "exec '" +
                             bin() +
                             "' verify-layout tiny.yaml train.steps=100000 train.eval_every=0 parallel.tp=2 "
                             "runtime.threads=1\"";
  const std::string script = "cd '" + dir + "' && (" + launch +
                             " > out.txt 2>&1 & mp=$!; sleep 1; "
                             "for i in $(seq 200); do kill -0 $mp 2>/dev/null || break; "
                             "kill -USR1 $(pgrep -P $mp) 2>/dev/null; sleep 0.5; done; "
                             "wait $mp; echo \"rc=$?\"; cat out.txt)";
  const CmdResult r = lattice::test::run_command("bash -s <<'EOS'\n" + script + "\nEOS\n", dir);
  ASSERT_NE(r.out.find("rc="), std::string::npos) << r.out;
  const int rc = std::stoi(r.out.substr(r.out.find("rc=") + 3));
  const std::regex header(R"(against one rank, (\d+) steps \(stopped by a stop request, SIGUSR1 or SIGTERM, after )"
                          R"(step (\d+) of 100000: the comparison covers those steps\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, header)) << r.out;
  EXPECT_EQ(m[1], m[2]) << r.out;
  const std::string steps = m[1];
  EXPECT_GE(std::stoi(steps), 1) << r.out;
  // A row for each compared step, then the verdict over them; exit 0 on PASS, 1 on FAIL (not a signal's death).
  EXPECT_NE(r.out.find("\n" + fmt::format("{:>5}  ", steps)), std::string::npos) << r.out;
  const bool pass = r.out.find("PASS: largest relative loss difference") != std::string::npos;
  EXPECT_TRUE(pass || r.out.find("FAIL: largest relative loss difference") != std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" over " + steps + " of 100000 steps"), std::string::npos) << r.out;
  EXPECT_EQ(rc, pass ? 0 : 1) << r.out;
}

// log.dir deleted under a running job: the metrics went to an unlinked file
// and the run ended "done" with nothing to show. It stops after the next step
// with a checkpoint (recreating checkpoint.dir) and says why.
TEST_F(Cli, ALogDirRemovedMidRunStopsWithACheckpoint) {
  // `timeout` bounds the run if the removal went unnoticed (100000 steps).
  CmdResult r = lattice::test::run_command(
      "{ (sleep 2; rm -rf gone) & timeout 120 '" + bin() +
          "' train tiny.yaml train.steps=100000 train.eval_every=0 checkpoint.every=0 log.every=50 log.dir=gone; }",
      dir);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("log.dir: 'gone/metrics.jsonl' was removed while the run wrote it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("start the same command again to resume"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/gone/checkpoints/latest")) << r.out;
}

// A shard truncated in place under a running job: its lost pages raised
// SIGBUS, which killed the run with a backtrace and no word about the data.
TEST_F(Cli, AShardTruncatedMidRunIsNamed) {
  fs::create_directories(dir + "/d2");
  for (const char* f : {"t_train_000000.bin", "t_val_000000.bin"}) fs::copy_file(dir + "/d/" + f, dir + "/d2/" + f);
  // `timeout` bounds the run if no read reached the lost pages (100000 steps).
  CmdResult r = lattice::test::run_command(
      "{ (sleep 2; truncate -s 1536 d2/t_train_000000.bin) & timeout 120 '" + bin() +
          "' train tiny.yaml train.steps=100000 train.eval_every=0 checkpoint.every=0 log.every=50 log.dir=trunc "
          "data.train=d2/t_train_*.bin data.val=d2/t_val_*.bin; }",
      dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("lattice: error: data: shard d2/t_train_000000.bin shrank while the run read it (SIGBUS)"),
            std::string::npos)
      << r.out;
}

// A rank killed in the middle of training (SIGKILL) ends the whole job
// promptly with a non-zero exit; nothing is left waiting in a collective.
TEST_F(Cli, KilledRankEndsTheJobPromptly) {
  // `timeout` bounds the job even if the kill below found no rank to kill.
  const std::string launch = "timeout 120 " + std::string(LATTICE_MPIEXEC) +
                             " -q --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2 '" + bin() +
                             "' train tiny.yaml train.steps=100000 log.dir=killed parallel.pp=2 runtime.threads=1";
  const std::string script = "cd '" + dir + "' && (" + launch +
                             " >/dev/null 2>&1 & mp=$!; "
                             "for i in $(seq 300); do [ -s killed/metrics.jsonl ] && break; sleep 0.1; done; "
                             "launcher=$(pgrep -P $mp | head -n 1); victim=$(pgrep -P $launcher | tail -n 1); "
                             "kill -9 $victim; t0=$(date +%s%N); "
                             "wait $mp; rc=$?; t1=$(date +%s%N); echo \"rc=$rc ms=$(( (t1 - t0) / 1000000 ))\")";
  CmdResult r;
  FILE* q = popen(("bash -s <<'EOS'\n" + script + "\nEOS\n").c_str(), "r");
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, q)) > 0) r.out.append(buf, n);
  pclose(q);
  ASSERT_NE(r.out.find("rc="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rc=0 "), std::string::npos) << r.out;
  EXPECT_LT(std::stod(r.out.substr(r.out.find("ms=") + 3)), 10000.0) << r.out;
}

// lattice convert: bad arguments and a missing directory are one line and a
// non-zero exit; the golden HF GPT-2 converts in and out with one line each.
TEST_F(Cli, ConvertBadArgumentsAreOneLineAndGoodOnesConvert) {
  expect_one_line_error(run("convert", dir), {"--to-hf", "--from-hf"});
  expect_one_line_error(run("convert --sideways a b", dir), {"--sideways"});
  expect_one_line_error(run("convert --from-hf only_one", dir), {"two directories", "1 argument"});
  expect_one_line_error(run("convert --from-hf nope ckpt", dir), {"nope"});
  expect_one_line_error(run("convert --to-hf nope hf", dir), {"nope"});
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  CmdResult in = run("convert --from-hf '" + std::string(src) + "/tests/checkpoint/data/hf_gpt2_tiny' ckpt", dir);
  EXPECT_EQ(in.status, 0) << in.out;
  EXPECT_EQ(lines(in.out), 1) << in.out;
  EXPECT_NE(in.out.find("ckpt/step_0000000"), std::string::npos) << in.out;
  CmdResult out = run("convert --to-hf ckpt/step_0000000 hf", dir);
  EXPECT_EQ(out.status, 0) << out.out;
  EXPECT_EQ(lines(out.out), 1) << out.out;
  EXPECT_TRUE(fs::exists(dir + "/hf/config.json") && fs::exists(dir + "/hf/model.safetensors"));
  expect_one_line_error(run("convert --to-hf ckpt/step_0000000 hf", dir), {"hf", "not empty"});
}

// A convert whose output write fails (here a file-size limit: EFBIG; a full
// disk is ENOSPC) is one line and leaves nothing behind, so the same command
// works once the cause is gone; a step_0000000.tmp an interrupted convert left
// does not block the next. Found by dogfooding on a full tmpfs: the partial
// model.safetensors made the rerun "not empty", the .tmp "already holds checkpoints".
TEST_F(Cli, FailedConvertLeavesNothingAndRerunWorks) {
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const std::string hf = std::string(src) + "/tests/checkpoint/data/hf_gpt2_tiny";
  auto limited = [&](const std::string& args) {
    return lattice::test::run_command("trap '' XFSZ; ulimit -f 8; '" + bin() + "' " + args, dir);
  };
  expect_one_line_error(limited("convert --from-hf '" + hf + "' ckpt"), {"ckpt", "run the command again"});
  EXPECT_FALSE(fs::exists(dir + "/ckpt/step_0000000.tmp"));
  CmdResult in = run("convert --from-hf '" + hf + "' ckpt", dir);
  ASSERT_EQ(in.status, 0) << in.out;
  expect_one_line_error(limited("convert --to-hf ckpt/step_0000000 hf"), {"hf/model.safetensors", "nothing was left"});
  EXPECT_FALSE(fs::exists(dir + "/hf"));
  CmdResult out = run("convert --to-hf ckpt/step_0000000 hf", dir);
  EXPECT_EQ(out.status, 0) << out.out;
  fs::create_directories(dir + "/ckpt2/step_0000000.tmp");
  CmdResult again = run("convert --from-hf '" + hf + "' ckpt2", dir);
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_FALSE(fs::exists(dir + "/ckpt2/step_0000000.tmp"));
}

// Training from an imported HF model with model keys that the tensor shapes do
// not pin down (n_head at the same d_model, norm_eps) would silently build
// another model; the keys the checkpoint holds are compared and a mismatch is
// one line naming the key and the checkpoint's value. Found by dogfooding.
TEST_F(Cli, FromHfModelKeysTheShapesMissAreChecked) {
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  ASSERT_EQ(run("convert --from-hf '" + std::string(src) + "/tests/checkpoint/data/hf_gpt2_tiny' ckpt", dir).status, 0);
  write(dir + "/ft.yaml", R"(model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 300, max_seq_len: 16 }
train: { steps: 2, global_batch: 4, micro_batch: 4, seq_len: 16 }
optimizer: { lr: 0.001 }
data: { train: "d/t_train_*.bin", tokenizer: bytes }
runtime: { threads: 1 }
checkpoint: { resume: ckpt/step_0000000 }
)");
  expect_one_line_error(run("train ft.yaml log.dir=a model.n_head=4", dir), {"model.n_head", "4", "2", "ckpt"});
  expect_one_line_error(run("train ft.yaml log.dir=b model.norm_eps=1e-6", dir), {"model.norm_eps", "1e-05"});
  CmdResult ok = run("train ft.yaml log.dir=c", dir);
  EXPECT_EQ(ok.status, 0) << ok.out;
}
