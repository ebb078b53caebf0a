#include "booster/checkpointing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/checksum.h"
#include "checkpoint/index.h"
#include "checkpoint/model_checkpoint.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "comm/gather_strings.h"
#include "models/registry.h"
#include "tp/sharding.h"

namespace lattice {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kModelIndex = "model.safetensors.index.json";
constexpr const char* kOptimizerIndex = "optimizer.safetensors.index.json";
constexpr const char* kTrainerState = "trainer_state.json";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);) out.push_back(part);
  return out;
}

void pause_for_tests(int64_t step) {
  const char* s = std::getenv("LATTICE_TEST_CHECKPOINT_PAUSE_S");
  const char* at = std::getenv("LATTICE_TEST_CHECKPOINT_PAUSE_STEP");
  if (!s || !*s || (at && *at && std::atoll(at) != step)) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(s)));
}

// The logical tensors of this rank's stage, named `prefix` + name, in table order.
std::vector<checkpoint::TensorDecl> stage_decls(const FlatParams& params, const std::string& prefix, DType dtype) {
  std::vector<checkpoint::TensorDecl> out;
  for (const ParamEntry& e : params.entries())
    if (!e.spec.tie_replica) out.push_back({prefix + e.spec.name, dtype, e.spec.shape});
  return out;
}

// Gathers the logical tensors of `buffer` (laid out like the parameters) over
// tp one at a time, a collective per tensor that every gathering rank (dp
// rank 0) calls; the writer puts each into its file as it comes, so it holds
// one logical tensor at a time, not the stage's.
void gather_stage(const FlatParams& params, const Tensor& buffer, const std::string& prefix, comm::Group& tp,
                  checkpoint::SafetensorsWriter* out) {
  for (const ParamEntry& e : params.entries()) {
    if (e.spec.tie_replica) continue;
    const Tensor t = tp::gather_logical(e, buffer.view(e.offset, e.local_shape), params.shard(), tp);
    if (out) out->put(prefix + e.spec.name, t);
  }
}

// A stage file's writer: the safetensors header from the declarations.
std::unique_ptr<checkpoint::SafetensorsWriter> stage_file(const std::string& dir, const std::string& file,
                                                          std::vector<checkpoint::TensorDecl> decls) {
  return std::make_unique<checkpoint::SafetensorsWriter>(dir + "/" + file, std::move(decls),
                                                         std::map<std::string, std::string>{{"format", "pt"}});
}

// Finishes a stage file: "file<TAB>size<TAB>xxh64<TAB>data bytes" and
// "index<TAB>tensor<TAB>file" lines for rank 0.
std::string finish_stage_file(checkpoint::SafetensorsWriter& w, const std::string& index, const std::string& file) {
  const checkpoint::FileDigest d = w.finish();
  uint64_t data = 0;
  std::string lines;
  for (const checkpoint::TensorDecl& t : w.decls()) {
    data += t.nbytes();
    lines += fmt::format("T\t{}\t{}\t{}\n", index, t.name, file);
  }
  return fmt::format("F\t{}\t{}\t{}\t{}\n", file, d.size, checkpoint::checksum_hex(d.checksum), data) + lines;
}

// Rank 0: the digests, indexes and trainer state, then the commit.
void commit_on_rank0(checkpoint::CheckpointWriter& w, const std::vector<std::string>& reports,
                     const TrainerState& state) {
  std::map<std::string, checkpoint::TensorIndex> indexes;
  std::map<std::string, uint64_t> file_data;
  for (const std::string& report : reports)
    for (const std::string& line : split(report, '\n')) {
      std::vector<std::string> f = split(line, '\t');
      if (f.empty()) continue;
      if (f[0] == "F") {
        checkpoint::FileDigest d{.size = std::stoull(f[2])};
        LATTICE_CHECK(checkpoint::parse_checksum_hex(f[3], d.checksum), "checkpoint: bad digest line '{}'", line);
        w.add_file(f[1], d);
        file_data[f[1]] = std::stoull(f[4]);
      } else {
        indexes[f[1]].weight_map[f[2]] = f[3];
      }
    }
  for (auto& [name, index] : indexes) {
    std::set<std::string> files;
    for (const auto& [tensor, file] : index.weight_map) files.insert(file);
    for (const std::string& file : files) index.total_size += file_data[file];
    w.write_file(name, checkpoint::index_json(index));
  }
  w.write_file(kTrainerState, trainer_state_json(state));
  w.commit();
}

// Copies this rank's slice of every logical tensor `prefix` + name into
// `buffer` (laid out like the parameters).
void load_stage(const checkpoint::IndexedTensors& in, const FlatParams& params, Tensor& buffer,
                const std::string& prefix) {
  for (const ParamEntry& e : params.entries()) {
    const std::string name = prefix + e.spec.name;
    LATTICE_INPUT_CHECK(
        in.contains(name),
        "checkpoint {}: no tensor '{}' — it was written for another model or optimizer; resume with the "
        "config it was written with, or start a new run in new directories (log.dir=..., and "
        "checkpoint.dir=... where it is set)",
        in.dir(), name);
    const checkpoint::SafetensorsInfo& info = in.info(name);
    LATTICE_INPUT_CHECK(
        info.shape == e.spec.shape && info.is(DType::f32),
        "checkpoint {}: tensor '{}' is {} {}, this model needs F32 {} — the checkpoint belongs to another "
        "model shape{}",
        in.dir(), name, info.dtype_name(), shape_str(info.shape), shape_str(e.spec.shape),
        e.spec.name == "wpe.weight" || e.spec.name.ends_with("position_embeddings.weight")
            ? " (the learned position table: set model.max_seq_len to the checkpoint's row count)"
            : "");
    Tensor local = tp::shard_from_logical(e.spec, params.shard(), in.read(name), false);
    buffer.view(e.offset, e.local_shape).copy_from(local);
  }
}

}  // namespace

std::vector<ShardPrint> fingerprint_shards(const std::vector<std::string>& paths, int source) {
  constexpr uint64_t kEnd = 64 << 10;
  std::vector<ShardPrint> out;
  for (const std::string& path : paths) {
    std::ifstream f(path, std::ios::binary);
    LATTICE_INPUT_CHECK(f.good(), "data.train: cannot read '{}'", path);
    const uint64_t bytes = fs::file_size(path);
    std::string head(std::min(bytes, kEnd), '\0'), tail(std::min(bytes, kEnd), '\0');
    f.read(head.data(), std::streamsize(head.size()));
    f.seekg(std::streamoff(bytes - tail.size()));
    f.read(tail.data(), std::streamsize(tail.size()));
    LATTICE_INPUT_CHECK(f.good(), "data.train: cannot read '{}'", path);
    checkpoint::Checksum64 sum;
    sum.update(head.data(), head.size());
    sum.update(tail.data(), tail.size());
    out.push_back({fs::path(path).filename().string(), bytes, checkpoint::checksum_hex(sum.digest()), source});
  }
  return out;
}

namespace {

// How `now` differs from `then`, first difference only ("" when equal).
std::string shard_difference(const std::vector<ShardPrint>& then, const std::vector<ShardPrint>& now) {
  for (size_t i = 0; i < std::max(then.size(), now.size()); ++i) {
    if (i >= now.size()) return fmt::format("'{}' is gone", then[i].file);
    if (i >= then.size()) return fmt::format("'{}' is new", now[i].file);
    const ShardPrint &a = then[i], &b = now[i];
    if (a.file != b.file) return fmt::format("shard {} is '{}', the checkpoint's was '{}'", i + 1, b.file, a.file);
    if (a.bytes != b.bytes) return fmt::format("'{}' is {} bytes, it was {}", b.file, b.bytes, a.bytes);
    if (a.xxh64 != b.xxh64) return fmt::format("'{}' holds other tokens", b.file);
  }
  return "";
}

}  // namespace

std::string trainer_state_json(const TrainerState& s) {
  nlohmann::ordered_json j;
  j["format"] = "lattice-trainer-state";
  j["version"] = 1;
  j["step"] = s.step;
  j["optimizer_updates"] = s.optimizer_updates;
  j["skipped_steps"] = s.skipped_steps;
  j["consumed_samples"] = s.consumed_samples;
  j["consumed_tokens"] = s.consumed_tokens;
  j["seed"] = s.seed;
  j["data_position"] = {{"step", s.step}};
  if (!s.config.empty()) {
    j["config_hash"] = checkpoint::checksum_hex(checkpoint::checksum64(s.config.data(), s.config.size()));
    j["config"] = s.config;
  }
  j["layout"] = {{"tp", s.layout.tp},      {"pp", s.layout.pp},
                 {"dp", s.layout.dp},      {"microbatches", s.layout.microbatches},
                 {"schedule", s.schedule}, {"virtual_stages", s.virtual_stages},
                 {"zero", s.zero}};
  j["vocab_size"] = s.vocab_size;
  j["padded_vocab_size"] = s.padded_vocab_size;
  j["optimizer"] = s.optimizer;
  j["arch"] = s.arch;
  if (s.loss_scaler) j["loss_scaler"] = optim::loss_scaler_state_json(*s.loss_scaler);
  if (!s.data_train.empty()) {
    j["data_train"] = nlohmann::ordered_json::array();
    for (const ShardPrint& p : s.data_train) {
      j["data_train"].push_back({{"file", p.file}, {"bytes", p.bytes}, {"xxh64", p.xxh64}});
      if (p.source != 0) j["data_train"].back()["source"] = p.source;  // a mixture's other sources
    }
  }
  return j.dump(2) + "\n";
}

TrainerState read_trainer_state(const std::string& step_dir) {
  const std::string path = step_dir + "/" + kTrainerState;
  std::ifstream f(path, std::ios::binary);
  LATTICE_CHECK(f.good(), "checkpoint {}: cannot open {}", step_dir, kTrainerState);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  LATTICE_CHECK(!j.is_discarded() && j.is_object() && j.value("format", "") == "lattice-trainer-state",
                "{}: not a Lattice trainer state (format 'lattice-trainer-state')", path);
  TrainerState s;
  try {
    s.step = j.at("step").get<int64_t>();
    s.optimizer_updates = j.value("optimizer_updates", int64_t(0));
    s.skipped_steps = j.value("skipped_steps", int64_t(0));
    s.consumed_samples = j.value("consumed_samples", int64_t(0));
    s.consumed_tokens = j.value("consumed_tokens", int64_t(0));
    s.seed = j.value("seed", uint64_t(0));
    s.config = j.value("config", std::string());
    if (j.contains("layout")) {
      const json& l = j["layout"];
      s.layout = {l.value("tp", 1), l.value("pp", 1), l.value("dp", 1), l.value("microbatches", 1)};
      s.schedule = l.value("schedule", std::string());
      s.virtual_stages = l.value("virtual_stages", 1);
      s.zero = l.value("zero", 0);
    }
    s.vocab_size = j.value("vocab_size", int64_t(0));
    s.padded_vocab_size = j.value("padded_vocab_size", int64_t(0));
    s.optimizer = j.value("optimizer", std::string());
    s.arch = j.value("arch", std::string());
    if (j.contains("model"))
      s.model = checkpoint::model_state_json(checkpoint::model_from_state_json(j["model"], path));
    if (j.contains("loss_scaler")) s.loss_scaler = optim::loss_scaler_state_from_json(j["loss_scaler"]);
    if (j.contains("data_train"))
      for (const json& p : j.at("data_train"))
        s.data_train.push_back({p.at("file").get<std::string>(), p.at("bytes").get<uint64_t>(),
                                p.at("xxh64").get<std::string>(), p.value("source", 0)});
  } catch (const json::exception& e) {
    LATTICE_FAIL("{}: {}", path, e.what());
  } catch (const Error& e) {
    LATTICE_FAIL("{}: {}", path, e.message());
  }
  LATTICE_CHECK(s.step >= 0 && s.optimizer_updates >= 0 && s.optimizer_updates <= s.step,
                "{}: step {} and optimizer_updates {} are inconsistent", path, s.step, s.optimizer_updates);
  return s;
}

namespace {

// A checkpoint write that the system refused (a full disk, a read-only or
// foreign directory): one line naming checkpoint.dir and the fix, and the
// checkpoint the same command resumes from (the .tmp directory is removed
// when the same command starts again: resolve_resume).
[[noreturn]] void fail_checkpoint_write(const checkpoint::WriteError& e, const std::string& step_dir) {
  const int err = e.error_number();
  const bool full = err == ENOSPC || err == EDQUOT, denied = err == EACCES || err == EPERM || err == EROFS;
  const std::string parent = fs::path(step_dir).parent_path().string();
  const std::string fix = full     ? "free space (or fix the disk)"
                          : denied ? fmt::format("make '{}' writable", parent)
                                   : "fix the disk";
  std::string then = fmt::format("it starts again from step 1 (no checkpoint in '{}' is complete yet)", parent);
  const std::vector<int64_t> steps = checkpoint::list_step_dirs(parent);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string name = checkpoint::step_dir_name(*it);
    std::error_code ec;
    if (!fs::exists(parent + "/" + name + "/" + std::string(checkpoint::kManifestName), ec)) continue;
    then = fmt::format("it resumes from {}, the last complete checkpoint", name);
    break;
  }
  LATTICE_INPUT_FAIL("checkpoint.dir: cannot write '{}': {} — {} and start the same command again: {}", e.path(),
                     std::strerror(err), fix, then);
}

void write_checkpoint(const std::string& step_dir, RankState& r, const TrainerState& state, int keep_last) {
  mesh::ProcessGroupMesh& mesh = r.mesh;
  const mesh::Coord me = mesh.this_coord();
  const int stages = mesh.size(mesh::Axis::pp);
  const bool gathers = me.dp == 0, writer = gathers && me.tp == 0;
  checkpoint::CheckpointWriter w;
  if (mesh.this_rank() == 0) w.begin(step_dir);  // creates <step_dir>.tmp
  mesh.world().barrier()->wait();
  const std::string tmp = step_dir + ".tmp";

  // ZeRO-1's 16-bit gather leaves the fp32 matmul weights outside each
  // rank's shard stale (core/param.h): the full values first (over dp).
  if (r.zero) r.zero->gather_values(r.params);
  LATTICE_CHECK(!r.params.values_partial(),
                "save_checkpoint: the fp32 values are partial and no ZeRO-1 optimizer "
                "can gather them");
  std::string report;
  if (gathers) {
    const std::string file = checkpoint::shard_file_name("model", me.pp + 1, stages);
    std::unique_ptr<checkpoint::SafetensorsWriter> out;
    if (writer) out = stage_file(tmp, file, stage_decls(r.params, "", r.params.values().dtype()));
    gather_stage(r.params, r.params.values().on_host(), "", mesh.tp(), out.get());
    if (writer) {
      report += finish_stage_file(*out, kModelIndex, file);
      pause_for_tests(state.step);
    }
  }
  // The optimizer's states, one after another in one file.
  const std::string optim_file = checkpoint::shard_file_name("optimizer", me.pp + 1, stages);
  std::vector<checkpoint::TensorDecl> optim;
  for (auto& [name, buf] : r.optimizer.state()) {
    std::vector<checkpoint::TensorDecl> d = stage_decls(r.params, name + ".", buf->dtype());
    optim.insert(optim.end(), d.begin(), d.end());
  }
  std::unique_ptr<checkpoint::SafetensorsWriter> out;
  if (writer && !optim.empty()) out = stage_file(tmp, optim_file, std::move(optim));
  for (auto& [name, buf] : r.optimizer.state()) {
    Tensor local;
    if (r.zero) {  // every dp rank holds one shard: the whole local buffer first (collective over dp)
      local = Tensor::zeros({r.params.padded_numel()}, buf->dtype());
      mesh.dp().all_gather(local, buf->on_host())->wait();
    }
    if (!gathers) continue;
    if (!r.zero) local = buf->on_host();
    gather_stage(r.params, local, name + ".", mesh.tp(), out.get());
  }
  if (out) report += finish_stage_file(*out, kOptimizerIndex, optim_file);

  std::vector<std::string> reports = comm::all_gather_strings(mesh.world(), report);
  if (mesh.this_rank() == 0) {
    commit_on_rank0(w, reports, state);
    if (keep_last > 0) checkpoint::keep_last(fs::path(step_dir).parent_path().string(), keep_last);
  }
  mesh.world().barrier()->wait();  // nobody goes on (or exits) before the commit
}

}  // namespace

void save_checkpoint(const std::string& step_dir, RankState& r, const TrainerState& state, int keep_last) {
  try {
    write_checkpoint(step_dir, r, state, keep_last);
  } catch (const checkpoint::WriteError& e) {
    fail_checkpoint_write(e, step_dir);
  }
}

void load_model_tensors(const std::string& step_dir, FlatParams& params) {
  load_stage(checkpoint::IndexedTensors::open(step_dir, kModelIndex), params, params.values(), "");
  params.mark_written();          // the caller refreshes a 16-bit shadow (core/param.h)
  params.mark_values_complete();  // every value was read from the checkpoint
}

void load_checkpoint(const std::string& step_dir, RankState& r) {
  load_model_tensors(step_dir, r.params);
  if (!fs::exists(step_dir + "/" + kOptimizerIndex)) return;  // model only: a fresh optimizer
  checkpoint::IndexedTensors in = checkpoint::IndexedTensors::open(step_dir, kOptimizerIndex);
  for (auto& [name, buf] : r.optimizer.state()) {
    Tensor local = Tensor::zeros({r.params.padded_numel()}, buf->dtype());
    load_stage(in, r.params, local, name + ".");
    if (r.zero)
      buf->copy_from(local.view(r.zero->shard_begin(), {r.zero->shard_numel()}));
    else
      buf->copy_from(local.view(0, {buf->numel()}));
  }
}

std::optional<std::string> resolve_resume(const Config& cfg, comm::Group& world, std::vector<std::string>* notes) {
  const std::string& mode = cfg.checkpoint.resume;
  if (mode == "never") return std::nullopt;
  if (mode != "auto") {  // a step directory, which must verify (checked by rank 0)
    if (world.rank() == 0) {
      if (!fs::is_directory(mode))
        config_fail(cfg, "checkpoint.resume",
                    fmt::format("'{}' is not a directory — name a step directory (…/step_NNNNNNN), or use auto or "
                                "never",
                                mode));
      try {
        checkpoint::verify_checkpoint_dir(mode);
      } catch (const Error& e) {  // as resume: auto reports the checkpoints it skips
        config_fail(cfg, "checkpoint.resume",
                    fmt::format("'{}' does not verify: {} — name another step directory, or use auto, which "
                                "resumes from the newest checkpoint of checkpoint.dir that verifies",
                                mode, e.message()));
      }
    }
    world.barrier()->wait();
    return mode;
  }
  double step = -1;
  if (world.rank() == 0 && fs::is_directory(cfg.checkpoint.dir)) {
    std::vector<std::string> failures;
    std::optional<checkpoint::LatestCheckpoint> found = checkpoint::find_latest_complete(cfg.checkpoint.dir, &failures);
    if (found) step = double(found->step);
    // This job holds checkpoint.dir's lock: a .tmp there is an earlier job's
    // unfinished write, whose space (a full disk's) the run may need now.
    for (const std::string& p : checkpoint::remove_unfinished_writes(cfg.checkpoint.dir))
      if (notes) notes->push_back(fmt::format("checkpoint {}: removed, a write an earlier job did not finish", p));
    if (notes) {
      for (const std::string& s : found ? found->skipped : std::vector<std::string>{})
        notes->push_back(s + fmt::format(": resuming from {} instead", checkpoint::step_dir_name(found->step)));
    }
    // The run will write those steps again: the damaged ones move aside, kept
    // for whoever can repair them (an unreadable file may be a permission).
    for (const std::string& name : found ? found->damaged : std::vector<std::string>{}) {
      const std::string from = cfg.checkpoint.dir + "/" + name;
      std::string to = from + ".damaged";
      for (int i = 2; fs::exists(to); ++i) to = fmt::format("{}.damaged{}", from, i);
      std::error_code ec;
      fs::rename(from, to, ec);
      LATTICE_CHECK(!ec,
                    "checkpoint {}: cannot move the damaged checkpoint aside to {}: {} — move or remove it, then "
                    "start again",
                    from, to, ec.message());
      if (notes)
        notes->push_back(fmt::format("checkpoint {} moved aside to {} (the run writes its step again)", from, to));
    }
    // Checkpoints, none intact: starting fresh would write over them, so say why each failed.
    if (!found && !checkpoint::list_step_dirs(cfg.checkpoint.dir).empty())
      config_fail(cfg, "checkpoint.resume",
                  fmt::format("auto found no intact checkpoint in '{}': {} — restore or remove the damaged "
                              "checkpoint, or start a new run elsewhere (checkpoint.dir=..., log.dir=...)",
                              cfg.checkpoint.dir, fmt::join(failures, "; ")));
  }
  if (world.size() > 1) {
    Tensor t = Tensor::from<double>({step}, {1});
    world.broadcast(t, 0)->wait();
    step = t.data<double>()[0];
  }
  if (step < 0) return std::nullopt;
  return cfg.checkpoint.dir + "/" + checkpoint::step_dir_name(int64_t(step));
}

namespace {

// A model-only checkpoint (lattice convert --from-hf): its tensors must be this model's, all of them.
void check_model_only_tensors(const Config& cfg, const TrainerState& state, const std::string& step_dir) {
  std::set<std::string> ours;
  for (const ParamSpec& s : model_param_specs(cfg.model)) ours.insert(s.name);
  for (const std::string& name : checkpoint::IndexedTensors::open(step_dir, kModelIndex).names())
    if (!ours.count(name))
      throw ConfigError(fmt::format("{}: checkpoint {} holds '{}', which this model ({}, {} layers) does not "
                                    "have — set the model.* keys to the checkpoint's, or start from another "
                                    "checkpoint",
                                    cfg.source, step_dir, name, enum_name(cfg.model.arch), cfg.model.n_layer),
                        "model");
  // Keys the tensor shapes do not pin down (n_head at the same d_model,
  // norm_eps, rope_theta) would otherwise load silently into another model;
  // max_seq_len may differ (rotary archs have no position table, GPT-2's
  // wpe shape is checked with the tensors).
  if (state.model.is_null()) return;
  const nlohmann::ordered_json mine = checkpoint::model_state_json(cfg.model);
  for (const auto& [key, value] : state.model.items()) {
    if (key == "max_seq_len" || (mine.contains(key) && mine[key] == value)) continue;  // positions: shapes
    config_fail(
        cfg, "model." + key,
        fmt::format("{} here, but checkpoint {} holds a model with {} — set model.{}: {} (the "
                    "checkpoint's model keys are in its trainer_state.json)",
                    mine.contains(key) ? mine[key].dump() : "unset", step_dir, value.dump(), key, value.dump()));
  }
}

}  // namespace

void check_checkpoint_model(const Config& cfg, const TrainerState& state, const std::string& step_dir) {
  if (state.config.empty()) return check_model_only_tensors(cfg, state, step_dir);
  const Config saved = parse_written_config(state.config, step_dir + "/" + kTrainerState);
  Config probe = cfg;  // cfg with the checkpoint's model and tokenizer: what differs is what may not
  probe.model = saved.model;
  probe.data.tokenizer = saved.data.tokenizer;
  // What the weights do not fix: training-time settings (dropout, the init of
  // weights that are loaded anyway), the padding of the vocabulary (the
  // checkpoint's tensors are unpadded) and the longest sequence (a learned
  // position table of another size fails the load with its shape).
  probe.model.dropout = cfg.model.dropout;
  probe.model.init_std = cfg.model.init_std;
  probe.model.vocab_multiple = cfg.model.vocab_multiple;
  probe.model.max_seq_len = cfg.model.max_seq_len;
  if (std::optional<ConfigDifference> d = first_difference(probe, cfg))
    config_fail(cfg, d->key,
                fmt::format("{} here, but the model in checkpoint {} has {} — set {} to the checkpoint's (its run's "
                            "config is in trainer_state.json)",
                            d->b, step_dir, d->a, d->key));
}

void check_resume_config(const Config& cfg, const TrainerState& state, const std::string& step_dir,
                         const std::vector<ShardPrint>& data_train) {
  if (state.config.empty()) {  // model only (lattice convert --from-hf): its tensors must be this model's, all of them
    check_model_only_tensors(cfg, state, step_dir);
    return;
  }
  const Config saved = with_resumable_settings(parse_written_config(state.config, step_dir + "/" + kTrainerState), cfg);
  std::optional<ConfigDifference> d = first_difference(saved, cfg);
  if (!d) {
    if (state.data_train.empty() || data_train.empty()) return;  // an older checkpoint, or a caller without data
    auto of_source = [](const std::vector<ShardPrint>& all, size_t s) {
      std::vector<ShardPrint> out;
      std::copy_if(all.begin(), all.end(), std::back_inserter(out),
                   [s](const ShardPrint& p) { return p.source == int(s); });
      return out;
    };
    for (size_t s = 0; s < cfg.data.train.size(); ++s) {  // the same sources: data.train is the checkpoint's
      const std::string diff = shard_difference(of_source(state.data_train, s), of_source(data_train, s));
      if (diff.empty()) continue;
      config_fail(cfg, train_source_key(cfg, s),
                  fmt::format("the shards matching '{}' are not the ones checkpoint {} was trained on: {} — restore "
                              "them, or start a new run in new directories (log.dir=..., and checkpoint.dir=... "
                              "where it is set)",
                              cfg.data.train[s].path, step_dir, diff));
    }
    return;
  }
  // Other settings on the same weights are a new run that starts from them:
  // checkpoint.init_from (in new directories when this is the run's own checkpoint.dir).
  std::error_code ec;
  const bool own = fs::equivalent(fs::path(step_dir).parent_path(), cfg.checkpoint.dir, ec) && !ec;
  const std::string fix =
      own ? fmt::format(
                "restore the setting, or, to train its weights with other settings, start a new run from "
                "them: checkpoint.init_from={} with a new log.dir (and checkpoint.dir where it is set)",
                step_dir)
          : fmt::format(
                "restore the setting, or, to train its weights with other settings, set "
                "checkpoint.init_from={} instead of checkpoint.resume",
                step_dir);
  config_fail(cfg, d->key,
              fmt::format("{} here, but checkpoint {} was written with {} — on resume only parallel.*, "
                          "runtime.threads, log.*, checkpoint.* and train.stop_at_step may change; {}",
                          d->b, step_dir, d->a, fix));
}

}  // namespace lattice
