// The run configuration: one YAML file (ARCHITECTURE.md §5) decoded into plain
// structs, plus `key.path=value` overrides applied on top.
//
// Invariants:
// - parse_config / load_config return a config that passed validate(): every
//   key has a value of the right type and range. Derived defaults are filled
//   in, so model.d_ff, model.n_kv_head, log.dir and checkpoint.dir are never
//   0/empty afterwards. The values that need the world size (parallel.dp when
//   0, parallel.microbatches when 0) come from resolve_layout().
// - Every error is a ConfigError whose what() is ONE line:
//     FILE:LINE:COL: KEY.PATH: what is wrong (the value) — what was expected
//   with "override 'k=v'" in place of FILE:LINE:COL for keys set by an
//   override, and FILE alone for keys that appear nowhere in the file.
// - to_yaml(cfg) writes every key; parsing it again gives a config equal to
//   cfg (operator== compares settings, not where they came from).
// - Unknown keys are errors at every level, in the file and in overrides.
// Every key, its type, default and meaning: docs/config.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace lattice {

// ---- enums with their YAML names ----

enum class ModelArch : uint8_t { gpt2, llama, bert, neox };
enum class PipeSchedule : uint8_t { gpipe, one_f_one_b, interleaved };  // "1f1b" in YAML
enum class LayerSplit : uint8_t { uniform, balanced, list };            // "list" is never written
enum class OptimizerName : uint8_t { adamw, sgd };
enum class LrDecay : uint8_t { cosine, linear, constant };
enum class TokenizerName : uint8_t { gpt2, bytes };
enum class Precision : uint8_t { fp32, bf16, fp16 };
// parallel.cpu_attention: what the CPU attention kernels save for backward
// (ops::AttentionState): each row's softmax statistics, linear in T, with P
// computed again in backward (compact), or P itself, (B, NH, T, T) per layer
// (full). The same bits either way.
enum class CpuAttention : uint8_t { compact, full };
// The type the matmul operands and the activations of a precision are stored
// in: f32, bf16 or f16 (parameters, gradients and statistics stay f32).
constexpr DType precision_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}
// The layout-invariance contract's relative loss tolerance between a layout
// and the one-rank run (short runs of tiny models; verify-layout's default):
// fp32 1e-5 (reduction order); bf16/fp16 1e-3, where a different fp32
// reduction order can flip a stored 16-bit value by one ulp and the flip
// spreads (tests/booster/test_layout_invariance_16bit.cpp).
constexpr double layout_loss_tolerance(Precision p) { return p == Precision::fp32 ? 1e-5 : 1e-3; }
// runtime.device uses core's DeviceType { cpu, cuda }.

// names[i] is the YAML name of E(i).
template <class E>
struct EnumNames;
template <>
struct EnumNames<ModelArch> {  // sized by its list: a new model appends one name (docs/adding-a-model.md)
  static constexpr auto names = std::to_array<std::string_view>({"gpt2", "llama", "bert", "neox"});
};
template <>
struct EnumNames<PipeSchedule> {
  static constexpr std::array<std::string_view, 3> names{"gpipe", "1f1b", "interleaved"};
};
template <>
struct EnumNames<LayerSplit> {
  static constexpr std::array<std::string_view, 2> names{"uniform", "balanced"};
};
template <>
struct EnumNames<OptimizerName> {
  static constexpr std::array<std::string_view, 2> names{"adamw", "sgd"};
};
template <>
struct EnumNames<LrDecay> {
  static constexpr std::array<std::string_view, 3> names{"cosine", "linear", "constant"};
};
template <>
struct EnumNames<TokenizerName> {
  static constexpr std::array<std::string_view, 2> names{"gpt2", "bytes"};
};
template <>
struct EnumNames<Precision> {
  static constexpr std::array<std::string_view, 3> names{"fp32", "bf16", "fp16"};
};
template <>
struct EnumNames<CpuAttention> {
  static constexpr std::array<std::string_view, 2> names{"compact", "full"};
};
template <>
struct EnumNames<DeviceType> {
  static constexpr std::array<std::string_view, 2> names{"cpu", "cuda"};
};

template <class E>
concept NamedEnum = requires {
  EnumNames<E>::names;
};

template <NamedEnum E>
std::string_view enum_name(E e) {
  auto i = size_t(e);
  return i < EnumNames<E>::names.size() ? EnumNames<E>::names[i] : std::string_view("?");
}
template <NamedEnum E>
std::optional<E> enum_from_name(std::string_view name) {
  for (size_t i = 0; i < EnumNames<E>::names.size(); ++i)
    if (EnumNames<E>::names[i] == name) return E(i);
  return std::nullopt;
}
template <NamedEnum E>
std::string enum_choices() {  // "gpt2|llama|bert|neox"
  std::string out;
  for (auto n : EnumNames<E>::names) {
    if (!out.empty()) out.push_back('|');
    out.append(n);
  }
  return out;
}

// What each architecture's model.* keys may say: the config checks read this
// table instead of naming architectures, so a new model adds one row here (and
// its folder under src/models; docs/adding-a-model.md).
struct ArchTraits {
  bool rotary = false;         // rotary positions: takes model.rope_theta (default 10000)
  bool grouped_query = false;  // takes n_kv_head != n_head
  bool free_d_ff = true;       // takes model.d_ff (else d_ff must be 4 * d_model)
  // Model special tokens after the tokenizer's own (BERT: [PAD] [MASK] [CLS]
  // [SEP]); they take the ids right after the tokenizer's (data/tokenizer.h).
  std::vector<std::string_view> special_tokens;
  bool causal = true;  // a left-to-right language model, which lattice sample can continue (BERT: masked tokens)
};
const ArchTraits& arch_traits(ModelArch arch);
// The ids the tokenizer itself uses, its own specials included (bytes 257:
// 256 bytes and <|endoftext|>; gpt2 50257), and the ids a model needs below
// model.vocab_size: those plus the architecture's special tokens.
int tokenizer_own_size(TokenizerName t);
int tokenizer_size(TokenizerName t, ModelArch arch);

// ---- sections (required keys have no meaningful default: they must be set) ----

struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  int n_layer = 0;      // required
  int n_head = 0;       // required
  int n_kv_head = 0;    // 0 = n_head (filled in by parse)
  int d_model = 0;      // required
  int d_ff = 0;         // 0 = 4 * d_model (filled in by parse)
  int vocab_size = 0;   // required; at least the tokenizer's size
  int max_seq_len = 0;  // required
  bool tie_embeddings = true;
  float dropout = 0.0f;
  double norm_eps = 1e-5;
  double rope_theta = 0.0;  // 0 = unset; rotary archs fill in 10000, the others must leave it 0
  double init_std = 0.02;
  int vocab_multiple = 64;  // the vocabulary is padded to a multiple of tp * vocab_multiple
  // Derived from data.tokenizer by fill_derived, not a YAML key: the ids the
  // tokenizer itself uses (bytes 257, gpt2 50257). The architecture's special
  // tokens (BERT's [PAD] [MASK] [CLS] [SEP]) take the ids right after them.
  int tokenizer_vocab = 0;
  bool operator==(const ModelConfig&) const = default;
};

struct LayersPerStage {
  LayerSplit split = LayerSplit::uniform;
  std::vector<int> counts;  // split == list: layers of each (virtual) stage, in order
  bool operator==(const LayersPerStage&) const = default;
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 0;                                           // 0 = world / (tp * pp), see resolve_layout
  std::vector<std::string> order = {"tp", "dp", "pp"};  // fastest-varying first
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int microbatches = 0;  // 0 = global_batch / (micro_batch * dp), see resolve_layout
  int virtual_stages = 1;
  LayersPerStage layers_per_stage;
  int zero = 0;  // ZeRO stage: 0 or 1
  // Gradient all-reduce over dp in buckets of about this many MiB, each started
  // as soon as the last microbatch's backward has produced it; 0 = one
  // all-reduce of the whole gradient buffer after backward (no overlap).
  double dp_bucket_mb = 25.0;
  // Activation recomputation: stage s recomputes the first [s] blocks of each
  // of its chunks in backward instead of keeping their activations; [] = none.
  std::vector<int> recompute_layers_per_stage;
  // Selective recomputation: blocks keep no (B, NH, T, T) attention
  // probabilities; backward computes them again from the saved q, k, v.
  bool recompute_attention = false;
  // The LM head and loss over at most this many tokens of a microbatch at a
  // time, keeping no logits (each chunk's gradients computed in forward);
  // 0 = all at once.
  int head_chunk_tokens = 0;
  // What the CPU attention kernels keep for backward (CpuAttention above).
  CpuAttention cpu_attention = CpuAttention::compact;
  bool operator==(const ParallelConfig&) const = default;
};

struct TrainConfig {
  int steps = 0;         // required: horizon of the run (the LR schedule spans it)
  int stop_at_step = 0;  // 0 = run to steps
  int global_batch = 0;  // required: sequences per optimizer step
  int micro_batch = 0;   // required: sequences per forward/backward
  int seq_len = 0;       // required
  int eval_every = 0;    // 0 = no evaluation
  int eval_steps = 0;    // validation batches per evaluation
  bool operator==(const TrainConfig&) const = default;
};

// The keys one optimizer reads (optimizer_key_owner) may be set only with
// that optimizer, and to_yaml writes them only for it; with another they keep
// their defaults.
struct OptimizerConfig {
  OptimizerName name = OptimizerName::adamw;
  double lr = 0.0;                            // required: peak learning rate
  std::array<double, 2> betas = {0.9, 0.95};  // adamw only
  double eps = 1e-8;                          // adamw only
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global grad norm; 0 = off
  double momentum = 0.9;   // sgd only
  struct Schedule {
    int warmup_steps = 0;
    LrDecay decay = LrDecay::cosine;
    int decay_steps = 0;  // 0 = every step after the warm-up; N = hold lr, then decay over the last N
    double min_lr = 0.0;
    bool operator==(const Schedule&) const = default;
  } schedule;
  bool operator==(const OptimizerConfig&) const = default;
};

// One training corpus of data.train: its shards and its share of the samples.
struct DataSource {
  std::string path;     // shard glob
  double weight = 1.0;  // > 0; the share is weight / (the sum of data.train's weights)
  bool operator==(const DataSource&) const = default;
};

struct DataConfig {
  // required: one shard glob (YAML: a string; one source of weight 1) or a
  // mixture (YAML: a list of {path: GLOB, weight: W}); data/mixture.h.
  std::vector<DataSource> train;
  std::string val;    // shard glob; "" = no validation data
  TokenizerName tokenizer = TokenizerName::gpt2;
  std::string vocab_dir;  // gpt2 tokenizer files (encoder.json, vocab.bpe); "" = none: there is no default
  bool operator==(const DataConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;              // "" = <log.dir>/checkpoints (filled in by parse)
  int every = 0;                // 0 = only at the end of the run and on stop
  int keep_last = 3;            // 0 = keep all
  std::string resume = "auto";  // auto | never | PATH
  bool at_end = true;           // false: no checkpoint at train.steps (every N steps and on stop still)
  // "" = none; else a step, checkpoint or run directory whose model weights
  // start this run (fresh optimizer, step 1) when it does not resume.
  std::string init_from;
  bool operator==(const CheckpointConfig&) const = default;
};

struct LogConfig {
  std::string dir;  // "" = runs/<config name> (filled in by parse)
  int every = 1;
  bool tensorboard = false;
  bool trace = false;
  bool per_rank = false;  // every rank also writes <dir>/ranks/rank_NNNNN.log
  bool operator==(const LogConfig&) const = default;
};

// runtime.loss_scale: dynamic loss scaling, fp16 only; these are the options
// optim::LossScaler runs with (optim/loss_scaler.h says what each one does).
struct LossScaleConfig {
  double initial = 65536.0;     // 2^16: the scale of step 1
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int growth_interval = 1000;   // finite steps before the scale grows
  double min = 1.0;             // backoff clamps here
  double max = 16777216.0;      // 2^24; growth clamps here
  bool operator==(const LossScaleConfig&) const = default;
};

// The optimizer that alone reads the key `path` ("optimizer.momentum" -> sgd);
// nullopt for a key every optimizer reads, or one outside optimizer.
std::optional<OptimizerName> optimizer_key_owner(const std::string& path);

// What is wrong with one runtime.loss_scale value: its key under
// runtime.loss_scale ("growth_factor") and why ("must be > 1 (got 1) — 2
// doubles the scale").
struct LossScaleProblem {
  std::string key, message;
};
// The first value a loss scaler cannot run with, or nullopt. The one check of
// these values: config validation reports it at the key's location in the
// file, optim::LossScaler's constructor as an Error naming the same key.
std::optional<LossScaleProblem> loss_scale_problem(const LossScaleConfig& s);

struct RuntimeConfig {
  DeviceType device = DeviceType::cpu;
  Precision precision = Precision::fp32;
  LossScaleConfig loss_scale;  // read with precision fp16 only
  uint64_t seed = 1337;
  int threads = 0;  // 0 = the OpenMP default for this rank
  double comm_timeout_s = 300.0;
  double peak_flops = 0.0;  // per rank, for MFU; 0 = measure (CPU) / device table (CUDA)
  bool operator==(const RuntimeConfig&) const = default;
};

// Where a key was set: a file position (1-based) or an override.
struct KeyLocation {
  int line = 0, column = 0;   // 0 = not from the file
  std::string override_text;  // non-empty: set by this `key=value` override
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  RuntimeConfig runtime;
  std::string source;  // file path or "<embedded>"
  std::string name;    // config name: the file stem
  // Key path ("model.n_layer", "optimizer.schedule") -> where it was set.
  std::map<std::string, KeyLocation> locations;

  // Settings only: source, name and locations are not compared.
  bool operator==(const Config& o) const;
};

// ---- errors ----

// A bad config: an InputError, printed as its message alone, located at the key.
class ConfigError : public InputError {
 public:
  ConfigError(std::string message, std::string key_path);
  const std::string& key_path() const { return key_path_; }  // "" when none applies

 private:
  std::string key_path_;
};

// "FILE:LINE:COL" / "override 'k=v'" / "FILE" for a key path, falling back to
// the nearest enclosing section that has a location.
std::string key_location(const Config& cfg, const std::string& key_path);
// Throws ConfigError "LOCATION: KEY.PATH: message". For other modules that
// reject a config value (e.g. "data.train: no file matches").
[[noreturn]] void config_fail(const Config& cfg, const std::string& key_path, const std::string& message);

// ---- API ----

// Reads the file, applies the overrides, decodes and validates.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from text; source_name stands for the file in messages.
Config parse_config(const std::string& yaml_text, const std::string& source_name = "<embedded>",
                    const std::vector<std::string>& overrides = {});
// An effective config a run wrote (its config.yaml, a checkpoint's
// trainer_state.json), read back to compare with. As parse_config, but the
// keys of another optimizer than its own are dropped instead of refused: an
// older Lattice wrote every optimizer key, and those had no effect.
Config parse_written_config(const std::string& yaml_text, const std::string& source_name);
Config load_written_config(const std::string& path);
// The effective config, every key, in the documented order.
std::string to_yaml(const Config& cfg);
// Checks that need no world size. Throws ConfigError.
void validate(const Config& cfg);
// Fills derived defaults (d_ff, n_kv_head, rope_theta, log.dir, checkpoint.dir);
// parse calls it, code that builds a Config by hand may too.
void fill_derived(Config& cfg);
// Every leaf key path, in the order to_yaml writes them.
std::vector<std::string> config_key_paths();

// The key of training source s's glob, for messages about its shards:
// "data.train" when data.train has one source, "data.train[s].path" in a mixture.
std::string train_source_key(const Config& cfg, size_t s);

// The first key path (in to_yaml order) whose value differs, with both values
// as YAML text; nullopt when the settings are equal.
struct ConfigDifference {
  std::string key, a, b;
};
std::optional<ConfigDifference> first_difference(const Config& a, const Config& b);
// `saved` with the settings that may change on resume (ARCHITECTURE.md §5:
// parallel.*, runtime.threads, log.*, checkpoint.*, train.stop_at_step)
// taken from `now`: first_difference of the result and `now` is what may not.
Config with_resumable_settings(Config saved, const Config& now);

// Layout of a job of `world_size` ranks: dp and microbatches derived and checked:
//   tp * pp * dp == world_size, global_batch == micro_batch * microbatches * dp.
struct Layout {
  int tp = 1, pp = 1, dp = 1, microbatches = 1;
  bool operator==(const Layout&) const = default;
};
Layout resolve_layout(const Config& cfg, int world_size);

}  // namespace lattice
