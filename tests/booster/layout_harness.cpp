#include "layout_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/kernels/cpu/matmul_bf16.h"
#include "core/rng.h"
#include "data/shard.h"
#include "support/test_support.h"

namespace lattice::layout_test {

namespace {

// Under ZeRO-1 a dp rank holds the summed gradients of its shard only: the
// shards of the padded buffer gathered over dp, as the (numel) gradients.
Tensor gather_zero_grads(FlatParams& p, comm::Group& dp) {
  const int64_t shard = p.padded_numel() / dp.size();
  Tensor all = Tensor::empty({p.padded_numel()}, p.dtype());
  dp.all_gather(all, p.padded_grads().view(dp.rank() * shard, {shard}).to(Device::cpu()))->wait();
  return all.view(0, {p.numel()});
}

}  // namespace

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

std::vector<std::vector<std::string>> half_precisions(const std::string& scale, int growth_interval) {
  std::vector<std::vector<std::string>> out;
  if (cpu::bf16_matmul_available()) out.push_back({"runtime.precision=bf16"});
  out.push_back({"runtime.precision=fp16", "runtime.loss_scale.initial=" + scale, "runtime.loss_scale.max=" + scale,
                 "runtime.loss_scale.growth_interval=" + std::to_string(growth_interval)});
  return out;
}

Config config(const std::string& glob, const LayoutCase& l, const ModelCase& model,
              const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {
      "parallel.tp=" + std::to_string(l.tp), "parallel.pp=" + std::to_string(l.pp),
      "parallel.dp=" + std::to_string(l.dp), "parallel.schedule=" + l.schedule, "parallel.layers_per_stage=" + l.layers,
      "parallel.virtual_stages=" + std::to_string(l.virtual_stages),
      "parallel.recompute_layers_per_stage=" + l.recompute, "parallel.zero=" + std::to_string(l.zero),
      "parallel.dp_bucket_mb=" + std::to_string(l.bucket_mb),
      std::string("parallel.recompute_attention=") + (l.recompute_attention ? "true" : "false"),
      // The shared buffer is for full (B, NH, T, T) states, which the CPU keeps only under cpu_attention: full.
      std::string("parallel.cpu_attention=") + (l.recompute_attention ? "full" : "compact"),
      "parallel.head_chunk_tokens=" + std::to_string(l.head_chunk)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return parse_config(R"(
model: )" + model.yaml + R"(
train: { steps: 20, global_batch: 8, micro_batch: 2, seq_len: 16 }
optimizer: { lr: 0.003, schedule: { warmup_steps: 3 } }
data: { train: ")" + glob +
                          R"(", tokenizer: bytes }
runtime: { seed: 42, threads: 1 }
)",
                      "layout-test", overrides);
}

Trace train(const Config& cfg, mesh::ProcessGroupMesh& mesh, std::optional<RankPlacement> placement) {
  HybridParallelPlugin plugin(cfg, mesh, placement);
  Trace t;
  for (int64_t step = 1; step <= kSteps; ++step) {
    StepStats s = plugin.execute_pipeline(step);
    const bool bucketed = cfg.parallel.dp_bucket_mb > 0 && mesh.dp().size() > 1;  // ZeRO-1 too
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
    Tensor mine = plugin.params().value(e).to(Device::cpu()), lo = mine.clone(), hi = mine.clone();
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

}  // namespace lattice::layout_test
