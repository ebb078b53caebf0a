#include "models/model.h"

namespace lattice {

std::vector<ParamSpec> select_stage_params(const std::vector<ParamSpec>& all, const std::vector<StageSpan>& chunks,
                                           int n_layer) {
  auto holds = [&](int layer) {
    for (const StageSpan& c : chunks) {
      int end = c.end_layer < 0 ? n_layer : c.end_layer;
      if ((layer == kEmbeddingLayer && c.embedding) || (layer == n_layer && c.head) ||
          (layer >= c.first_layer && layer < end))
        return true;
    }
    return false;
  };
  std::vector<ParamSpec> out;
  for (ParamSpec s : all) {
    bool owner = holds(s.layer), replica = s.tie_layer != kNoLayer && holds(s.tie_layer);
    if (!owner && !replica) continue;
    s.tie_replica = !owner;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lattice
