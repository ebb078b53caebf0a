// run_schedule under mpirun over the pp group (pp = world): a toy model whose
// model chunk g computes y = a_g x + b_g (a_g = g + 2, b_g = g + 1) on small
// integers, so every activation, loss and gradient is exact in f32. Checked
// for GPipe, 1F1B and interleaved 1F1B: the values each stage receives, the
// loss, the gradient reaching the first chunk, the allocator's peak
// activation bytes against max_in_flight, the watchdog, and the trace file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "comm/mpi_communicator.h"
#include "core/allocator.h"
#include "mesh/process_group_mesh.h"
#include "pipeline/interpreter.h"
#include "support/test_support.h"

namespace lattice::pipeline {
namespace {

const Shape kShape = {1, 2, 3};  // (B, T, C)
constexpr int64_t kN = 6;

float a_of(int g) { return float(g + 2); }
float b_of(int g) { return float(g + 1); }

// The input of model chunk g for microbatch mb, element i.
float input_of(int g, int mb, int64_t i) {
  float x = float(mb + i);
  for (int h = 0; h < g; ++h) x = a_of(h) * x + b_of(h);
  return x;
}

struct Pipeline {
  mesh::ProcessGroupMesh mesh;
  PipelineStageManager stages;
  P2P p2p;
  Pipeline(int virtual_stages, int microbatches)
      : mesh(mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)),
                                            {1, comm::make_world_communicator(60)->size(), 0})),
        stages(layout(mesh.size(mesh::Axis::pp), virtual_stages, microbatches), mesh.pp().rank(),
               mesh.pp().world_ranks()),
        p2p(mesh.pp(), stages, 60) {}
  static StageLayout layout(int pp, int v, int m) {
    StageConfig c;
    c.pp = pp;
    c.virtual_stages = v;
    c.interleaved = v > 1;
    c.microbatches = m;
    c.n_layer = pp * v;
    return make_stage_layout(c);
  }
  int pp() const { return stages.num_stages(); }
  int stage() const { return stages.stage(); }
};

// The toy stage: checks what arrives, counts calls, records the losses.
struct ToyStage {
  explicit ToyStage(const PipelineStageManager& s) : sm(s) {}
  const PipelineStageManager& sm;
  std::map<int, double> loss;  // microbatch -> loss (last chunk)
  int forwards = 0, backwards = 0;

  StageCallbacks callbacks() {
    StageCallbacks cb;
    cb.activation_shape = kShape;
    cb.forward = [this](int chunk, int mb, const Tensor& in, Tensor& out) { forward(chunk, mb, in, out); };
    cb.backward = [this](int chunk, int mb, const Tensor& dout, Tensor& din) { backward(chunk, mb, dout, din); };
    return cb;
  }

  void forward(int chunk, int mb, const Tensor& in, Tensor& out) {
    ++forwards;
    const int g = sm.model_chunk(chunk);
    ASSERT_EQ(in.defined(), g > 0);
    ASSERT_EQ(out.defined(), !sm.is_last_chunk(chunk));
    double sum = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const float x = in.defined() ? in.data<float>()[i] : input_of(0, mb, i);
      ASSERT_EQ(x, input_of(g, mb, i)) << "chunk " << g << " microbatch " << mb << " element " << i;
      const float y = a_of(g) * x + b_of(g);
      if (out.defined()) out.data<float>()[i] = y;
      sum += y;
    }
    if (!out.defined()) loss[mb] = sum;
  }

  void backward(int chunk, int mb, const Tensor& dout, Tensor& din) {
    ++backwards;
    const int g = sm.model_chunk(chunk), last = sm.layout().num_chunks() - 1;
    ASSERT_EQ(dout.defined(), g < last);
    ASSERT_EQ(din.defined(), g > 0);
    float expect = 1;  // d loss / d output of chunk g = product of a_h over the chunks after g
    for (int h = g + 1; h <= last; ++h) expect *= a_of(h);
    for (int64_t i = 0; i < kN; ++i) {
      const float dy = dout.defined() ? dout.data<float>()[i] : 1.0f;
      ASSERT_EQ(dy, expect) << "chunk " << g << " microbatch " << mb;
      if (din.defined()) din.data<float>()[i] = a_of(g) * dy;
    }
  }
};

struct Outcome {
  RunStats stats;
  int64_t peak_buffers = 0;
};

Outcome run(Pipeline& p, const Plan& plan, ToyStage& toy, bool trace = false) {
  StageCallbacks cb = toy.callbacks();
  reset_peak_memory(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).live_bytes;
  Outcome o;
  o.stats = run_schedule(plan, p.p2p, cb, {.timeout_s = 60, .trace = trace});
  o.peak_buffers = (memory_stats(Device::cpu()).peak_bytes - base) / int64_t(kN * sizeof(float));
  EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, base) << "buffers outlived the run";
  return o;
}

void check_results(const Pipeline& p, const ToyStage& toy, int m) {
  const int v = p.stages.virtual_stages();
  EXPECT_EQ(toy.forwards, m * v);
  EXPECT_EQ(toy.backwards, m * v);
  if (!p.stages.is_last_stage()) return;
  ASSERT_EQ(int(toy.loss.size()), m);
  const int last = p.stages.layout().num_chunks() - 1;
  for (int mb = 0; mb < m; ++mb) {
    double expect = 0;
    for (int64_t i = 0; i < kN; ++i) expect += a_of(last) * input_of(last, mb, i) + b_of(last);
    EXPECT_EQ(toy.loss.at(mb), expect) << "microbatch " << mb;
  }
}

// Peak buffers against the schedule's contexts: each in-flight context holds
// its input (unless model chunk 0) and output (unless the last chunk); one
// more context's receive and one backward's two gradients may be live on top.
void check_peak(const Pipeline& p, const Plan& plan, int64_t peak) {
  int held_min = 2, held_max = 0;
  for (int v = 0; v < p.stages.virtual_stages(); ++v) {
    const int held = !p.stages.is_first_chunk(v) + !p.stages.is_last_chunk(v);
    held_min = std::min(held_min, held);
    held_max = std::max(held_max, held);
  }
  const int mif = max_in_flight(plan);
  EXPECT_GE(peak, int64_t(held_min) * mif);
  EXPECT_LE(peak, int64_t(held_max) * (mif + 1) + 2);
}

TEST(RunSchedule, GPipeAndOneFOneBComputeTheSameExactValues) {
  Pipeline p(1, 8);
  const int m = 8;
  ToyStage g(p.stages), f(p.stages);
  Outcome og = run(p, plan_gpipe(p.pp(), p.stage(), m), g);
  Outcome of = run(p, plan_1f1b(p.pp(), p.stage(), m), f);
  check_results(p, g, m);
  check_results(p, f, m);
  EXPECT_EQ(g.loss, f.loss);
  SCOPED_TRACE(testing::Message() << "stage " << p.stage() << " peaks gpipe " << og.peak_buffers << " 1f1b "
                                  << of.peak_buffers);
  check_peak(p, plan_gpipe(p.pp(), p.stage(), m), og.peak_buffers);
  check_peak(p, plan_1f1b(p.pp(), p.stage(), m), of.peak_buffers);
  // 1F1B holds stages - stage contexts, GPipe all 8: measured, not assumed.
  EXPECT_LT(of.peak_buffers, og.peak_buffers);
  EXPECT_GE(og.peak_buffers, m);
  EXPECT_LE(of.peak_buffers, 2 * (p.pp() - p.stage() + 1) + 2);
  EXPECT_GT(of.stats.compute_s, 0);
}

TEST(RunSchedule, InterleavedComputesTheSameExactValues) {
  const int m = 8, v = 2;
  Pipeline p(v, m);
  ToyStage t(p.stages);
  Plan plan = plan_interleaved_1f1b(p.pp(), p.stage(), m, v);
  Outcome o = run(p, plan, t);
  check_results(p, t, m);
  check_peak(p, plan, o.peak_buffers);
}

TEST(RunSchedule, ForwardOnlyFreesEachContextAfterItsForward) {
  Pipeline p(1, 4);
  ToyStage t(p.stages);
  StageCallbacks cb = t.callbacks();
  reset_peak_memory(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).live_bytes;
  run_schedule(plan_forward_only(p.pp(), p.stage(), 4), p.p2p, cb, {.timeout_s = 60});
  EXPECT_EQ(t.forwards, 4);
  EXPECT_EQ(t.backwards, 0);
  EXPECT_LE(memory_stats(Device::cpu()).peak_bytes - base, int64_t(2 * kN * sizeof(float)));
  EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, base);
  if (p.stages.is_last_stage()) {
    EXPECT_EQ(int(t.loss.size()), 4);
  }
}

TEST(RunSchedule, TraceHasASpanPerActionAndParsesAsJson) {
  Pipeline p(1, 4);
  ToyStage t(p.stages);
  Plan plan = plan_1f1b(p.pp(), p.stage(), 4);
  Outcome o = run(p, plan, t, /*trace=*/true);
  ASSERT_EQ(o.stats.trace.size(), plan.size());
  const int rank = p.mesh.this_rank();
  const std::string path = test::make_temp_dir("pipeline_trace") + fmt::format("/rank{}.json", rank);
  write_chrome_trace(path, o.stats.trace, rank);
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  std::map<std::string, int> by_cat;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") {
      ++by_cat[e.at("cat").get<std::string>()];
      EXPECT_GE(e.at("dur").get<double>(), 0);
    }
  EXPECT_EQ(by_cat["forward"], 4);
  EXPECT_EQ(by_cat["backward"], 4);
  EXPECT_EQ(by_cat["send"], 4 * (!p.stages.is_first_stage() + !p.stages.is_last_stage()));
  EXPECT_EQ(by_cat["recv"], 4 * (!p.stages.is_first_stage() + !p.stages.is_last_stage()));
  EXPECT_GT(by_cat["send"], 0);
}

// Kept last: the dropped transfer leaves the pp communicator of this mesh unusable.
TEST(RunSchedule, WatchdogNamesTheBlockedActionWhenAStageSkipsASend) {
  Pipeline p(1, 4);
  ToyStage t(p.stages);
  Plan plan = plan_1f1b(p.pp(), p.stage(), 4);
  if (p.stage() == 0) {  // the test hook: stage 0 never sends microbatch 1's output
    auto it = std::find_if(plan.begin(), plan.end(),
                           [](const Action& a) { return a.kind == ActionKind::send_forward && a.microbatch == 1; });
    ASSERT_NE(it, plan.end());
    if (it + 1 != plan.end()) (it + 1)->fused = false;
    plan.erase(it);
  }
  StageCallbacks cb = t.callbacks();
  std::string message;
  try {
    run_schedule(plan, p.p2p, cb, {.timeout_s = 1.0});
  } catch (const Error& e) {
    message = e.message();
  }
  EXPECT_NE(message.find(fmt::format("pipeline stage {} (world rank {}) is blocked at plan action", p.stage(),
                                     p.mesh.this_rank())),
            std::string::npos)
      << message;
  if (p.stage() == 1) {
    EXPECT_NE(message.find(fmt::format("recv_forward microbatch 1 chunk 0 from world rank {}", p.stages.prev_rank())),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("timed out after 1 s"), std::string::npos) << message;
  }
  p.mesh.world().barrier()->wait();
}

}  // namespace
}  // namespace lattice::pipeline
