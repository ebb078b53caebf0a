#include "checkpoint/hf_gpt2.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/index.h"
#include "checkpoint/posix_file.h"
#include "core/error.h"
#include "models/registry.h"

namespace lattice::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr const char* kHfWeights = "model.safetensors";
constexpr const char* kHfIndex = "model.safetensors.index.json";
constexpr size_t kMaxConfigBytes = size_t(16) << 20;
// HF's names for GELU with the tanh approximation, which Lattice computes
// (core/kernels/math.h): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr std::string_view kTanhGelus[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

// (R, K) -> (K, R), F32 on the CPU.
Tensor transpose2d(const Tensor& t) {
  LATTICE_CHECK(t.ndim() == 2 && t.dtype() == DType::f32 && t.device().is_cpu(), "transpose2d: got {} {}",
                shape_str(t.shape()), dtype_name(t.dtype()));
  const int64_t R = t.dim(0), K = t.dim(1);
  Tensor out = Tensor::empty({K, R}, DType::f32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) dst[k * R + r] = src[r * K + k];
  return out;
}

// A float written as float shows as 0.10000000149011612 in JSON; HF writes 0.1.
double shortest(float v) { return std::stod(fmt::format("{}", v)); }

// ---------------------------------------------------------------- config.json

const json* find_key(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k) && !c[k].is_null()) return &c[k];
  return nullptr;
}

int config_int(const json& c, std::initializer_list<const char*> keys, const std::string& path) {
  const json* v = find_key(c, keys);
  const char* key = *keys.begin();
  LATTICE_CHECK(v != nullptr, "{}: '{}' is missing (GPT2Config needs it)", path, key);
  LATTICE_CHECK(v->is_number_integer() && v->get<int64_t>() > 0 && v->get<int64_t>() <= INT32_MAX,
                "{}: '{}' is {}, expected a positive integer", path, key, v->dump());
  return v->get<int>();
}

template <class T>
T config_value(const json& c, const char* key, T fallback, const std::string& path) {
  const json* v = find_key(c, {key});
  if (v == nullptr) return fallback;
  try {
    return v->get<T>();
  } catch (const json::exception&) {
    LATTICE_FAIL("{}: '{}' is {}, expected {}", path, key, v->dump(), json(fallback).type_name());
  }
}

json read_json(const std::string& path, const char* what) {
  std::error_code ec;
  LATTICE_CHECK(fs::is_regular_file(path, ec), "{}: missing ({})", path, what);
  json j = json::parse(read_text_file(path, kMaxConfigBytes), nullptr, false);
  LATTICE_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", path);
  return j;
}

// ---------------------------------------------------------------- HF weight files

// model.safetensors, or the shards model.safetensors.index.json names.
class HfTensors {
 public:
  explicit HfTensors(const std::string& dir) {
    std::error_code ec;
    if (fs::exists(dir + "/" + kHfWeights, ec)) {
      where_ = dir + "/" + kHfWeights;
      single_ = SafetensorsFile::open(where_);
    } else if (fs::exists(dir + "/" + kHfIndex, ec)) {
      where_ = dir + "/" + kHfIndex;
      sharded_ = IndexedTensors::open(dir, kHfIndex);
    } else {
      LATTICE_FAIL(
          "{}: no {} or {} (PyTorch .bin weights are not read: re-save with "
          "save_pretrained(dir, safe_serialization=True))",
          dir, kHfWeights, kHfIndex);
    }
  }
  const std::string& where() const { return where_; }
  std::vector<std::string> names() const { return single_ ? single_->names() : sharded_->names(); }
  bool contains(const std::string& n) const { return single_ ? single_->contains(n) : sharded_->contains(n); }
  const SafetensorsInfo& info(const std::string& n) const { return single_ ? single_->info(n) : sharded_->info(n); }
  Tensor read(const std::string& n) const { return single_ ? single_->read(n) : sharded_->read(n); }

 private:
  std::string where_;
  std::optional<SafetensorsFile> single_;
  std::optional<IndexedTensors> sharded_;
};

// The causal-mask buffers that files saved by older transformers carry.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

// One parameter of the HF file as Lattice's logical F32 tensor.
Tensor read_hf_param(const HfTensors& files, const std::string& name, const ParamSpec& spec, bool transposed,
                     const ModelConfig& cfg) {
  LATTICE_CHECK(files.contains(name),
                "{}: no tensor '{}', which config.json (n_layer {}, tie_word_embeddings {}) needs", files.where(), name,
                cfg.n_layer, cfg.tie_embeddings);
  const SafetensorsInfo& info = files.info(name);
  Shape want = transposed ? Shape{spec.shape[1], spec.shape[0]} : spec.shape;
  LATTICE_CHECK(info.shape == want, "{}: '{}' has shape {}, expected {}{} from config.json", files.where(), name,
                shape_str(info.shape), shape_str(want), transposed ? " (HF Conv1D layout: (in, out))" : "");
  LATTICE_CHECK(is_float(info.dtype), "{}: '{}' is {}, expected a float dtype (F32, F16, BF16, F64)", files.where(),
                name, safetensors_dtype_name(info.dtype));
  Tensor t = files.read(name);
  if (t.dtype() != DType::f32) t = t.to(DType::f32);
  return transposed ? transpose2d(t) : t;
}

// The tensors of the file that are not parameters: mask buffers, and a tied
// head stored anyway (it must then equal the embedding). Anything else is refused.
void check_leftovers(const HfTensors& files, const std::set<std::string>& used, const LogicalModel& m) {
  for (const std::string& name : files.names()) {
    if (used.count(name) || is_mask_buffer(name)) continue;
    if (name == "lm_head.weight" && m.config.tie_embeddings) {
      const Tensor& wte = m.tensors.front().second;
      const SafetensorsInfo& info = files.info(name);
      bool same = info.shape == wte.shape() && is_float(info.dtype);
      if (same) {
        Tensor head = files.read(name).to(DType::f32);
        same = std::equal(head.data<float>(), head.data<float>() + head.numel(), wte.data<float>());
      }
      LATTICE_CHECK(same,
                    "{}: lm_head.weight differs from the token embedding, but config.json has "
                    "tie_word_embeddings true (set it to false for an untied head)",
                    files.where());
      continue;
    }
    LATTICE_FAIL("{}: tensor '{}' is not a parameter of GPT2LMHeadModel (n_layer {}); Lattice cannot import it",
                 files.where(), name, m.config.n_layer);
  }
}

void prepare_out_dir(const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    LATTICE_CHECK(fs::is_directory(out_dir, ec), "{}: exists and is not a directory", out_dir);
    LATTICE_CHECK(fs::is_empty(out_dir, ec), "{}: exists and is not empty; name a new or empty output directory",
                  out_dir);
  }
  fs::create_directories(out_dir, ec);
  LATTICE_CHECK(!ec, "{}: cannot create: {}", out_dir, ec.message());
}

}  // namespace

HfTensorName gpt2_hf_name(const ParamSpec& spec) {
  HfTensorName n;
  n.name = spec.name == "lm_head.weight" ? spec.name : std::string(kPrefix) + spec.name;
  // The tp-split linear weights are exactly GPT-2's Conv1D modules.
  n.transposed = spec.shape.size() == 2 && (spec.placement == Placement::column || spec.placement == Placement::row);
  return n;
}

std::string gpt2_hf_config_json(const ModelConfig& m) {
  LATTICE_CHECK(m.arch == ModelArch::gpt2,
                "model.arch: '{}' cannot be exported as HF GPT2LMHeadModel (lattice convert --to-hf handles gpt2)",
                enum_name(m.arch));
  LATTICE_CHECK(m.d_ff == 4 * m.d_model, "model.d_ff: {} cannot be exported; HF GPT-2 here uses 4 * d_model = {}",
                m.d_ff, 4 * m.d_model);
  LATTICE_CHECK(m.n_kv_head == 0 || m.n_kv_head == m.n_head,
                "model.n_kv_head: {} != n_head {}; HF GPT-2 has no grouped-query attention", m.n_kv_head, m.n_head);
  LATTICE_CHECK(m.rope_theta == 0.0, "model.rope_theta: {}; HF GPT-2 has learned positions, not rotary", m.rope_theta);
  const double p = shortest(m.dropout);
  json c = {{"activation_function", "gelu_new"},  // Lattice's GELU is the tanh approximation
            {"architectures", {"GPT2LMHeadModel"}},
            {"attn_pdrop", p},
            {"embd_pdrop", p},
            {"resid_pdrop", p},
            {"initializer_range", m.init_std},
            {"layer_norm_epsilon", m.norm_eps},
            {"model_type", "gpt2"},
            {"n_embd", m.d_model},
            {"n_head", m.n_head},
            {"n_inner", nullptr},
            {"n_layer", m.n_layer},
            {"n_positions", m.max_seq_len},
            {"reorder_and_upcast_attn", false},
            {"scale_attn_by_inverse_layer_idx", false},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", m.tie_embeddings},
            {"torch_dtype", "float32"},
            {"use_cache", true},
            {"vocab_size", m.vocab_size}};
  return c.dump(2) + "\n";
}

ModelConfig gpt2_config_from_hf(const std::string& path) {
  json c = read_json(path, "an HF model directory holds config.json and model.safetensors");
  std::string type = config_value<std::string>(c, "model_type", "", path);
  LATTICE_CHECK(type == "gpt2", "{}: model_type is '{}', expected 'gpt2' (lattice convert reads HF GPT-2 only)", path,
                type);
  ModelConfig m;
  m.arch = ModelArch::gpt2;
  m.vocab_size = config_int(c, {"vocab_size"}, path);
  m.max_seq_len = config_int(c, {"n_positions", "n_ctx"}, path);
  m.d_model = config_int(c, {"n_embd"}, path);
  m.n_layer = config_int(c, {"n_layer"}, path);
  m.n_head = config_int(c, {"n_head"}, path);
  m.n_kv_head = m.n_head;
  m.d_ff = 4 * m.d_model;
  LATTICE_CHECK(m.d_model % m.n_head == 0, "{}: n_embd {} is not divisible by n_head {}", path, m.d_model, m.n_head);
  if (const json* inner = find_key(c, {"n_inner"}))
    LATTICE_CHECK(inner->is_number_integer() && inner->get<int64_t>() == m.d_ff,
                  "{}: n_inner is {}; Lattice's GPT-2 needs null or 4 * n_embd = {}", path, inner->dump(), m.d_ff);
  std::string act = config_value<std::string>(c, "activation_function", "gelu_new", path);
  LATTICE_CHECK(std::find(std::begin(kTanhGelus), std::end(kTanhGelus), act) != std::end(kTanhGelus),
                "{}: activation_function is '{}'; Lattice's GPT-2 computes GELU with the tanh approximation "
                "(gelu_new, gelu_pytorch_tanh or gelu_fast)",
                path, act);
  LATTICE_CHECK(config_value<bool>(c, "scale_attn_weights", true, path),
                "{}: scale_attn_weights is false; Lattice scales attention by 1/sqrt(head size)", path);
  LATTICE_CHECK(!config_value<bool>(c, "scale_attn_by_inverse_layer_idx", false, path),
                "{}: scale_attn_by_inverse_layer_idx is true; Lattice's GPT-2 does not scale by layer", path);
  LATTICE_CHECK(!config_value<bool>(c, "add_cross_attention", false, path),
                "{}: add_cross_attention is true; Lattice's GPT-2 is decoder-only", path);
  m.norm_eps = config_value<double>(c, "layer_norm_epsilon", 1e-5, path);
  LATTICE_CHECK(m.norm_eps > 0, "{}: layer_norm_epsilon is {}, expected a positive number", path, m.norm_eps);
  m.tie_embeddings = config_value<bool>(c, "tie_word_embeddings", true, path);
  m.dropout = float(config_value<double>(c, "resid_pdrop", 0.1, path));
  m.init_std = config_value<double>(c, "initializer_range", 0.02, path);
  return m;
}

LogicalModel read_hf_gpt2(const std::string& hf_dir) {
  std::error_code ec;
  LATTICE_CHECK(fs::is_directory(hf_dir, ec), "{}: not a directory (expected an HF GPT-2 model directory)", hf_dir);
  LogicalModel m;
  m.config = gpt2_config_from_hf(hf_dir + "/config.json");
  HfTensors files(hf_dir);
  // A bare GPT2Model was saved without the `transformer.` prefix.
  const bool bare = !files.contains(std::string(kPrefix) + "wte.weight") && files.contains("wte.weight");
  std::set<std::string> used;
  for (const ParamSpec& spec : model_param_specs(m.config)) {
    HfTensorName hf = gpt2_hf_name(spec);
    if (bare && hf.name.starts_with(kPrefix)) hf.name.erase(0, kPrefix.size());
    m.tensors.emplace_back(spec.name, read_hf_param(files, hf.name, spec, hf.transposed, m.config));
    used.insert(hf.name);
  }
  check_leftovers(files, used, m);
  check_logical_model(m, hf_dir);
  return m;
}

void write_hf_gpt2(const LogicalModel& m, const std::string& out_dir) {
  check_logical_model(m, out_dir);
  const std::string config = gpt2_hf_config_json(m.config);  // refuse before writing anything
  NamedTensors hf;
  std::vector<ParamSpec> specs = model_param_specs(m.config);
  for (size_t i = 0; i < specs.size(); ++i) {
    HfTensorName n = gpt2_hf_name(specs[i]);
    const Tensor& t = m.tensors[i].second;
    hf.emplace_back(n.name, n.transposed ? transpose2d(t) : t);
  }
  // The reference writer's order: larger dtypes first, then by name.
  std::stable_sort(hf.begin(), hf.end(), [](const auto& a, const auto& b) {
    size_t sa = dtype_size(a.second.dtype()), sb = dtype_size(b.second.dtype());
    return sa != sb ? sa > sb : a.first < b.first;
  });
  prepare_out_dir(out_dir);
  write_safetensors(out_dir + "/" + kHfWeights, hf, {{"format", "pt"}});
  write_file_synced(out_dir + "/config.json", config);
  fsync_path(out_dir);
}

ConvertSummary convert_to_hf(const std::string& step_dir, const std::string& out_dir) {
  std::error_code ec;
  const std::string latest = step_dir + "/" + std::string(kLatestName);
  if (fs::exists(latest, ec)) {
    std::string name = read_text_file(latest, 4096);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    LATTICE_FAIL("{}: is a checkpoint directory; name one of its step directories (latest: {}/{})", step_dir, step_dir,
                 name);
  }
  LogicalModel m = read_logical_model(step_dir);
  write_hf_gpt2(m, out_dir);
  return {m.config, m.numel(), out_dir};
}

ConvertSummary convert_from_hf(const std::string& hf_dir, const std::string& out_parent) {
  LogicalModel m = read_hf_gpt2(hf_dir);
  std::string dir = write_model_checkpoint(m, out_parent, 0);
  return {m.config, m.numel(), dir};
}

}  // namespace lattice::checkpoint
