// lattice plan as a library: the report's sections for several layouts, the
// same one-line errors as train, the activation simulation against what the
// schedules hold, the model's activation byte counts against the allocator,
// and the whole prediction against the allocator's peak of a real one-rank
// plugin step (the multi-rank and GPT-2 124M checks: test_plan_memory.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "booster/hybrid_parallel_plugin.h"
#include "booster/plan.h"
#include "comm/self_communicator.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/rng.h"
#include "data/shard.h"
#include "models/registry.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

Config tiny(const std::vector<std::string>& overrides = {}, const std::string& glob = "unused_*.bin") {
  return parse_config(R"(
model: { arch: gpt2, n_layer: 4, n_head: 4, d_model: 32, vocab_size: 300, max_seq_len: 64 }
train: { steps: 5, global_batch: 16, micro_batch: 4, seq_len: 64 }
optimizer: { lr: 0.001 }
data: { train: ")" + glob +
                          R"(", tokenizer: bytes }
runtime: { threads: 1 }
)",
                      "tiny.yaml", overrides);
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::string report(const Config& cfg, int world) { return format_job_plan(make_job_plan(cfg, world)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Plan, ReportHasEverySectionForSeveralLayouts) {
  struct Case {
    std::vector<std::string> overrides;
    int world;
  };
  for (const Case& c : {Case{{}, 1}, Case{{"parallel.tp=2", "parallel.pp=2"}, 8},
                        Case{{"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}, 2},
                        Case{{"parallel.pp=4", "parallel.schedule=gpipe", "parallel.zero=1"}, 8}}) {
    SCOPED_TRACE(testing::PrintToString(c.overrides));
    const Config cfg = tiny(c.overrides);
    const JobPlan p = make_job_plan(cfg, c.world);
    const std::string text = format_job_plan(p);
    for (const char* section : {"layout\n", "rank map\n", "groups (world ranks)\n", "layer-to-stage map:",
                                "tie groups\n", "schedule table (", "memory per rank:", "activations at the peak"})
      EXPECT_TRUE(has(text, section)) << section << " missing in\n" << text;
    const Layout l = resolve_layout(cfg, c.world);
    EXPECT_TRUE(has(text, fmt::format("{} ranks: tp={} pp={} dp={}", c.world, l.tp, l.pp, l.dp))) << text;
    EXPECT_TRUE(has(text, fmt::format("{} microbatches of 4 x 64 tokens", l.microbatches))) << text;
    EXPECT_TRUE(has(text, p.stages.describe()));
    EXPECT_TRUE(has(text, pipeline::format_schedule_table(p.plans, p.stages.virtual_stages)));
    ASSERT_EQ(int(p.memory.size()), c.world);
    for (int r = 0; r < c.world; ++r) {  // one rank-map row and one memory row per rank
      const mesh::Coord co = p.mesh.coord(r);
      EXPECT_TRUE(has(text, fmt::format("\n  {:<6} {:>3} {:>3} {:>3}\n", r, co.tp, co.dp, co.pp))) << r;
      EXPECT_TRUE(has(text, fmt::format("\n  {:<5} {:>5} {:>3} {:>3} ", r, co.pp, co.tp, co.dp))) << r;
      EXPECT_GT(p.memory[size_t(r)].activations.total(), 0);
      EXPECT_EQ(p.memory[size_t(r)].coord, co);
    }
  }
}

// The activation header says which recomputation the prediction assumes, and
// selective recomputation shrinks the prediction.
TEST(Plan, ReportNamesTheRecomputation) {
  const std::string plain = report(tiny({"parallel.pp=2", "parallel.cpu_attention=full"}), 2);
  EXPECT_FALSE(has(plain, "recomputed")) << plain;
  const Config cfg = tiny({"parallel.pp=2", "parallel.recompute_layers_per_stage=[2,1]",
                           "parallel.recompute_attention=true", "parallel.cpu_attention=full"});
  const std::string text = report(cfg, 2);
  EXPECT_TRUE(has(text,
                  "; blocks recomputed whole per chunk, by stage [2, 1]; attention probabilities recomputed, "
                  "one buffer per chunk)\n"))
      << text;
  const JobPlan with =
      make_job_plan(tiny({"parallel.pp=2", "parallel.recompute_attention=true", "parallel.cpu_attention=full"}), 2);
  const JobPlan without = make_job_plan(tiny({"parallel.pp=2", "parallel.cpu_attention=full"}), 2);
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(with.memory[size_t(r)].activations.total(), without.memory[size_t(r)].activations.total()) << r;
  // The CPU's compact state (the default) says so, with or without recompute_attention, which changes nothing.
  for (const char* shared : {"parallel.recompute_attention=false", "parallel.recompute_attention=true"}) {
    const std::string compact = report(tiny({"parallel.pp=2", shared}), 2);
    EXPECT_TRUE(has(compact, "; attention kept as row statistics, its probabilities recomputed in backward)\n"))
        << compact;
    const JobPlan c = make_job_plan(tiny({"parallel.pp=2", shared}), 2);
    for (int r = 0; r < 2; ++r) {
      EXPECT_LT(c.memory[size_t(r)].activations.total(), with.memory[size_t(r)].activations.total()) << r;
      EXPECT_EQ(c.memory[size_t(r)].activations.total(),
                make_job_plan(tiny({"parallel.pp=2"}), 2).memory[size_t(r)].activations.total());
    }
  }
}

// parallel.head_chunk_tokens: the header says so; the last stage, which holds
// the head, predicts less at its peak (under GPipe each of its 4 kept
// microbatches drops its 256 rows of logits for the head input's gradient,
// the workspace gains one chunk's 64 rows of logits); the first stage is
// unchanged.
TEST(Plan, ReportNamesTheHeadChunks) {
  const std::vector<std::string> gpipe = {"parallel.pp=2", "parallel.schedule=gpipe"};
  std::vector<std::string> chunked = gpipe;
  chunked.push_back("parallel.head_chunk_tokens=64");
  EXPECT_FALSE(has(report(tiny(gpipe), 2), "LM head over")) << report(tiny(gpipe), 2);
  const std::string text = report(tiny(chunked), 2);
  EXPECT_TRUE(has(text, "; LM head over 64 tokens at a time, its gradients computed in forward)\n")) << text;
  const JobPlan with = make_job_plan(tiny(chunked), 2), without = make_job_plan(tiny(gpipe), 2);
  EXPECT_EQ(with.memory[0].activations.total(), without.memory[0].activations.total());
  const int64_t saved = without.memory[1].activations.total() - with.memory[1].activations.total();
  // Per fp32 logit column (the padded vocabulary, at least 300): 4 * 256
  // rows less in the contexts, 64 more in the workspace; each context gains
  // the head input's gradient, 256 rows of d_model 32.
  const int64_t columns = (saved / 4 + 4 * 256 * 32) / (4 * 256 - 64);
  EXPECT_GE(columns, 300) << saved;
  EXPECT_EQ(saved, (columns * (4 * 256 - 64) - 4 * 256 * 32) * 4) << saved;
}

TEST(Plan, GroupsAreTheMeshGroupsAsWorldRanks) {
  // tp=2 pp=2 dp=2, order tp, dp, pp: rank = tp + 2 dp + 4 pp.
  const std::string text = report(tiny({"parallel.tp=2", "parallel.pp=2"}), 8);
  EXPECT_TRUE(has(text, "  tp    [0, 1]  [2, 3]  [4, 5]  [6, 7]\n")) << text;
  EXPECT_TRUE(has(text, "  dp    [0, 2]  [1, 3]  [4, 6]  [5, 7]\n")) << text;
  EXPECT_TRUE(has(text, "  pp    [0, 4]  [1, 5]  [2, 6]  [3, 7]\n")) << text;
  EXPECT_TRUE(has(text, "  tie   [0, 4]  [1, 5]  [2, 6]  [3, 7]\n")) << text;
  EXPECT_TRUE(has(text, "  tp_pp [0, 1, 4, 5]  [2, 3, 6, 7]\n")) << text;
  EXPECT_TRUE(has(text, "wte.weight lives on stage 0 (the embedding) with a replica on stage 1 (the LM head)")) << text;
  // Another axis order moves the ranks.
  const std::string pp_first = report(tiny({"parallel.pp=2", "parallel.order=[pp,tp,dp]"}), 2);
  EXPECT_TRUE(has(pp_first, "  pp    [0, 1]\n")) << pp_first;
  // One stage: the tied embedding is one tensor.
  EXPECT_TRUE(has(report(tiny(), 1), "is one tensor on stage 0")) << report(tiny(), 1);
  EXPECT_TRUE(has(report(tiny({"model.tie_embeddings=false"}), 1), "tie groups\n  none\n"));
}

TEST(Plan, FailsWithTheLayoutErrorsOfTrain) {
  // The errors the plugin's checks give for the same config (resolve_layout,
  // mesh, stage split), one line each. (Config-level errors come from
  // load_config before either runs; the CLI test compares plan with train.)
  auto plan_error = [](const Config& cfg, int world) { return error_of([&] { make_job_plan(cfg, world); }); };
  auto layout_error = [](const Config& cfg, int world) { return error_of([&] { resolve_layout(cfg, world); }); };
  const Config dp3 = tiny({"parallel.tp=2", "parallel.dp=3", "train.global_batch=24"});
  EXPECT_EQ(plan_error(dp3, 8), layout_error(dp3, 8));
  EXPECT_TRUE(has(plan_error(dp3, 8), "tp (2) * pp (1) * dp (3) = 6, but the job has 8 ranks"));
  const Config gb = tiny({"parallel.microbatches=3"});
  EXPECT_EQ(plan_error(gb, 1), layout_error(gb, 1));
  EXPECT_TRUE(has(plan_error(gb, 1), "16 != micro_batch (4) * microbatches (3) * dp (1) = 12"));
  EXPECT_TRUE(has(plan_error(tiny({"parallel.tp=2"}), 3), "tp (2)"));
  // (load_config refuses this uneven interleaved split itself; a config changed
  // after loading reaches the stage split's own check.)
  Config uneven =
      tiny({"parallel.pp=2", "model.n_layer=8", "parallel.schedule=interleaved", "parallel.virtual_stages=2"});
  uneven.model.n_layer = 6;
  const std::string split = plan_error(uneven, 2);
  EXPECT_TRUE(has(split, "n_layer")) << split;
  EXPECT_EQ(split, error_of([&] { pipeline::make_stage_layout(stage_config_of(uneven, resolve_layout(uneven, 2))); }));
  for (const std::string& e : {plan_error(dp3, 8), split}) EXPECT_FALSE(has(e, "\n")) << e;
}

TEST(Plan, SimulationHoldsTheContextsTheScheduleHolds) {
  // 100 bytes a context, 7 of workspace, a boundary buffer of 1000 bytes.
  const int M = 6;
  for (int pp : {2, 4}) {
    for (int stage = 0; stage < pp; ++stage) {
      const std::vector<ChunkActivations> chunk{{{100, 7, 0}, stage == 0, stage == pp - 1}};
      const pipeline::Plan f1b = pipeline::plan_1f1b(pp, stage, M), gpipe = pipeline::plan_gpipe(pp, stage, M);
      ActivationPeak a = simulate_activations(f1b, chunk, 1000), b = simulate_activations(gpipe, chunk, 1000);
      SCOPED_TRACE(testing::Message() << "pp " << pp << " stage " << stage);
      EXPECT_EQ(a.pool, std::vector<int>{pp - stage});
      EXPECT_EQ(a.pool[0], pipeline::max_in_flight(f1b));
      EXPECT_EQ(b.pool, std::vector<int>{M});
      EXPECT_EQ(a.contexts, 100 * (pp - stage));
      EXPECT_EQ(b.contexts, 100 * M);
      EXPECT_EQ(a.workspace, 7);
      EXPECT_EQ(a.boundary, 1000 * int64_t(a.boundary_buffers));
      // GPipe keeps every microbatch's boundary activations: the first stage
      // its outputs, the last its inputs (pinned by the contexts), a middle
      // stage both; plus the first output gradient received (first, middle)
      // and the first input gradient computed (middle, last).
      const bool middle = stage > 0 && stage < pp - 1;
      EXPECT_EQ(b.boundary_buffers, middle ? 2 * M + 2 : M + 1);
      // 1F1B's last stage: while one microbatch's input gradient is sent, the
      // next input arrives; backward dropped the context's reference to the
      // sent one's input, so these two are all there is.
      if (stage == pp - 1) {
        EXPECT_EQ(a.boundary_buffers, 2);
      }
    }
  }
  // One stage: nothing crosses a boundary, one context, the loss scratch on top.
  const std::vector<ChunkActivations> whole{{{100, 7, 3}, true, true}};
  ActivationPeak one = simulate_activations(pipeline::plan_1f1b(1, 0, M), whole, 1000);
  EXPECT_EQ(one.total(), 100 + 7 + 3);
  EXPECT_EQ(one.boundary_buffers, 0);
  // Interleaved: one pool per chunk, together the schedule's maximum in flight.
  const pipeline::Plan inter = pipeline::plan_interleaved_1f1b(2, 0, 4, 2);
  ActivationPeak i = simulate_activations(inter, {{{100, 7, 0}, true, false}, {{100, 7, 0}, false, false}}, 1000);
  ASSERT_EQ(i.pool.size(), 2u);
  EXPECT_GE(i.pool[0] + i.pool[1], pipeline::max_in_flight(inter));
  EXPECT_EQ(i.workspace, 14);
}

// On CUDA with 16-bit matmuls each kept layer's att, and the backward
// scratch (twice with recompute: the recomputed block's att too), is the
// compact attention state of ops::attention_state_shape, over 4 times smaller
// here; nothing else changes. BERT keeps (B, NH, T, T): its key mask takes
// the plain path. The job plan counts the same.
TEST(Plan, AttentionStateIsCompactOnCudaWith16BitMatmuls) {
  const Config cfg = tiny();
  const int64_t B = 2, T = 48, NH = cfg.model.n_head, HS = cfg.model.d_model / NH;
  const TpShard shard{.vocab_multiple = cfg.model.vocab_multiple};
  const Shape compact =
      ops::attention_state_shape({.B = B, .T = T, .NH = NH, .HS = HS}, DType::bf16, ops::AttentionState::fused_cuda);
  ASSERT_EQ(compact.size(), 1u);
  const int64_t saved = (B * NH * T * T - compact[0]) * 2;  // bytes per attention state, bf16
  EXPECT_GT(B * NH * T * T, 4 * compact[0]);
  for (StageSpan span : {StageSpan{}, StageSpan{0, 4, true, true, 1}, StageSpan{1, 3, false, false, 0}}) {
    SCOPED_TRACE(testing::Message() << "span [" << span.first_layer << ", " << span.end_layer << ") recompute "
                                    << span.recompute);
    const ActivationBytes plain =
        model_activation_bytes(cfg.model, span, shard, DType::bf16, B, T, ops::AttentionState::full_cuda);
    const ActivationBytes fused =
        model_activation_bytes(cfg.model, span, shard, DType::bf16, B, T, ops::AttentionState::fused_cuda);
    const int64_t layers = (span.end_layer < 0 ? cfg.model.n_layer : span.end_layer) - span.first_layer;
    EXPECT_EQ(plain.context - fused.context, (layers - span.recompute) * saved);
    EXPECT_EQ(plain.workspace - fused.workspace, (span.recompute > 0 ? 2 : 1) * saved);
    EXPECT_EQ(plain.transient, fused.transient);
  }
  const Config bert = tiny({"model.arch=bert"});
  EXPECT_EQ(model_activation_bytes(bert.model, {}, shard, DType::bf16, B, T, ops::AttentionState::fused_cuda).context,
            model_activation_bytes(bert.model, {}, shard, DType::bf16, B, T, ops::AttentionState::full_cuda).context);

  const int64_t on_cpu =
      make_job_plan(tiny({"runtime.precision=bf16", "parallel.cpu_attention=full"}), 1).memory[0].activations.total();
  const int64_t on_cuda =
      make_job_plan(tiny({"runtime.precision=bf16", "runtime.device=cuda"}), 1).memory[0].activations.total();
  // Every layer of every context in flight, at least, less the compact scratch CUDA keeps and the CPU does not.
  EXPECT_GT(on_cpu - on_cuda, int64_t(cfg.model.n_layer) * saved - compact[0] * 2);
  // fp32: (B, NH, T, T) on both, but the CPU allocates no backward scratch (one byte: the allocator's least).
  const Config fp32 = tiny();
  const int64_t full_f32 = fp32.train.micro_batch * NH * fp32.train.seq_len * fp32.train.seq_len * 4;
  EXPECT_EQ(make_job_plan(tiny({"runtime.device=cuda"}), 1).memory[0].activations.total() -
                make_job_plan(tiny({"parallel.cpu_attention=full"}), 1).memory[0].activations.total(),
            full_f32 - 1);
}

// On a GPU under bf16 the model allocates what the plan counts, compact
// attention state included (GPT-2 without dropout: the fused path's rules
// take its calls), byte for byte. Skips without a device.
TEST(Plan, CudaContextHoldsTheCompactAttentionStateThePlanCounts) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Config cfg = tiny({"model.dropout=0"});
  const int64_t B = 2, T = 48;
  comm::Group tp = comm::self_group("tp");
  const TpShard shard{.vocab_multiple = cfg.model.vocab_multiple};
  FlatParams params(select_stage_params(model_param_specs(cfg.model), {StageSpan{}}, cfg.model.n_layer), DType::f32,
                    Device::cuda(0), shard);
  params.init(1);
  const test::GpuMatmuls bf16(DType::bf16);
  auto model = build_model(cfg.model, params, tp, {});
  model->set_activation_dtype(DType::bf16);
  const ActivationBytes want =
      model_activation_bytes(cfg.model, {}, shard, DType::bf16, B, T, ops::AttentionState::fused_cuda);
  EXPECT_LT(want.context,
            model_activation_bytes(cfg.model, {}, shard, DType::bf16, B, T, ops::AttentionState::full_cuda).context);
  const int64_t live = memory_stats(Device::cuda(0)).live_bytes;
  auto ctx = model->make_context(B, T);
  EXPECT_EQ(ctx->bytes(), want.context);
  EXPECT_EQ(memory_stats(Device::cuda(0)).live_bytes - live, want.context);
}

// The model's byte counts are the allocator's: one context, the workspace
// plus the transient of the first forward, and the backward's transient.
TEST(Plan, ActivationBytesAreWhatTheModelAllocates) {
  const Config cfg = tiny();
  const int64_t B = 2, T = 48, C = cfg.model.d_model;
  comm::Group tp = comm::self_group("tp");
  const TpShard shard{.vocab_multiple = cfg.model.vocab_multiple};
  for (StageSpan span : {StageSpan{}, StageSpan{0, 2, true, false, 0}, StageSpan{2, 4, false, true, 1},
                         StageSpan{1, 3, false, false, 2}}) {
    SCOPED_TRACE(testing::Message() << "span [" << span.first_layer << ", " << span.end_layer << ") recompute "
                                    << span.recompute);
    FlatParams params(select_stage_params(model_param_specs(cfg.model), {span}, cfg.model.n_layer), DType::f32,
                      Device::cpu(), shard);
    params.init(1);
    auto model = build_model(cfg.model, params, tp, span);
    const ActivationBytes want =
        model_activation_bytes(cfg.model, span, shard, DType::f32, B, T, ops::attention_state_on(Device::cpu()));
    EXPECT_EQ(model->activation_bytes(B, T).context, want.context);
    Tensor ids = Tensor::zeros({B, T}, DType::i32), targets = Tensor::zeros({B, T}, DType::i32);
    Tensor act = test::random_tensor({B, T, C}, DType::f32, 3), out = Tensor::zeros({B, T, C}, DType::f32);
    Tensor dout = test::random_tensor({B, T, C}, DType::f32, 4), din = Tensor::zeros({B, T, C}, DType::f32);

    int64_t live = memory_stats(Device::cpu()).live_bytes;
    auto ctx = model->make_context(B, T);
    EXPECT_EQ(memory_stats(Device::cpu()).live_bytes - live, want.context);
    EXPECT_EQ(ctx->bytes(), want.context);

    live = memory_stats(Device::cpu()).live_bytes;
    reset_peak_memory(Device::cpu());
    model->forward(*ctx, span.embedding ? ids : act, targets, StepCoords{1, 1, 0, true}, span.head ? nullptr : &out);
    EXPECT_EQ(memory_stats(Device::cpu()).live_bytes - live, want.workspace);
    EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes - live, want.workspace + want.transient);
    live = memory_stats(Device::cpu()).live_bytes;
    reset_peak_memory(Device::cpu());
    model->backward(*ctx, 1e-3f, span.head ? nullptr : &dout, span.embedding ? nullptr : &din);
    EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, live);
    EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes - live, want.backward_transient);
  }
}

// The prediction against a real one-rank plugin: allocator peak of one
// training step above what was live before the plugin, within 10%.
TEST(Plan, PredictsTheMeasuredPeakOfOneRank) {
  std::string dir = test::make_temp_dir("plan");
  std::vector<int32_t> tokens(20000);
  RngKey k{.seed = 5, .purpose = RngPurpose::data};
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(rng_uniform(k, 0, i) * 256);
  data::write_shard(dir + "/p_train_000000.bin", tokens);
  const std::string glob = dir + "/p_train_*.bin";
  for (const std::vector<std::string>& o :
       std::vector<std::vector<std::string>>{{},
                                             {"parallel.schedule=gpipe"},
                                             {"parallel.recompute_layers_per_stage=[2]", "optimizer.name=sgd"},
                                             {"train.micro_batch=16", "model.tie_embeddings=false"}}) {
    SCOPED_TRACE(testing::PrintToString(o));
    const Config cfg = tiny(o, glob);
    const RankMemory want = make_job_plan(cfg, 1).memory.at(0);
    auto mesh = mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});
    const int64_t base = memory_stats(Device::cpu()).live_bytes;
    reset_peak_memory(Device::cpu());
    {
      HybridParallelPlugin plugin(cfg, mesh);
      EXPECT_EQ(plugin.params().numel(), want.param_count);
      plugin.execute_pipeline(1);
      plugin.optimizer_step(1, 1e-3);
    }
    const int64_t measured = memory_stats(Device::cpu()).peak_bytes - base;
    const int64_t fixed = want.params + want.grads + want.optimizer + want.data;
    std::printf("  predicted %lld B (activations %lld), measured %lld B (activations %lld)\n", (long long)want.total(),
                (long long)want.activations.total(), (long long)measured, (long long)(measured - fixed));
    EXPECT_NEAR(double(want.total()), double(measured), 0.10 * double(measured));
    // The activations alone, too: at these sizes they are a large share of the total.
    EXPECT_NEAR(double(want.activations.total()), double(measured - fixed), 0.10 * double(measured - fixed));
  }
}
