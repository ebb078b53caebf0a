// The job plan: the plugin's composition rules as pure functions, the
// per-rank memory prediction (an activation simulation of the schedule plan),
// the job's layout, and the report that `lattice plan` prints.
#include "booster/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "models/registry.h"
#include "optim/zero.h"

namespace lattice {

pipeline::StageConfig stage_config_of(const Config& cfg, const Layout& layout) {
  pipeline::StageConfig s;
  s.n_layer = cfg.model.n_layer;
  s.pp = layout.pp;
  s.virtual_stages = cfg.parallel.virtual_stages;
  s.interleaved = cfg.parallel.schedule == PipeSchedule::interleaved;
  s.microbatches = layout.microbatches;
  const LayersPerStage& l = cfg.parallel.layers_per_stage;
  s.split = l.split == LayerSplit::list       ? pipeline::StageSplit::list
            : l.split == LayerSplit::balanced ? pipeline::StageSplit::balanced
                                              : pipeline::StageSplit::uniform;
  s.layers_per_stage = l.counts;
  s.cost = {cfg.model.d_model, cfg.model.vocab_size, cfg.train.seq_len};
  return s;
}

pipeline::Plan train_plan_of(const Config& cfg, const Layout& layout, int stage) {
  switch (cfg.parallel.schedule) {
    case PipeSchedule::gpipe:
      return pipeline::plan_gpipe(layout.pp, stage, layout.microbatches);
    case PipeSchedule::one_f_one_b:
      return pipeline::plan_1f1b(layout.pp, stage, layout.microbatches);
    case PipeSchedule::interleaved:
      return pipeline::plan_interleaved_1f1b(layout.pp, stage, layout.microbatches, cfg.parallel.virtual_stages);
  }
  LATTICE_FAIL("parallel.schedule: unknown schedule");
}

std::vector<StageSpan> stage_spans(const Config& cfg, const pipeline::StageLayout& stages, int stage) {
  const std::vector<int>& recompute = cfg.parallel.recompute_layers_per_stage;
  std::vector<StageSpan> spans;
  for (int v = 0; v < stages.virtual_stages; ++v) {
    const int chunk = stages.model_chunk(stage, v);
    const pipeline::LayerRange& r = stages.layers(stage, v);
    spans.push_back(StageSpan{r.begin, r.end, chunk == 0, chunk == stages.num_chunks() - 1,
                              recompute.empty() ? 0 : std::min(recompute[size_t(stage)], r.size()),
                              cfg.parallel.recompute_attention, cfg.parallel.head_chunk_tokens});
  }
  return spans;
}

int default_world_size(const Config& cfg) {
  const ParallelConfig& p = cfg.parallel;
  return p.tp * p.pp * (p.dp > 0 ? p.dp : 1);
}

// ---- the activation simulation ----

namespace {

// Replays one rank's plan with the allocation rules of the context pool, the
// model and the interpreter (see plan.h), keeping the live bytes and their peak.
class ActivationSim {
 public:
  ActivationSim(const std::vector<ChunkActivations>& chunks, int64_t boundary_bytes)
      : chunks_(chunks),
        boundary_bytes_(boundary_bytes),
        pools_(chunks.size()),
        has_workspace_(chunks.size()),
        created_(chunks.size()) {}

  void forward(int chunk, int mb) {
    const ChunkActivations& c = chunks_.at(size_t(chunk));
    Slot& s = live_[{chunk, mb}];
    if (!c.last) s.output = new_buffer();
    const int ctx = take_context(chunk, mb);
    if (!has_workspace_[size_t(chunk)]) {  // the model's first forward
      has_workspace_[size_t(chunk)] = true;
      now_.workspace += c.bytes.workspace;
      observe();
    }
    if (!c.first) {  // the context references this input until its backward (ChunkModel: ctx.emb = input)
      ref(s.input);
      unref(std::exchange(pinned_[size_t(ctx)], s.input));
    }
    now_.transient = c.bytes.transient;
    observe();
    now_.transient = 0;
  }

  void backward(int chunk, int mb) {
    const ChunkActivations& c = chunks_.at(size_t(chunk));
    Slot& s = live_[{chunk, mb}];
    if (!c.first) s.dinput = new_buffer();
    now_.transient = c.bytes.backward_transient;
    observe();
    now_.transient = 0;
    auto it = busy_.find({chunk, mb});
    LATTICE_CHECK(it != busy_.end(), "plan: backward of chunk {} microbatch {} before its forward", chunk, mb);
    unref(std::exchange(pinned_[size_t(it->second)], -1));  // backward drops the context's reference
    pools_[size_t(chunk)].push_back(it->second);
    busy_.erase(it);
    for (int* b : {&s.input, &s.output, &s.doutput}) unref(std::exchange(*b, -1));
    if (c.first) live_.erase({chunk, mb});
  }

  // One P2P batch: its receives are allocated when it starts, a sent input
  // gradient is freed when it completes.
  void batch(const pipeline::Action* begin, const pipeline::Action* end) {
    for (const pipeline::Action* a = begin; a != end; ++a) {
      Slot& s = live_[{a->chunk, a->microbatch}];
      if (a->kind == pipeline::ActionKind::recv_forward) s.input = new_buffer();
      if (a->kind == pipeline::ActionKind::recv_backward) s.doutput = new_buffer();
    }
    for (const pipeline::Action* a = begin; a != end; ++a) {
      if (a->kind != pipeline::ActionKind::send_backward) continue;
      unref(std::exchange(live_[{a->chunk, a->microbatch}].dinput, -1));
      live_.erase({a->chunk, a->microbatch});
    }
  }

  ActivationPeak result() const {
    ActivationPeak p = peak_;
    p.pool = created_;
    return p;
  }

 private:
  struct Slot {
    int input = -1, output = -1, doutput = -1, dinput = -1;  // buffer ids
  };

  int take_context(int chunk, int mb) {
    std::vector<int>& free = pools_[size_t(chunk)];
    int ctx;
    if (free.empty()) {
      ctx = int(pinned_.size());
      pinned_.push_back(-1);
      ++created_[size_t(chunk)];
      now_.contexts += chunks_[size_t(chunk)].bytes.context;
      observe();
    } else {
      ctx = free.back();
      free.pop_back();
    }
    busy_[{chunk, mb}] = ctx;
    return ctx;
  }
  int new_buffer() {
    refs_.push_back(1);
    now_.boundary += boundary_bytes_;
    ++now_.boundary_buffers;
    observe();
    return int(refs_.size()) - 1;
  }
  void ref(int id) {
    if (id >= 0) ++refs_[size_t(id)];
  }
  void unref(int id) {
    if (id < 0 || --refs_[size_t(id)] > 0) return;
    now_.boundary -= boundary_bytes_;
    --now_.boundary_buffers;
  }
  void observe() {
    if (now_.total() > peak_.total()) peak_ = now_;
  }

  const std::vector<ChunkActivations>& chunks_;
  int64_t boundary_bytes_;
  std::vector<std::vector<int>> pools_;  // free contexts per chunk, reused last-in first-out
  std::vector<bool> has_workspace_;
  std::map<std::pair<int, int>, int> busy_;  // (chunk, microbatch) -> context
  std::vector<int> created_;                 // chunk -> contexts created
  std::vector<int> pinned_;                  // context -> the input buffer it references
  std::vector<int> refs_;                    // buffer -> references
  std::map<std::pair<int, int>, Slot> live_;
  ActivationPeak now_, peak_;
};

// The attention state the job's models take (ops::attention_state_on's rule for the configured device).
ops::AttentionState attention_state_of(const Config& cfg) {
  return ops::attention_state_of(cfg.runtime.device, cfg.runtime.precision != Precision::fp32,
                                 cfg.parallel.cpu_attention == CpuAttention::compact);
}

}  // namespace

ActivationPeak simulate_activations(const pipeline::Plan& plan, const std::vector<ChunkActivations>& chunks,
                                    int64_t boundary_bytes) {
  ActivationSim sim(chunks, boundary_bytes);
  // Two steps: the first grows the pools and workspaces as it goes, the second
  // starts with all of them, so its peak can come earlier in the plan, where
  // more boundary buffers are live than at the first step's peak.
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < plan.size();) {
      const pipeline::Action& a = plan[i];
      if (a.kind == pipeline::ActionKind::forward) {
        sim.forward(a.chunk, a.microbatch);
      } else if (a.kind == pipeline::ActionKind::backward) {
        sim.backward(a.chunk, a.microbatch);
      }
      if (!pipeline::is_p2p(a.kind)) {
        ++i;
        continue;
      }
      size_t end = i + 1;
      while (end < plan.size() && pipeline::is_p2p(plan[end].kind) && plan[end].fused) ++end;
      sim.batch(plan.data() + i, plan.data() + end);
      i = end;
    }
  }
  return sim.result();
}

// ---- per-rank memory ----

RankMemory predict_rank_memory(const Config& cfg, const Layout& layout, const mesh::ProcessGroupMesh& mesh,
                               const pipeline::StageLayout& stages, int rank) {
  constexpr int64_t kF32 = 4, kI32 = 4, kHalf = 2;  // the plugin's parameters are f32
  RankMemory m;
  m.rank = rank;
  m.coord = mesh.coord(rank);
  const TpShard tp{.rank = m.coord.tp, .size = layout.tp, .vocab_multiple = cfg.model.vocab_multiple};
  const std::vector<StageSpan> spans = stage_spans(cfg, stages, m.coord.pp);
  const std::vector<ParamEntry> entries =
      lay_out_params(select_stage_params(model_param_specs(cfg.model), spans, cfg.model.n_layer), tp);
  for (const ParamEntry& e : entries) m.param_count += e.numel;
  // ZeRO-1 (optim/zero.h): the flat buffers padded to dp shards of S elements;
  // the state covers this rank's shard, plus a staging shard for the
  // reduce-scatter when there are no dp buckets (which all-reduce in place).
  const bool zero = cfg.parallel.zero == 1;
  const int64_t shard = zero ? (m.param_count + layout.dp - 1) / layout.dp : m.param_count;
  const int64_t flat = zero ? shard * layout.dp : m.param_count;
  m.params = m.grads = flat * kF32;
  // runtime.precision bf16 / fp16: the 16-bit shadow of the values, same layout (core/param.h).
  if (cfg.runtime.precision != Precision::fp32) m.params += flat * kHalf;
  const int64_t state_buffers = (cfg.optimizer.name == OptimizerName::adamw ? 2 : 1) +
                                (zero && layout.dp > 1 && cfg.parallel.dp_bucket_mb <= 0 ? 1 : 0);
  m.optimizer = state_buffers * shard * kF32;
  // ZeRO-1 with the 16-bit shadow: the packed blocks of its fp32 broadcasts,
  // when it takes the 16-bit gather (optim/zero.h gathers_half).
  if (zero && layout.dp > 1 && cfg.runtime.precision != Precision::fp32) {
    const optim::HalfGatherPlan half =
        optim::plan_half_gather(entries, shard, layout.dp, optim::ZeroOptimizer::kInPlaceBroadcast);
    if (half.saves_bytes(flat)) m.optimizer += half.packed_offsets.back() * kF32;
  }
  const int64_t B = cfg.train.micro_batch, T = cfg.train.seq_len;
  // Token ids and targets of the step, and the step's loss sum (one double).
  m.data = 2 * int64_t(layout.microbatches) * B * T * kI32 + int64_t(sizeof(double));

  // Activations in the precision's type (16-bit under bf16/fp16), statistics f32.
  // Attention state as the device takes it (ops::attention_state_on): the CPU's as parallel.cpu_attention says;
  // on CUDA compact where cuDNN's fused attention may take the calls (ops::attention_state_shape).
  const DType act = precision_dtype(cfg.runtime.precision);
  const ops::AttentionState attention = attention_state_of(cfg);
  std::vector<ChunkActivations> chunks;
  for (const StageSpan& span : spans)
    chunks.push_back({model_activation_bytes(cfg.model, span, tp, act, B, T, attention), span.embedding, span.head});
  m.activations = simulate_activations(train_plan_of(cfg, layout, m.coord.pp), chunks,
                                       B * T * cfg.model.d_model * int64_t(dtype_size(act)));
  return m;
}

// ---- the job ----

JobPlan make_job_plan(const Config& cfg, int world_size) {
  const Layout layout = resolve_layout(cfg, world_size);
  std::vector<mesh::Axis> order;
  for (const std::string& axis : cfg.parallel.order) order.push_back(mesh::axis_from_name(axis));
  JobPlan p{.cfg = cfg,
            .world_size = world_size,
            .layout = layout,
            .mesh = mesh::ProcessGroupMesh({layout.tp, layout.pp, layout.dp}, world_size, order),
            .stages = pipeline::make_stage_layout(stage_config_of(cfg, layout)),
            .plans = {},
            .memory = {}};
  for (int s = 0; s < layout.pp; ++s) p.plans.push_back(train_plan_of(cfg, layout, s));
  for (int r = 0; r < world_size; ++r) p.memory.push_back(predict_rank_memory(cfg, layout, p.mesh, p.stages, r));
  return p;
}

// ---- the report ----

std::string format_bytes(int64_t bytes) {
  constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;
  const double b = double(bytes);
  if (b < KiB) return fmt::format("{} B", bytes);
  if (b < MiB) return fmt::format("{:.1f} KiB", b / KiB);
  if (b < GiB) return fmt::format("{:.1f} MiB", b / MiB);
  return fmt::format("{:.2f} GiB", b / GiB);
}

namespace {

std::string rank_list(const std::vector<int>& ranks) { return fmt::format("[{}]", fmt::join(ranks, ", ")); }

// "1,234,567"
std::string thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string layout_section(const JobPlan& p) {
  const Config& c = p.cfg;
  const Layout& l = p.layout;
  int64_t logical = 0;
  for (const ParamSpec& s : model_param_specs(c.model)) logical += shape_numel(s.shape);
  const TpShard shard{.size = l.tp, .vocab_multiple = c.model.vocab_multiple};
  std::string order;
  for (const std::string& a : c.parallel.order) order += (order.empty() ? "" : ", ") + a;
  std::string out = "layout\n";
  auto row = [&](const char* key, const std::string& value) { out += fmt::format("  {:<11}{}\n", key, value); };
  row("world", fmt::format("{} ranks: tp={} pp={} dp={}, order [{}] (fastest-varying first)", p.world_size, l.tp, l.pp,
                           l.dp, order));
  std::string heads = fmt::format("{} heads", c.model.n_head);
  if (c.model.n_kv_head != c.model.n_head) heads += fmt::format(" ({} key/value)", c.model.n_kv_head);
  row("model", fmt::format("{}, {} parameters, {} layers, d_model {}, d_ff {}, {}, vocabulary {} (padded to {})",
                           enum_name(c.model.arch), thousands(logical), c.model.n_layer, c.model.d_model,
                           c.model.d_ff, heads, c.model.vocab_size, padded_vocab(c.model.vocab_size, shard)));
  std::string sched(enum_name(c.parallel.schedule));
  if (c.parallel.schedule == PipeSchedule::interleaved)
    sched += fmt::format(" ({} virtual stages)", c.parallel.virtual_stages);
  row("schedule",
      fmt::format("{}, {} microbatches of {} x {} tokens per dp rank, global batch {}{}", sched, l.microbatches,
                  c.train.micro_batch, c.train.seq_len, c.train.global_batch,
                  l.pp > 1 ? fmt::format(", bubble {:.1f}% in theory",
                                         100 * pipeline::bubble_theory(l.pp, l.microbatches, p.stages.virtual_stages))
                           : ""));
  row("optimizer", fmt::format("{}, zero {}", enum_name(c.optimizer.name), c.parallel.zero));
  return out;
}

std::string rank_map_section(const JobPlan& p) {
  std::string out = "rank map\n  rank    tp  dp  pp\n";
  for (int r = 0; r < p.world_size; ++r) {
    const mesh::Coord c = p.mesh.coord(r);
    out += fmt::format("  {:<6} {:>3} {:>3} {:>3}\n", r, c.tp, c.dp, c.pp);
  }
  return out;
}

// The distinct groups of each kind, in the order of their lowest rank, wrapped.
std::string groups_section(const JobPlan& p) {
  const mesh::ProcessGroupMesh& m = p.mesh;
  using Of = std::vector<int> (*)(const mesh::ProcessGroupMesh&, const mesh::Coord&);
  const std::pair<const char*, Of> kinds[] = {
      {"tp", [](const mesh::ProcessGroupMesh& g, const mesh::Coord& c) { return g.ranks_along(mesh::Axis::tp, c); }},
      {"dp", [](const mesh::ProcessGroupMesh& g, const mesh::Coord& c) { return g.ranks_along(mesh::Axis::dp, c); }},
      {"pp", [](const mesh::ProcessGroupMesh& g, const mesh::Coord& c) { return g.ranks_along(mesh::Axis::pp, c); }},
      {"tie", [](const mesh::ProcessGroupMesh& g, const mesh::Coord& c) { return g.tie_ranks(c); }},
      {"tp_pp", [](const mesh::ProcessGroupMesh& g, const mesh::Coord& c) { return g.tp_pp_ranks(c); }}};
  std::string out = "groups (world ranks)\n";
  for (const auto& [name, of] : kinds) {
    std::set<std::vector<int>> seen;
    std::string line = fmt::format("  {:<6}", name);
    size_t width = line.size();
    for (int r = 0; r < p.world_size; ++r) {
      std::vector<int> g = of(m, m.coord(r));
      if (!seen.insert(g).second) continue;
      std::string item = rank_list(g) + "  ";
      if (width + item.size() > 100 && width > 8) {
        line += "\n        ";
        width = 8;
      }
      line += item;
      width += item.size();
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (p.layout.pp > 2) out += "  (ranks of middle stages are in no tie group: they hold no tied parameter)\n";
  return out;
}

// The stage that holds model layer `layer` (kEmbeddingLayer, a block, or n_layer for the head).
int stage_of_layer(const pipeline::StageLayout& s, int layer) {
  int chunk = 0;
  if (layer >= s.n_layer) chunk = s.num_chunks() - 1;
  for (int c = 0; layer >= 0 && layer < s.n_layer && c < s.num_chunks(); ++c)
    if (layer >= s.chunks[size_t(c)].begin && layer < s.chunks[size_t(c)].end) chunk = c;
  return chunk % s.pp;
}

std::string layer_name(int layer, int n_layer) {
  if (layer == kEmbeddingLayer) return "the embedding";
  if (layer >= n_layer) return "the LM head";
  return fmt::format("block {}", layer);
}

std::string tie_section(const JobPlan& p) {
  std::string out = "tie groups\n";
  bool any = false;
  for (const ParamSpec& s : model_param_specs(p.cfg.model)) {
    if (s.tie_group.empty()) continue;
    any = true;
    const int owner = stage_of_layer(p.stages, s.layer), replica = stage_of_layer(p.stages, s.tie_layer);
    const std::string user = layer_name(s.layer, p.stages.n_layer), tied = layer_name(s.tie_layer, p.stages.n_layer);
    if (owner == replica)
      out += fmt::format("  {}: {} is one tensor on stage {}, used by {} and {}: no communication\n", s.tie_group,
                         s.name, owner, user, tied);
    else
      out += fmt::format(
          "  {}: {} lives on stage {} ({}) with a replica on stage {} ({}); the replicas'\n"
          "       gradients are summed over each tie group (above) before dp\n",
          s.tie_group, s.name, owner, user, replica, tied);
  }
  if (!any) out += "  none\n";
  return out;
}

std::string schedule_section(const JobPlan& p) {
  const int v = p.stages.virtual_stages;
  std::string out = fmt::format(
      "schedule table ({}): F3 forward of microbatch 3, B3 backward, SF/RF send/recv forward, SB/RB send/recv "
      "backward, a+b one P2P batch{}\n",
      enum_name(p.cfg.parallel.schedule), v > 1 ? ", .c1 chunk 1" : "");
  return out + pipeline::format_schedule_table(p.plans, v);
}

std::string memory_section(const JobPlan& p) {
  std::string out = fmt::format(
      "memory per rank: predicted allocator peak of a training step (runtime.precision {}, "
      "runtime.device {}{})\n",
      enum_name(p.cfg.runtime.precision), enum_name(p.cfg.runtime.device),
      p.cfg.runtime.precision == Precision::fp32
          ? ""
          : fmt::format("; params include their {} copy, 2 B each", enum_name(p.cfg.runtime.precision)));
  out += fmt::format("  {:<5} {:>5} {:>3} {:>3} {:>14} {:>11} {:>11} {:>11} {:>12} {:>11} {:>11}\n", "rank", "stage",
                     "tp", "dp", "param count", "params", "grads", "optimizer", "activations", "data", "total");
  for (const RankMemory& m : p.memory)
    out += fmt::format("  {:<5} {:>5} {:>3} {:>3} {:>14} {:>11} {:>11} {:>11} {:>12} {:>11} {:>11}\n", m.rank,
                       m.coord.pp, m.coord.tp, m.coord.dp, thousands(m.param_count), format_bytes(m.params),
                       format_bytes(m.grads), format_bytes(m.optimizer), format_bytes(m.activations.total()),
                       format_bytes(m.data), format_bytes(m.total()));
  const ParallelConfig& par = p.cfg.parallel;
  std::string recompute;
  if (!par.recompute_layers_per_stage.empty())
    recompute += fmt::format("; blocks recomputed whole per chunk, by stage [{}]",
                             fmt::join(par.recompute_layers_per_stage, ", "));
  // The CPU's compact attention state is per block and never shared, so recompute_attention changes nothing there.
  if (attention_state_of(p.cfg) == ops::AttentionState::compact_cpu)
    recompute += "; attention kept as row statistics, its probabilities recomputed in backward";
  else if (par.recompute_attention)
    recompute += "; attention probabilities recomputed, one buffer per chunk";
  if (par.head_chunk_tokens > 0)
    recompute +=
        fmt::format("; LM head over {} tokens at a time, its gradients computed in forward", par.head_chunk_tokens);
  out += "activations at the peak, per stage (contexts kept per chunk; workspace; boundary buffers" + recompute + ")\n";
  std::set<int> done;
  for (const RankMemory& m : p.memory) {
    if (!done.insert(m.coord.pp).second) continue;
    const ActivationPeak& a = m.activations;
    std::string pool;
    for (size_t v = 0; v < a.pool.size(); ++v) pool += fmt::format("{}{}", v ? " + " : "", a.pool[v]);
    out += fmt::format("  stage {}: contexts {} ({} kept{}), workspace {}, {} boundary buffer(s) {}{}\n", m.coord.pp,
                       format_bytes(a.contexts), pool, a.pool.size() > 1 ? " by chunk" : "", format_bytes(a.workspace),
                       a.boundary_buffers, format_bytes(a.boundary),
                       a.transient ? ", scratch " + format_bytes(a.transient) : "");
  }
  return out;
}

}  // namespace

std::string format_job_plan(const JobPlan& p) {
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", layout_section(p), rank_map_section(p), groups_section(p),
                     p.stages.describe(), tie_section(p), schedule_section(p), memory_section(p));
}

}  // namespace lattice
