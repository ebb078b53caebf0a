// A model as logical tensors, and the model part of Lattice checkpoints
// (docs/checkpoint-format.md) read and written without a training run.
//
// A LogicalModel is a model config plus one tensor per entry of the model's
// parameter table (model_param_specs): Lattice names, logical shapes (linear
// weights (OC, C), vocabulary rows unpadded), F32, in table order. A tied
// parameter appears once. check_logical_model() enforces all of that, so the
// readers below return only models that a trainer can load.
//
// write_model_checkpoint() commits a MODEL-ONLY checkpoint through
// CheckpointWriter (manifest written last, `latest` replaced): the model index
// and one shard file, and a trainer_state.json with step / optimizer_updates
// as given, no `config` and no optimizer files, plus a "model" object
//   {"arch", "n_layer", "n_head", "d_model", "vocab_size", "max_seq_len",
//    "tie_embeddings", "norm_eps"}
// and, for archs other than gpt2, "n_kv_head", "d_ff" and "rope_theta",
// so that a trainer starting from it can check the shapes against its config.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "core/param.h"

namespace lattice::checkpoint {

struct LogicalModel {
  ModelConfig config;
  NamedTensors tensors;  // parameter-table order
  // The run's data section (tokenizer, vocab_dir) where the checkpoint keeps
  // the run's config; model-only checkpoints have none.
  std::optional<DataConfig> data{};
  int64_t numel() const;
};

// Throws one Error line, prefixed by `where`, unless `m.tensors` holds exactly
// the parameters of model_param_specs(m.config), each F32 with its logical shape.
void check_logical_model(const LogicalModel& m, const std::string& where);

// The "model" object of trainer_state.json, and back (Error naming `where` and the key).
nlohmann::ordered_json model_state_json(const ModelConfig& m);
ModelConfig model_from_state_json(const nlohmann::json& j, const std::string& where);

// Commits `parent`/step_%07d (step) as a model-only checkpoint; returns its path.
// `parent` must not hold checkpoints already (one Error line naming it).
std::string write_model_checkpoint(const LogicalModel& m, const std::string& parent, int64_t step = 0);

// The model of checkpoint step directory `step_dir`, which must verify
// (verify_checkpoint_dir, a read of every file; skipped when the caller has
// just verified it: Manifest::verified): its config from trainer_state.json's
// `config` (the run's YAML, parsed with parse_written_config) or, in a
// model-only checkpoint, its "model" object; its tensors through
// model.safetensors.index.json.
enum class Manifest { verify, verified };
LogicalModel read_logical_model(const std::string& step_dir, Manifest manifest = Manifest::verify);

// Copies the tensors of `m` into `params`, which hold m.config's parameters
// sharded as params.shard() (tp::shard_from_logical; the padded vocabulary
// rows stay as they are).
void load_logical_model(const LogicalModel& m, FlatParams& params);

}  // namespace lattice::checkpoint
