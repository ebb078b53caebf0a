// Derived defaults, value checks that need no world size, and the layout
// arithmetic that does. Every failure names the key path and where it was set.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config/config.h"
#include "config/schema.h"

namespace lattice {

using config_detail::format_location;
using config_detail::parent_path;

std::string key_location(const Config& cfg, const std::string& key_path) {
  for (std::string p = key_path; !p.empty(); p = parent_path(p))
    if (auto it = cfg.locations.find(p); it != cfg.locations.end()) return format_location(cfg.source, it->second);
  return cfg.source;
}

std::string train_source_key(const Config& cfg, size_t s) {
  return cfg.data.train.size() == 1 ? std::string("data.train") : fmt::format("data.train[{}].path", s);
}

void config_fail(const Config& cfg, const std::string& key_path, const std::string& message) {
  throw ConfigError(fmt::format("{}: {}: {}", key_location(cfg, key_path), key_path, message), key_path);
}

// One row per ModelArch, in enum order.
const ArchTraits& arch_traits(ModelArch arch) {
  static const std::array<ArchTraits, EnumNames<ModelArch>::names.size()> table = {{
      // rotary, grouped_query, free_d_ff, special_tokens, causal
      {false, false, false, {}, true},                                     // gpt2
      {true, true, true, {}, true},                                        // llama
      {false, false, true, {"[PAD]", "[MASK]", "[CLS]", "[SEP]"}, false},  // bert
      {true, false, true, {}, true},                                       // neox
  }};
  LATTICE_CHECK(size_t(arch) < table.size(), "model.arch: no traits for arch {}", int(arch));
  return table[size_t(arch)];
}

// Base vocabulary plus special tokens (ARCHITECTURE.md §5, Tokenizers): bytes
// has 256 byte ids then <|endoftext|>; gpt2 has 50257 ids including it; the
// architecture's own specials follow.
int tokenizer_own_size(TokenizerName t) { return t == TokenizerName::bytes ? 257 : 50257; }

int tokenizer_size(TokenizerName t, ModelArch arch) {
  return tokenizer_own_size(t) + int(arch_traits(arch).special_tokens.size());
}

namespace {

constexpr int kMaxDModel = std::numeric_limits<int32_t>::max() / 4;  // 4 * d_model, the default d_ff, fits an int
// Bounds far above any real job on the per-layer and per-microbatch tables
// every rank (and `lattice plan`) builds, so a typo is a config error, not an
// allocation that fails after minutes or takes the machine's memory.
constexpr int kMaxLayers = 100000;
constexpr long long kMaxMicrobatches = 1000000;

// Like config_fail, but located at `where` (a key that names the problem
// better than the section, e.g. parallel.dp for a "parallel:" message).
template <class... Args>
void require_at(bool ok, const Config& cfg, const std::string& where, const std::string& path,
                fmt::format_string<Args...> f, Args&&... args) {
  if (!ok) [[unlikely]]
    throw ConfigError(
        fmt::format("{}: {}: {}", key_location(cfg, where), path, fmt::format(f, std::forward<Args>(args)...)), path);
}

template <class... Args>
void require(bool ok, const Config& cfg, const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  require_at(ok, cfg, path, path, f, std::forward<Args>(args)...);
}

void require_positive(const Config& cfg, const std::string& path, long long v, const char* what) {
  require(v > 0, cfg, path, "must be at least 1 (got {}) — set {}", v, what);
}

void require_non_negative(const Config& cfg, const std::string& path, double v, const char* what) {
  require(v >= 0, cfg, path, "must not be negative (got {}) — {}", v, what);
}

void validate_model(const Config& c) {
  const ModelConfig& m = c.model;
  require_positive(c, "model.n_layer", m.n_layer, "the number of transformer blocks");
  require(m.n_layer <= kMaxLayers, c, "model.n_layer",
          "{} is too large (at most {}): every rank builds a table per block — is it a typo?", m.n_layer, kMaxLayers);
  require_positive(c, "model.n_head", m.n_head, "the number of attention heads");
  require_positive(c, "model.d_model", m.d_model, "the hidden size");
  require(m.d_model <= kMaxDModel, c, "model.d_model",
          "{} is too large: the MLP width 4 * d_model must fit in 32 bits (at most {})", m.d_model, kMaxDModel);
  require_positive(c, "model.vocab_size", m.vocab_size, "the vocabulary size");
  require_positive(c, "model.max_seq_len", m.max_seq_len, "the longest sequence the model supports");
  require_positive(c, "model.n_kv_head", m.n_kv_head, "the key/value heads, or omit it for n_head");
  require_positive(c, "model.d_ff", m.d_ff, "the MLP hidden size, or omit it for 4 * d_model");
  require(m.d_model % m.n_head == 0, c, "model.d_model",
          "{} is not divisible by model.n_head ({}) — use d_model = n_head * head_dim", m.d_model, m.n_head);
  require(m.n_head % m.n_kv_head == 0, c, "model.n_kv_head",
          "model.n_head ({}) is not divisible by n_kv_head ({}) — each kv head serves a whole group of heads", m.n_head,
          m.n_kv_head);
  const ArchTraits& traits = arch_traits(m.arch);
  require(traits.grouped_query || m.n_kv_head == m.n_head, c, "model.n_kv_head",
          "{} has no grouped-query attention: n_kv_head ({}) must equal n_head ({}) — omit n_kv_head",
          enum_name(m.arch), m.n_kv_head, m.n_head);
  require(traits.free_d_ff || m.d_ff == 4 * m.d_model, c, "model.d_ff",
          "{} uses d_ff = 4 * d_model = {} (got {}) — remove d_ff", enum_name(m.arch), 4 * m.d_model, m.d_ff);
  require(m.dropout >= 0 && m.dropout < 1, c, "model.dropout", "must be in [0, 1) (got {})", m.dropout);
  require(m.norm_eps > 0, c, "model.norm_eps", "must be positive (got {})", m.norm_eps);
  require(m.init_std > 0, c, "model.init_std", "must be positive (got {})", m.init_std);
  require(m.vocab_multiple >= 1, c, "model.vocab_multiple", "must be at least 1 (got {})", m.vocab_multiple);
  require_non_negative(c, "model.rope_theta", m.rope_theta, "omit it for the default");
  require(!traits.rotary || (m.d_model / m.n_head) % 2 == 0, c, "model.d_model",
          "{} over model.n_head ({}) gives an odd head size ({}); {}'s rotary embeddings rotate pairs — use an even "
          "d_model / n_head",
          m.d_model, m.n_head, m.d_model / m.n_head, enum_name(m.arch));
  require(traits.rotary || m.rope_theta == 0, c, "model.rope_theta",
          "{} uses learned positions, not RoPE (got {}) — remove rope_theta", enum_name(m.arch), m.rope_theta);
  int need = tokenizer_size(c.data.tokenizer, m.arch);
  require(
      m.vocab_size >= need, c, "model.vocab_size",
      "{} is smaller than the {} tokenizer ({} ids with the special tokens of model.arch {}) — set vocab_size >= {}",
      m.vocab_size, enum_name(c.data.tokenizer), need, enum_name(m.arch), need);
}

void validate_order(const Config& c) {
  const auto& order = c.parallel.order;
  std::vector<std::string> seen;
  for (const auto& axis : order) {
    require(axis == "tp" || axis == "dp" || axis == "pp", c, "parallel.order",
            "unknown axis '{}' — expected a permutation of tp, dp, pp", axis);
    require(std::find(seen.begin(), seen.end(), axis) == seen.end(), c, "parallel.order",
            "axis '{}' appears twice — expected a permutation of tp, dp, pp", axis);
    seen.push_back(axis);
  }
  require(order.size() == 3, c, "parallel.order", "lists {} of the 3 axes — expected a permutation of tp, dp, pp",
          order.size());
}

void validate_recompute(const Config& c) {
  const std::vector<int>& r = c.parallel.recompute_layers_per_stage;
  if (r.empty()) return;
  require(int(r.size()) == c.parallel.pp, c, "parallel.recompute_layers_per_stage",
          "has {} entries, but parallel.pp is {} — give one count per stage (or [] for none)", r.size(), c.parallel.pp);
  for (size_t i = 0; i < r.size(); ++i)
    require(r[i] >= 0 && r[i] <= c.model.n_layer, c, fmt::format("parallel.recompute_layers_per_stage[{}]", i),
            "must be between 0 and model.n_layer ({}) (got {})", c.model.n_layer, r[i]);
}

void validate_stages(const Config& c) {
  validate_recompute(c);
  const ParallelConfig& p = c.parallel;
  int chunks = p.pp * p.virtual_stages;
  const LayersPerStage& lps = p.layers_per_stage;
  if (lps.split != LayerSplit::list) {
    require(c.model.n_layer >= chunks, c, "model.n_layer",
            "{} layers cannot fill pp ({}) * virtual_stages ({}) = {} stages — each stage needs a layer",
            c.model.n_layer, p.pp, p.virtual_stages, chunks);
    require(lps.split != LayerSplit::uniform || p.virtual_stages == 1 || c.model.n_layer % chunks == 0, c,
            "model.n_layer",
            "{} layers do not divide into pp ({}) * virtual_stages ({}) = {} equal chunks, which the uniform split "
            "needs with interleaving — change virtual_stages or give parallel.layers_per_stage as a list (or balanced)",
            c.model.n_layer, p.pp, p.virtual_stages, chunks);
    return;
  }
  require(int(lps.counts.size()) == chunks, c, "parallel.layers_per_stage",
          "has {} entries, but pp ({}) * virtual_stages ({}) = {} — give one count per stage", lps.counts.size(), p.pp,
          p.virtual_stages, chunks);
  int sum = 0;
  for (size_t i = 0; i < lps.counts.size(); ++i) {
    require(lps.counts[i] > 0, c, fmt::format("parallel.layers_per_stage[{}]", i),
            "must be at least 1 (got {}) — every stage holds a layer", lps.counts[i]);
    sum += lps.counts[i];
  }
  require(sum == c.model.n_layer, c, "parallel.layers_per_stage", "sums to {}, but model.n_layer is {}", sum,
          c.model.n_layer);
}

void validate_parallel(const Config& c) {
  const ParallelConfig& p = c.parallel;
  require_positive(c, "parallel.tp", p.tp, "the tensor-parallel degree");
  require_positive(c, "parallel.pp", p.pp, "the number of pipeline stages");
  require_non_negative(c, "parallel.dp", p.dp, "omit it for world / (tp * pp)");
  require_non_negative(c, "parallel.microbatches", p.microbatches, "omit it for global_batch / (micro_batch * dp)");
  require_positive(c, "parallel.virtual_stages", p.virtual_stages, "1 unless the schedule is interleaved");
  require(p.zero == 0 || p.zero == 1, c, "parallel.zero", "must be 0 or 1 (got {})", p.zero);
  require_non_negative(c, "parallel.head_chunk_tokens", p.head_chunk_tokens,
                       "0 runs the head over the whole microbatch at once");
  require(p.dp_bucket_mb >= 0 && p.dp_bucket_mb <= 1e6, c, "parallel.dp_bucket_mb",
          "must be between 0 (one all-reduce after backward) and 1e6 MiB (got {})", p.dp_bucket_mb);
  validate_order(c);
  bool interleaved = p.schedule == PipeSchedule::interleaved;
  require(interleaved || p.virtual_stages == 1, c, "parallel.virtual_stages",
          "is {}, but only the interleaved schedule uses virtual stages — set parallel.schedule: interleaved",
          p.virtual_stages);
  require(!interleaved || (p.virtual_stages >= 2 && p.pp >= 2), c, "parallel.schedule",
          "interleaved needs pp >= 2 and virtual_stages >= 2 (got pp {}, virtual_stages {}) — or use 1f1b", p.pp,
          p.virtual_stages);
  const ModelConfig& m = c.model;
  require(m.n_head % p.tp == 0, c, "parallel.tp", "model.n_head ({}) is not divisible by tp ({})", m.n_head, p.tp);
  // k/v heads split over tp, or (n_kv_head dividing tp) each held by tp / n_kv_head ranks.
  require(m.n_kv_head % p.tp == 0 || p.tp % m.n_kv_head == 0, c, "parallel.tp",
          "model.n_kv_head ({}) is neither divisible by tp ({}) nor a divisor of it — each tp rank needs whole k/v "
          "heads, shared by an equal number of ranks",
          m.n_kv_head, p.tp);
  require(m.d_ff % p.tp == 0, c, "parallel.tp", "model.d_ff ({}) is not divisible by tp ({})", m.d_ff, p.tp);
  validate_stages(c);
}

void validate_train(const Config& c) {
  const TrainConfig& t = c.train;
  require_positive(c, "train.steps", t.steps, "the number of optimizer steps");
  require_positive(c, "train.global_batch", t.global_batch, "the sequences per optimizer step");
  require_positive(c, "train.micro_batch", t.micro_batch, "the sequences per forward/backward");
  require_positive(c, "train.seq_len", t.seq_len, "the tokens per sequence");
  require(t.stop_at_step >= 0 && t.stop_at_step <= t.steps, c, "train.stop_at_step",
          "must be in [0, train.steps = {}] (got {}) — 0 runs to the end", t.steps, t.stop_at_step);
  require(t.global_batch % t.micro_batch == 0, c, "train.global_batch", "{} is not divisible by train.micro_batch ({})",
          t.global_batch, t.micro_batch);
  require(t.seq_len <= c.model.max_seq_len, c, "train.seq_len",
          "{} exceeds model.max_seq_len ({}) — lower seq_len or raise max_seq_len", t.seq_len, c.model.max_seq_len);
  // A masked-LM window is framed [CLS] tokens [SEP] (models/bert/bert_mlm.h).
  require(arch_traits(c.model.arch).causal || t.seq_len >= 3, c, "train.seq_len",
          "{} is too short for {}: a masked-LM window needs at least 3 positions ([CLS], a token, [SEP])", t.seq_len,
          enum_name(c.model.arch));
  require_non_negative(c, "train.eval_every", t.eval_every, "0 turns evaluation off");
  require_non_negative(c, "train.eval_steps", t.eval_steps, "the validation batches per evaluation");
  if (t.eval_every > 0) {
    require(!c.data.val.empty(), c, "train.eval_every",
            "is {}, but data.val is not set — set data.val or eval_every: 0", t.eval_every);
    require(t.eval_steps > 0, c, "train.eval_steps",
            "must be at least 1 when eval_every is set (got {}) — the batches per evaluation", t.eval_steps);
  }
}

// What optimizer.name is called in prose ("SGD's").
const char* optimizer_title(OptimizerName n) { return n == OptimizerName::adamw ? "AdamW" : "SGD"; }

void validate_optimizer(const Config& c) {
  const OptimizerConfig& o = c.optimizer;
  // Another optimizer's key would be ignored: refused where it is set (file or override).
  for (const auto& [path, where] : c.locations) {
    const std::optional<OptimizerName> owner = optimizer_key_owner(path);
    require(!owner || *owner == o.name, c, path,
            "is {}'s and optimizer.name is {} — remove it, or set optimizer.name: {}",
            optimizer_title(owner.value_or(o.name)), enum_name(o.name), enum_name(owner.value_or(o.name)));
  }
  require(o.lr > 0, c, "optimizer.lr", "must be positive (got {}) — the peak learning rate", o.lr);
  for (int i = 0; i < 2; ++i)
    require(o.betas[i] >= 0 && o.betas[i] < 1, c, fmt::format("optimizer.betas[{}]", i), "must be in [0, 1) (got {})",
            o.betas[i]);
  require(o.eps > 0, c, "optimizer.eps", "must be positive (got {})", o.eps);
  require_non_negative(c, "optimizer.weight_decay", o.weight_decay, "0 turns it off");
  require_non_negative(c, "optimizer.grad_clip", o.grad_clip, "0 turns clipping off");
  require(o.momentum >= 0 && o.momentum < 1, c, "optimizer.momentum", "must be in [0, 1) (got {})", o.momentum);
  require(o.schedule.warmup_steps >= 0 && o.schedule.warmup_steps <= c.train.steps, c,
          "optimizer.schedule.warmup_steps", "must be in [0, train.steps = {}] (got {})", c.train.steps,
          o.schedule.warmup_steps);
  require(o.schedule.decay_steps >= 0 && o.schedule.decay_steps <= c.train.steps - o.schedule.warmup_steps, c,
          "optimizer.schedule.decay_steps",
          "must be in [0, train.steps - warmup_steps = {}] (got {}) — 0 decays over every step after the warm-up",
          c.train.steps - o.schedule.warmup_steps, o.schedule.decay_steps);
  require(o.schedule.decay_steps == 0 || o.schedule.decay != LrDecay::constant, c, "optimizer.schedule.decay_steps",
          "is {}, but optimizer.schedule.decay is constant, which never decays — set decay: linear or cosine, or "
          "decay_steps: 0",
          o.schedule.decay_steps);
  require(o.schedule.min_lr >= 0 && o.schedule.min_lr <= o.lr, c, "optimizer.schedule.min_lr",
          "must be in [0, optimizer.lr = {}] (got {})", o.lr, o.schedule.min_lr);
}

// data.train's sources: each a glob, once, with a positive weight.
void validate_train_sources(const Config& c) {
  const std::vector<DataSource>& v = c.data.train;
  require(!v.empty(), c, "data.train",
          "is empty — give a glob of training shards, or a list of {{path: GLOB, weight: W}} for a mixture");
  double total = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("data.train[{}]", i);
    require(!v[i].path.empty(), c, at + ".path", "is empty — give a glob of this source's training shards");
    require(v[i].weight > 0 && std::isfinite(v[i].weight), c, at + ".weight",
            "must be a number > 0 (got {}) — the source's share is its weight over the sum of the weights; remove "
            "the source to leave it out",
            v[i].weight);
    for (size_t j = 0; j < i; ++j)
      require(v[j].path != v[i].path, c, at + ".path",
              "'{}' is also data.train[{}].path — list each glob once, with the weights summed", v[i].path, j);
    total += v[i].weight;
  }
  require(std::isfinite(total), c, "data.train",
          "the weights sum to {} — use smaller weights (only their ratios matter)", total);
}

void validate_io(const Config& c) {
  validate_train_sources(c);
  require_non_negative(c, "checkpoint.every", c.checkpoint.every, "0 saves only at the end and on stop");
  require_non_negative(c, "checkpoint.keep_last", c.checkpoint.keep_last, "0 keeps every checkpoint");
  require(!c.checkpoint.resume.empty(), c, "checkpoint.resume", "is empty — use auto, never or a checkpoint path");
  require(c.checkpoint.init_from.empty() || c.checkpoint.resume == "auto" || c.checkpoint.resume == "never", c,
          "checkpoint.init_from",
          "and checkpoint.resume ('{}') both name a checkpoint — resume continues a run (its optimizer and step), "
          "init_from starts a new one from its weights: keep one",
          c.checkpoint.resume);
  require_positive(c, "log.every", c.log.every, "the steps between metric lines");
}

}  // namespace

std::optional<OptimizerName> optimizer_key_owner(const std::string& path) {
  if (path == "optimizer.betas" || path == "optimizer.eps") return OptimizerName::adamw;
  if (path == "optimizer.momentum") return OptimizerName::sgd;
  return std::nullopt;
}

std::optional<LossScaleProblem> loss_scale_problem(const LossScaleConfig& s) {
  constexpr double kMax = std::numeric_limits<float>::max();  // the loss is scaled in fp32
  auto problem = [](const char* key, std::string message) {
    return std::optional<LossScaleProblem>(LossScaleProblem{key, std::move(message)});
  };
  if (!(s.min > 0 && s.min <= kMax))
    return problem("min", fmt::format("must be > 0 and finite in fp32 (got {})", s.min));
  if (!(s.max >= s.min && s.max <= kMax))
    return problem("max", fmt::format("must lie in [runtime.loss_scale.min = {}, {:g}] (got {})", s.min, kMax, s.max));
  if (!(s.initial >= s.min && s.initial <= s.max))
    return problem("initial", fmt::format("must lie in [min = {}, max = {}] (got {}) — {}", s.min, s.max, s.initial,
                                          s.initial > s.max ? "raise max to start higher" : "lower min to start lower"));
  if (!(s.growth_factor > 1 && std::isfinite(s.growth_factor)))
    return problem("growth_factor",
                   fmt::format("must be > 1 (got {}) and finite — 2 doubles the scale", s.growth_factor));
  if (!(s.backoff_factor > 0 && s.backoff_factor < 1))
    return problem("backoff_factor",
                   fmt::format("must lie in (0, 1) (got {}) — 0.5 halves the scale", s.backoff_factor));
  if (s.growth_interval < 1)
    return problem(
        "growth_interval",
        fmt::format("must be at least 1 step (got {}) — the finite steps before the scale grows", s.growth_interval));
  return std::nullopt;
}

namespace {

// runtime.loss_scale: only fp16 scales the loss, so setting it with another
// precision is a mistake worth a line; its values as loss_scale_problem says.
void validate_loss_scale(const Config& c) {
  const Precision p = c.runtime.precision;
  // The first key set under it names the mistake best (an override locates only its own key).
  const auto set = std::find_if(c.locations.begin(), c.locations.end(),
                                [](const auto& kv) { return kv.first.starts_with("runtime.loss_scale."); });
  require(set == c.locations.end() || p == Precision::fp16, c,
          set == c.locations.end() ? "runtime.loss_scale" : set->first,
          "is set, but runtime.precision is {} and only fp16 scales the loss — remove runtime.loss_scale or set "
          "runtime.precision: fp16",
          enum_name(p));
  if (auto bad = loss_scale_problem(c.runtime.loss_scale))
    config_fail(c, "runtime.loss_scale." + bad->key, bad->message);
}

void validate_runtime(const Config& c) {
  const RuntimeConfig& r = c.runtime;
  validate_loss_scale(c);
  require_non_negative(c, "runtime.threads", r.threads, "0 uses the OpenMP default");
  require(r.comm_timeout_s > 0, c, "runtime.comm_timeout_s", "must be positive (got {})", r.comm_timeout_s);
  require_non_negative(c, "runtime.peak_flops", r.peak_flops, "0 measures or looks it up");
}

}  // namespace

void fill_derived(Config& cfg) {
  ModelConfig& m = cfg.model;
  // 0 is "not given": a key the config sets to 0 stays 0, for validate_model to refuse.
  auto given = [&](const char* key) { return cfg.locations.count(key) > 0; };
  if (m.n_kv_head == 0 && !given("model.n_kv_head")) m.n_kv_head = m.n_head;
  // (A d_model too large for it leaves d_ff 0; validate_model names d_model.)
  if (m.d_ff == 0 && !given("model.d_ff") && m.d_model <= kMaxDModel) m.d_ff = 4 * m.d_model;
  if (m.rope_theta == 0 && arch_traits(m.arch).rotary) m.rope_theta = 10000.0;
  m.tokenizer_vocab = tokenizer_own_size(cfg.data.tokenizer);
  if (cfg.log.dir.empty()) cfg.log.dir = "runs/" + (cfg.name.empty() ? std::string("run") : cfg.name);
  if (cfg.checkpoint.dir.empty()) cfg.checkpoint.dir = cfg.log.dir + "/checkpoints";
}

void validate(const Config& cfg) {
  validate_model(cfg);
  validate_parallel(cfg);
  validate_train(cfg);
  validate_optimizer(cfg);
  validate_io(cfg);
  validate_runtime(cfg);
}

Layout resolve_layout(const Config& c, int world) {
  const ParallelConfig& p = c.parallel;
  validate_order(c);
  require(world >= 1, c, "parallel", "the job has {} ranks — launch at least one", world);
  Layout out{p.tp, p.pp, p.dp, p.microbatches};
  if (p.dp == 0) {
    require_at(world % (p.tp * p.pp) == 0, c, p.pp > 1 ? "parallel.pp" : "parallel.tp", "parallel",
               "the job has {} ranks, not divisible by tp ({}) * pp ({}) = {} — choose tp and pp whose product divides "
               "the rank count",
               world, p.tp, p.pp, p.tp * p.pp);
    out.dp = world / (p.tp * p.pp);
  }
  require_at(p.tp * p.pp * out.dp == world, c, "parallel.dp", "parallel",
             "tp ({}) * pp ({}) * dp ({}) = {}, but the job has {} ranks", p.tp, p.pp, out.dp, p.tp * p.pp * out.dp,
             world);
  const TrainConfig& t = c.train;
  long long per_micro = (long long)t.micro_batch * out.dp;
  if (p.microbatches == 0) {
    require(t.global_batch % per_micro == 0, c, "train.global_batch",
            "{} is not divisible by micro_batch ({}) * dp ({}) = {} — set train.global_batch to a multiple of {} "
            "(or a smaller train.micro_batch)",
            t.global_batch, t.micro_batch, out.dp, per_micro, per_micro);
    require(t.global_batch / per_micro <= kMaxMicrobatches, c, "train.global_batch",
            "{} / (micro_batch ({}) * dp ({})) = {} microbatches per step is too many (at most {}): the schedule "
            "lists each — raise train.micro_batch or lower train.global_batch",
            t.global_batch, t.micro_batch, out.dp, t.global_batch / per_micro, kMaxMicrobatches);
    out.microbatches = int(t.global_batch / per_micro);
  }
  require(out.microbatches <= kMaxMicrobatches, c, "parallel.microbatches",
          "{} is too many (at most {}): the schedule lists each — raise train.micro_batch", out.microbatches,
          kMaxMicrobatches);
  require(t.global_batch == per_micro * out.microbatches, c, "train.global_batch",
          "{} != micro_batch ({}) * microbatches ({}) * dp ({}) = {} — omit parallel.microbatches to derive it",
          t.global_batch, t.micro_batch, out.microbatches, out.dp, per_micro * out.microbatches);
  require(p.schedule != PipeSchedule::interleaved || out.microbatches % p.pp == 0, c, "parallel.microbatches",
          "the interleaved schedule needs microbatches ({}) divisible by pp ({}) — choose train.global_batch and "
          "train.micro_batch (or parallel.microbatches) for a multiple of {}, or use parallel.schedule: 1f1b",
          out.microbatches, p.pp, p.pp);
  return out;
}

}  // namespace lattice
