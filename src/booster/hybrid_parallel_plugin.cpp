#include "booster/hybrid_parallel_plugin.h"

#include <cmath>

#include "core/allocator.h"
#include "models/registry.h"
#include "optim/grad_clip.h"

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

// Settings the config accepts (they are part of the schema) but this version
// cannot honour yet: refused with one line rather than silently ignored.
void refuse_unsupported(const Config& cfg, const Layout& layout) {
  auto refuse = [&](const char* key, const std::string& what) {
    config_fail(cfg, key, what + " is not available in this version yet; remove the setting");
  };
  if (layout.pp != 1) refuse("parallel.pp", fmt::format("pipeline parallelism (pp = {})", layout.pp));
  if (cfg.runtime.device != DeviceType::cpu) refuse("runtime.device", "training on cuda");
  if (cfg.parallel.zero != 0) refuse("parallel.zero", "ZeRO-1");
  if (cfg.log.tensorboard) refuse("log.tensorboard", "TensorBoard output");
  if (cfg.log.trace) refuse("log.trace", "the timeline trace");
  if (cfg.checkpoint.every != 0) refuse("checkpoint.every", "checkpointing");
  if (cfg.checkpoint.resume != "auto" && cfg.checkpoint.resume != "never")
    refuse("checkpoint.resume", "resuming from '" + cfg.checkpoint.resume + "'");
}

double all_reduce_scalar(comm::Group& g, double v, comm::ReduceOp op) {
  if (g.size() == 1) return v;
  Tensor t = Tensor::from<double>({v}, {1});
  g.all_reduce(t, {.op = op})->wait();
  return t.data<double>()[0];
}

}  // namespace

HybridParallelPlugin::HybridParallelPlugin(const Config& cfg, mesh::ProcessGroupMesh& mesh)
    : cfg_(cfg), mesh_(mesh), layout_(resolve_layout(cfg, mesh.world_size())) {
  LATTICE_CHECK(layout_.tp == mesh.size(mesh::Axis::tp) && layout_.pp == mesh.size(mesh::Axis::pp) &&
                    layout_.dp == mesh.size(mesh::Axis::dp),
                "plugin: config layout (tp {}, pp {}, dp {}) differs from the mesh's", layout_.tp, layout_.pp,
                layout_.dp);
  refuse_unsupported(cfg, layout_);
  comm::Group& tp = mesh.tp();
  TpShard shard{.rank = tp.rank(), .size = tp.size(), .vocab_multiple = cfg.model.vocab_multiple};
  params_ = FlatParams(model_param_specs(cfg.model), DType::f32, Device::cpu(), shard);
  params_.init(cfg.runtime.seed);
  model_ = build_model(cfg.model, params_, tp);
  optimizer_ = optim::make_optimizer(optimizer_options(cfg.optimizer), params_);

  const int64_t T = cfg.train.seq_len, B = cfg.train.micro_batch;
  auto dataset = [&](const std::string& pattern, const char* key) {
    return std::make_unique<data::TokenDataset>(data::TokenDatasetOptions{
        .pattern = pattern, .name = key, .vocab_size = cfg.model.vocab_size, .seq_len = T,
        .global_batch = cfg.train.global_batch, .seed = cfg.runtime.seed});
  };
  train_ = dataset(cfg.data.train, "data.train");
  if (!cfg.data.val.empty()) val_ = dataset(cfg.data.val, "data.val");
  ctx_ = model_->make_context(B, T);
  inputs_ = Tensor::empty({layout_.microbatches, B, T}, DType::i32);
  targets_ = Tensor::empty({layout_.microbatches, B, T}, DType::i32);
}

std::string HybridParallelPlugin::describe() const {
  return fmt::format("{} | {} parameters | layout tp={} pp={} dp={} | {} microbatches of {} x {} tokens per dp rank",
                     model_->arch(), param_count(), layout_.tp, layout_.pp, layout_.dp, layout_.microbatches,
                     cfg_.train.micro_batch, cfg_.train.seq_len);
}

int64_t HybridParallelPlugin::param_count() const {
  int64_t n = 0;
  for (const ParamSpec& s : model_param_specs(cfg_.model)) n += shape_numel(s.shape);
  return n;
}

double HybridParallelPlugin::flops_per_token() const {
  return model_->flops_per_token(cfg_.train.seq_len) / double(mesh_.world_size());
}

double HybridParallelPlugin::sum_over(comm::Group& g, double v) { return all_reduce_scalar(g, v, comm::ReduceOp::sum); }

StepStats HybridParallelPlugin::execute_pipeline(int64_t step) {
  const int64_t M = layout_.microbatches, B = cfg_.train.micro_batch, T = cfg_.train.seq_len;
  const int64_t first = int64_t(mesh_.this_coord().dp) * M * B;  // this dp rank's slice of the global batch
  // The whole step's batch first, so the global valid-token count is fixed before backward.
  for (int64_t m = 0; m < M; ++m)
    train_->fill_batch(step - 1, first + m * B, B, microbatch(inputs_, m).data<int32_t>(),
                       microbatch(targets_, m).data<int32_t>());
  StepStats s;
  s.valid_tokens = int64_t(sum_over(mesh_.dp(), double(count_valid(targets_))));
  s.tokens = int64_t(cfg_.train.global_batch) * T;
  const float dloss = s.valid_tokens > 0 ? float(1.0 / double(s.valid_tokens)) : 0.0f;
  params_.zero_grad();
  double loss = 0;
  for (int64_t m = 0; m < M; ++m) {
    StepCoords coords{cfg_.runtime.seed, step, first + m * B, true};
    loss += model_->forward(*ctx_, microbatch(inputs_, m), microbatch(targets_, m), coords);
    model_->backward(*ctx_, dloss);
  }
  if (mesh_.dp().size() > 1) mesh_.dp().all_reduce(params_.grads())->wait();
  s.loss_sum = sum_over(mesh_.dp(), loss);
  return s;
}

UpdateStats HybridParallelPlugin::optimizer_step(int64_t step, double lr) {
  UpdateStats u;
  optim::GradSquares g = optim::grad_squares_by_placement(params_);
  u.grad_norm = std::sqrt(sum_over(mesh_.tp(), g.sharded) + g.replicated);
  if (!std::isfinite(u.grad_norm)) {  // identical on every rank: all skip together
    u.skipped = true;
    return u;
  }
  ++updates_;
  optimizer_->step(params_, lr, updates_, optim::clip_factor(u.grad_norm, cfg_.optimizer.grad_clip));
  return u;
}

double HybridParallelPlugin::evaluate(int64_t batches) {
  const int64_t B = cfg_.train.micro_batch, T = cfg_.train.seq_len, GB = cfg_.train.global_batch;
  const int64_t per_rank = GB / layout_.dp, first = int64_t(mesh_.this_coord().dp) * per_rank;
  if (batches <= 0) batches = (val_->n_windows() + GB - 1) / GB;  // the whole val set
  double loss = 0, valid = 0;
  Tensor x = Tensor::empty({B, T}, DType::i32), y = Tensor::empty({B, T}, DType::i32);
  for (int64_t k = 0; k < batches; ++k) {
    for (int64_t off = 0; off < per_rank; off += B) {
      val_->fill_eval_batch(k, first + off, B, x.data<int32_t>(), y.data<int32_t>());
      loss += model_->forward(*ctx_, x, y, StepCoords{cfg_.runtime.seed, 0, k * GB + first + off, false});
      valid += double(count_valid(y));
    }
  }
  loss = sum_over(mesh_.dp(), loss);
  valid = sum_over(mesh_.dp(), valid);
  return valid > 0 ? loss / valid : 0.0;
}

int64_t HybridParallelPlugin::peak_mem_bytes() {
  double peak = double(memory_stats(Device::cpu()).peak_bytes);
  return int64_t(all_reduce_scalar(mesh_.world(), peak, comm::ReduceOp::max));
}

double HybridParallelPlugin::max_over_ranks(double v) { return all_reduce_scalar(mesh_.world(), v, comm::ReduceOp::max); }

}  // namespace lattice
