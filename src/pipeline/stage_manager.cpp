#include "pipeline/stage_manager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace lattice::pipeline {
namespace {

constexpr double kEps = 1e-9;

// Linear partition of n layers into k chunks (each >= 1) minimising
// max_c cost(c, layers_c), subject to limit(c, layers_c) (true = allowed).
// Returns {} when no split satisfies the limit.
template <typename Cost, typename Allowed>
std::vector<int> min_max_partition(int n, int k, Cost cost, Allowed allowed) {
  const double inf = std::numeric_limits<double>::infinity();
  // best[i][j]: min over splits of j layers into chunks 0..i-1 of the max cost.
  std::vector<std::vector<double>> best(size_t(k + 1), std::vector<double>(size_t(n + 1), inf));
  std::vector<std::vector<int>> take(size_t(k + 1), std::vector<int>(size_t(n + 1), 0));
  best[0][0] = 0;
  for (int i = 1; i <= k; ++i) {
    for (int j = i; j <= n - (k - i); ++j) {
      for (int m = 1; m <= j - (i - 1); ++m) {
        if (!allowed(i - 1, m)) continue;
        double v = std::max(best[size_t(i - 1)][size_t(j - m)], cost(i - 1, m));
        if (v < best[size_t(i)][size_t(j)] - kEps) {
          best[size_t(i)][size_t(j)] = v;
          take[size_t(i)][size_t(j)] = m;
        }
      }
    }
  }
  if (best[size_t(k)][size_t(n)] == inf) return {};
  std::vector<int> counts(static_cast<size_t>(k));
  for (int i = k, j = n; i >= 1; --i) {
    counts[size_t(i - 1)] = take[size_t(i)][size_t(j)];
    j -= counts[size_t(i - 1)];
  }
  return counts;
}

void check_config(const StageConfig& c) {
  LATTICE_CHECK(c.pp >= 1, "parallel.pp: {} — the number of pipeline stages must be at least 1", c.pp);
  LATTICE_CHECK(c.virtual_stages >= 1, "parallel.virtual_stages: {} — must be at least 1", c.virtual_stages);
  LATTICE_CHECK(c.interleaved || c.virtual_stages == 1,
                "parallel.virtual_stages: {}, but only the interleaved schedule uses virtual stages — set "
                "parallel.schedule: interleaved",
                c.virtual_stages);
  LATTICE_CHECK(!c.interleaved || (c.pp >= 2 && c.virtual_stages >= 2),
                "parallel.schedule: interleaved needs pp >= 2 and virtual_stages >= 2 (got pp {}, virtual_stages {}) "
                "— or use 1f1b",
                c.pp, c.virtual_stages);
  LATTICE_CHECK(!c.interleaved || c.microbatches % c.pp == 0,
                "parallel.microbatches: {} is not a multiple of pp ({}) — the interleaved schedule runs whole rounds "
                "of pp microbatches",
                c.microbatches, c.pp);
}

std::vector<int> checked_list(const StageConfig& c) {
  const int chunks = c.pp * c.virtual_stages;
  const std::vector<int>& l = c.layers_per_stage;
  LATTICE_CHECK(int(l.size()) == chunks,
                "parallel.layers_per_stage: [{}] has {} entries, but pp ({}) * virtual_stages ({}) = {} — give one "
                "count per stage",
                fmt::join(l, ", "), l.size(), c.pp, c.virtual_stages, chunks);
  for (size_t i = 0; i < l.size(); ++i)
    LATTICE_CHECK(l[i] >= 1, "parallel.layers_per_stage[{}]: must be at least 1 (got {}) — every stage holds a layer",
                  i, l[i]);
  int sum = std::accumulate(l.begin(), l.end(), 0);
  LATTICE_CHECK(sum == c.n_layer, "parallel.layers_per_stage: [{}] sums to {}, but model.n_layer is {}",
                fmt::join(l, ", "), sum, c.n_layer);
  return l;
}

}  // namespace

std::vector<int> split_uniform(int n_layer, int chunks) {
  LATTICE_CHECK(chunks >= 1 && n_layer >= chunks, "split_uniform: {} layers into {} chunks", n_layer, chunks);
  std::vector<int> counts(size_t(chunks), n_layer / chunks);
  int extra = n_layer % chunks;
  const int middle = chunks - 2;
  if (extra <= middle) {
    int start = 1 + (middle - extra) / 2;  // centred among chunks 1 .. chunks-2
    for (int i = 0; i < extra; ++i) ++counts[size_t(start + i)];
  } else {  // extra == chunks - 1 (all middles, then the first) or chunks == 2, extra == 1
    for (int i = 0; i < extra; ++i) ++counts[size_t(i)];
  }
  return counts;
}

double head_cost_in_blocks(const StageCostModel& m) {
  const double c = double(m.d_model), v = double(m.vocab_size), t = double(m.seq_len);
  return (2 * v * c + 5 * v) / (24 * c * c + 4 * c * t);
}

double embedding_cost_in_blocks(const StageCostModel& m) {
  const double c = double(m.d_model), t = double(m.seq_len);
  return 2 * c / (24 * c * c + 4 * c * t);
}

std::vector<int> split_balanced(int n_layer, int chunks, const StageCostModel& m) {
  LATTICE_CHECK(m.d_model > 0 && m.vocab_size > 0 && m.seq_len > 0,
                "parallel.layers_per_stage: balanced needs model.d_model, model.vocab_size and train.seq_len (got {}, "
                "{}, {})",
                m.d_model, m.vocab_size, m.seq_len);
  LATTICE_CHECK(chunks >= 1 && n_layer >= chunks, "split_balanced: {} layers into {} chunks", n_layer, chunks);
  const double head = head_cost_in_blocks(m), embed = embedding_cost_in_blocks(m);
  auto compute = [&](int c, int layers) { return layers + (c == 0 ? embed : 0.0) + (c == chunks - 1 ? head : 0.0); };
  const double block_params = 12.0 * double(m.d_model) * double(m.d_model);
  const double table = double(m.vocab_size) * double(m.d_model) / block_params;
  const double positions = double(m.seq_len) * double(m.d_model) / block_params;
  auto memory = [&](int c, int layers) {
    return layers + (c == 0 ? table + positions : 0.0) + (c == chunks - 1 ? table : 0.0);
  };
  std::vector<int> fastest = min_max_partition(n_layer, chunks, compute, [](int, int) { return true; });
  double limit = 0;
  for (int c = 0; c < chunks; ++c) limit = std::max(limit, compute(c, fastest[size_t(c)]));
  std::vector<int> counts =
      min_max_partition(n_layer, chunks, memory, [&](int c, int layers) { return compute(c, layers) <= limit + kEps; });
  return counts.empty() ? fastest : counts;
}

StageLayout make_stage_layout(const StageConfig& c) {
  check_config(c);
  const int chunks = c.pp * c.virtual_stages;
  std::vector<int> counts;
  if (c.split == StageSplit::list) {
    counts = checked_list(c);
  } else {
    LATTICE_CHECK(c.n_layer >= chunks,
                  "model.n_layer: {} layers cannot fill pp ({}) * virtual_stages ({}) = {} stages — each stage needs "
                  "a layer",
                  c.n_layer, c.pp, c.virtual_stages, chunks);
    if (c.split == StageSplit::uniform) {
      LATTICE_CHECK(c.virtual_stages == 1 || c.n_layer % chunks == 0,
                    "model.n_layer: {} layers do not divide into pp ({}) * virtual_stages ({}) = {} equal chunks, "
                    "which the uniform split needs with interleaving — change virtual_stages or give "
                    "parallel.layers_per_stage as a list",
                    c.n_layer, c.pp, c.virtual_stages, chunks);
      counts = split_uniform(c.n_layer, chunks);
    } else {
      counts = split_balanced(c.n_layer, chunks, c.cost);
    }
  }
  StageLayout out{c.n_layer, c.pp, c.virtual_stages, {}};
  int begin = 0;
  for (int n : counts) {
    out.chunks.push_back({begin, begin + n});
    begin += n;
  }
  return out;
}

const LayerRange& StageLayout::layers(int stage, int vstage) const {
  LATTICE_CHECK(stage >= 0 && stage < pp && vstage >= 0 && vstage < virtual_stages,
                "stage {} chunk {} is outside pp {} x virtual_stages {}", stage, vstage, pp, virtual_stages);
  return chunks[size_t(model_chunk(stage, vstage))];
}

int StageLayout::layers_on_stage(int stage) const {
  int n = 0;
  for (int v = 0; v < virtual_stages; ++v) n += layers(stage, v).size();
  return n;
}

std::string StageLayout::describe() const {
  std::string out = fmt::format("layer-to-stage map: {} layers on pp {}{}\n", n_layer, pp,
                                virtual_stages > 1 ? fmt::format(" x {} virtual stages", virtual_stages) : "");
  for (int s = 0; s < pp; ++s) {
    out += fmt::format("  stage {}:", s);
    for (int v = 0; v < virtual_stages; ++v) {
      const int c = model_chunk(s, v);
      const LayerRange& r = chunks[size_t(c)];
      if (virtual_stages > 1) out += fmt::format("{} chunk {}", v ? "," : "", c);
      out += fmt::format(" layers {}-{} ({})", r.begin, r.end - 1, r.size());
      if (c == 0) out += " + embedding";
      if (c == num_chunks() - 1) out += " + head, loss";
    }
    out += "\n";
  }
  return out;
}

PipelineStageManager::PipelineStageManager(StageLayout layout, int stage, std::vector<int> pp_world_ranks)
    : layout_(std::move(layout)), stage_(stage), world_ranks_(std::move(pp_world_ranks)) {
  LATTICE_CHECK(stage_ >= 0 && stage_ < layout_.pp, "stage {} is outside pp {}", stage_, layout_.pp);
  LATTICE_CHECK(world_ranks_.empty() || int(world_ranks_.size()) == layout_.pp,
                "the pp group has {} ranks, but the layout has pp {}", world_ranks_.size(), layout_.pp);
}

int PipelineStageManager::prev_stage() const {
  if (layout_.pp == 1) return -1;
  if (stage_ > 0) return stage_ - 1;
  return layout_.virtual_stages > 1 ? layout_.pp - 1 : -1;
}

int PipelineStageManager::next_stage() const {
  if (layout_.pp == 1) return -1;
  if (stage_ < layout_.pp - 1) return stage_ + 1;
  return layout_.virtual_stages > 1 ? 0 : -1;
}

int PipelineStageManager::world_rank_of(int stage) const {
  if (stage < 0 || world_ranks_.empty()) return -1;
  return world_ranks_[size_t(stage)];
}

}  // namespace lattice::pipeline
