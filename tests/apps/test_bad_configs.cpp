// Every invalid config fails before any rank allocates memory, with ONE line
// naming the key (and FILE:LINE:COL where it was set) or the file, and a
// prompt non-zero exit (about 30 ms single-process, 1.5 s under mpirun on an
// idle 2-core machine; the slowest of each is printed); under mpirun the line
// is printed once, not once per rank, and no rank is left running.
//
// One table row per bad config: the base config below with one edit (or a set
// of overrides, or a bad environment variable), run single-process or under
// mpirun. Also log.per_rank: a 2-rank run writes one log per rank with a line
// per logged step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "config/config.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

using lattice::test::CmdResult;

// Line numbers matter: the expectations below name them.
constexpr const char* kBase =
    "model:\n"                        //  1
    "  arch: gpt2\n"                  //  2
    "  n_layer: 2\n"                  //  3
    "  n_head: 2\n"                   //  4
    "  d_model: 32\n"                 //  5
    "  vocab_size: 260\n"             //  6
    "  max_seq_len: 32\n"             //  7
    "parallel:\n"                     //  8
    "  tp: 1\n"                       //  9
    "  pp: 1\n"                       // 10
    "train:\n"                        // 11
    "  steps: 4\n"                    // 12
    "  global_batch: 8\n"             // 13
    "  micro_batch: 2\n"              // 14
    "  seq_len: 32\n"                 // 15
    "optimizer:\n"                    // 16
    "  lr: 0.01\n"                    // 17
    "  schedule:\n"                   // 18
    "    warmup_steps: 1\n"           // 19
    "data:\n"                         // 20
    "  train: \"d/t_train_*.bin\"\n"  // 21
    "  tokenizer: bytes\n"            // 22
    "checkpoint:\n"                   // 23
    "  every: 0\n"                    // 24
    "log:\n"                          // 25
    "  every: 1\n"                    // 26
    "runtime:\n"                      // 27
    "  threads: 1\n";                 // 28

// The base with each `from` (exact text, must occur) replaced by its `to`.
std::string edit(std::vector<std::pair<std::string, std::string>> changes) {
  std::string s = kBase;
  for (const auto& [from, to] : changes) {
    auto pos = s.find(from);
    if (pos == std::string::npos) return "EDIT NOT FOUND: " + from;  // fails every expectation
    s.replace(pos, from.size(), to);
  }
  return s;
}
std::string edit(const std::string& from, const std::string& to) { return edit({{from, to}}); }

struct BadConfig {
  std::string name;                  // the test name
  std::string yaml;                  // written to <case>/bad.yaml
  std::string args;                  // after the config path
  int ranks = 0;                     // 0: one process; else under mpirun
  std::vector<std::string> needles;  // each must be in the one line
  std::string config = "";           // the config argument; "" = <case>/bad.yaml
  std::string env = "";              // "VAR=value" for the run
};

std::ostream& operator<<(std::ostream& os, const BadConfig& c) { return os << c.name; }

const char* kNoFile = "\x01";  // BadConfig::yaml: write no file

// The tables read best one case per row or two.
// clang-format off

std::vector<BadConfig> malformed_yaml() {
  return {
      {"YamlTabIndentation", edit("  n_head: 2\n", "\tn_head: 2\n"), "", 0, {"bad.yaml:4:", "malformed YAML"}},
      {"YamlUnclosedBracket", edit("  tp: 1\n", "  tp: [1, 2\n"), "", 0,
       {"bad.yaml:", "malformed YAML", "'[' opened before this position is never closed"}},
      {"YamlUnclosedQuote", edit("  train: \"d/t_train_*.bin\"\n", "  train: \"d/t_train_*.bin\n"), "", 0,
       {"bad.yaml:21:10", "data.train", "malformed YAML", "never closed"}},
      {"YamlDuplicateKey", edit("  n_layer: 2\n", "  n_layer: 2\n  n_layer: 3\n"), "", 0,
       {"bad.yaml:4:3", "model.n_layer", "duplicate key (first set at ", "bad.yaml:3:3)"}},
      {"YamlTopLevelList", "- model\n- train\n", "", 0, {"bad.yaml:1:1", "expected a mapping", "a list"}},
      {"YamlTopLevelScalar", "just some words\n", "", 0, {"bad.yaml:1:1", "expected a mapping", "'just some words'"}},
      {"YamlEmptyFile", "", "", 0, {"bad.yaml", "model.n_layer", "required key is missing"}},
      {"RequiredKeyMissing", edit("  lr: 0.01\n", ""), "", 0,
       {"bad.yaml:16:1", "optimizer.lr", "required key is missing", "under 'optimizer:'"}},
      {"ConfigFileMissing", kNoFile, "", 0, {"nope.yaml", "not found"}, "nope.yaml"},
      {"ConfigIsADirectory", kNoFile, "", 0, {"d", "is a directory"}, "d"},
  };
}

std::vector<BadConfig> unknown_keys() {
  return {
      {"UnknownTopLevel", edit("model:\n", "modle:\n"), "", 0, {"bad.yaml:1:1", "modle", "did you mean 'model'"}},
      {"UnknownInModel", edit("  n_head: 2\n", "  n_haed: 2\n"), "", 0,
       {"bad.yaml:4:3", "model.n_haed", "did you mean 'model.n_head'"}},
      {"UnknownInParallel", edit("  pp: 1\n", "  pp: 1\n  microbatch: 2\n"), "", 0,
       {"bad.yaml:11:3", "parallel.microbatch", "did you mean 'parallel.microbatches'"}},
      {"UnknownInTrain", edit("  steps: 4\n", "  stepz: 4\n"), "", 0,
       {"bad.yaml:12:3", "train.stepz", "did you mean 'train.steps'"}},
      {"UnknownInOptimizer", edit("  lr: 0.01\n", "  lr: 0.01\n  weight_decy: 0.1\n"), "", 0,
       {"bad.yaml:18:3", "optimizer.weight_decy", "did you mean 'optimizer.weight_decay'"}},
      {"UnknownInOptimizerSchedule", edit("    warmup_steps: 1\n", "    warmup_step: 1\n"), "", 0,
       {"bad.yaml:19:5", "optimizer.schedule.warmup_step", "did you mean 'optimizer.schedule.warmup_steps'"}},
      {"UnknownInData", edit("  tokenizer: bytes\n", "  tokeniser: bytes\n"), "", 0,
       {"bad.yaml:22:3", "data.tokeniser", "did you mean 'data.tokenizer'"}},
      {"UnknownInCheckpoint", edit("  every: 0\n", "  keep_lst: 2\n"), "", 0,
       {"bad.yaml:24:3", "checkpoint.keep_lst", "did you mean 'checkpoint.keep_last'"}},
      {"UnknownInLog", edit("  every: 1\n", "  every: 1\n  per_rnak: true\n"), "", 0,
       {"bad.yaml:27:3", "log.per_rnak", "did you mean 'log.per_rank'"}},
      {"UnknownInRuntime", edit("  threads: 1\n", "  thread: 1\n"), "", 0,
       {"bad.yaml:28:3", "runtime.thread", "did you mean 'runtime.threads'"}},
      {"KeyInTheWrongSection", edit("  seq_len: 32\n", "  seq_len: 32\n  lr: 0.1\n"), "", 0,
       {"bad.yaml:16:3", "train.lr", "did you mean 'optimizer.lr'"}},
      {"UnknownKeyWithoutSuggestion", edit("  arch: gpt2\n", "  arch: gpt2\n  colour: blue\n"), "", 0,
       {"bad.yaml:3:3", "model.colour", "known keys in model", "n_head"}},
  };
}

std::vector<BadConfig> wrong_types() {
  return {
      {"StringForInt", edit("  n_layer: 2\n", "  n_layer: two\n"), "", 0,
       {"bad.yaml:3:12", "model.n_layer", "'two'", "expected an integer"}},
      {"ListForScalar", edit("  d_model: 32\n", "  d_model: [32, 64]\n"), "", 0,
       {"bad.yaml:5:12", "model.d_model", "a list", "expected an integer"}},
      {"FloatForInt", edit("  steps: 4\n", "  steps: 4.5\n"), "", 0,
       {"bad.yaml:12:10", "train.steps", "'4.5'", "expected an integer"}},
      {"MappingForNumber", edit("  lr: 0.01\n", "  lr: { peak: 0.01 }\n"), "", 0,
       {"bad.yaml:17:7", "optimizer.lr", "a mapping", "expected a number"}},
      {"BadBool", edit("  every: 1\n", "  every: 1\n  tensorboard: maybe\n"), "", 0,
       {"bad.yaml:27:16", "log.tensorboard", "'maybe'", "expected true or false"}},
      {"BadEnumValue", edit("  arch: gpt2\n", "  arch: gpt3\n"), "", 0,
       {"bad.yaml:2:9", "model.arch", "'gpt3'", "did you mean 'gpt2'"}},
      {"SectionIsAScalar", edit("parallel:\n  tp: 1\n  pp: 1\n", "parallel: 4\n"), "", 0,
       {"bad.yaml:8:11", "parallel", "'4'", "expected a mapping"}},
      {"IntegerOutOfRange", edit("  n_layer: 2\n", "  n_layer: 99999999999\n"), "", 0,
       {"bad.yaml:3:12", "model.n_layer", "99999999999", "out of range"}},
  };
}

std::vector<BadConfig> bad_sizes() {
  return {
      {"ZeroLayers", edit("  n_layer: 2\n", "  n_layer: 0\n"), "", 0,
       {"bad.yaml:3:3", "model.n_layer", "got 0", "at least 1"}},
      {"NegativeDModel", edit("  d_model: 32\n", "  d_model: -1\n"), "", 0,
       {"bad.yaml:5:3", "model.d_model", "got -1"}},
      // Bounds on the per-block and per-microbatch tables: a typo fails here, not in an allocation.
      {"TooManyLayers", edit("  n_layer: 2\n", "  n_layer: 100000000\n"), "", 0,
       {"bad.yaml:3:3", "model.n_layer", "100000000", "at most 100000"}},
      {"TooManyMicrobatches", edit("  global_batch: 8\n", "  global_batch: 4000000\n"), "", 0,
       {"bad.yaml:13:3", "train.global_batch", "2000000 microbatches", "at most 1000000", "raise train.micro_batch"}},
      {"DecayStepsPastTheHorizon", kBase, "optimizer.schedule.decay_steps=4", 0,
       {"optimizer.schedule.decay_steps", "must be in [0, train.steps - warmup_steps = 3] (got 4)"}},
      {"DecayStepsWithConstant", kBase, "optimizer.schedule.decay_steps=2 optimizer.schedule.decay=constant", 0,
       {"optimizer.schedule.decay_steps", "decay is constant", "decay_steps: 0"}},
      {"BetasOfThree", kBase, "optimizer.betas=[0.9,0.95,0.99]", 0,
       {"optimizer.betas", "list of 2 numbers", "got a list of 3"}},
      // Another optimizer's key would be ignored.
      {"MomentumWithAdamw", edit("  lr: 0.01\n", "  lr: 0.01\n  momentum: 0.5\n"), "", 0,
       {"bad.yaml:18:3", "optimizer.momentum: is SGD's and optimizer.name is adamw", "set optimizer.name: sgd"}},
      {"EpsWithSgd", edit("  lr: 0.01\n", "  name: sgd\n  lr: 0.01\n  eps: 1.0e-6\n"), "", 0,
       {"bad.yaml:19:3", "optimizer.eps: is AdamW's and optimizer.name is sgd", "set optimizer.name: adamw"}},
      {"BetasWithSgd_np2", kBase, "optimizer.name=sgd optimizer.betas=[0.5,0.5]", 2,
       {"override 'optimizer.betas=[0.5,0.5]'", "optimizer.betas: is AdamW's", "remove it"}},
      {"ZeroSteps", edit("  steps: 4\n", "  steps: 0\n"), "", 0, {"bad.yaml:12:3", "train.steps", "got 0"}},
      {"ZeroMicroBatch", edit("  micro_batch: 2\n", "  micro_batch: 0\n"), "", 0,
       {"bad.yaml:14:3", "train.micro_batch", "got 0"}},
      {"SeqLenOverMaxSeqLen", edit("  seq_len: 32\n", "  seq_len: 64\n"), "", 0,
       {"bad.yaml:15:3", "train.seq_len", "64", "model.max_seq_len (32)"}},
      {"NegativeLr", edit("  lr: 0.01\n", "  lr: -0.01\n"), "", 0, {"bad.yaml:17:3", "optimizer.lr", "-0.01"}},
      {"DropoutOutOfRange", kBase, "model.dropout=1.5", 0,
       {"override 'model.dropout=1.5'", "model.dropout", "1.5", "[0, 1)"}},
      {"HeadsDoNotDivideDModel", edit("  n_head: 2\n", "  n_head: 3\n"), "", 0,
       {"bad.yaml:5:3", "model.d_model", "32", "n_head (3)"}},
      {"VocabSmallerThanTokenizer", edit("  vocab_size: 260\n", "  vocab_size: 100\n"), "", 0,
       {"bad.yaml:6:3", "model.vocab_size", "100", "bytes"}},
  };
}

// What one architecture cannot take (config's arch_traits, the registry).
std::vector<BadConfig> bad_models() {
  return {
      {"UnknownArchListsTheRegisteredOnes", edit("  arch: gpt2\n", "  arch: mamba\n"), "", 0,
       {"bad.yaml:2:9", "model.arch", "'mamba'", "expected one of " + lattice::enum_choices<lattice::ModelArch>()}},
      {"KvHeadsDoNotDivideHeads", kBase, "model.arch=llama model.n_kv_head=3 model.n_head=4", 0,
       {"model.n_kv_head", "n_head (4) is not divisible by n_kv_head (3)"}},
      {"KvHeadsOnAModelWithoutGqa", kBase, "model.arch=neox model.n_kv_head=1", 0,
       {"model.n_kv_head", "neox has no grouped-query attention", "omit n_kv_head"}},
      {"RopeThetaOnLearnedPositions", edit("  max_seq_len: 32\n", "  max_seq_len: 32\n  rope_theta: 500\n"), "", 0,
       {"bad.yaml:8:3", "model.rope_theta", "gpt2 uses learned positions", "remove rope_theta"}},
      {"DffOnGpt2", kBase, "model.d_ff=100", 0, {"model.d_ff", "gpt2 uses d_ff = 4 * d_model = 128", "got 100"}},
      {"BertVocabWithoutItsSpecials", kBase, "model.arch=bert model.vocab_size=259 model.d_ff=64", 0,
       {"model.vocab_size", "259", "261 ids with the special tokens of model.arch bert"}},
      {"OddRotaryHeadSize", kBase, "model.arch=neox model.d_model=30", 0,
       {"model.d_model", "odd head size (15)", "neox's rotary embeddings"}},
  };
}

// Layouts: most need a world size, so they run under mpirun.
std::vector<BadConfig> bad_layouts() {
  return {
      {"TpDoesNotDivideHeads_np4", edit("  tp: 1\n", "  tp: 4\n"), "", 4,
       {"bad.yaml:9:3", "parallel.tp", "n_head (2)", "tp (4)"}},
      {"GlobalBatchMismatch_np2", edit("  pp: 1\n", "  pp: 1\n  microbatches: 3\n"), "", 2,
       {"bad.yaml:14:3", "train.global_batch", "8 != micro_batch (2) * microbatches (3) * dp (2) = 12"}},
      {"WorldNotDivisibleByTpPp_np2", edit({{"  n_layer: 2\n", "  n_layer: 3\n"}, {"  pp: 1\n", "  pp: 3\n"}}), "",
       2, {"bad.yaml:10:3", "parallel", "2 ranks", "pp (3)"}},
      {"DpDoesNotMatchWorld_np2", edit("  pp: 1\n", "  pp: 1\n  dp: 3\n"), "", 2,
       {"bad.yaml:11:3", "parallel", "dp (3) = 3", "the job has 2 ranks"}},
      {"PpExceedsLayers_np4", edit("  pp: 1\n", "  pp: 4\n"), "", 4, {"bad.yaml:3:3", "model.n_layer", "pp (4)"}},
      {"UnevenLayerSplit_np2", edit("  pp: 1\n", "  pp: 2\n  layers_per_stage: [1, 2]\n"), "", 2,
       {"bad.yaml:11:3", "parallel.layers_per_stage", "sums to 3", "model.n_layer is 2"}},
      {"InterleavedChunksUneven_np2", kBase,
       "parallel.pp=2 model.n_layer=6 parallel.schedule=interleaved parallel.virtual_stages=2", 2,
       {"model.n_layer", "6 layers", "virtual_stages (2)"}},
      {"GlobalBatchNotDivisible_np4", kBase, "train.global_batch=6 train.micro_batch=3", 4,
       {"train.global_batch", "6", "micro_batch (3) * dp (4)"}},
  };
}

std::vector<BadConfig> bad_files() {
  return {
      {"DataGlobMatchesNothing", edit("d/t_train_*.bin", "d/nothing_*.bin"), "", 0,
       {"bad.yaml:21:3", "data.train", "'d/nothing_*.bin'", "no file matches"}},
      {"DataGlobMatchesNothing_np2", edit("d/t_train_*.bin", "d/nothing_*.bin"), "", 2,
       {"bad.yaml:21:3", "data.train", "'d/nothing_*.bin'", "no file matches"}},
      {"DataIsADirectory", edit("\"d/t_train_*.bin\"", "d"), "", 0,
       {"bad.yaml:21:3", "data.train", "directory 'd'"}},
      {"DataIsABrokenLink", edit("d/t_train_*.bin", "broken/t_train_*.bin"), "", 0,
       {"bad.yaml:21:3", "data.train", "broken/t_train_000000.bin", "link to nothing"}},
      {"DataIsNotAShard", edit("d/t_train_*.bin", "junk/t_train_*.bin"), "", 0,
       {"junk/t_train_000000.bin", "magic"}},
      {"ValGlobMatchesNothing", edit("  tokenizer: bytes\n", "  tokenizer: bytes\n  val: \"d/t_valid_*.bin\"\n"),
       "", 0, {"bad.yaml:23:3", "data.val", "'d/t_valid_*.bin'", "no file matches"}},
      {"EvalWithoutValData", kBase, "train.eval_every=2 train.eval_steps=1", 0,
       {"override 'train.eval_every=2'", "train.eval_every", "data.val is not set"}},
      {"VocabDirMissing", kBase, "data.tokenizer=gpt2 model.vocab_size=50304 data.vocab_dir=no_such_dir", 0,
       {"override 'data.vocab_dir=no_such_dir'", "data.vocab_dir", "'no_such_dir'", "not a directory"}},
      {"CheckpointDirIsAFile", edit("  every: 0\n", "  dir: plain.txt\n  every: 0\n"), "", 0,
       {"bad.yaml:24:3", "checkpoint.dir", "'plain.txt' is a file"}},
      {"CheckpointDirUnderAFile", kBase, "checkpoint.dir=plain.txt/ckpt", 0,
       {"override 'checkpoint.dir=plain.txt/ckpt'", "checkpoint.dir", "'plain.txt/ckpt' cannot be created"}},
      // Permissions allow it, the file system refuses (/proc): tried at start-up, not after training.
      {"CheckpointDirRefusedByTheFileSystem", kBase, "checkpoint.dir=/proc/lattice-nothing/ckpt", 0,
       {"override 'checkpoint.dir=/proc/lattice-nothing/ckpt'", "checkpoint.dir", "cannot be created",
        "choose another checkpoint.dir"}},
      {"LogDirRefusedByTheFileSystem_np2", kBase, "log.dir=/proc/lattice-nothing", 2,
       {"override 'log.dir=/proc/lattice-nothing'", "log.dir", "cannot be created", "choose another log.dir"}},
      {"ResumeFromMissingPath", edit("  every: 0\n", "  every: 0\n  resume: ckpt/step_0000007\n"), "", 0,
       {"bad.yaml:25:3", "checkpoint.resume", "'ckpt/step_0000007' does not exist"}},
      {"ResumeFromMissingPath_np2", edit("  every: 0\n", "  every: 0\n  resume: ckpt/step_0000007\n"), "", 2,
       {"bad.yaml:25:3", "checkpoint.resume", "'ckpt/step_0000007' does not exist"}},
      {"ResumeFromAFile", kBase, "checkpoint.resume=plain.txt", 0,
       {"checkpoint.resume", "'plain.txt' is a file"}},
      {"ResumeFromANonCheckpointDir", kBase, "checkpoint.resume=empty_dir", 0,
       {"checkpoint.resume", "'empty_dir'", "manifest.json"}},
      {"LogDirIsAFile", edit("  every: 1\n", "  every: 1\n  dir: plain.txt\n"), "", 0,
       {"bad.yaml:27:3", "log.dir", "'plain.txt' is a file"}},
  };
}

std::vector<BadConfig> bad_device_and_overrides() {
  return {
      {"LossScaleWithFp32", edit("  threads: 1\n", "  threads: 1\n  loss_scale: { initial: 1024 }\n"), "", 0,
       {"bad.yaml:29:", "runtime.loss_scale.initial", "runtime.precision is fp32", "set runtime.precision: fp16"}},
      {"LossScaleWithFp32_np2", kBase, "runtime.loss_scale.initial=1024", 2,
       {"override 'runtime.loss_scale.initial=1024'", "runtime.loss_scale.initial", "only fp16 scales the loss"}},
      {"CudaWithoutGpu", edit("  threads: 1\n", "  threads: 1\n  device: cuda\n"), "", 0,
       {"bad.yaml:29:3", "runtime.device", "no CUDA device is visible on host", "set runtime.device: cpu"}},
      {"CudaWithoutGpu_np2", kBase, "runtime.device=cuda", 2,
       {"override 'runtime.device=cuda'", "runtime.device", "no CUDA device is visible on host"}},
      {"LossScaleGrowthFactor", edit("  threads: 1\n", "  threads: 1\n  precision: fp16\n  loss_scale: { growth_factor: 0.5 }\n"),
       "", 0, {"bad.yaml:30:", "runtime.loss_scale.growth_factor", "must be > 1 (got 0.5)"}},
      {"OverrideUnknownKey", kBase, "train.stepz=5", 0,
       {"override 'train.stepz=5'", "train.stepz", "did you mean 'train.steps'"}},
      {"OverrideUnknownKey_np2", kBase, "parallel.tpp=2", 2,
       {"override 'parallel.tpp=2'", "parallel.tpp", "did you mean 'parallel.tp'"}},
      {"OverrideWithoutEquals", kBase, "train.steps", 0, {"override 'train.steps'", "missing '='"}},
      {"OverrideOfASection", kBase, "optimizer.schedule=cosine", 0, {"optimizer.schedule", "is a section"}},
      {"OverrideWrongType", kBase, "train.steps=many", 0, {"override 'train.steps=many'", "train.steps", "'many'"}},
      {"OverrideMalformedValue", kBase, "parallel.order=[tp,dp", 0, {"parallel.order", "malformed value"}},
      {"OverrideEmptyKey", kBase, "=5", 0, {"override '=5'", "empty key"}},
      {"OverrideUnclosedQuote", kBase, "'data.train=\"d/t_train_*.bin'", 0,
       {"override 'data.train=\"d/t_train_*.bin'", "data.train", "malformed value"}},
  };
}

// The environment Lattice reads at start-up, on runs that would not use it
// (one rank; tp 2, no dp): every run checks it, once, before MPI starts.
std::vector<BadConfig> bad_environment() {
  return {
      {"MpiProgressUsNotANumber", kBase, "", 0,
       {"LATTICE_MPI_PROGRESS_US='fast'", "whole number of microseconds", "unset it"}, "",
       "LATTICE_MPI_PROGRESS_US=fast"},
      {"MpiProgressUsWithUnit_np2", kBase, "parallel.tp=2", 2,
       {"LATTICE_MPI_PROGRESS_US='50us'", "in [0, 1000000]", "LATTICE_MPI_PROGRESS_US=50"}, "",
       "LATTICE_MPI_PROGRESS_US=50us"},
  };
}

// clang-format on

std::vector<BadConfig> all_cases() {
  std::vector<BadConfig> all;
  for (auto part : {malformed_yaml(), unknown_keys(), wrong_types(), bad_sizes(), bad_models(), bad_layouts(),
                    bad_files(), bad_device_and_overrides(), bad_environment()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Processes (other than this one) whose command line mentions `needle`.
std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> found;
  const std::string self = std::to_string(::getpid());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit) || pid == self) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos) found.push_back(pid + ": " + cmd);
  }
  return found;
}

// One data set and the odd files the cases point at, shared by every case.
class BadConfigs : public ::testing::TestWithParam<BadConfig> {
 protected:
  static void SetUpTestSuite() {
    dir_ = lattice::test::make_temp_dir("bad_configs");
    std::string text;
    for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
    write(dir_ + "/a.txt", text);
    CmdResult r = lattice::test::run_lattice("data prepare --input a.txt --tokenizer bytes --out d/t", dir_);
    ASSERT_EQ(r.status, 0) << r.out;
    write(dir_ + "/plain.txt", "not a directory\n");
    fs::create_directories(dir_ + "/empty_dir");
    fs::create_directories(dir_ + "/broken");
    fs::create_symlink(dir_ + "/no_such_target", dir_ + "/broken/t_train_000000.bin");
    fs::create_directories(dir_ + "/junk");
    write(dir_ + "/junk/t_train_000000.bin", text);
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    std::printf("[ timing   ] slowest single-process case %.0f ms, slowest mpirun case %.0f ms\n", max_single_ms_,
                max_mpirun_ms_);
  }
  static std::string dir_;
  static double max_single_ms_, max_mpirun_ms_;
};
std::string BadConfigs::dir_;
double BadConfigs::max_single_ms_ = 0, BadConfigs::max_mpirun_ms_ = 0;

TEST_P(BadConfigs, FailsWithOneLine) {
  const BadConfig& c = GetParam();
  if (c.name.rfind("CudaWithoutGpu", 0) == 0 && fs::exists("/dev/nvidiactl"))
    GTEST_SKIP() << "this machine has an NVIDIA device; the case needs one without";
  // A directory per case makes the config path unique, so leftover ranks can be found by it.
  const std::string case_dir = dir_ + "/" + c.name;
  fs::create_directories(case_dir);
  std::string config = case_dir + "/bad.yaml";
  if (c.yaml != kNoFile) write(config, c.yaml);
  if (!c.config.empty()) config = c.config;
  const auto t0 = std::chrono::steady_clock::now();
  CmdResult r = lattice::test::run_lattice("train '" + config + "' " + c.args, dir_, c.ranks, c.env);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_EQ(r.out.rfind("lattice: error: ", 0), 0u) << r.out;
  for (const auto& n : c.needles) EXPECT_NE(r.out.find(n), std::string::npos) << "missing '" << n << "' in: " << r.out;
  EXPECT_FALSE(fs::exists(dir_ + "/runs/bad/metrics.jsonl")) << "a run directory was written";
  // The bounds catch a wait or real work before the check (a timeout, a model
  // allocated), not speed: a loaded machine (CI beside other jobs) took 1.4 s
  // for a single-process case that starts MPI and probes for CUDA.
  if (c.ranks > 0) {
    EXPECT_LT(ms, 10000.0) << r.out;
    max_mpirun_ms_ = std::max(max_mpirun_ms_, ms);
    std::vector<std::string> left = processes_mentioning(case_dir + "/bad.yaml");
    EXPECT_TRUE(left.empty()) << "still running: " << left.front();
  } else {
    EXPECT_LT(ms, 5000.0) << r.out;
    max_single_ms_ = std::max(max_single_ms_, ms);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfigs, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<BadConfig>& info) { return info.param.name; });

// The leftover-rank check above can fail: it finds a process by its command line.
TEST(ProcessScan, FindsAProcessByItsCommandLine) {
  const std::string marker = lattice::test::make_temp_dir("scan") + "/marker";
  ASSERT_EQ(std::system(("sh -c 'sleep 3' '" + marker + "' &").c_str()), 0);
  EXPECT_FALSE(processes_mentioning(marker).empty());
  EXPECT_TRUE(processes_mentioning(marker + "_absent").empty());
  fs::remove_all(fs::path(marker).parent_path());
}

// The base config itself is good (so each failure above comes from its one
// edit), and log.per_rank gives every rank its own log: a header with the
// rank's coordinates, one line per step that metrics.jsonl logs, and where
// its log.trace timeline went.
TEST(PerRankLog, TwoRanksWriteOneLogEachWithALinePerLoggedStep) {
  const std::string dir = lattice::test::make_temp_dir("per_rank_log");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
  write(dir + "/a.txt", text);
  ASSERT_EQ(lattice::test::run_lattice("data prepare --input a.txt --tokenizer bytes --out d/t", dir).status, 0);
  write(dir + "/good.yaml", kBase);
  CmdResult r = lattice::test::run_lattice(
      "train good.yaml train.steps=5 log.every=2 parallel.pp=2 log.per_rank=true log.trace=true runtime.peak_flops=1e9",
      dir, 2);
  ASSERT_EQ(r.status, 0) << r.out;

  std::vector<int64_t> logged;  // the steps metrics.jsonl logs: 1, 2, 4, 5
  std::ifstream m(dir + "/runs/good/metrics.jsonl");
  for (std::string line; std::getline(m, line);) logged.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  ASSERT_EQ(logged, (std::vector<int64_t>{1, 2, 4, 5}));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + "/runs/good/ranks/rank_0000" + std::to_string(rank) + ".log";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << "no log for rank " << rank;
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines[0].find("rank " + std::to_string(rank) + " of 2"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("tp0 pp" + std::to_string(rank) + " dp0"), std::string::npos) << lines[0];
    std::vector<int64_t> steps;
    for (const auto& l : lines) {
      if (l.rfind("step ", 0) != 0 || l.find("val_loss") != std::string::npos) continue;
      steps.push_back(std::stoll(l.substr(5)));
      for (const char* field : {"/5 | loss ", " | step_ms ", " | peak_mem_mib "})
        EXPECT_NE(l.find(field), std::string::npos) << l;
      double ms = std::stod(l.substr(l.find("step_ms ") + 8));
      EXPECT_GT(ms, 0.0) << l;
    }
    EXPECT_EQ(steps, logged) << path;
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.rfind("timeline written to ", 0) == 0;
    })) << path;  // log.trace
    EXPECT_NE(lines.back().find("done: step 5"), std::string::npos) << lines.back();
  }
  // Off by default: no ranks/ directory.
  CmdResult off = lattice::test::run_lattice("train good.yaml train.steps=1 log.dir=off runtime.peak_flops=1e9", dir);
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_TRUE(fs::exists(dir + "/off/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir + "/off/ranks"));
  fs::remove_all(dir);
}

}  // namespace
