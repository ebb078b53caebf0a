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
// `params` must have been laid out from model_param_specs(cfg) with this
// rank's shard of `tp` (a group of one rank for the unsharded model).
std::unique_ptr<LanguageModel> build_model(const ModelConfig& cfg, FlatParams& params, comm::Group& tp);
std::vector<std::string> registered_archs();

}  // namespace lattice
