// What the Hugging Face converters (checkpoint/hf_gpt2.h, checkpoint/hf_llama.h)
// share: reading config.json keys with one-line errors, the HF weight files
// of a directory (model.safetensors, or the shards model.safetensors.index.json
// names), parameter reads checked against the parameter table, and the
// writer of an HF directory. Internal to lattice_checkpoint_model.
//
// Every Error names the file and the key or tensor; parameters come back as
// Lattice's logical F32 tensors, whatever float dtype the HF file holds.
#pragma once

#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/index.h"
#include "checkpoint/model_checkpoint.h"
#include "core/error.h"
#include "core/param.h"

namespace lattice::checkpoint::hf {

using json = nlohmann::json;

inline constexpr const char* kWeights = "model.safetensors";
inline constexpr const char* kIndex = "model.safetensors.index.json";

// A float written as float shows as 0.10000000149011612 in JSON; HF writes 0.1.
double shortest(float v);

// `path` parsed as a JSON object; `what` says what was expected there.
json read_json(const std::string& path, const char* what);
// config.json's model_type ("" when absent).
std::string model_type(const std::string& hf_dir);

// The first of `keys` present and not null.
const json* find_key(const json& c, std::initializer_list<const char*> keys);
// A positive int under the first present key; missing: "(`cls` needs it)".
int config_int(const json& c, std::initializer_list<const char*> keys, const std::string& path, const char* cls);

template <class T>
T config_value(const json& c, const char* key, T fallback, const std::string& path) {
  const json* v = find_key(c, {key});
  if (v == nullptr) return fallback;
  try {
    return v->get<T>();
  } catch (const json::exception&) {
    LATTICE_INPUT_FAIL("{}: '{}' is {}, expected {}", path, key, v->dump(), json(fallback).type_name());
  }
}

// model.safetensors, or the shards model.safetensors.index.json names.
class HfTensors {
 public:
  explicit HfTensors(const std::string& dir);
  const std::string& where() const { return where_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& n) const;
  const SafetensorsInfo& info(const std::string& n) const;
  Tensor read(const std::string& n) const;

 private:
  std::string where_;
  std::optional<SafetensorsFile> single_;
  std::optional<IndexedTensors> sharded_;
};

// HF tensor `name` as the logical F32 tensor of `spec`; HF stores it (in, out)
// when `transposed` (GPT-2's Conv1D).
Tensor read_param(const HfTensors& files, const std::string& name, const ParamSpec& spec, bool transposed,
                  const ModelConfig& cfg);

// The tensors of the file that were not read (`used`): those `skip` accepts
// (buffers), and a tied head stored anyway, which must equal the embedding
// (m.tensors.front()). Anything else is refused as not a parameter of `cls`.
void check_leftovers(const HfTensors& files, const std::set<std::string>& used, const LogicalModel& m,
                     const std::function<bool(const std::string&)>& skip, const char* cls);

// (R, K) -> (K, R), F32 on the CPU.
Tensor transpose2d(const Tensor& t);

// Writes `out_dir` (new or empty) with model.safetensors (`tensors` in the
// reference writer's order, __metadata__ {"format": "pt"}) and config.json.
void write_hf_dir(NamedTensors tensors, const std::string& config_json, const std::string& out_dir);

}  // namespace lattice::checkpoint::hf
