#include "models/registry.h"

#include "models/gpt2/gpt2.h"

namespace lattice {

namespace {

gpt2::Gpt2Config to_gpt2(const ModelConfig& m) {
  gpt2::Gpt2Config c;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.d_model = m.d_model;
  c.vocab_size = m.vocab_size;
  c.max_seq_len = m.max_seq_len;
  c.tie_embeddings = m.tie_embeddings;
  c.dropout = m.dropout;
  c.norm_eps = float(m.norm_eps);
  c.init_std = float(m.init_std);
  return c;
}

[[noreturn]] void unsupported(const ModelConfig& m) {
  std::string known;
  for (const std::string& a : registered_archs()) known += (known.empty() ? "" : ", ") + a;
  LATTICE_FAIL("model.arch: '{}' is not built into this version (registered: {})", enum_name(m.arch), known);
}

}  // namespace

std::vector<std::string> registered_archs() { return {"gpt2"}; }

std::vector<ParamSpec> model_param_specs(const ModelConfig& cfg) {
  if (cfg.arch == ModelArch::gpt2) {
    LATTICE_CHECK(cfg.d_ff == 4 * cfg.d_model, "model.d_ff: gpt2 uses d_ff = 4 * d_model = {}, got {}",
                  4 * cfg.d_model, cfg.d_ff);
    return gpt2::param_specs(to_gpt2(cfg));
  }
  unsupported(cfg);
}

std::unique_ptr<LanguageModel> build_model(const ModelConfig& cfg, FlatParams& params, comm::Group& tp,
                                           StageSpan span) {
  if (cfg.arch == ModelArch::gpt2) return std::make_unique<gpt2::Gpt2>(to_gpt2(cfg), params, tp, span);
  unsupported(cfg);
}

ActivationBytes model_activation_bytes(const ModelConfig& cfg, const StageSpan& span, const TpShard& shard, DType dtype,
                                       int64_t B, int64_t T) {
  if (cfg.arch == ModelArch::gpt2) return gpt2::Gpt2::activation_bytes_of(to_gpt2(cfg), span, shard, dtype, B, T);
  unsupported(cfg);
}

}  // namespace lattice
