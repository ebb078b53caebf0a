// The layout-invariance harness (ARCHITECTURE.md §2), shared by the CPU
// suite (test_layout_invariance.cpp) and the GPU one (test_cuda_training.cpp):
// the data, the models under test, the config of one layout, a 20-step
// training run that records loss, grad norm and step 1's gradients, and the
// relative L2 distance of a gradient from the one-rank reference's slice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "booster/hybrid_parallel_plugin.h"

namespace lattice::layout_test {

constexpr int kSteps = 20;

// A token shard with some structure (a repeating phrase with noise) so the
// loss moves; ids below 250. Returns the data.train glob.
std::string make_data();

struct LayoutCase {
  int tp, pp, dp;
  std::string schedule = "1f1b", layers = "uniform";
  int virtual_stages = 1;
  std::string recompute = "[]";
  int zero = 0;
  double bucket_mb = 0.01;  // small buckets: several per layer start during backward
  bool recompute_attention = false;
  int head_chunk = 0;  // parallel.head_chunk_tokens
};

// The models under test: GPT-2 runs every layout; each other registered
// model runs (2,1,1), (1,2,1), (2,2,1), (4,1,1) and (2,2,2) with 1F1B. The
// data's token ids stay below 250 (under every tokenizer's special ids).
struct ModelCase {
  std::string name, yaml;  // yaml: the `model:` mapping
  bool every_layout = false;
};
const std::vector<ModelCase>& models();

// runtime.precision overrides for the 16-bit precisions this CPU runs: bf16
// where it has bf16 matmuls (core/kernels/cpu/matmul_bf16.h), then fp16 with
// the loss scale starting and capped at `scale`, growing every
// `growth_interval` steps.
std::vector<std::vector<std::string>> half_precisions(const std::string& scale, int growth_interval);

// The 20-step config of layout l for `model`, plus `extra` overrides (key=value).
Config config(const std::string& glob, const LayoutCase& l, const ModelCase& model,
              const std::vector<std::string>& extra = {});

struct Trace {
  std::vector<double> loss, norm;
  FlatParams grads_step1;  // a copy of the parameters' layout with step 1's gradients
};

// Trains cfg for kSteps on `mesh`. The gradients and values are read back to
// the host, so the run may live on any device. Checks on the way that every dp
// bucket started during backward and that the tied replicas stay bit-identical.
// `placement`: where the tensors live, when not runtime.device placed on
// `mesh` (verify-layout's one-rank reference runs on the job's placement).
Trace train(const Config& cfg, mesh::ProcessGroupMesh& mesh, std::optional<RankPlacement> placement = std::nullopt);

// Relative L2 distance between this rank's gradient of `e` and the slice of the reference's.
double relative_l2(const FlatParams& got, const ParamEntry& e, const FlatParams& ref);

}  // namespace lattice::layout_test
