#include "checkpoint/hf_gpt2.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/hf_common.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/posix_file.h"
#include "core/error.h"
#include "models/registry.h"

namespace lattice::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace hf;

namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr const char* kClass = "GPT2LMHeadModel";
// HF's names for GELU with the tanh approximation, which Lattice computes
// (core/kernels/math.h): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr std::string_view kTanhGelus[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

// The causal-mask buffers that files saved by older transformers carry.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// The archs `convert --to-hf` exports, and how.
struct HfExporter {
  ModelArch arch;
  void (*write)(const LogicalModel&, const std::string&);
  const char* hf_class;
};
const HfExporter kHfExporters[] = {{ModelArch::gpt2, write_hf_gpt2, kClass},
                                   {ModelArch::llama, write_hf_llama, kLlamaHfClass}};

}  // namespace

HfTensorName gpt2_hf_name(const ParamSpec& spec) {
  HfTensorName n;
  n.name = spec.name == "lm_head.weight" ? spec.name : std::string(kPrefix) + spec.name;
  // The tp-split linear weights are exactly GPT-2's Conv1D modules.
  n.transposed = spec.shape.size() == 2 && (spec.placement == Placement::column || spec.placement == Placement::row);
  return n;
}

std::string gpt2_hf_config_json(const ModelConfig& m) {
  LATTICE_INPUT_CHECK(m.arch == ModelArch::gpt2,
                      "model.arch: '{}' cannot be exported as HF GPT2LMHeadModel (a gpt2 model only)",
                      enum_name(m.arch));
  LATTICE_INPUT_CHECK(m.d_ff == 4 * m.d_model, "model.d_ff: {} cannot be exported; HF GPT-2 here uses 4 * d_model = {}",
                      m.d_ff, 4 * m.d_model);
  LATTICE_INPUT_CHECK(m.n_kv_head == 0 || m.n_kv_head == m.n_head,
                      "model.n_kv_head: {} != n_head {}; HF GPT-2 has no grouped-query attention", m.n_kv_head,
                      m.n_head);
  LATTICE_INPUT_CHECK(m.rope_theta == 0.0, "model.rope_theta: {}; HF GPT-2 has learned positions, not rotary",
                      m.rope_theta);
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
  LATTICE_INPUT_CHECK(type == "gpt2", "{}: model_type is '{}', expected 'gpt2' (this reader takes HF GPT-2 only)", path,
                      type);
  ModelConfig m;
  m.arch = ModelArch::gpt2;
  m.vocab_size = config_int(c, {"vocab_size"}, path, "GPT2Config");
  m.max_seq_len = config_int(c, {"n_positions", "n_ctx"}, path, "GPT2Config");
  m.d_model = config_int(c, {"n_embd"}, path, "GPT2Config");
  m.n_layer = config_int(c, {"n_layer"}, path, "GPT2Config");
  m.n_head = config_int(c, {"n_head"}, path, "GPT2Config");
  m.n_kv_head = m.n_head;
  m.d_ff = 4 * m.d_model;
  LATTICE_INPUT_CHECK(m.d_model % m.n_head == 0, "{}: n_embd {} is not divisible by n_head {}", path, m.d_model,
                      m.n_head);
  if (const json* inner = find_key(c, {"n_inner"}))
    LATTICE_INPUT_CHECK(inner->is_number_integer() && inner->get<int64_t>() == m.d_ff,
                        "{}: n_inner is {}; Lattice's GPT-2 needs null or 4 * n_embd = {}", path, inner->dump(),
                        m.d_ff);
  std::string act = config_value<std::string>(c, "activation_function", "gelu_new", path);
  LATTICE_INPUT_CHECK(std::find(std::begin(kTanhGelus), std::end(kTanhGelus), act) != std::end(kTanhGelus),
                      "{}: activation_function is '{}'; Lattice's GPT-2 computes GELU with the tanh approximation "
                      "(gelu_new, gelu_pytorch_tanh or gelu_fast)",
                      path, act);
  LATTICE_INPUT_CHECK(config_value<bool>(c, "scale_attn_weights", true, path),
                      "{}: scale_attn_weights is false; Lattice scales attention by 1/sqrt(head size)", path);
  LATTICE_INPUT_CHECK(!config_value<bool>(c, "scale_attn_by_inverse_layer_idx", false, path),
                      "{}: scale_attn_by_inverse_layer_idx is true; Lattice's GPT-2 does not scale by layer", path);
  LATTICE_INPUT_CHECK(!config_value<bool>(c, "add_cross_attention", false, path),
                      "{}: add_cross_attention is true; Lattice's GPT-2 is decoder-only", path);
  m.norm_eps = config_value<double>(c, "layer_norm_epsilon", 1e-5, path);
  LATTICE_INPUT_CHECK(m.norm_eps > 0, "{}: layer_norm_epsilon is {}, expected a positive number", path, m.norm_eps);
  m.tie_embeddings = config_value<bool>(c, "tie_word_embeddings", true, path);
  m.dropout = float(config_value<double>(c, "resid_pdrop", 0.1, path));
  m.init_std = config_value<double>(c, "initializer_range", 0.02, path);
  return m;
}

LogicalModel read_hf_gpt2(const std::string& hf_dir) {
  std::error_code ec;
  LATTICE_INPUT_CHECK(fs::is_directory(hf_dir, ec), "{}: not a directory (expected an HF GPT-2 model directory)",
                      hf_dir);
  LogicalModel m;
  m.config = gpt2_config_from_hf(hf_dir + "/config.json");
  HfTensors files(hf_dir);
  // A bare GPT2Model was saved without the `transformer.` prefix.
  const bool bare = !files.contains(std::string(kPrefix) + "wte.weight") && files.contains("wte.weight");
  std::set<std::string> used;
  for (const ParamSpec& spec : model_param_specs(m.config)) {
    HfTensorName hf = gpt2_hf_name(spec);
    if (bare && hf.name.starts_with(kPrefix)) hf.name.erase(0, kPrefix.size());
    m.tensors.emplace_back(spec.name, read_param(files, hf.name, spec, hf.transposed, m.config));
    used.insert(hf.name);
  }
  check_leftovers(files, used, m, is_mask_buffer, kClass);
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
  write_hf_dir(std::move(hf), config, out_dir);
}

ConvertSummary convert_to_hf(const std::string& step_dir, const std::string& out_dir, Manifest manifest) {
  std::error_code ec;
  const std::string latest = step_dir + "/" + std::string(kLatestName);
  if (fs::exists(latest, ec)) {
    std::string name = read_text_file(latest, 4096);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    LATTICE_INPUT_FAIL("{}: is a checkpoint directory; name one of its step directories (latest: {}/{})", step_dir,
                       step_dir, name);
  }
  LogicalModel m = read_logical_model(step_dir, manifest);
  // The exporter of the checkpoint's arch.
  for (const HfExporter& e : kHfExporters)
    if (e.arch == m.config.arch) {
      e.write(m, out_dir);
      return {m.config, m.numel(), out_dir, e.hf_class};
    }
  std::string archs;
  for (const HfExporter& e : kHfExporters) archs += fmt::format("{}{}", archs.empty() ? "" : ", ", enum_name(e.arch));
  LATTICE_INPUT_FAIL(
      "{}: model.arch is '{}', and there is no Hugging Face exporter for {} models (convert --to-hf exports {}); "
      "the checkpoint itself {}",
      step_dir, enum_name(m.config.arch), enum_name(m.config.arch), archs,
      arch_traits(m.config.arch).causal ? "trains and samples with lattice"
                                        : "trains with lattice (lattice sample takes left-to-right models only)");
}

ConvertSummary convert_from_hf(const std::string& hf_dir, const std::string& out_parent) {
  // config.json's model_type picks the reader.
  const std::string type = model_type(hf_dir);
  LATTICE_INPUT_CHECK(type == "gpt2" || type == "llama",
                      "{}/config.json: model_type is '{}'; lattice convert --from-hf reads 'gpt2' and 'llama'", hf_dir,
                      type);
  const bool llama = type == "llama";
  LogicalModel m = llama ? read_hf_llama(hf_dir) : read_hf_gpt2(hf_dir);
  std::string dir = write_model_checkpoint(m, out_parent, 0);
  return {m.config, m.numel(), dir, llama ? kLlamaHfClass : kClass};
}

}  // namespace lattice::checkpoint
