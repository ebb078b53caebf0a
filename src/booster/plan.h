// lattice plan: what a job of one config on N ranks will run and hold,
// worked out without MPI and without allocating the model (ARCHITECTURE.md §5).
//
// The pieces are the ones the HybridParallelPlugin composes: the resolved
// layout (config), the pure mesh layout (ranks, coordinates, groups), the
// stage layout and each stage's schedule plan (pipeline), and the parameter
// table (models). Errors are the same one-line errors `lattice train` gives
// for the same config and world size (resolve_layout, the mesh, the stage
// split, the model's sharding checks).
//
// Memory is predicted per rank as the allocator will count it
// (core/allocator.h: every tensor's bytes, CPU or device) at the peak of a
// training step:
//   params, grads   the rank's flat buffers (its chunks' entries, tp-sharded,
//                   the vocabulary padded; a tied replica included); params
//                   adds the 16-bit shadow (2 bytes per element) under
//                   runtime.precision bf16 or fp16 (core/param.h)
//   optimizer       AdamW 2, SGD 1 flat buffers of the same size; with
//                   parallel.zero: 1 (optim/zero.h) the flat buffers are padded
//                   to dp shards, the state covers one shard, plus one shard
//                   of reduce-scatter staging when dp > 1
//   data            the step's token ids and targets of this dp rank
//   activations     the peak of two simulated steps: the plan is walked action by
//                   action with the allocation rules of the context pool
//                   (booster/context_pool.h: a chunk's contexts grow to the
//                   most it holds at once and are kept), the model's
//                   workspace and transients (LanguageModel::activation_bytes)
//                   and the interpreter's boundary buffers
//                   (pipeline/interpreter.h), an input activation referenced
//                   by its context from forward to backward.
// Small allocations (scalar reductions) are left out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "mesh/process_group_mesh.h"
#include "models/model.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_manager.h"

namespace lattice {

// ---- the plugin's composition rules, pure ----

// The stage settings of the job (parallel.* and the balanced split's cost model).
pipeline::StageConfig stage_config_of(const Config& cfg, const Layout& layout);
// The training schedule plan of pipeline stage `stage` (parallel.schedule).
pipeline::Plan train_plan_of(const Config& cfg, const Layout& layout, int stage);
// The model chunks of stage `stage`, by virtual stage, with its recomputed blocks.
std::vector<StageSpan> stage_spans(const Config& cfg, const pipeline::StageLayout& stages, int stage);
// tp * pp * dp, or tp * pp when parallel.dp is 0 (one dp replica).
int default_world_size(const Config& cfg);

// ---- memory ----

// One chunk as the activation simulation sees it.
struct ChunkActivations {
  ActivationBytes bytes;
  bool first = false;  // model chunk 0: reads token ids, receives no activation
  bool last = false;   // the last model chunk: computes the loss, sends nothing
};

// The activation bytes of one rank at the peak of a training step.
struct ActivationPeak {
  int64_t contexts = 0;      // contexts created so far (pooled, never freed)
  int64_t workspace = 0;     // the chunks' workspaces
  int64_t boundary = 0;      // live boundary buffers
  int64_t transient = 0;     // a forward's or backward's transient, when the peak is inside one
  int boundary_buffers = 0;  // how many boundary buffers are live
  std::vector<int> pool;     // contexts per chunk at the end of the step
  int64_t total() const { return contexts + workspace + boundary + transient; }
};

// Walks `plan` (one rank's training plan) twice, two steps of one pool, with chunks[v] for virtual stage v;
// each boundary buffer is `boundary_bytes` (one (B, T, C) activation).
ActivationPeak simulate_activations(const pipeline::Plan& plan, const std::vector<ChunkActivations>& chunks,
                                    int64_t boundary_bytes);

struct RankMemory {
  int rank = 0;
  mesh::Coord coord;
  int64_t param_count = 0;  // local elements of the flat buffers
  int64_t params = 0, grads = 0, optimizer = 0, data = 0;
  ActivationPeak activations;
  int64_t total() const { return params + grads + optimizer + data + activations.total(); }
};

// Predicted peak of rank `rank` of a job with this layout.
RankMemory predict_rank_memory(const Config& cfg, const Layout& layout, const mesh::ProcessGroupMesh& mesh,
                               const pipeline::StageLayout& stages, int rank);

// ---- the whole job ----

struct JobPlan {
  Config cfg;
  int world_size = 0;
  Layout layout;
  mesh::ProcessGroupMesh mesh;
  pipeline::StageLayout stages;
  std::vector<pipeline::Plan> plans;  // the training plan of each pp stage
  std::vector<RankMemory> memory;     // by world rank
};

// Resolves and checks everything `lattice train` would (one-line errors).
JobPlan make_job_plan(const Config& cfg, int world_size);
// The report `lattice plan` prints: layout, rank map, groups, layer-to-stage
// map, tie groups, schedule table, memory per rank.
std::string format_job_plan(const JobPlan& plan);
// "512 B", "12.0 KiB", "340.5 MiB", "1.25 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace lattice
