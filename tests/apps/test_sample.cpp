// lattice sample as a user meets it: a tiny GPT-2 trained on one sentence
// repeated continues any part of it word for word when greedy (across its
// 32-token window), a tp = 2 x pp = 2 run's checkpoint writes the one-rank
// run's text, the seed decides a sampled text, a model-only checkpoint
// samples the same once given its tokenizer, and bad input is one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// What sample printed after its first line (the header on stderr, which comes first).
std::string text(const std::string& out) { return out.substr(out.find('\n') + 1); }

// 45 bytes, odd, so the loader's 32-token windows start at every offset of it.
const std::string kSentence = "the quick brown fox jumps over the lazy dog.\n";

// `prompt` (a piece of the repeated sentence) and the `tokens` bytes after it.
std::string continued(const std::string& prompt, size_t tokens) {
  std::string text;
  while (text.size() < prompt.size() + tokens + 2 * kSentence.size()) text += kSentence;
  const size_t at = text.find(prompt);
  return text.substr(at, prompt.size() + tokens);
}

class Sample : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = lattice::test::make_temp_dir("sample");
    std::string text;
    for (int i = 0; i < 400; ++i) text += kSentence;
    write(dir + "/a.txt", text);
    CmdResult r = run("data prepare --input a.txt --tokenizer bytes --out d/t", dir);
    ASSERT_EQ(r.status, 0) << r.out;
    write(dir + "/tiny.yaml",
          R"(model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 260, max_seq_len: 32 }
train: { steps: 150, global_batch: 8, micro_batch: 8, seq_len: 32 }
optimizer: { name: adamw, lr: 0.01, schedule: { warmup_steps: 5 } }
data: { train: "d/t_train_*.bin", tokenizer: bytes }
runtime: { seed: 7, threads: 1 }
log: { every: 50 }
)");
    r = run("train tiny.yaml", dir);
    ASSERT_EQ(r.status, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }
  void expect_one_line_error(const CmdResult& r, const std::vector<std::string>& needles) {
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    for (const auto& n : needles) EXPECT_NE(r.out.find(n), std::string::npos) << "missing '" << n << "' in: " << r.out;
  }
  static std::string dir;
};
std::string Sample::dir;

}  // namespace

TEST_F(Sample, GreedyContinuesTheTrainedTextAcrossTheWindow) {
  // A run directory, its checkpoint directory and the step directory all name the same model.
  for (const std::string where : {"runs/tiny", "runs/tiny/checkpoints", "runs/tiny/checkpoints/step_0000150"})
    for (const std::string prompt : {"the quick", "he quick brown fox jumps", "lazy dog.\nthe"}) {
      CmdResult r = run("sample " + where + " --temperature 0 --tokens 90 --prompt '" + prompt + "'", dir);
      ASSERT_EQ(r.status, 0) << r.out;
      EXPECT_NE(r.out.find("sampling 1 x 90 tokens from runs/tiny/checkpoints/step_0000150"), std::string::npos)
          << r.out;
      EXPECT_NE(r.out.find(continued(prompt, 90) + "\n"), std::string::npos)
          << "prompt '" << prompt << "' from " << where << ": " << r.out;
    }
}

// A checkpoint of a tp = 2, pp = 2 run (each stage's shards in its own file)
// is the same logical model: the same text as the one-rank run's, greedy and
// sampled (the weights agree to roundoff, layout invariance).
TEST_F(Sample, ALayoutsCheckpointWritesTheOneRankRunsText) {
  CmdResult r =
      run("train tiny.yaml parallel.tp=2 parallel.pp=2 parallel.microbatches=2 train.micro_batch=4 "
          "log.dir=runs/tp2pp2",
          dir, 4);
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(fs::exists(dir + "/runs/tp2pp2/checkpoints/step_0000150/model-00002-of-00002.safetensors"));
  for (const std::string args : {" --temperature 0 --tokens 90 --prompt 'e quick brown'",
                                 " --temperature 0.8 --seed 2 --tokens 60 --prompt 'the'"}) {
    CmdResult one = run("sample runs/tiny" + args, dir), four = run("sample runs/tp2pp2" + args, dir);
    ASSERT_EQ(four.status, 0) << four.out;
    EXPECT_EQ(text(four.out), text(one.out)) << args;
  }
}

TEST_F(Sample, APromptFileIsTheSamePrompt) {
  write(dir + "/prompt.txt", "lazy dog.\nthe");  // a newline, which a shell argument makes awkward
  CmdResult from_file = run("sample runs/tiny --temperature 0 --tokens 40 --prompt-file prompt.txt", dir);
  ASSERT_EQ(from_file.status, 0) << from_file.out;
  EXPECT_EQ(text(from_file.out), continued("lazy dog.\nthe", 40) + "\n");
  // A path that is no text file is the option's error, not a file layer's (host and source line).
  for (const char* path : {"missing.txt", "d"}) {
    CmdResult bad = run(std::string("sample runs/tiny --prompt-file ") + path, dir);
    expect_one_line_error(bad, {std::string("--prompt-file ") + path + ": ", "pass a text file"});
    EXPECT_EQ(bad.out.find("[src/"), std::string::npos) << bad.out;
  }
  expect_one_line_error(run("sample runs/tiny --prompt x --prompt-file prompt.txt", dir), {"--prompt-file", "once"});
}

TEST_F(Sample, TheSeedDecidesTheText) {
  const std::string args = "sample runs/tiny --samples 2 --tokens 60 --temperature 3 --prompt the";
  CmdResult a = run(args + " --seed 4", dir), b = run(args + " --seed 4", dir), c = run(args + " --seed 5", dir);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.out.find("--- sample 1\nthe"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("--- sample 2\nthe"), std::string::npos) << a.out;
  // One sample is printed token by token as it comes: the same text as sample 1 of the batch.
  CmdResult one = run("sample runs/tiny --tokens 60 --temperature 3 --prompt the --seed 4", dir);
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_NE(a.out.find("--- sample 1\n" + text(one.out) + "--- sample 2\n"), std::string::npos)
      << one.out << "\nagainst\n"
      << a.out;
  // No prompt: the text starts after <|endoftext|>, which is not printed.
  CmdResult d = run("sample runs/tiny --tokens 20 --temperature 0", dir);
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(d.out.find("<|endoftext|>"), std::string::npos) << d.out;
}

TEST_F(Sample, AModelOnlyCheckpointSamplesTheSameGivenItsTokenizer) {
  // convert takes a run directory too (its latest checkpoint), as sample does.
  CmdResult exported = run("convert --to-hf runs/tiny hf", dir);
  ASSERT_EQ(exported.status, 0) << exported.out;
  ASSERT_EQ(run("convert --from-hf hf model_only", dir).status, 0);
  // Training from it with another model shape is one line naming a tensor it
  // holds that the model does not (not a partial load).
  expect_one_line_error(run("train tiny.yaml log.dir=ft model.n_layer=1 checkpoint.resume=model_only/step_0000000", dir),
                        {"model_only/step_0000000", "holds 'h.1.", "gpt2, 1 layers", "model.*"});
  expect_one_line_error(run("sample model_only", dir), {"model-only", "--tokenizer"});
  const std::string args = " --temperature 0.8 --seed 3 --tokens 50 --prompt 'the lazy'";
  CmdResult from_run = run("sample runs/tiny" + args, dir);
  CmdResult from_hf = run("sample model_only --tokenizer bytes" + args, dir);
  ASSERT_EQ(from_hf.status, 0) << from_hf.out;
  EXPECT_EQ(text(from_hf.out), text(from_run.out));
}

TEST_F(Sample, BadInputIsOneLine) {
  expect_one_line_error(run("sample", dir), {"expected a checkpoint"});
  expect_one_line_error(run("sample runs/tiny --bogus 1", dir), {"--bogus"});
  expect_one_line_error(run("sample runs/tiny other", dir), {"other"});
  expect_one_line_error(run("sample runs/tiny --temperature -1", dir), {"--temperature", "-1"});
  // Past the upper bounds: the message gives the range, not "a number >= 0" for a positive one.
  expect_one_line_error(run("sample runs/tiny --temperature 2000000", dir), {"--temperature", "[0, 1000000]"});
  expect_one_line_error(run("sample runs/tiny --top-k 3000000000", dir), {"--top-k", "[0, 2147483647]"});
  expect_one_line_error(run("sample runs/tiny --seed 18446744073709551616", dir), {"--seed", "64-bit"});
  expect_one_line_error(run("sample runs/tiny --tokens 0", dir), {"--tokens", "'0'"});
  expect_one_line_error(run("sample runs/tiny --top-k x", dir), {"--top-k", "'x'"});
  expect_one_line_error(run("sample runs/tiny --samples", dir), {"--samples needs a value"});
  expect_one_line_error(run("sample runs/tiny --tokenizer words", dir), {"--tokenizer", "words"});
  expect_one_line_error(run("sample nowhere", dir), {"nowhere", "not a directory"});
  expect_one_line_error(run("sample d", dir), {"d holds no complete checkpoint"});
  // Another tokenizer than the run's would read its ids as other text: refused, naming both.
  CmdResult wrong = run("sample runs/tiny --tokenizer gpt2 --vocab-dir .", dir);
  expect_one_line_error(wrong, {"--tokenizer gpt2, but the model in", "was trained on bytes tokens", "omit --tokenizer"});
  EXPECT_EQ(run("sample runs/tiny --tokenizer bytes --tokens 2", dir).status, 0);  // the run's own: fine
  // One process: under mpirun with two ranks, one line for the job.
  expect_one_line_error(run("sample runs/tiny", dir, 2), {"one process", "mpirun"});
  expect_one_line_error(lattice::test::run_lattice("sample runs/tiny", dir, 0, "SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0"),
                        {"one process", "srun"});
  // A batch script's own shell (sbatch -n 4 sets SLURM_NTASKS, no step of tasks) is one process.
  EXPECT_EQ(lattice::test::run_lattice("sample runs/tiny --tokens 4", dir, 0, "SLURM_NTASKS=4 SLURM_PROCID=0").status,
            0);
  // A BERT checkpoint has no left-to-right continuation.
  write(dir + "/bert.yaml",
        R"(model: { arch: bert, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 261, max_seq_len: 32 }
train: { steps: 1, global_batch: 2, micro_batch: 2, seq_len: 32 }
optimizer: { lr: 0.001 }
data: { train: "d/t_train_*.bin", tokenizer: bytes }
runtime: { threads: 1 }
)");
  ASSERT_EQ(run("train bert.yaml", dir).status, 0);
  expect_one_line_error(run("sample runs/bert", dir), {"bert", "not a left-to-right language model"});
}
