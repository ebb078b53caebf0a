#include "checkpoint/model_checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/index.h"
#include "checkpoint/posix_file.h"
#include "core/error.h"
#include "models/registry.h"
#include "tp/sharding.h"

namespace lattice::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kModelIndex = "model.safetensors.index.json";
constexpr const char* kTrainerState = "trainer_state.json";
constexpr size_t kMaxStateBytes = size_t(64) << 20;

int state_int(const json& j, const char* key, const std::string& where) {
  LATTICE_CHECK(
      j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0 && j[key].get<int64_t>() <= INT32_MAX,
      "{}: model.{} is {}, expected a positive integer", where, key, j.contains(key) ? j[key].dump() : "missing");
  return j[key].get<int>();
}

// Refuses a directory that already holds checkpoints: a model-only step 0
// there would become `latest` and hide the run's own checkpoints.
void check_no_checkpoints(const std::string& parent) {
  std::error_code ec;
  if (!fs::exists(parent, ec)) return;
  LATTICE_CHECK(fs::is_directory(parent, ec), "{}: exists and is not a directory (name a new checkpoint directory)",
                parent);
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    std::string name = entry.path().filename().string();
    // What an interrupted convert leaves (training writes no step 0); begin() replaces it.
    if (name == step_dir_name(0) + ".tmp") continue;
    std::string stem = name.ends_with(".tmp") ? name.substr(0, name.size() - 4) : name;
    LATTICE_CHECK(name != kLatestName && !parse_step_dir_name(stem),
                  "{}: already holds checkpoints ('{}'); convert into a new or empty directory", parent, name);
  }
}

// The model config, and the data section where the state keeps the run's config.
std::pair<ModelConfig, std::optional<DataConfig>> config_of_state(const json& state, const std::string& path) {
  if (state.contains("config")) {
    LATTICE_CHECK(state["config"].is_string(), "{}: `config` is not the run's YAML text", path);
    const Config c = parse_written_config(state["config"].get<std::string>(), path + " (config)");
    return {c.model, c.data};
  }
  LATTICE_CHECK(state.contains("model"), "{}: neither `config` nor `model` is present: not a Lattice trainer state",
                path);
  return {model_from_state_json(state["model"], path), std::nullopt};
}

}  // namespace

int64_t LogicalModel::numel() const {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += t.numel();
  return n;
}

void check_logical_model(const LogicalModel& m, const std::string& where) {
  std::vector<ParamSpec> specs = model_param_specs(m.config);
  LATTICE_CHECK(m.tensors.size() == specs.size(), "{}: {} tensors, but {} {} has {} parameters", where,
                m.tensors.size(), enum_name(m.config.arch), "model", specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [name, t] = m.tensors[i];
    LATTICE_CHECK(name == specs[i].name, "{}: tensor {} is '{}', expected '{}' (parameter-table order)", where, i, name,
                  specs[i].name);
    LATTICE_CHECK(t.dtype() == DType::f32, "{}: '{}' is {}, expected F32", where, name,
                  safetensors_dtype_name(t.dtype()));
    LATTICE_CHECK(t.shape() == specs[i].shape, "{}: '{}' has shape {}, the model config gives {}", where, name,
                  shape_str(t.shape()), shape_str(specs[i].shape));
  }
}

ordered_json model_state_json(const ModelConfig& m) {
  ordered_json j = {{"arch", std::string(enum_name(m.arch))},
                    {"n_layer", m.n_layer},
                    {"n_head", m.n_head},
                    {"d_model", m.d_model},
                    {"vocab_size", m.vocab_size},
                    {"max_seq_len", m.max_seq_len},
                    {"tie_embeddings", m.tie_embeddings},
                    {"norm_eps", m.norm_eps}};
  const ArchTraits& t = arch_traits(m.arch);
  if (t.grouped_query || t.free_d_ff || t.rotary) {  // keys the arch takes (gpt2: none of them)
    j["n_kv_head"] = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
    j["d_ff"] = m.d_ff > 0 ? m.d_ff : 4 * m.d_model;
    j["rope_theta"] = m.rope_theta;
  }
  return j;
}

ModelConfig model_from_state_json(const json& j, const std::string& where) {
  LATTICE_CHECK(j.is_object(), "{}: `model` is not an object", where);
  ModelConfig m;
  std::string arch = j.contains("arch") && j["arch"].is_string() ? j["arch"].get<std::string>() : "";
  auto a = enum_from_name<ModelArch>(arch);
  LATTICE_CHECK(a.has_value(), "{}: model.arch is '{}', expected one of {}", where, arch, enum_choices<ModelArch>());
  m.arch = *a;
  m.n_layer = state_int(j, "n_layer", where);
  m.n_head = state_int(j, "n_head", where);
  m.n_kv_head = m.n_head;
  m.d_model = state_int(j, "d_model", where);
  m.d_ff = 4 * m.d_model;
  m.vocab_size = state_int(j, "vocab_size", where);
  m.max_seq_len = state_int(j, "max_seq_len", where);
  LATTICE_CHECK(j.contains("tie_embeddings") && j["tie_embeddings"].is_boolean(),
                "{}: model.tie_embeddings is missing or not a boolean", where);
  m.tie_embeddings = j["tie_embeddings"].get<bool>();
  LATTICE_CHECK(j.contains("norm_eps") && j["norm_eps"].is_number() && j["norm_eps"].get<double>() > 0,
                "{}: model.norm_eps is missing or not a positive number", where);
  m.norm_eps = j["norm_eps"].get<double>();
  // Written for the archs that take them (model_state_json); absent: n_head, 4 * d_model, no rotary.
  if (j.contains("n_kv_head")) m.n_kv_head = state_int(j, "n_kv_head", where);
  if (j.contains("d_ff")) m.d_ff = state_int(j, "d_ff", where);
  if (j.contains("rope_theta")) {
    LATTICE_CHECK(j["rope_theta"].is_number() && j["rope_theta"].get<double>() >= 0,
                  "{}: model.rope_theta is {}, expected a non-negative number", where, j["rope_theta"].dump());
    m.rope_theta = j["rope_theta"].get<double>();
  }
  return m;
}

std::string write_model_checkpoint(const LogicalModel& m, const std::string& parent, int64_t step) {
  check_logical_model(m, "write_model_checkpoint");
  check_no_checkpoints(parent);
  const std::string file = shard_file_name("model", 1, 1);
  TensorIndex index;
  for (const auto& [name, t] : m.tensors) {
    index.total_size += t.nbytes();
    index.weight_map[name] = file;
  }
  ordered_json state = {{"format", "lattice-trainer-state"},
                        {"version", 1},
                        {"step", step},
                        {"optimizer_updates", step},
                        {"skipped_steps", 0},
                        {"consumed_samples", 0},
                        {"consumed_tokens", 0},
                        {"data_position", {{"step", step}}},
                        {"layout", {{"tp", 1}, {"pp", 1}, {"dp", 1}}},
                        {"vocab_size", m.config.vocab_size},
                        {"padded_vocab_size", m.config.vocab_size},
                        {"arch", std::string(enum_name(m.config.arch))},
                        {"model", model_state_json(m.config)}};
  const std::string step_dir = parent + "/" + step_dir_name(step);
  try {
    CheckpointWriter writer;
    writer.begin(step_dir);
    writer.write_safetensors(file, m.tensors, {{"format", "pt"}});
    writer.write_file(kModelIndex, index_json(index));
    writer.write_file(kTrainerState, state.dump(2) + "\n");
    return writer.commit();
  } catch (const WriteError& e) {
    std::error_code ec;
    fs::remove_all(step_dir + ".tmp", ec);
    fail_output_write(e, parent, fmt::format("no checkpoint was written to '{}'", parent));
  }
}

LogicalModel read_logical_model(const std::string& step_dir, Manifest manifest) {
  if (manifest == Manifest::verify) verify_checkpoint_dir(step_dir);
  const std::string state_path = step_dir + "/" + kTrainerState;
  json state = json::parse(read_text_file(state_path, kMaxStateBytes), nullptr, false);
  LATTICE_CHECK(!state.is_discarded() && state.is_object(), "{}: not a JSON object", state_path);
  LogicalModel m;
  std::tie(m.config, m.data) = config_of_state(state, state_path);
  IndexedTensors files = IndexedTensors::open(step_dir, kModelIndex);
  std::set<std::string> expected;
  for (const ParamSpec& spec : model_param_specs(m.config)) {
    expected.insert(spec.name);
    LATTICE_CHECK(files.contains(spec.name), "{}/{}: no tensor '{}', which the model config ({} layers) needs",
                  step_dir, kModelIndex, spec.name, m.config.n_layer);
    m.tensors.emplace_back(spec.name, files.read(spec.name));
  }
  for (const std::string& name : files.names())
    LATTICE_CHECK(expected.count(name), "{}/{}: tensor '{}' is not a parameter of the model in {}", step_dir,
                  kModelIndex, name, kTrainerState);
  check_logical_model(m, step_dir);
  return m;
}

void load_logical_model(const LogicalModel& m, FlatParams& params) {
  for (const auto& [name, t] : m.tensors) {
    const ParamEntry& e = params.entry(name);
    Tensor dst = params.value(e);
    dst.copy_from(tp::shard_from_logical(e.spec, params.shard(), t, false));
  }
  params.mark_written();
  params.mark_values_complete();
}

}  // namespace lattice::checkpoint
