#include "checkpoint/hf_llama.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "checkpoint/hf_common.h"
#include "core/error.h"
#include "models/llama/llama.h"
#include "models/registry.h"

namespace lattice::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace hf;

namespace {

constexpr const char* kConfigClass = "LlamaConfig";

// The rotary inverse-frequency buffers that files saved by older transformers carry.
bool is_rotary_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// The settings of LlamaConfig that Lattice's LLaMA does not compute: refused
// by name, with the value and what Lattice needs.
void check_computable(const json& c, const std::string& path) {
  if (const json* s = find_key(c, {"rope_scaling"}))
    LATTICE_INPUT_FAIL("{}: rope_scaling is {}; Lattice's LLaMA has plain rotary embeddings (rope_scaling null)", path,
                       s->dump());
  for (const char* key : {"attention_bias", "mlp_bias"})
    LATTICE_INPUT_CHECK(!config_value<bool>(c, key, false, path), "{}: {} is true; Lattice's LLaMA has no biases", path,
                        key);
  // HF maps both names to the same SiLU.
  std::string act = config_value<std::string>(c, "hidden_act", "silu", path);
  LATTICE_INPUT_CHECK(act == "silu" || act == "swish",
                      "{}: hidden_act is '{}'; Lattice's LLaMA computes a SwiGLU MLP with silu", path, act);
}

}  // namespace

std::string llama_hf_config_json(const ModelConfig& m) {
  LATTICE_INPUT_CHECK(m.arch == ModelArch::llama,
                      "model.arch: '{}' cannot be exported as HF {} (lattice convert --to-hf handles gpt2 and llama)",
                      enum_name(m.arch), kLlamaHfClass);
  const llama::LlamaConfig c = llama::config_of(m);  // fills n_kv_head, d_ff, rope_theta
  json j = {{"architectures", {kLlamaHfClass}},
            {"attention_bias", false},
            {"attention_dropout", shortest(c.dropout)},
            {"head_dim", c.d_model / c.n_head},
            {"hidden_act", "silu"},
            {"hidden_size", c.d_model},
            {"initializer_range", m.init_std},
            {"intermediate_size", c.d_ff},
            {"max_position_embeddings", c.max_seq_len},
            {"mlp_bias", false},
            {"model_type", "llama"},
            {"num_attention_heads", c.n_head},
            {"num_hidden_layers", c.n_layer},
            {"num_key_value_heads", c.n_kv_head},
            {"pretraining_tp", 1},
            {"rms_norm_eps", m.norm_eps},
            {"rope_scaling", nullptr},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_embeddings},
            {"torch_dtype", "float32"},
            {"use_cache", true},
            {"vocab_size", c.vocab_size}};
  return j.dump(2) + "\n";
}

ModelConfig llama_config_from_hf(const std::string& path) {
  json c = read_json(path, "an HF model directory holds config.json and model.safetensors");
  std::string type = config_value<std::string>(c, "model_type", "", path);
  LATTICE_INPUT_CHECK(type == "llama", "{}: model_type is '{}', expected 'llama' (this reader takes HF LLaMA only)",
                      path, type);
  check_computable(c, path);
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.vocab_size = config_int(c, {"vocab_size"}, path, kConfigClass);
  m.max_seq_len = config_int(c, {"max_position_embeddings"}, path, kConfigClass);
  m.d_model = config_int(c, {"hidden_size"}, path, kConfigClass);
  m.d_ff = config_int(c, {"intermediate_size"}, path, kConfigClass);
  m.n_layer = config_int(c, {"num_hidden_layers"}, path, kConfigClass);
  m.n_head = config_int(c, {"num_attention_heads"}, path, kConfigClass);
  m.n_kv_head =
      find_key(c, {"num_key_value_heads"}) ? config_int(c, {"num_key_value_heads"}, path, kConfigClass) : m.n_head;
  LATTICE_INPUT_CHECK(m.d_model % m.n_head == 0, "{}: hidden_size {} is not divisible by num_attention_heads {}", path,
                      m.d_model, m.n_head);
  LATTICE_INPUT_CHECK(m.n_head % m.n_kv_head == 0,
                      "{}: num_attention_heads {} is not divisible by num_key_value_heads {}", path, m.n_head,
                      m.n_kv_head);
  const int HS = m.d_model / m.n_head;
  if (const json* hd = find_key(c, {"head_dim"}))
    LATTICE_INPUT_CHECK(hd->is_number_integer() && hd->get<int64_t>() == HS,
                        "{}: head_dim is {}; Lattice's LLaMA needs hidden_size / num_attention_heads = {}", path,
                        hd->dump(), HS);
  LATTICE_INPUT_CHECK(HS % 2 == 0, "{}: head size hidden_size / num_attention_heads = {} is odd; rotary needs it even",
                      path, HS);
  m.norm_eps = config_value<double>(c, "rms_norm_eps", 1e-6, path);
  LATTICE_INPUT_CHECK(m.norm_eps > 0, "{}: rms_norm_eps is {}, expected a positive number", path, m.norm_eps);
  m.rope_theta = config_value<double>(c, "rope_theta", 10000.0, path);
  LATTICE_INPUT_CHECK(m.rope_theta > 0, "{}: rope_theta is {}, expected a positive number", path, m.rope_theta);
  m.tie_embeddings = config_value<bool>(c, "tie_word_embeddings", false, path);  // LlamaConfig's default
  m.dropout = float(config_value<double>(c, "attention_dropout", 0.0, path));
  m.init_std = config_value<double>(c, "initializer_range", 0.02, path);
  return m;
}

LogicalModel read_hf_llama(const std::string& hf_dir) {
  std::error_code ec;
  LATTICE_INPUT_CHECK(fs::is_directory(hf_dir, ec), "{}: not a directory (expected an HF LLaMA model directory)",
                      hf_dir);
  LogicalModel m;
  m.config = llama_config_from_hf(hf_dir + "/config.json");
  HfTensors files(hf_dir);
  std::set<std::string> used;
  for (const ParamSpec& spec : model_param_specs(m.config)) {  // HF names already
    m.tensors.emplace_back(spec.name, read_param(files, spec.name, spec, false, m.config));
    used.insert(spec.name);
  }
  check_leftovers(files, used, m, is_rotary_buffer, kLlamaHfClass);
  check_logical_model(m, hf_dir);
  return m;
}

void write_hf_llama(const LogicalModel& m, const std::string& out_dir) {
  check_logical_model(m, out_dir);
  const std::string config = llama_hf_config_json(m.config);  // refuse before writing anything
  write_hf_dir(m.tensors, config, out_dir);
}

}  // namespace lattice::checkpoint
