// Tests src/config: decoding, defaults, the to_yaml round trip, overrides,
// validation, the layout arithmetic, and the one-line error contract.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "config/config.h"
#include "support/test_support.h"

namespace lattice {
namespace {

// Every key set to a value other than its default, but optimizer.betas and
// optimizer.eps, which sgd does not read: full_adamw() sets those instead of momentum.
const char* kFull = R"(# full config
model:
  arch: llama
  n_layer: 8
  n_head: 8
  n_kv_head: 2
  d_model: 256
  d_ff: 688
  vocab_size: 50304
  max_seq_len: 512
  tie_embeddings: false
  dropout: 0.1
  norm_eps: 1.0e-6
  rope_theta: 500000
  init_std: 0.01
parallel:
  tp: 2
  pp: 2
  dp: 2
  order: [dp, tp, pp]
  schedule: interleaved
  microbatches: 4
  virtual_stages: 2
  layers_per_stage: [1, 3, 3, 1]
  zero: 1
train:
  steps: 100
  stop_at_step: 40
  global_batch: 32
  micro_batch: 4
  seq_len: 256
  eval_every: 10
  eval_steps: 5
optimizer:
  name: sgd
  lr: 3.0e-4
  weight_decay: 0.05
  grad_clip: 0
  momentum: 0.5
  schedule:
    warmup_steps: 10
    decay: linear
    min_lr: 3.0e-5
data:
  train: "data/tiny_train_*.bin"
  val: data/tiny_val_*.bin
  tokenizer: gpt2
  vocab_dir: /opt/gpt2
checkpoint:
  dir: /tmp/ckpt
  every: 20
  keep_last: 0
  resume: never
log:
  dir: /tmp/run
  every: 5
  tensorboard: true
  trace: yes
runtime:
  device: cuda
  precision: bf16
  seed: 18446744073709551615
  threads: 4
  comm_timeout_s: 60.5
  peak_flops: 9.89e14
)";

// Only the required keys.
const char* kMinimal = R"(model:
  n_layer: 2
  n_head: 4
  d_model: 64
  vocab_size: 257
  max_seq_len: 128
train:
  steps: 20
  global_batch: 8
  micro_batch: 2
  seq_len: 64
optimizer:
  lr: 1.0e-3
data:
  train: data/tiny_train_*.bin
  tokenizer: bytes
)";

std::string replace(std::string text, const std::string& from, const std::string& to);

// kFull with adamw, its betas and eps set instead of SGD's momentum.
std::string full_adamw() {
  return replace(replace(kFull, "  name: sgd\n", "  betas: [0.8, 0.99]\n  eps: 1.0e-7\n"), "  momentum: 0.5\n", "");
}

// 1-based line of the first occurrence of `needle` in `text`.
int line_of(const std::string& text, const std::string& needle) {
  auto pos = text.find(needle);
  EXPECT_NE(pos, std::string::npos) << needle;
  return 1 + int(std::count(text.begin(), text.begin() + pos, '\n'));
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

// The message of the ConfigError `f` throws; fails the test if none or if it spans lines.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return "";
}

std::string parse_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_config(yaml, "test.yaml", overrides); });
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(Config, FullConfigDecodes) {
  Config c = parse_config(kFull, "configs/full.yaml", {});
  EXPECT_EQ(c.name, "full");
  EXPECT_EQ(c.source, "configs/full.yaml");
  EXPECT_EQ(c.model.arch, ModelArch::llama);
  EXPECT_EQ(c.model.n_layer, 8);
  EXPECT_EQ(c.model.n_head, 8);
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.model.d_ff, 688);
  EXPECT_EQ(c.model.vocab_size, 50304);
  EXPECT_EQ(c.model.max_seq_len, 512);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_FLOAT_EQ(c.model.dropout, 0.1f);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000);
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.01);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.order, (std::vector<std::string>{"dp", "tp", "pp"}));
  EXPECT_EQ(c.parallel.schedule, PipeSchedule::interleaved);
  EXPECT_EQ(c.parallel.microbatches, 4);
  EXPECT_EQ(c.parallel.virtual_stages, 2);
  EXPECT_EQ(c.parallel.layers_per_stage.split, LayerSplit::list);
  EXPECT_EQ(c.parallel.layers_per_stage.counts, (std::vector<int>{1, 3, 3, 1}));
  EXPECT_EQ(c.parallel.zero, 1);
  EXPECT_EQ(c.train.steps, 100);
  EXPECT_EQ(c.train.stop_at_step, 40);
  EXPECT_EQ(c.train.global_batch, 32);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.seq_len, 256);
  EXPECT_EQ(c.train.eval_every, 10);
  EXPECT_EQ(c.train.eval_steps, 5);
  EXPECT_EQ(c.optimizer.name, OptimizerName::sgd);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas, OptimizerConfig{}.betas);  // AdamW's: not set with sgd
  EXPECT_EQ(c.optimizer.eps, OptimizerConfig{}.eps);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.0);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.5);
  const Config a = parse_config(full_adamw(), "configs/full.yaml", {});
  EXPECT_EQ(a.optimizer.name, OptimizerName::adamw);
  EXPECT_DOUBLE_EQ(a.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(a.optimizer.betas[1], 0.99);
  EXPECT_DOUBLE_EQ(a.optimizer.eps, 1e-7);
  EXPECT_EQ(a.optimizer.momentum, OptimizerConfig{}.momentum);  // SGD's: not set with adamw
  EXPECT_EQ(c.optimizer.schedule.warmup_steps, 10);
  EXPECT_EQ(c.optimizer.schedule.decay, LrDecay::linear);
  EXPECT_DOUBLE_EQ(c.optimizer.schedule.min_lr, 3e-5);
  EXPECT_EQ(c.data.train, (std::vector<DataSource>{{"data/tiny_train_*.bin", 1.0}}));
  EXPECT_EQ(c.data.val, "data/tiny_val_*.bin");
  EXPECT_EQ(c.data.tokenizer, TokenizerName::gpt2);
  EXPECT_EQ(c.data.vocab_dir, "/opt/gpt2");
  EXPECT_EQ(c.checkpoint.dir, "/tmp/ckpt");
  EXPECT_EQ(c.checkpoint.every, 20);
  EXPECT_EQ(c.checkpoint.keep_last, 0);
  EXPECT_EQ(c.checkpoint.resume, "never");
  EXPECT_EQ(c.log.dir, "/tmp/run");
  EXPECT_EQ(c.log.every, 5);
  EXPECT_TRUE(c.log.tensorboard);
  EXPECT_TRUE(c.log.trace);
  EXPECT_EQ(c.runtime.device, DeviceType::cuda);
  EXPECT_EQ(c.runtime.precision, Precision::bf16);
  EXPECT_EQ(c.runtime.seed, 18446744073709551615ull);
  EXPECT_EQ(c.runtime.threads, 4);
  EXPECT_DOUBLE_EQ(c.runtime.comm_timeout_s, 60.5);
  EXPECT_DOUBLE_EQ(c.runtime.peak_flops, 9.89e14);
  // Locations are 1-based file positions.
  EXPECT_EQ(c.locations.at("model.n_layer").line, line_of(kFull, "n_layer"));
  EXPECT_EQ(c.locations.at("model.n_layer").column, 3);
  EXPECT_EQ(c.locations.at("optimizer.schedule.decay").line, line_of(kFull, "    decay:"));
}

TEST(Config, DefaultsAndDerivedValues) {
  Config c = parse_config(kMinimal, "configs/tiny_bytes.yaml", {});
  EXPECT_EQ(c.model.arch, ModelArch::gpt2);
  EXPECT_EQ(c.model.n_kv_head, 4);  // = n_head
  EXPECT_EQ(c.model.d_ff, 256);     // = 4 * d_model
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.dropout, 0.0f);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.rope_theta, 0.0);
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.02);
  ParallelConfig p;
  EXPECT_EQ(c.parallel, p);
  EXPECT_EQ(c.parallel.order, (std::vector<std::string>{"tp", "dp", "pp"}));
  EXPECT_EQ(c.parallel.schedule, PipeSchedule::one_f_one_b);
  EXPECT_EQ(c.parallel.layers_per_stage.split, LayerSplit::uniform);
  EXPECT_EQ(c.train.stop_at_step, 0);
  EXPECT_EQ(c.train.eval_every, 0);
  EXPECT_EQ(c.optimizer.name, OptimizerName::adamw);
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.9, 0.95}));
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 1.0);
  EXPECT_EQ(c.optimizer.schedule, OptimizerConfig::Schedule{});
  EXPECT_EQ(c.optimizer.schedule.decay, LrDecay::cosine);
  EXPECT_EQ(c.data.val, "");
  EXPECT_EQ(c.data.tokenizer, TokenizerName::bytes);
  EXPECT_EQ(c.log.dir, "runs/tiny_bytes");
  EXPECT_EQ(c.log.every, 1);
  EXPECT_EQ(c.checkpoint.dir, "runs/tiny_bytes/checkpoints");
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.runtime, RuntimeConfig{});
  EXPECT_EQ(c.runtime.seed, 1337u);
  // Keys the file does not set point at the file only.
  EXPECT_EQ(key_location(c, "runtime.seed"), "configs/tiny_bytes.yaml");
  EXPECT_EQ(key_location(c, "train.steps"), fmt::format("configs/tiny_bytes.yaml:{}:3", line_of(kMinimal, "steps")));
  // The llama default for rope_theta.
  Config l = parse_config(kMinimal, "x", {"model.arch=llama"});
  EXPECT_DOUBLE_EQ(l.model.rope_theta, 10000.0);
}

TEST(Config, ToYamlRoundTrip) {
  const std::vector<std::string> fp16 = {"runtime.precision=fp16", "runtime.loss_scale.growth_interval=7"};
  const std::vector<std::string> sgd = {"optimizer.name=sgd", "optimizer.momentum=0.25"};
  const std::vector<std::string> adamw = {"optimizer.betas=[0.5, 0.75]", "optimizer.eps=0.125"};
  for (const auto& [text, overrides] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {kFull, {}}, {full_adamw(), {}}, {kMinimal, {}}, {kMinimal, fp16}, {kMinimal, sgd}, {kMinimal, adamw}}) {
    SCOPED_TRACE(testing::PrintToString(overrides));
    Config a = parse_config(text, "a.yaml", overrides);
    std::string y = to_yaml(a);
    Config b = parse_config(y, "b.yaml", {});
    EXPECT_EQ(a, b) << y;
    EXPECT_EQ(to_yaml(b).substr(y.find('\n')), y.substr(y.find('\n')));  // equal below the header comment
    // Every key is written; runtime.loss_scale only with fp16 (validate refuses it with another precision).
    const bool scaled = a.runtime.precision == Precision::fp16;
    EXPECT_EQ(y.find("loss_scale:") != std::string::npos, scaled) << y;
    // The optimizer's keys only for that optimizer (validate refuses the others).
    for (const auto& path : config_key_paths()) {
      std::string name = path.substr(path.rfind('.') + 1);
      if (auto owner = optimizer_key_owner(path)) {  // "\n  eps:" is no model's "  norm_eps:"
        EXPECT_EQ(y.find("\n  " + name + ":") != std::string::npos, *owner == a.optimizer.name) << path << "\n" << y;
        continue;
      }
      if (!scaled && path.starts_with("runtime.loss_scale.")) continue;
      EXPECT_HAS(y, name + ":");
    }
  }
}

// optimizer.betas and optimizer.eps are AdamW's, optimizer.momentum is SGD's:
// set with the other optimizer (in the file or by an override) they would be
// ignored, so they are one line naming the key and the fix.
TEST(Config, OptimizerKeysOfTheOtherOptimizer) {
  const std::string adamw_file = replace(kMinimal, "  lr: 1.0e-3\n", "  lr: 1.0e-3\n  momentum: 0.9\n");
  EXPECT_EQ(parse_error(adamw_file),
            fmt::format("test.yaml:{}:3: optimizer.momentum: is SGD's and optimizer.name is adamw — remove it, or set "
                        "optimizer.name: sgd",
                        line_of(adamw_file, "momentum")));
  EXPECT_EQ(parse_config(adamw_file, "t.yaml", {"optimizer.name=sgd"}).optimizer.momentum, 0.9);
  EXPECT_EQ(parse_error(kMinimal, {"optimizer.momentum=0.5"}),
            "override 'optimizer.momentum=0.5': optimizer.momentum: is SGD's and optimizer.name is adamw — remove it, "
            "or set optimizer.name: sgd");
  const std::string sgd_file = replace(kMinimal, "  lr: 1.0e-3\n", "  name: sgd\n  lr: 1.0e-3\n  eps: 1.0e-6\n");
  EXPECT_EQ(parse_error(sgd_file),
            fmt::format("test.yaml:{}:3: optimizer.eps: is AdamW's and optimizer.name is sgd — remove it, or set "
                        "optimizer.name: adamw",
                        line_of(sgd_file, "  eps:")));
  EXPECT_EQ(parse_error(kMinimal, {"optimizer.name=sgd", "optimizer.betas=[0.5,0.5]"}),
            "override 'optimizer.betas=[0.5,0.5]': optimizer.betas: is AdamW's and optimizer.name is sgd — remove "
            "it, or set optimizer.name: adamw");
  // The optimizer chosen by an override, the key in the file: the key's line is named.
  const std::string betas_file = replace(kMinimal, "  lr: 1.0e-3\n", "  lr: 1.0e-3\n  betas: [0.9, 0.95]\n");
  EXPECT_HAS(parse_error(betas_file, {"optimizer.name=sgd"}),
             fmt::format("test.yaml:{}:3: optimizer.betas: is AdamW's", line_of(betas_file, "betas")));
  EXPECT_EQ(optimizer_key_owner("optimizer.lr"), std::nullopt);
}

// What an older Lattice wrote (config.yaml, a checkpoint's trainer_state.json)
// holds every optimizer key: read back as a written config, the other
// optimizer's keys are dropped, whatever their value (they had no effect), so
// its runs still resume; parse_config refuses the same text.
TEST(Config, WrittenConfigOfAnOlderVersionReadsBack) {
  for (const std::vector<std::string>& o : {std::vector<std::string>{}, {"optimizer.name=sgd"}}) {
    const Config now = parse_config(kMinimal, "a.yaml", o);
    const bool sgd = now.optimizer.name == OptimizerName::sgd;
    std::string old = to_yaml(now);
    old = replace(old, "  weight_decay:",
                  sgd ? "  betas: [0.5, 0.5]\n  eps: 1.0e-08\n  weight_decay:" : "  momentum: 0.5\n  weight_decay:");
    EXPECT_HAS(parse_error(old), sgd ? "optimizer.betas: is AdamW's" : "optimizer.momentum: is SGD's");
    const Config back = parse_written_config(old, "run/config.yaml");
    EXPECT_EQ(back, now) << old;
    EXPECT_EQ(first_difference(back, now), std::nullopt);
    EXPECT_EQ(parse_written_config(to_yaml(now), "run/config.yaml"), now);
  }
  // Only the other optimizer's keys are dropped: the rest is read and checked as ever.
  const std::string bad = replace(kMinimal, "  lr: 1.0e-3\n", "  lr: 1.0e-3\n  momentum: 0.5\n  eps: 0\n");
  EXPECT_EQ(parse_written_config(replace(bad, "  eps: 0\n", "  eps: 1.0e-6\n"), "w").optimizer.eps, 1e-6);
  EXPECT_HAS(error_of([&] { parse_written_config(bad, "w"); }), "optimizer.eps: must be positive (got 0)");
}

// runtime.loss_scale: it is read with fp16 only, and a bad value names its
// key (optim::LossScaler runs this struct and its check: test_loss_scaler).
TEST(Config, LossScale) {
  EXPECT_FALSE(loss_scale_problem(LossScaleConfig{}).has_value());  // the defaults run
  Config c = parse_config(kMinimal, "t.yaml",
                          {"runtime.precision=fp16", "runtime.loss_scale.initial=1024", "runtime.loss_scale.max=4096"});
  EXPECT_EQ(c.runtime.loss_scale.initial, 1024.0);
  EXPECT_EQ(c.runtime.loss_scale.max, 4096.0);
  EXPECT_EQ(c.runtime.loss_scale.growth_factor, 2.0);
  // Set with fp32, in the file or by an override: one line naming the key and the fix.
  const std::string file = std::string(kMinimal) + "runtime:\n  loss_scale:\n    initial: 1024\n";
  std::string msg = parse_error(file);
  EXPECT_EQ(msg, fmt::format(
                     "test.yaml:{}:5: runtime.loss_scale.initial: is set, but runtime.precision is fp32 and only fp16 "
                     "scales the loss — remove runtime.loss_scale or set runtime.precision: fp16",
                     line_of(file, "    initial")));
  EXPECT_HAS(parse_error(kMinimal, {"runtime.precision=bf16", "runtime.loss_scale.min=2"}),
             "runtime.loss_scale.min: is set, but runtime.precision is bf16");
}

TEST(Config, ToYamlRoundTripOddValues) {
  std::vector<std::string> o = {"data.train=\"a: #b/'c'\\\"*.bin\"", "data.val=null",
                                "checkpoint.resume=\"yes\"",         "model.dropout=0.3",
                                "optimizer.lr=0.000123456789012345", "runtime.seed=0",
                                "runtime.comm_timeout_s=1e-7",       "parallel.layers_per_stage=balanced"};
  Config a = parse_config(kMinimal, "a.yaml", o);
  EXPECT_EQ(a.data.train, (std::vector<DataSource>{{"a: #b/'c'\"*.bin", 1.0}}));
  EXPECT_EQ(a.data.val, "");
  EXPECT_EQ(a.checkpoint.resume, "yes");
  EXPECT_EQ(a.parallel.layers_per_stage.split, LayerSplit::balanced);
  Config b = parse_config(to_yaml(a), "b.yaml", {});
  EXPECT_EQ(a, b) << to_yaml(a);
  EXPECT_EQ(b.model.dropout, 0.3f);
  EXPECT_EQ(b.optimizer.lr, 0.000123456789012345);
  // Exponents carry a '.' so YAML 1.1 readers see floats too.
  EXPECT_HAS(to_yaml(a), "comm_timeout_s: 1.0e-07");
  EXPECT_HAS(to_yaml(a), "eps: 1.0e-08");
}

TEST(Config, ConfigFailNamesKeyAndLine) {
  Config c = parse_config(kMinimal, "t.yaml", {});
  std::string msg = error_of([&] { config_fail(c, "data.train", "no file matches 'data/tiny_train_*.bin'"); });
  EXPECT_EQ(msg, fmt::format("t.yaml:{}:3: data.train: no file matches 'data/tiny_train_*.bin'",
                             line_of(kMinimal, "  train: data")));
  bool thrown = false;
  try {
    config_fail(c, "optimizer.schedule.min_lr", "x");
  } catch (const ConfigError& e) {
    thrown = true;
    EXPECT_EQ(e.key_path(), "optimizer.schedule.min_lr");
    EXPECT_EQ(std::string(e.what()),
              fmt::format("t.yaml:{}:1: optimizer.schedule.min_lr: x", line_of(kMinimal, "optimizer:")));
  }
  EXPECT_TRUE(thrown);
  ConfigError e("two\nlines", "k");
  EXPECT_EQ(std::string(e.what()), "two lines");
}

TEST(Config, LoadConfigFromFileAndWriteBack) {
  std::string dir = test::make_temp_dir("config");
  std::string path = dir + "/gpt2_tiny.yaml";
  std::ofstream(path) << kMinimal;
  Config a = load_config(path, {"train.steps=50"});
  EXPECT_EQ(a.name, "gpt2_tiny");
  EXPECT_EQ(a.source, path);
  EXPECT_EQ(a.train.steps, 50);
  std::string effective = dir + "/config.yaml";
  std::ofstream(effective) << to_yaml(a);
  Config b = load_config(effective, {});
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.log.dir, "runs/gpt2_tiny");  // written out, so not re-derived from the new name
}

TEST(Config, UnknownKeyAtTopLevel) {
  std::string y = std::string(kMinimal) + "trian:\n  steps: 3\n";
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:1: trian: unknown key", line_of(y, "trian")));
  EXPECT_HAS(msg, "did you mean 'train'?");
}

TEST(Config, UnknownNestedKeyWithSuggestion) {
  std::string y = replace(kMinimal, "  steps: 20", "  steps: 20\n  stepz: 5");
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:3: train.stepz: unknown key", line_of(y, "stepz")));
  EXPECT_HAS(msg, "did you mean 'train.steps'?");
  // Three levels deep.
  y = replace(kFull, "    decay: linear", "    decai: linear");
  msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format(":{}:5: optimizer.schedule.decai: unknown key", line_of(y, "decai")));
  EXPECT_HAS(msg, "did you mean 'optimizer.schedule.decay'?");
  // A key that belongs to another section.
  msg = parse_error(replace(kMinimal, "  steps: 20", "  steps: 20\n  lr: 0.1"));
  EXPECT_HAS(msg, "train.lr: unknown key — did you mean 'optimizer.lr'?");
  // Nothing close: the known keys are listed.
  msg = parse_error(replace(kMinimal, "  steps: 20", "  steps: 20\n  banana: 1"));
  EXPECT_HAS(msg, "train.banana: unknown key — known keys in train: steps, stop_at_step");
}

TEST(Config, WrongTypes) {
  std::string y = replace(kMinimal, "n_layer: 2", "n_layer: abc");
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:12: model.n_layer: expected an integer, got 'abc'", line_of(y, "abc")));
  EXPECT_HAS(parse_error(replace(kMinimal, "n_layer: 2", "n_layer: 2.5")), "expected an integer, got '2.5'");
  EXPECT_HAS(parse_error(replace(kMinimal, "n_layer: 2", "n_layer: [2]")),
             "model.n_layer: expected an integer, got a list");
  // An empty value is located at its key, not where the next line starts (yaml-cpp's mark for it).
  y = replace(kMinimal, "n_layer: 2", "n_layer:");
  EXPECT_HAS(parse_error(y), fmt::format("test.yaml:{}:3: model.n_layer: expected an integer, got an empty value",
                                         line_of(y, "n_layer:")));
  EXPECT_HAS(parse_error(replace(kMinimal, "n_layer: 2", "n_layer: 99999999999")), "out of range");
  EXPECT_HAS(parse_error(replace(kMinimal, "lr: 1.0e-3", "lr: fast")), "optimizer.lr: expected a number, got 'fast'");
  EXPECT_HAS(parse_error(std::string(kMinimal) + "log:\n  trace: maybe\n"), "log.trace: expected true or false");
  msg = parse_error(replace(kMinimal, "tokenizer: bytes", "tokenizer: byts"));
  EXPECT_HAS(msg, "data.tokenizer: unknown value 'byts' — expected one of gpt2|bytes (did you mean 'bytes'?)");
  EXPECT_HAS(parse_error(kMinimal, {"optimizer.betas=[0.9]"}), "optimizer.betas: expected a list of 2 numbers");
  EXPECT_HAS(parse_error(kMinimal, {"optimizer.betas=[0.9, x]"}), "optimizer.betas[1]: expected a number, got 'x'");
  EXPECT_HAS(parse_error(kMinimal, {"runtime.seed=-1"}), "runtime.seed: expected a non-negative integer");
  y = replace(kMinimal, "train:\n", "train: 5\nx:\n");
  EXPECT_HAS(parse_error(y), "train: expected a mapping of keys, got '5'");
  EXPECT_HAS(parse_error("- 1\n- 2\n"), "test.yaml:1:1: config: expected a mapping of sections");
}

TEST(Config, NegativeAndZeroSizes) {
  std::string y = replace(kMinimal, "n_layer: 2", "n_layer: -2");
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:3: model.n_layer: must be at least 1 (got -2)", line_of(y, "n_layer")));
  EXPECT_HAS(parse_error(replace(kMinimal, "micro_batch: 2", "micro_batch: 0")),
             "train.micro_batch: must be at least 1 (got 0)");
  EXPECT_HAS(parse_error(kMinimal, {"parallel.tp=0"}), "override 'parallel.tp=0': parallel.tp: must be at least 1");
  EXPECT_HAS(parse_error(kMinimal, {"checkpoint.every=-5"}), "checkpoint.every: must not be negative (got -5)");
}

TEST(Config, MalformedYaml) {
  std::string y = replace(kMinimal, "  n_head: 4", "  n_head: [4, 5");
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, "test.yaml:");
  EXPECT_HAS(msg, "malformed YAML");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(msg, m, std::regex(R"(test\.yaml:(\d+):(\d+): )"))) << msg;
  EXPECT_GE(std::stoi(m[1]), line_of(y, "[4, 5"));
  msg = parse_error("model:\n  n_layer: 2\n bad: 1\n");
  EXPECT_HAS(msg, "test.yaml:3:");
}

TEST(Config, MissingFileAndMissingKey) {
  std::string dir = test::make_temp_dir("config");
  std::string msg = error_of([&] { load_config(dir + "/nope.yaml", {}); });
  EXPECT_HAS(msg, fmt::format("config file '{}/nope.yaml' not found", dir));
  msg = error_of([&] { load_config(dir, {}); });
  EXPECT_HAS(msg, "is a directory");
  std::string y = replace(kMinimal, "  vocab_size: 257\n", "");
  msg = parse_error(y);
  EXPECT_HAS(msg, "test.yaml:1:1: model.vocab_size: required key is missing — add 'vocab_size: ...' under 'model:'");
  msg = parse_error(replace(kMinimal, "optimizer:\n  lr: 1.0e-3\n", ""));
  EXPECT_HAS(msg, "test.yaml: optimizer.lr: required key is missing");
  EXPECT_HAS(parse_error(""), "model.n_layer: required key is missing");
  // A required key supplied by an override is enough.
  EXPECT_EQ(parse_config(y, "t", {"model.vocab_size=300"}).model.vocab_size, 300);
}

TEST(Config, DuplicateKey) {
  std::string y = replace(kMinimal, "  steps: 20", "  steps: 20\n  steps: 30");
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:3: train.steps: duplicate key", line_of(y, "steps: 30")));
}

TEST(Config, Overrides) {
  Config c =
      parse_config(kMinimal, "t.yaml",
                   {"train.steps=50", "optimizer.betas=[0.9,0.99]", "parallel.pp=2", "parallel.layers_per_stage=[1, 1]",
                    "optimizer.schedule.warmup_steps=5", " log.tensorboard = true", "train.steps=60"});
  EXPECT_EQ(c.train.steps, 60);  // later overrides win
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.9, 0.99}));
  EXPECT_EQ(c.parallel.layers_per_stage.counts, (std::vector<int>{1, 1}));
  EXPECT_EQ(c.optimizer.schedule.warmup_steps, 5);
  EXPECT_TRUE(c.log.tensorboard);
  EXPECT_EQ(key_location(c, "train.steps"), "override 'train.steps=60'");
  EXPECT_EQ(key_location(c, "parallel.layers_per_stage"), "override 'parallel.layers_per_stage=[1, 1]'");
  // Errors name the override.
  std::string msg = parse_error(kMinimal, {"train.stepz=5"});
  EXPECT_EQ(msg, "override 'train.stepz=5': train.stepz: unknown key — did you mean 'train.steps'?");
  msg = parse_error(kMinimal, {"train.steps"});
  EXPECT_HAS(msg, "override 'train.steps': missing '='");
  msg = parse_error(kMinimal, {"train.steps=abc"});
  EXPECT_EQ(msg, "override 'train.steps=abc': train.steps: expected an integer, got 'abc'");
  EXPECT_HAS(parse_error(kMinimal, {"optimizer.schedule=1"}), "optimizer.schedule: is a section");
  EXPECT_HAS(parse_error(kMinimal, {"model.n_layer=[1,"}),
             "override 'model.n_layer=[1,': model.n_layer: malformed value");
  EXPECT_HAS(parse_error(kMinimal, {"bogus=1"}), "override 'bogus=1': bogus: unknown key");
  // A validation error on an overridden key points at the override.
  EXPECT_HAS(parse_error(kMinimal, {"train.seq_len=4096"}),
             "override 'train.seq_len=4096': train.seq_len: 4096 exceeds model.max_seq_len (128)");
}

TEST(Config, LayersPerStage) {
  Config c = parse_config(kMinimal, "t", {"parallel.layers_per_stage=balanced"});
  EXPECT_EQ(c.parallel.layers_per_stage.split, LayerSplit::balanced);
  EXPECT_TRUE(c.parallel.layers_per_stage.counts.empty());
  c = parse_config(kMinimal, "t", {"parallel.layers_per_stage=uniform"});
  EXPECT_EQ(c.parallel.layers_per_stage.split, LayerSplit::uniform);
  c = parse_config(kMinimal, "t", {"model.n_layer=8", "parallel.pp=4", "parallel.layers_per_stage=[1,3,3,1]"});
  EXPECT_EQ(c.parallel.layers_per_stage.split, LayerSplit::list);
  EXPECT_EQ(c.parallel.layers_per_stage.counts, (std::vector<int>{1, 3, 3, 1}));
  std::string y = std::string(kMinimal) + "parallel:\n  pp: 2\n  layers_per_stage: [1, 2]\n";
  std::string msg = parse_error(y);
  EXPECT_HAS(msg, fmt::format("test.yaml:{}:3: parallel.layers_per_stage: sums to 3, but model.n_layer is 2",
                              line_of(y, "layers_per_stage")));
  EXPECT_HAS(parse_error(kMinimal, {"parallel.pp=2", "parallel.layers_per_stage=[2]"}),
             "parallel.layers_per_stage: has 1 entries, but pp (2) * virtual_stages (1) = 2");
  EXPECT_HAS(parse_error(kMinimal, {"parallel.pp=2", "parallel.layers_per_stage=[2, 0]"}),
             "parallel.layers_per_stage[1]: must be at least 1 (got 0)");
  EXPECT_HAS(
      parse_error(kMinimal, {"parallel.layers_per_stage=even"}),
      "parallel.layers_per_stage: expected uniform, balanced or a list of layer counts like [3, 5, 5, 3], got 'even'");
  EXPECT_HAS(parse_error(kMinimal, {"parallel.layers_per_stage=[]"}), "got an empty list");
  EXPECT_HAS(parse_error(kMinimal, {"parallel.layers_per_stage=[1, a]"}),
             "parallel.layers_per_stage[1]: expected an integer, got 'a'");
  EXPECT_HAS(parse_error(kMinimal, {"parallel.pp=4"}),
             "model.n_layer: 2 layers cannot fill pp (4) * virtual_stages (1) = 4 stages");
}

TEST(Config, ValidateChecks) {
  struct Case {
    std::vector<std::string> overrides;
    std::string expected;
  };
  std::vector<Case> cases = {
      {{"model.d_model=66"}, "model.d_model: 66 is not divisible by model.n_head (4)"},
      {{"model.arch=llama", "model.n_kv_head=3"},
       "model.n_kv_head: model.n_head (4) is not divisible by n_kv_head (3)"},
      {{"model.n_kv_head=2"}, "model.n_kv_head: gpt2 has no grouped-query attention"},
      // 0 set explicitly is refused, not read as "omitted" (n_head k/v heads, a 4 * d_model MLP).
      {{"model.arch=llama", "model.n_kv_head=0"}, "model.n_kv_head: must be at least 1 (got 0)"},
      {{"model.arch=llama", "model.d_ff=0"}, "model.d_ff: must be at least 1 (got 0)"},
      {{"model.vocab_size=0"}, "model.vocab_size: must be at least 1 (got 0)"},
      {{"model.vocab_size=256"},
       "model.vocab_size: 256 is smaller than the bytes tokenizer (257 ids with the special tokens of model.arch "
       "gpt2)"},
      {{"model.arch=bert"},
       "model.vocab_size: 257 is smaller than the bytes tokenizer (261 ids with the special tokens of model.arch "
       "bert)"},
      {{"data.tokenizer=gpt2"}, "model.vocab_size: 257 is smaller than the gpt2 tokenizer (50257 ids"},
      {{"train.seq_len=129"}, "train.seq_len: 129 exceeds model.max_seq_len (128)"},
      {{"model.dropout=1"}, "model.dropout: must be in [0, 1) (got 1)"},
      {{"model.dropout=-0.1"}, "model.dropout: must be in [0, 1)"},
      {{"model.rope_theta=10000"}, "model.rope_theta: gpt2 uses learned positions"},
      {{"model.arch=gpt3"},  // the archs from the enum's names, so a new model needs no edit here
       "model.arch: unknown value 'gpt3' — expected one of " + enum_choices<ModelArch>() + " (did you mean 'gpt2'?)"},
      {{"optimizer.name=adam"}, "optimizer.name: unknown value 'adam' — expected one of adamw|sgd"},
      {{"optimizer.schedule.decay=cos"}, "optimizer.schedule.decay: unknown value 'cos'"},
      {{"parallel.schedule=zb"}, "parallel.schedule: unknown value 'zb' — expected one of gpipe|1f1b|interleaved"},
      {{"runtime.device=tpu"}, "runtime.device: unknown value 'tpu' — expected one of cpu|cuda"},
      {{"runtime.precision=fp8"}, "runtime.precision: unknown value 'fp8' — expected one of fp32|bf16|fp16"},
      {{"runtime.precision=fp16", "runtime.loss_scale.growth_factor=1"},
       "runtime.loss_scale.growth_factor: must be > 1 (got 1) and finite — 2 doubles the scale"},
      {{"runtime.precision=fp16", "runtime.loss_scale.backoff_factor=1"},
       "runtime.loss_scale.backoff_factor: must lie in (0, 1) (got 1)"},
      {{"runtime.precision=fp16", "runtime.loss_scale.growth_interval=0"},
       "runtime.loss_scale.growth_interval: must be at least 1 step (got 0)"},
      {{"runtime.precision=fp16", "runtime.loss_scale.min=0"},
       "runtime.loss_scale.min: must be > 0 and finite in fp32 (got 0)"},
      {{"runtime.precision=fp16", "runtime.loss_scale.max=1e39"}, "runtime.loss_scale.max: must lie in [runtime"},
      {{"runtime.precision=fp16", "runtime.loss_scale.initial=1e8"},
       "runtime.loss_scale.initial: must lie in [min = 1, max = 16777216] (got 100000000) — raise max"},
      {{"runtime.precision=fp16", "runtime.loss_scale.growth_factor=two"},
       "runtime.loss_scale.growth_factor: expected a number, got 'two'"},
      {{"train.eval_every=-1"}, "train.eval_every: must not be negative (got -1)"},
      {{"train.eval_every=10"}, "train.eval_every: is 10, but data.val is not set"},
      {{"train.eval_every=10", "data.val=v*.bin"}, "train.eval_steps: must be at least 1 when eval_every is set"},
      {{"train.stop_at_step=21"}, "train.stop_at_step: must be in [0, train.steps = 20] (got 21)"},
      {{"train.global_batch=7"}, "train.global_batch: 7 is not divisible by train.micro_batch (2)"},
      {{"optimizer.schedule.warmup_steps=21"},
       "optimizer.schedule.warmup_steps: must be in [0, train.steps = 20] (got 21)"},
      {{"optimizer.schedule.min_lr=0.1"}, "optimizer.schedule.min_lr: must be in [0, optimizer.lr = 0.001] (got 0.1)"},
      {{"optimizer.lr=0"}, "optimizer.lr: must be positive (got 0)"},
      {{"model.arch=bert", "model.vocab_size=261", "train.seq_len=2"},
       "train.seq_len: 2 is too short for bert: a masked-LM window needs at least 3 positions"},
      {{"optimizer.betas=[0.9, 1.0]"}, "optimizer.betas[1]: must be in [0, 1) (got 1)"},
      {{"parallel.zero=2"}, "parallel.zero: must be 0 or 1 (got 2)"},
      {{"parallel.head_chunk_tokens=-64"}, "parallel.head_chunk_tokens: must not be negative (got -64)"},
      {{"model.d_model=2000000000", "model.n_head=1"}, "model.d_model: 2000000000 is too large: the MLP width"},
      {{"parallel.virtual_stages=2"}, "parallel.virtual_stages: is 2, but only the interleaved schedule"},
      {{"parallel.schedule=interleaved"}, "parallel.schedule: interleaved needs pp >= 2 and virtual_stages >= 2"},
      // The uniform split of interleaved chunks needs equal ones: refused here, not by the stage manager's check.
      {{"parallel.schedule=interleaved", "parallel.pp=2", "parallel.virtual_stages=2", "model.n_layer=5"},
       "model.n_layer: 5 layers do not divide into pp (2) * virtual_stages (2) = 4 equal chunks"},
      {{"parallel.tp=8"}, "parallel.tp: model.n_head (4) is not divisible by tp (8)"},
      {{"model.arch=llama", "model.n_head=12", "model.d_model=96", "model.n_kv_head=6", "parallel.tp=4"},
       "parallel.tp: model.n_kv_head (6) is neither divisible by tp (4) nor a divisor of it"},
      {{"parallel.order=[tp, xp, pp]"}, "parallel.order: unknown axis 'xp' — expected a permutation of tp, dp, pp"},
      {{"parallel.order=[tp, tp, pp]"}, "parallel.order: axis 'tp' appears twice"},
      {{"parallel.order=[tp, dp]"}, "parallel.order: lists 2 of the 3 axes"},
      {{"log.every=0"}, "log.every: must be at least 1 (got 0)"},
      {{"checkpoint.resume=\"\""}, "checkpoint.resume: is empty"},
      {{"runtime.comm_timeout_s=0"}, "runtime.comm_timeout_s: must be positive (got 0)"},
      {{"data.train=\"\""}, "data.train: is empty"},
  };
  for (const auto& c : cases) {
    std::string msg = parse_error(kMinimal, c.overrides);
    EXPECT_HAS(msg, c.expected);
    // Located at an override or at the file's line.
    EXPECT_TRUE(msg.rfind("override '", 0) == 0 || std::regex_search(msg, std::regex(R"(^test\.yaml:\d+:\d+: )")))
        << msg;
  }
  // validate() on a hand-built config names the key and, without locations, the source.
  Config c = parse_config(kMinimal, "t.yaml", {});
  c.train.seq_len = 1000;
  std::string msg = error_of([&] { validate(c); });
  EXPECT_HAS(msg, fmt::format("t.yaml:{}:3: train.seq_len: 1000 exceeds", line_of(kMinimal, "  seq_len")));
  c = Config{};
  c.source = "<embedded>";
  msg = error_of([&] { validate(c); });
  EXPECT_EQ(msg, "<embedded>: model.n_layer: must be at least 1 (got 0) — set the number of transformer blocks");
}

// 1-based column of the first occurrence of `needle` in `text`.
int column_of(const std::string& text, const std::string& needle) {
  auto pos = text.find(needle);
  return int(pos - text.rfind('\n', pos));
}

// data.train as a mixture: a list of {path, weight}; one glob stays a string.
const char* kMixture = R"(  train:
    - path: data/web_train_*.bin
      weight: 3
    - {path: "data/code_train_*.bin", weight: 0.5}
)";

TEST(Config, TrainMixtureDecodesAndRoundTrips) {
  const std::string y = replace(kMinimal, "  train: data/tiny_train_*.bin\n", kMixture);
  Config c = parse_config(y, "m.yaml", {});
  EXPECT_EQ(c.data.train, (std::vector<DataSource>{{"data/web_train_*.bin", 3.0}, {"data/code_train_*.bin", 0.5}}));
  EXPECT_EQ(train_source_key(c, 1), "data.train[1].path");
  EXPECT_EQ(key_location(c, "data.train[1].weight"),
            fmt::format("m.yaml:{}:{}", line_of(y, "weight: 0.5"), column_of(y, "weight: 0.5")));
  const std::string out = to_yaml(c);
  EXPECT_HAS(out, "    - {path: \"data/code_train_*.bin\", weight: 0.5}");
  EXPECT_EQ(parse_config(out, "again.yaml", {}), c) << out;
  // One source of weight 1 is the glob, written as one; of another weight, a list.
  Config one = parse_config(kMinimal, "t.yaml", {"data.train=[{path: a_*.bin, weight: 1}]"});
  EXPECT_EQ(one, parse_config(kMinimal, "t.yaml", {"data.train=a_*.bin"}));
  EXPECT_EQ(train_source_key(one, 0), "data.train");
  EXPECT_HAS(to_yaml(one), "train: \"a_*.bin\"");
  Config heavy = parse_config(kMinimal, "t.yaml", {"data.train=[{path: a_*.bin, weight: 2}]"});
  EXPECT_EQ(parse_config(to_yaml(heavy), "again.yaml", {}), heavy);
  // A changed weight is a difference in data.train (the resume check's line).
  Config lighter = parse_config(y, "m.yaml",
                                {"data.train=[{path: data/web_train_*.bin, weight: 3}, "
                                 "{path: data/code_train_*.bin, weight: 0.25}]"});
  std::optional<ConfigDifference> d = first_difference(c, lighter);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key, "data.train");
  EXPECT_HAS(d->b, "weight: 0.25");
}

// Every bad data.train value: one line naming the element's key, at its line.
TEST(Config, TrainMixtureErrors) {
  const std::string y = replace(kMinimal, "  train: data/tiny_train_*.bin\n", kMixture);
  const int second = line_of(y, "{path: \"data/code"), weight = column_of(y, "weight: 0.5");
  struct Case {
    std::string from, to, expected;
  };
  const std::vector<Case> cases = {
      {"weight: 0.5", "weight: 0",
       fmt::format("test.yaml:{}:{}: data.train[1].weight: must be a number > 0 (got 0) "
                   "— the source's share is its weight over the sum",
                   second, weight)},
      {"weight: 3", "weight: -1", "data.train[0].weight: must be a number > 0 (got -1)"},
      {"weight: 3", "weight: lots", "data.train[0].weight: expected a number, got 'lots'"},
      {"weight: 3", "weight: .inf", "data.train[0].weight: expected a number, got '.inf'"},
      {"weight: 0.5", "weight: 1.0e308", ""},  // sums to inf only with the other one at 1e308
      {", weight: 0.5", "", fmt::format("test.yaml:{}:7: data.train[1]: has no weight — add weight: W", second)},
      {"{path: \"data/code_train_*.bin\", ", "{", "data.train[1]: has no path — add path: GLOB"},
      {"weight: 0.5", "wieght: 0.5",
       "data.train[1].wieght: unknown key — a source has path: GLOB and weight: W (did "
       "you mean 'weight'?)"},
      {", weight: 0.5", ", weight: 0.5, weight: 1", "data.train[1].weight: duplicate key"},
      {"code_train", "web_train",
       "data.train[1].path: 'data/web_train_*.bin' is also data.train[0].path — list each glob once, with the weights "
       "summed"},
      {"\"data/code_train_*.bin\"", "\"\"", "data.train[1].path: is empty — give a glob"},
      {"    - {path: \"data/code_train_*.bin\", weight: 0.5}", "    - data/code_train_*.bin",
       "data.train[1]: expected a source {path: GLOB, weight: W}, got 'data/code_train_*.bin'"},
  };
  for (const Case& c : cases) {
    const std::string text = replace(y, c.from, c.to);
    if (c.expected.empty()) {
      EXPECT_NO_THROW(parse_config(text, "test.yaml", {}));
      continue;
    }
    std::string msg = parse_error(text);
    EXPECT_HAS(msg, c.expected);
    EXPECT_TRUE(std::regex_search(msg, std::regex(R"(^test\.yaml:\d+:\d+: data\.train)"))) << msg;
  }
  for (const auto& [value, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "data.train: is empty — give a glob of training shards, or a list of {path: GLOB, weight: W}"},
           {"{path: a, weight: 1}",
            "data.train: expected a shard glob, or a list of {path: GLOB, weight: W} for a "
            "mixture, got a mapping"},
           {"[{path: a, weight: 1.0e308}, {path: b, weight: 1.0e308}]",
            "data.train: the weights sum to inf — use smaller weights (only their ratios matter)"},
       }) {
    std::string msg = parse_error(kMinimal, {"data.train=" + value});
    EXPECT_HAS(msg, "override 'data.train=" + value + "': " + expected);
  }
}

TEST(Config, ResolveLayoutDerivesDpAndMicrobatches) {
  Config c = parse_config(kMinimal, "t.yaml", {"train.global_batch=32"});
  EXPECT_EQ(resolve_layout(c, 1), (Layout{1, 1, 1, 16}));
  EXPECT_EQ(resolve_layout(c, 4), (Layout{1, 1, 4, 4}));
  c = parse_config(kMinimal, "t.yaml", {"train.global_batch=32", "parallel.tp=2", "parallel.pp=2"});
  EXPECT_EQ(resolve_layout(c, 8), (Layout{2, 2, 2, 8}));
  c = parse_config(kMinimal, "t.yaml", {"train.global_batch=32", "parallel.dp=2", "parallel.microbatches=8"});
  EXPECT_EQ(resolve_layout(c, 2), (Layout{1, 1, 2, 8}));
  c = parse_config(kFull, "full.yaml", {});
  EXPECT_EQ(resolve_layout(c, 8), (Layout{2, 2, 2, 4}));
}

TEST(Config, ResolveLayoutArithmeticErrors) {
  std::string y = std::string(kMinimal) + "parallel:\n  tp: 2\n  pp: 2\n  dp: 3\n";
  Config c = parse_config(y, "job.yaml", {});
  std::string msg = error_of([&] { resolve_layout(c, 8); });
  EXPECT_EQ(msg, fmt::format("job.yaml:{}:3: parallel: tp (2) * pp (2) * dp (3) = 12, but the job has 8 ranks",
                             line_of(y, "dp: 3")));
  c = parse_config(kMinimal, "job.yaml", {"parallel.tp=4"});
  msg = error_of([&] { resolve_layout(c, 6); });
  EXPECT_HAS(msg, "parallel: the job has 6 ranks, not divisible by tp (4) * pp (1) = 4");
  c = parse_config(kMinimal, "job.yaml", {"train.global_batch=12"});
  msg = error_of([&] { resolve_layout(c, 4); });
  EXPECT_HAS(msg, "train.global_batch: 12 is not divisible by micro_batch (2) * dp (4) = 8");
  EXPECT_HAS(msg, "set train.global_batch to a multiple of 8");
  c = parse_config(kMinimal, "job.yaml", {"train.global_batch=64", "parallel.microbatches=8"});
  msg = error_of([&] { resolve_layout(c, 2); });
  EXPECT_HAS(msg,
             "override 'train.global_batch=64': train.global_batch: 64 != micro_batch (2) * microbatches (8) * "
             "dp (2) = 32");
  c = parse_config(kFull, "full.yaml", {"train.global_batch=24", "parallel.microbatches=0"});
  msg = error_of([&] { resolve_layout(c, 8); });
  EXPECT_HAS(msg, "parallel.microbatches: the interleaved schedule needs microbatches (3) divisible by pp (2)");
  EXPECT_HAS(msg, "— choose train.global_batch and train.micro_batch (or parallel.microbatches) for a multiple of 2");
  msg = error_of([&] { resolve_layout(parse_config(kMinimal, "j", {}), 0); });
  EXPECT_HAS(msg, "parallel: the job has 0 ranks");
}

TEST(Config, ResolveLayoutChecksOrder) {
  Config c = parse_config(kMinimal, "job.yaml", {});
  c.parallel.order = {"tp", "dp", "xp"};
  EXPECT_HAS(error_of([&] { resolve_layout(c, 1); }), "parallel.order: unknown axis 'xp'");
  c.parallel.order = {"pp", "dp", "pp"};
  EXPECT_HAS(error_of([&] { resolve_layout(c, 1); }), "parallel.order: axis 'pp' appears twice");
  std::string y = std::string(kMinimal) + "parallel:\n  order: [dp, dp, tp]\n";
  EXPECT_HAS(parse_error(y),
             fmt::format("test.yaml:{}:3: parallel.order: axis 'dp' appears twice", line_of(y, "order")));
}

TEST(Config, ExpressesTinyAndGpt2Small) {
  Config tiny = parse_config(kMinimal, "tiny.yaml", {"model.n_layer=4", "model.d_model=128"});
  EXPECT_EQ(tiny.model.vocab_size, 257);
  const char* small =
      R"(model: {arch: gpt2, n_layer: 12, n_head: 12, d_model: 768, vocab_size: 50257, max_seq_len: 1024}
train: {steps: 10, global_batch: 8, micro_batch: 4, seq_len: 1024}
optimizer: {lr: 6.0e-4}
data: {train: "data/fineweb_train_*.bin", tokenizer: gpt2}
)";
  Config g = parse_config(small, "gpt2_small.yaml", {});
  EXPECT_EQ(g.model.d_ff, 3072);
  EXPECT_EQ(g.model.n_kv_head, 12);
  EXPECT_EQ(g.model.max_seq_len, 1024);
  EXPECT_EQ(parse_config(to_yaml(g), "again.yaml", {}), g);
}

// docs/config.md has one table row per key ("| `model.n_layer` | ..."), and no others.
TEST(Config, DocsListEveryKey) {
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "LATTICE_SOURCE_DIR is not set";
  std::ifstream in(std::string(src) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::set<std::string> documented;
  std::regex row(R"(^\| `([a-z_.]+)` \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) documented.insert(m[1]);
  }
  auto keys = config_key_paths();
  for (const auto& k : keys) EXPECT_TRUE(documented.count(k)) << k << " is not in docs/config.md";
  for (const auto& d : documented)
    EXPECT_NE(std::find(keys.begin(), keys.end(), d), keys.end()) << d << " is documented but not a key";
}

// LLaMA's k/v heads split over tp (tp divides n_kv_head) or are replicated on
// tp / n_kv_head ranks (n_kv_head divides tp); both are accepted.
TEST(Config, LlamaKvHeadsSplitOrReplicateOverTp) {
  for (const char* kv : {"1", "2", "4"})
    for (const char* tp : {"1", "2", "4"}) {
      Config c =
          parse_config(kMinimal, "t.yaml",
                       {"model.arch=llama", std::string("model.n_kv_head=") + kv, std::string("parallel.tp=") + tp});
      EXPECT_EQ(c.model.n_kv_head, std::stoi(kv));
      EXPECT_EQ(c.parallel.tp, std::stoi(tp));
    }
}

}  // namespace
}  // namespace lattice
