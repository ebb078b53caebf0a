// The layout-invariance contract (ARCHITECTURE.md §2): inside one mpirun of W
// ranks, every (tp, pp, dp) layout with tp * pp * dp = W, with each pipeline
// schedule (GPipe, 1F1B, interleaved) and even and uneven stage splits, trains
// a tiny GPT-2 (dropout on, tied embeddings, a vocabulary that tp does not
// divide) for 20 steps and must match the single-rank run that each rank also
// computes itself: the loss at every step within relative 1e-5, step 1 within
// 1e-6, and every gradient tensor of step 1 within 1e-5 in relative L2 norm
// against the reference's slice for this rank. The two replicas of the tied
// embedding (first and last stage) stay bit-identical. Every layout with
// dp > 1 runs again with ZeRO-1 (parallel.zero = 1), whose step-1 gradients
// are the dp shards gathered back together. The dp all-reduce runs in small
// buckets that must all start during backward, and once more unbucketed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "booster/hybrid_parallel_plugin.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/rng.h"
#include "data/shard.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

constexpr int kSteps = 20;

std::string make_data() {
  std::string dir = test::make_temp_dir("layout");
  std::vector<int32_t> tokens;
  RngKey k{.seed = 5, .purpose = RngPurpose::data};
  // Some structure (a repeating phrase with noise) so the loss moves.
  for (int i = 0; i < 20000; ++i)
    tokens.push_back(rng_uniform(k, 0, uint64_t(i)) < 0.3f ? int32_t(rng_uniform(k, 1, uint64_t(i)) * 250)
                                                           : int32_t((i * 7) % 50));
  data::write_shard(dir + "/t_train_000000.bin", tokens);
  return dir + "/t_train_*.bin";
}

struct LayoutCase {
  int tp, pp, dp;
  std::string schedule = "1f1b", layers = "uniform";
  int virtual_stages = 1;
  std::string recompute = "[]";
  int zero = 0;
  double bucket_mb = 0.01;  // small buckets: several per layer start during backward
};

// The models under test: GPT-2 runs every layout; each other registered
// model runs (2,1,1), (1,2,1), (2,2,1), (4,1,1) and (2,2,2) with 1F1B. The
// data's token ids stay below 250 (under every tokenizer's special ids).
struct ModelCase {
  std::string name, yaml;  // yaml: the `model:` mapping
  bool every_layout = false;
};
const std::vector<ModelCase>& models() {
  static const std::vector<ModelCase> m = {
      {"gpt2",
       "{ arch: gpt2, n_layer: 8, n_head: 4, d_model: 32, vocab_size: 299, max_seq_len: 16, dropout: 0.1, "
       "vocab_multiple: 8 }",
       true},
      // BERT: bidirectional attention, masked-LM batches (prepare_batch), the decoder tied across pp.
      {"bert",
       "{ arch: bert, n_layer: 4, n_head: 4, d_model: 32, d_ff: 48, vocab_size: 299, max_seq_len: 16, "
       "dropout: 0.1, vocab_multiple: 8 }"},
      // LLaMA: k/v heads 1 and 2 are replicated at tp 4 (and 1 at tp 2); n_head splits.
      {"llama-kv1",
       "{ arch: llama, n_layer: 4, n_head: 4, n_kv_head: 1, d_model: 32, d_ff: 64, vocab_size: 299, "
       "max_seq_len: 16, dropout: 0.1, tie_embeddings: false, vocab_multiple: 8 }"},
      {"llama-kv2",
       "{ arch: llama, n_layer: 4, n_head: 4, n_kv_head: 2, d_model: 32, d_ff: 64, vocab_size: 299, "
       "max_seq_len: 16, tie_embeddings: true, rope_theta: 500, vocab_multiple: 8 }"},
      {"llama-kv4",
       "{ arch: llama, n_layer: 4, n_head: 4, d_model: 32, d_ff: 64, vocab_size: 299, "
       "max_seq_len: 16, tie_embeddings: false, vocab_multiple: 8 }"},
      // GPT-NeoX (docs/adding-a-model.md): parallel residual, rotary, tied head across pp.
      {"neox",
       "{ arch: neox, n_layer: 4, n_head: 4, d_model: 32, d_ff: 64, vocab_size: 299, max_seq_len: 16, "
       "dropout: 0.1, tie_embeddings: true, vocab_multiple: 8 }"},
  };
  return m;
}

Config config(const std::string& glob, const LayoutCase& l, const ModelCase& model) {
  return parse_config(R"(
model: )" + model.yaml + R"(
train: { steps: 20, global_batch: 8, micro_batch: 2, seq_len: 16 }
optimizer: { lr: 0.003, schedule: { warmup_steps: 3 } }
data: { train: ")" + glob +
                          R"(", tokenizer: bytes }
runtime: { seed: 42, threads: 1 }
)",
                      "layout-test",
                      {"parallel.tp=" + std::to_string(l.tp), "parallel.pp=" + std::to_string(l.pp),
                       "parallel.dp=" + std::to_string(l.dp), "parallel.schedule=" + l.schedule,
                       "parallel.layers_per_stage=" + l.layers,
                       "parallel.virtual_stages=" + std::to_string(l.virtual_stages),
                       "parallel.recompute_layers_per_stage=" + l.recompute, "parallel.zero=" + std::to_string(l.zero),
                       "parallel.dp_bucket_mb=" + std::to_string(l.bucket_mb)});
}

struct Trace {
  std::vector<double> loss, norm;
  FlatParams grads_step1;  // a copy of the parameters' layout with step 1's gradients
};

// Under ZeRO-1 a dp rank holds the summed gradients of its shard only: the
// shards of the padded buffer gathered over dp, as the (numel) gradients.
Tensor gather_zero_grads(FlatParams& p, comm::Group& dp) {
  const int64_t shard = p.padded_numel() / dp.size();
  Tensor all = Tensor::empty({p.padded_numel()}, p.dtype());
  dp.all_gather(all, p.padded_grads().view(dp.rank() * shard, {shard}))->wait();
  return all.view(0, {p.numel()});
}

Trace train(const Config& cfg, mesh::ProcessGroupMesh& mesh) {
  HybridParallelPlugin plugin(cfg, mesh);
  Trace t;
  for (int64_t step = 1; step <= kSteps; ++step) {
    StepStats s = plugin.execute_pipeline(step);
    const bool bucketed = cfg.parallel.dp_bucket_mb > 0 && cfg.parallel.zero == 0 && mesh.dp().size() > 1;
    EXPECT_EQ(plugin.grad_buckets() != nullptr, bucketed);
    if (bucketed) {  // every bucket started during backward, none waited for the end
      EXPECT_GT(plugin.grad_buckets()->buckets().size(), 1u);
      EXPECT_EQ(plugin.grad_buckets()->started_early(), int64_t(plugin.grad_buckets()->buckets().size()));
    }
    if (step == 1) {
      std::vector<ParamSpec> specs;
      for (const ParamEntry& e : plugin.params().entries()) specs.push_back(e.spec);
      t.grads_step1 = FlatParams(specs, DType::f32, Device::cpu(), plugin.params().shard());
      t.grads_step1.grads().copy_from(plugin.params().grads());
      if (cfg.parallel.zero == 1) t.grads_step1.grads().copy_from(gather_zero_grads(plugin.params(), mesh.dp()));
    }
    UpdateStats u = plugin.optimizer_step(step, 0.003 * std::min(1.0, double(step) / 3));
    t.loss.push_back(s.loss_sum / double(s.valid_tokens));
    t.norm.push_back(u.grad_norm);
  }
  // A tied parameter's replicas (first and last stage) are bit-identical.
  for (const ParamEntry& e : plugin.params().entries()) {
    if (e.spec.tie_group.empty() || mesh.tie().size() == 1) continue;
    Tensor mine = plugin.params().value(e).clone(), lo = mine.clone(), hi = mine.clone();
    mesh.tie().all_reduce(lo, {.op = comm::ReduceOp::min})->wait();
    mesh.tie().all_reduce(hi, {.op = comm::ReduceOp::max})->wait();
    EXPECT_EQ(std::memcmp(lo.raw(), mine.raw(), mine.nbytes()), 0) << e.spec.name << ": tied replicas differ";
    EXPECT_EQ(std::memcmp(hi.raw(), mine.raw(), mine.nbytes()), 0) << e.spec.name << ": tied replicas differ";
  }
  return t;
}

// Relative L2 distance between this rank's gradient of `e` and the slice of the reference's.
double relative_l2(const FlatParams& got, const ParamEntry& e, const FlatParams& ref) {
  const float* g = got.grad(e).data<float>();
  const float* r = ref.grad(e.spec.name).data<float>();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < e.numel; ++i) {
    int64_t logical = local_to_logical(e.spec, got.shard(), i);
    double want = logical < 0 ? 0.0 : r[logical];
    diff += (g[i] - want) * (g[i] - want);
    norm += want * want;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

}  // namespace

// The layouts every other model runs (1F1B, no ZeRO).
std::vector<LayoutCase> model_layouts(int world) {
  if (world == 2) return {{2, 1, 1}, {1, 2, 1}};
  if (world == 4) return {{2, 2, 1}, {4, 1, 1}};
  if (world == 8) return {{2, 2, 2}};
  return {};
}

// Every layout of the world: all (tp, pp, dp) factorisations with 1F1B, plus
// GPipe, interleaved and uneven splits where pp > 1; each again with ZeRO-1
// and with one unbucketed all-reduce where dp > 1. Eight ranks (on a 2-core
// CI machine) run the full 3D layout (2, 2, 2) only.
std::vector<LayoutCase> layouts(int world) {
  std::vector<LayoutCase> out;
  if (world == 8) {
    for (int zero : {0, 1}) {
      out.push_back({.tp = 2, .pp = 2, .dp = 2, .zero = zero});
      out.push_back({.tp = 2, .pp = 2, .dp = 2, .schedule = "interleaved", .virtual_stages = 2, .zero = zero});
    }
    out.push_back({.tp = 2, .pp = 2, .dp = 2, .bucket_mb = 0});
    return out;
  }
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; pp <= world / tp; ++pp) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      if (tp * pp * dp == 1) continue;
      out.push_back({tp, pp, dp});
      if (pp == 1) continue;
      out.push_back({tp, pp, dp, "gpipe"});
      out.push_back({tp, pp, dp, "interleaved", "uniform", 2});
      if (pp == 2) out.push_back({tp, pp, dp, "1f1b", "[3,5]"});
      if (pp == 2) out.push_back({tp, pp, dp, "1f1b", "uniform", 1, "[2,4]"});
      if (pp == 4) out.push_back({tp, pp, dp, "1f1b", "[1,3,3,1]"});
    }
  const size_t plain = out.size();
  for (size_t i = 0; i < plain; ++i) {
    if (out[i].dp == 1) continue;
    LayoutCase z = out[i];
    z.zero = 1;
    out.push_back(z);
    if (out[i].schedule != "1f1b" || out[i].layers != "uniform" || out[i].recompute != "[]") continue;
    LayoutCase whole = out[i];
    whole.bucket_mb = 0;
    out.push_back(whole);
  }
  return out;
}

void check_layouts(const std::string& glob, const ModelCase& model, const std::vector<LayoutCase>& cases,
                   int world_rank) {
  auto ref_mesh = mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});
  Trace ref = train(config(glob, {1, 1, 1}, model), ref_mesh);
  EXPECT_LT(ref.loss.back(), ref.loss.front() - 0.5) << "the reference run does not learn";
  for (const LayoutCase& l : cases) {
    SCOPED_TRACE(testing::Message() << "tp=" << l.tp << " pp=" << l.pp << " dp=" << l.dp << " " << l.schedule
                                    << " layers " << l.layers << " virtual_stages " << l.virtual_stages << " recompute "
                                    << l.recompute << " zero " << l.zero << " dp_bucket_mb " << l.bucket_mb);
    auto m = mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {l.tp, l.pp, l.dp});
    Trace got = train(config(glob, l, model), m);
    EXPECT_NEAR(got.loss[0], ref.loss[0], 1e-6 * ref.loss[0]);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got.loss[size_t(s)], ref.loss[size_t(s)], 1e-5 * ref.loss[size_t(s)]) << "step " << s + 1;
      EXPECT_NEAR(got.norm[size_t(s)], ref.norm[size_t(s)], 1e-4 * ref.norm[size_t(s)]) << "step " << s + 1;
    }
    for (const ParamEntry& e : got.grads_step1.entries())
      EXPECT_LT(relative_l2(got.grads_step1, e, ref.grads_step1), 1e-5) << e.spec.name << " rank " << world_rank;
    if (::testing::Test::HasFailure()) break;  // one failing layout is enough to read
  }
}

TEST(LayoutInvariance, EveryLayoutMatchesOneRank) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const std::string glob = make_data();
  for (const ModelCase& model : models()) {
    SCOPED_TRACE(model.name);
    check_layouts(glob, model, model.every_layout ? layouts(world_size) : model_layouts(world_size), world_rank);
    if (HasFailure()) break;
  }
}
