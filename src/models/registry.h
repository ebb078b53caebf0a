// The model registry: model.arch -> the model's parameter table and class.
// `lattice train` and the plugins build every model through here, so adding a
// model means adding a folder and one entry in registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/param.h"
#include "models/model.h"

namespace lattice {

std::vector<ParamSpec> model_param_specs(const ModelConfig& cfg);
// The model object for pipeline chunk `span` (the whole model by default).
// `params` must hold the chunk's entries (select_stage_params of
// model_param_specs(cfg)) sharded for this rank of `tp` (a group of one rank
// for the unsharded model).
std::unique_ptr<LanguageModel> build_model(const ModelConfig& cfg, FlatParams& params, comm::Group& tp,
                                           StageSpan span = {});
// The activation bytes of chunk `span` of that model, sharded as `shard`, at
// microbatch (B, T) in `dtype`, without building it (lattice plan).
ActivationBytes model_activation_bytes(const ModelConfig& cfg, const StageSpan& span, const TpShard& shard, DType dtype,
                                       int64_t B, int64_t T);
std::vector<std::string> registered_archs();

}  // namespace lattice
