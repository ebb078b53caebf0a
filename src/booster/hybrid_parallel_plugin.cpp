#include "booster/hybrid_parallel_plugin.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "booster/plan.h"
#include "comm/device_placement.h"
#include "comm/gather_strings.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "models/registry.h"
#include "optim/grad_clip.h"
#include "pipeline/schedule.h"

namespace lattice {

namespace {

optim::OptimizerOptions optimizer_options(const OptimizerConfig& o) {
  optim::OptimizerOptions out;
  out.name = std::string(enum_name(o.name));
  out.beta1 = o.betas[0];
  out.beta2 = o.betas[1];
  out.eps = o.eps;
  out.weight_decay = o.weight_decay;
  out.momentum = o.momentum;
  return out;
}

// Microbatch m of a (M, B, T) batch, as (B, T).
Tensor microbatch(const Tensor& t, int64_t m) { return t.slice_rows(m, m + 1).reshape({t.dim(1), t.dim(2)}); }

int64_t count_valid(const Tensor& targets) {
  int64_t n = 0;
  const int32_t* t = targets.data<int32_t>();
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] != kIgnoreIndex;
  return n;
}

// runtime.precision: bf16 and fp16 run the matmuls with 16-bit operands and
// fp32 accumulation: on the GPU through cuBLAS (core/backend.h); on the CPU
// bf16 through oneDNN (core/kernels/cpu/matmul_bf16.h) where this CPU and
// build have it, fp16 as an emulation on sgemm (matmul_f16.h). The weights
// come from the parameters' 16-bit shadow (the constructor enables it).
void set_matmul_precision(const Config& cfg, Device device) {
  const DType operands = precision_dtype(cfg.runtime.precision);
  if (device.is_cuda()) {
    cuda_backend().set_matmul_dtype(operands);
    return;
  }
  std::string why;
  if (operands == DType::bf16 && !cpu::bf16_matmul_available(&why))
    config_fail(cfg, "runtime.precision",
                fmt::format("bf16 on cpu needs bf16 matmuls, and {} on host {} — set runtime.precision: fp32 or fp16",
                            why, host_name()));
  cpu::set_matmul_dtype(operands);
}

constexpr int64_t kTracedSteps = 3;  // a timeline of the first steps is what a user reads

}  // namespace

HybridParallelPlugin::HybridParallelPlugin(const Config& cfg, mesh::ProcessGroupMesh& mesh,
                                           std::optional<RankPlacement> placement, HalfWeights half_weights,
                                           PluginUse use)
    : cfg_(cfg),
      mesh_(mesh),
      layout_(resolve_layout(cfg, mesh.world_size())),
      scaler_(optim::make_loss_scaler(precision_dtype(cfg.runtime.precision), cfg.runtime.loss_scale)) {
  LATTICE_CHECK(layout_.tp == mesh.size(mesh::Axis::tp) && layout_.pp == mesh.size(mesh::Axis::pp) &&
                    layout_.dp == mesh.size(mesh::Axis::dp),
                "plugin: config layout (tp {}, pp {}, dp {}) differs from the mesh's", layout_.tp, layout_.pp,
                layout_.dp);
  placement_ = placement ? *placement : place_rank(cfg);
  if (!placement && placement_.device.is_cuda()) {  // no two ranks on one GPU: checked by the whole job at once
    const int dev = placement_.device.index;
    const std::vector<std::string> keys = comm::all_gather_strings(
        mesh.world(), comm::placed_device_key(comm::machine_id(), cuda_backend().device_pci_bus_id(dev), host_name(),
                                              dev, std::getenv("CUDA_VISIBLE_DEVICES")));
    if (const std::string e = comm::shared_gpu_error(keys); !e.empty()) config_fail(cfg, "runtime.device", e);
  }
  set_matmul_precision(cfg, placement_.device);
  ops::set_cpu_attention_compact(cfg.parallel.cpu_attention == CpuAttention::compact);  // before the model allocates
  groups_ = std::make_unique<DeviceGroups>(mesh, placement_, cfg.runtime.comm_timeout_s);
  const int stage = mesh.this_coord().pp;
  stages_ = std::make_unique<pipeline::PipelineStageManager>(pipeline::make_stage_layout(stage_config_of(cfg, layout_)),
                                                             stage, mesh.pp().world_ranks());
  p2p_ = std::make_unique<pipeline::P2P>(groups_->pp(), *stages_, cfg.runtime.comm_timeout_s);
  train_plan_ = train_plan_of(cfg, layout_, stage);
  eval_plan_ = pipeline::plan_forward_only(layout_.pp, stage, layout_.microbatches, stages_->virtual_stages());
  spans_ = stage_spans(cfg, stages_->layout(), stage);
  comm::Group& tp = groups_->tp();
  TpShard shard{.rank = tp.rank(), .size = tp.size(), .vocab_multiple = cfg.model.vocab_multiple};
  const int64_t pad = cfg.parallel.zero == 1 ? layout_.dp : 1;  // ZeRO-1 splits the buffers into dp equal shards
  params_ = FlatParams(select_stage_params(model_param_specs(cfg.model), spans_, cfg.model.n_layer), DType::f32,
                       placement_.device, shard, pad);
  const DType operands = precision_dtype(cfg.runtime.precision);
  if (operands != DType::f32 && half_weights == HalfWeights::shadow) params_.enable_shadow(operands);
  params_.init(cfg.runtime.seed);
  params_.refresh_shadow();  // before the models bind their views, which check it on every read
  for (const StageSpan& span : spans_) {
    chunks_.push_back(build_model(cfg.model, params_, tp, span));
    chunks_.back()->set_activation_dtype(operands);  // 16-bit activations beside 16-bit matmuls
  }
  const int64_t T = cfg.train.seq_len, B = cfg.train.micro_batch;
  contexts_ = std::make_unique<ContextPool>([this, B, T](int v) { return chunks_[size_t(v)]->make_context(B, T); });
  const bool train = use == PluginUse::train;
  if (train && layout_.dp > 1 && cfg.parallel.dp_bucket_mb > 0) {  // under ZeRO-1 too (optim/zero.h)
    buckets_ = std::make_unique<GradBuckets>(params_, groups_->dp(), cfg.parallel.dp_bucket_mb);
    last_backward_mb_.assign(spans_.size(), -1);
    for (const pipeline::Action& a : train_plan_)
      if (a.kind == pipeline::ActionKind::backward) last_backward_mb_[size_t(a.chunk)] = a.microbatch;
  }
  if (train && cfg.parallel.zero == 1) {  // evaluation only: no optimizer state
    auto zero = std::make_unique<optim::ZeroOptimizer>(optimizer_options(cfg.optimizer), params_, groups_->dp());
    zero_ = zero.get();
    optimizer_ = std::move(zero);
  } else if (train) {
    optimizer_ = optim::make_optimizer(optimizer_options(cfg.optimizer), params_);
  }

  auto dataset = [&](const std::string& pattern, const std::string& key, uint32_t source) {
    return data::TokenDataset(data::TokenDatasetOptions{.pattern = pattern,
                                                        .name = key,
                                                        .vocab_size = cfg.model.vocab_size,
                                                        .tokenizer = std::string(enum_name(cfg.data.tokenizer)),
                                                        .seq_len = T,
                                                        .global_batch = cfg.train.global_batch,
                                                        .seed = cfg.runtime.seed,
                                                        .source = source});
  };
  if (train) {
    std::vector<data::TokenDataset> sources;
    std::vector<double> weights;
    for (size_t s = 0; s < cfg.data.train.size(); ++s) {
      sources.push_back(dataset(cfg.data.train[s].path, train_source_key(cfg, s), uint32_t(s)));
      weights.push_back(cfg.data.train[s].weight);
      for (const ShardPrint& p : fingerprint_shards(sources.back().shard_paths(), int(s))) train_print_.push_back(p);
    }
    train_ = std::make_unique<data::DataMixture>(std::move(sources), std::move(weights), cfg.train.global_batch);
  }
  if (!cfg.data.val.empty()) val_ = std::make_unique<data::TokenDataset>(dataset(cfg.data.val, "data.val", 0));
  inputs_ = Tensor::empty({layout_.microbatches, B, T}, DType::i32);
  targets_ = Tensor::empty({layout_.microbatches, B, T}, DType::i32);
  device_inputs_ = placement_.device.is_cpu() ? inputs_ : Tensor::empty(inputs_.shape(), DType::i32, placement_.device);
  device_targets_ =
      placement_.device.is_cpu() ? targets_ : Tensor::empty(targets_.shape(), DType::i32, placement_.device);
  // The head's loss sums add up on the device, read once per run_plan: on a
  // GPU no host wait per microbatch (LanguageModel::set_loss_sum).
  loss_sum_ = Tensor::zeros({1}, DType::f64, placement_.device);
  for (size_t v = 0; v < chunks_.size(); ++v)
    if (spans_[v].head) chunks_[v]->set_loss_sum(&loss_sum_);
}

void HybridParallelPlugin::batch_to_device() {
  if (placement_.device.is_cpu()) return;  // the same tensors
  device_inputs_.copy_from(inputs_);
  device_targets_.copy_from(targets_);
}

std::string HybridParallelPlugin::describe() const {
  std::string s = fmt::format(
      "{} | {} parameters | layout tp={} pp={} dp={} | {} microbatches of {} x {} tokens per dp rank | activations {}",
      enum_name(cfg_.model.arch), param_count(), layout_.tp, layout_.pp, layout_.dp, layout_.microbatches,
      cfg_.train.micro_batch, cfg_.train.seq_len, dtype_name(chunks_.front()->activation_dtype()));
  if (zero_ && layout_.dp > 1)  // this rank's stage and tp shard: the first rank's says it
    s += fmt::format(" | ZeRO-1 gathers {} per step ({})", format_bytes(zero_->gather_bytes(params_)),
                     zero_->gathers_half(params_)
                         ? fmt::format("{} shadow + fp32 norms, biases, embeddings", dtype_name(params_.shadow_dtype()))
                         : "fp32 values");
  if (train_) s += describe_train_data() + shared_train_shard_note();
  if (train_ && val_) s += shared_val_shard_note();
  const int64_t whole = val_ ? (val_->n_windows() + cfg_.train.global_batch - 1) / cfg_.train.global_batch : 0;
  if (val_ && cfg_.train.eval_steps > whole) {  // batches past the ones that cover the set once
    s += fmt::format(
        " | note: an evaluation reads train.eval_steps ({}) x global batch ({}) windows, but data.val holds {}: it "
        "reads some of them more than once — set train.eval_steps to {} or less ({} reads the whole set once; 0 in "
        "lattice eval --batches)",
        cfg_.train.eval_steps, cfg_.train.global_batch, val_->n_windows(), whole, whole);
  }
  return s;
}

// How the header names training source k: "data.train", or "data.train[k]" in a mixture.
std::string HybridParallelPlugin::train_source_name(size_t k) const {
  return train_->size() == 1 ? std::string("data.train") : fmt::format("data.train[{}]", k);
}

// Each training source: its tokens, windows, share and the epochs of it the
// run reads (train.steps * global_batch samples, the source's share of them);
// a note where a step takes more of its samples than it has windows.
std::string HybridParallelPlugin::describe_train_data() const {
  const int64_t GB = cfg_.train.global_batch, T = cfg_.train.seq_len;
  const double run_samples = double(cfg_.train.steps) * double(GB);
  std::string s, notes;
  for (size_t k = 0; k < train_->size(); ++k) {
    const data::TokenDataset& d = train_->source(k);
    const std::string key = train_source_name(k);
    const double share = train_->share(k), epochs = share * run_samples / double(d.n_windows());
    s += train_->size() == 1
             ? fmt::format(" | {}: {} tokens, {} windows, {:.3g} epochs", key, d.n_tokens(), d.n_windows(), epochs)
             : fmt::format(" | {} '{}': weight {} ({:.3g}%), {} tokens, {} windows, {:.3g} epochs", key,
                           cfg_.data.train[k].path, cfg_.data.train[k].weight, 100 * share, d.n_tokens(), d.n_windows(),
                           epochs);
    if (double(d.n_windows()) >= share * double(GB)) continue;  // the loader wraps around (data/loader.h)
    notes += train_->size() == 1
                 ? fmt::format(
                       " | note: {} holds {} windows of {} tokens, fewer than the global batch of {}: each "
                       "step sees some of them twice",
                       key, d.n_windows(), T + 1, GB)
                 : fmt::format(
                       " | note: {} holds {} windows of {} tokens, fewer than the {:.3g} of each global "
                       "batch of {} its weight gives it: each step sees some of them twice",
                       key, d.n_windows(), T + 1, share * double(GB), GB);
  }
  return s + notes;
}

namespace {

// Whether paths a and b name the same file (however the globs spell them).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

}  // namespace

// Two mixture sources that share a shard (the same file, however the globs
// name it): its windows are drawn by both, more often than either weight says.
std::string HybridParallelPlugin::shared_train_shard_note() const {
  for (size_t j = 0; j < train_->size(); ++j)
    for (size_t k = j + 1; k < train_->size(); ++k)
      for (const std::string& a : train_->source(j).shard_paths())
        for (const std::string& b : train_->source(k).shard_paths())
          if (same_file(a, b))
            return fmt::format(
                " | note: {} and {} both hold the shard {}: its windows are drawn by both sources, more often "
                "than either weight says — give each shard to one source",
                train_source_name(j), train_source_name(k), a);
  return "";
}

// A validation shard that is also a training shard (the same file, however
// the globs name it): val_loss then scores windows the run trains on.
std::string HybridParallelPlugin::shared_val_shard_note() const {
  for (const std::string& v : val_->shard_paths())
    for (size_t k = 0; k < train_->size(); ++k)
      for (const std::string& t : train_->source(k).shard_paths())
        if (same_file(v, t))
          return fmt::format(
              " | note: data.val's shard {} is also a shard of {}: val_loss scores data the run trains on — point "
              "data.val at held-out shards (lattice data prepare writes them as PREFIX_val_*.bin)",
              v, train_source_name(k));
  return "";
}

std::string HybridParallelPlugin::stage_map() const { return layout_.pp > 1 ? stages_->describe() : ""; }

int64_t HybridParallelPlugin::param_count() const {
  int64_t n = 0;
  for (const ParamSpec& s : model_param_specs(cfg_.model)) n += shape_numel(s.shape);
  return n;
}

double HybridParallelPlugin::flops_per_token() const {
  return chunks_.front()->flops_per_token(cfg_.train.seq_len) / double(mesh_.world_size());
}

void HybridParallelPlugin::prepare_batch(const StepCoords& coords, int64_t m) {
  const ModelEntry& model = model_entry(cfg_.model.arch);
  if (!model.prepare_batch) return;
  Tensor in = microbatch(inputs_, m), tg = microbatch(targets_, m);
  model.prepare_batch(cfg_.model, coords, in, tg);
}

double HybridParallelPlugin::sum_over(comm::Group& g, double v) {
  return comm::all_reduce_scalar(g, v, comm::ReduceOp::sum);
}

double HybridParallelPlugin::run_plan(const pipeline::Plan& plan, const StepCoords& base, int64_t first_sample,
                                      float dloss, pipeline::RunStats* stats) {
  const int64_t B = cfg_.train.micro_batch;
  pipeline::StageCallbacks cb;
  cb.activation_shape = {B, cfg_.train.seq_len, cfg_.model.d_model};
  cb.dtype = chunks_.front()->activation_dtype();
  cb.device = placement_.device;
  cb.forward = [&](int v, int mb, const Tensor& in, Tensor& out) {
    StepCoords c = base;
    c.sample0 = first_sample + mb * B;
    const StageSpan& span = spans_[size_t(v)];
    // The head adds its loss sum to loss_sum_ (set_loss_sum); forward returns 0.
    chunks_[size_t(v)]->forward(contexts_->take(v, mb), span.embedding ? microbatch(device_inputs_, mb) : in,
                                microbatch(device_targets_, mb), c, span.head ? nullptr : &out);
    if (!base.train) contexts_->give_back(v, mb);
  };
  cb.backward = [&](int v, int mb, const Tensor& dout, Tensor& din) {
    const StageSpan& span = spans_[size_t(v)];
    LanguageModel& chunk = *chunks_[size_t(v)];
    // The chunk's last microbatch finishes its gradients layer by layer: start their buckets.
    if (buckets_ && mb == last_backward_mb_[size_t(v)])
      chunk.on_grads_ready = [this](int l) { buckets_->layer_ready(l); };
    chunk.backward(contexts_->get(v, mb), dloss, span.head ? nullptr : &dout, span.embedding ? nullptr : &din);
    chunk.on_grads_ready = nullptr;
    contexts_->give_back(v, mb);
  };
  const bool trace = cfg_.log.trace && base.train && base.step <= kTracedSteps;
  loss_sum_.zero_();
  pipeline::RunStats s =
      pipeline::run_schedule(plan, *p2p_, cb, {.timeout_s = cfg_.runtime.comm_timeout_s, .trace = trace});
  trace_.insert(trace_.end(), s.trace.begin(), s.trace.end());
  if (stats) *stats = s;
  return loss_sum_.on_host().data<double>()[0];
}

StepStats HybridParallelPlugin::execute_pipeline(int64_t step) {
  LATTICE_CHECK(optimizer_ && train_, "HybridParallelPlugin::{}: the plugin was built for evaluation only",
                "execute_pipeline");
  const int64_t M = layout_.microbatches, B = cfg_.train.micro_batch, T = cfg_.train.seq_len;
  const int64_t first = int64_t(mesh_.this_coord().dp) * M * B;  // this dp rank's slice of the global batch
  // The whole step's batch first, so the global valid-token count is fixed before backward.
  for (int64_t m = 0; m < M; ++m) {
    train_->fill_batch(step - 1, first + m * B, B, microbatch(inputs_, m).data<int32_t>(),
                       microbatch(targets_, m).data<int32_t>());
    prepare_batch(StepCoords{cfg_.runtime.seed, step, first + m * B, true}, m);
  }
  batch_to_device();
  StepStats s;
  s.valid_tokens = int64_t(sum_over(mesh_.dp(), double(count_valid(targets_))));
  s.tokens = int64_t(cfg_.train.global_batch) * T;
  // fp16: the gradients are those of the loss times the scale (1 for bf16 and fp32).
  const float dloss = (s.valid_tokens > 0 ? float(1.0 / double(s.valid_tokens)) : 0.0f) * scaler_.scale();
  for (auto& chunk : chunks_) chunk->set_loss_weight(dloss);  // known before forward (LanguageModel::set_loss_weight)
  params_.zero_grad();
  if (on_zeroed_grads_for_tests) on_zeroed_grads_for_tests(step, params_);
  if (buckets_) buckets_->begin_step();
  pipeline::RunStats run;
  double loss = run_plan(train_plan_, StepCoords{cfg_.runtime.seed, step, 0, true}, first, dloss, &run);
  const auto sync_start = std::chrono::steady_clock::now();
  // Tied parameters: the replicas' gradients summed over the tie group, before dp.
  for (const ParamEntry& e : params_.entries()) {
    if (e.spec.tie_group.empty() || groups_->tie().size() == 1) continue;
    Tensor g = params_.grad(e);
    groups_->tie().all_reduce(g)->wait();
  }
  if (buckets_) {                                    // every rank gets the whole dp sum (ZeRO-1 reads its shard of it)
    for (const ParamEntry& e : params_.entries()) {  // the tied entries, which no bucket holds
      if (e.spec.tie_group.empty()) continue;
      Tensor g = params_.grad(e);
      groups_->dp().all_reduce(g)->wait();
    }
    buckets_->finish();
  } else if (zero_) {
    zero_->reduce_scatter_grads(params_);  // each dp rank gets the sum of its own shard
  } else if (groups_->dp().size() > 1) {
    groups_->dp().all_reduce(params_.grads())->wait();
  }
  s.grad_sync_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  s.loss_sum = sum_over(mesh_.dp(), sum_over(mesh_.pp(), loss));  // only the last stage has a loss
  if (layout_.pp > 1) {
    s.bubble = run.wait_s / std::max(1e-12, run.wait_s + run.compute_s);
    s.bubble_theory = pipeline::bubble_theory(layout_.pp, int(M), stages_->virtual_stages());
  }
  return s;
}

UpdateStats HybridParallelPlugin::optimizer_step(int64_t step, double lr) {
  LATTICE_CHECK(optimizer_ && train_, "HybridParallelPlugin::{}: the plugin was built for evaluation only",
                "optimizer_step");
  UpdateStats u;
  // Sharded entries differ across tp, replicated ones are equal there (count
  // them once: 1/tp on each rank), every stage holds its own, and a tied
  // replica is counted by its owner only. Without ZeRO every dp replica holds
  // the same summed gradients, so the sum runs over one replica (tp x pp);
  // with ZeRO-1 each dp rank holds a disjoint shard of them: over the world.
  // The gradients are scaled (fp16; the scale is 1 otherwise): the norm is
  // reported, and clips, unscaled.
  const double local_sq = zero_ ? zero_->shard_grad_squares(params_, layout_.tp)
                                : optim::weighted_grad_squares(params_, layout_.tp, 0, params_.numel());
  u.loss_scale = scaler_.enabled() ? scaler_.scale() : 0.0;
  const float inv_scale = scaler_.inv_scale();
  u.grad_norm = std::sqrt(sum_over(zero_ ? mesh_.world() : mesh_.tp_pp(), local_sq)) / double(scaler_.scale());
  // The norm is the joint verdict: a non-finite square anywhere (an fp16
  // overflow, or a diverging run at any precision) makes every rank's sum
  // non-finite (dp replicas outside the tp x pp sum hold the same synced
  // gradients), so every rank skips the step; the scaler backs off (fp16).
  const bool found_inf = !std::isfinite(u.grad_norm);
  scaler_.update(found_inf);  // fp16: backs off or grows; disabled: no change
  u.skipped = found_inf;
  if (u.skipped) return u;
  ++updates_;
  optimizer_->step(params_, lr, updates_, optim::clip_factor(u.grad_norm, cfg_.optimizer.grad_clip) * inv_scale);
  params_.refresh_shadow();
  return u;
}

double HybridParallelPlugin::evaluate(int64_t batches) {
  const int64_t M = layout_.microbatches, B = cfg_.train.micro_batch, GB = cfg_.train.global_batch;
  const int64_t first = int64_t(mesh_.this_coord().dp) * M * B;
  const bool whole = batches <= 0;
  if (whole) batches = (val_->n_windows() + GB - 1) / GB;  // the whole val set
  double loss = 0, valid = 0;
  for (int64_t k = 0; k < batches; ++k) {
    for (int64_t m = 0; m < M; ++m) {
      val_->fill_eval_batch(k, first + m * B, B, microbatch(inputs_, m).data<int32_t>(),
                            microbatch(targets_, m).data<int32_t>());
      prepare_batch(StepCoords{cfg_.runtime.seed, 0, k * GB + first + m * B, false}, m);
      // The whole set scores each window once: the last batch's rows past
      // the end (wrapped around to window 0) score nothing.
      const int64_t T = cfg_.train.seq_len;
      for (int64_t j = 0; whole && j < B; ++j)
        if (k * GB + first + m * B + j >= val_->n_windows())
          std::fill_n(microbatch(targets_, m).data<int32_t>() + j * T, T, kIgnoreIndex);
    }
    batch_to_device();
    valid += double(count_valid(targets_));
    loss += run_plan(eval_plan_, StepCoords{cfg_.runtime.seed, 0, k * GB, false}, first, 0.0f, nullptr);
  }
  loss = sum_over(mesh_.dp(), sum_over(mesh_.pp(), loss));
  valid = sum_over(mesh_.dp(), valid);
  return valid > 0 ? loss / valid : std::nan("");  // no token to score: no loss (null in metrics.jsonl)
}

int64_t HybridParallelPlugin::local_peak_mem_bytes() const { return memory_stats(placement_.device).peak_bytes; }

bool HybridParallelPlugin::write_trace(const std::string& path) const {
  if (trace_.empty()) return false;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  pipeline::write_chrome_trace(path, trace_, mesh_.this_rank());
  return true;
}

void HybridParallelPlugin::save_checkpoint(const std::string& step_dir, int64_t step, int64_t skipped) {
  LATTICE_CHECK(optimizer_ && train_, "HybridParallelPlugin::{}: the plugin was built for evaluation only",
                "save_checkpoint");
  TrainerState st;
  st.step = step;
  st.optimizer_updates = updates_;
  st.skipped_steps = skipped;
  st.consumed_samples = step * cfg_.train.global_batch;
  st.consumed_tokens = st.consumed_samples * cfg_.train.seq_len;
  st.seed = cfg_.runtime.seed;
  st.config = to_yaml(cfg_);
  st.layout = layout_;
  st.schedule = std::string(enum_name(cfg_.parallel.schedule));
  st.virtual_stages = cfg_.parallel.virtual_stages;
  st.zero = cfg_.parallel.zero;
  st.vocab_size = cfg_.model.vocab_size;
  st.padded_vocab_size = padded_vocab(cfg_.model.vocab_size, params_.shard());
  st.optimizer = std::string(enum_name(cfg_.optimizer.name));
  st.arch = std::string(enum_name(cfg_.model.arch));
  if (scaler_.enabled()) st.loss_scaler = scaler_.state();
  st.data_train = train_print_;
  RankState rs{params_, *optimizer_, zero_, mesh_};
  lattice::save_checkpoint(step_dir, rs, st, cfg_.checkpoint.keep_last);
}

TrainerState HybridParallelPlugin::load_checkpoint(const std::string& step_dir) {
  LATTICE_CHECK(optimizer_ && train_, "HybridParallelPlugin::{}: the plugin was built for evaluation only",
                "load_checkpoint");
  TrainerState st = read_trainer_state(step_dir);
  check_resume_config(cfg_, st, step_dir, train_print_);
  RankState rs{params_, *optimizer_, zero_, mesh_};
  lattice::load_checkpoint(step_dir, rs);
  params_.refresh_shadow();
  updates_ = st.optimizer_updates;
  if (st.loss_scaler) scaler_.load_state(*st.loss_scaler);  // a model-only checkpoint has none
  return st;
}

TrainerState HybridParallelPlugin::load_model(const std::string& step_dir) {
  TrainerState st = read_trainer_state(step_dir);
  check_checkpoint_model(cfg_, st, step_dir);
  load_model_tensors(step_dir, params_);
  params_.refresh_shadow();
  return st;
}

std::vector<double> HybridParallelPlugin::max_over_ranks(std::vector<double> v) {
  if (mesh_.world().size() == 1 || v.empty()) return v;
  Tensor t = Tensor::from<double>(v, {int64_t(v.size())});
  mesh_.world().all_reduce(t, {.op = comm::ReduceOp::max})->wait();
  std::copy_n(t.data<double>(), v.size(), v.begin());
  return v;
}

}  // namespace lattice
