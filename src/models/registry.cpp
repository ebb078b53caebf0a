#include "models/registry.h"

#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"
#include "models/neox/neox.h"

namespace lattice {

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> entries = {gpt2::registry_entry(), bert::registry_entry(),
                                                  llama::registry_entry(), neox::registry_entry()};
  return entries;
}

std::vector<std::string> registered_archs() {
  std::vector<std::string> out;
  for (const ModelEntry& e : model_registry()) out.emplace_back(enum_name(e.arch));
  return out;
}

const ModelEntry& model_entry(ModelArch arch) {
  for (const ModelEntry& e : model_registry())
    if (e.arch == arch) return e;
  std::string known;
  for (const std::string& a : registered_archs()) known += (known.empty() ? "" : ", ") + a;
  LATTICE_FAIL("model.arch: '{}' is not built into this version (registered: {})", enum_name(arch), known);
}

std::vector<ParamSpec> model_param_specs(const ModelConfig& cfg) { return model_entry(cfg.arch).param_specs(cfg); }

ShardingPolicy model_sharding_policy(const ModelConfig& cfg) { return model_entry(cfg.arch).policy(cfg); }

std::unique_ptr<LanguageModel> build_model(const ModelConfig& cfg, FlatParams& params, comm::Group& tp,
                                           StageSpan span) {
  return model_entry(cfg.arch).build(cfg, params, tp, span);
}

ActivationBytes model_activation_bytes(const ModelConfig& cfg, const StageSpan& span, const TpShard& shard, DType dtype,
                                       int64_t B, int64_t T, ops::AttentionState attention) {
  return model_entry(cfg.arch).activation_bytes(cfg, span, shard, dtype, B, T, attention);
}

}  // namespace lattice
