#include "booster/booster.h"

#include <cmath>
#include <csignal>

#include "booster/peak_flops.h"
#include "booster/stop_signal.h"
#include "booster/tensorboard.h"
#include "checkpoint/atomic_dir.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/blas_core.h"
#include "core/kernels/cpu/matmul.h"
#include "core/timer.h"
#include "optim/lr_schedule.h"

namespace lattice {

optim::LrSchedule lr_schedule(const Config& cfg) {
  optim::LrSchedule s;
  s.lr = cfg.optimizer.lr;
  s.min_lr = cfg.optimizer.schedule.min_lr;
  s.warmup_steps = cfg.optimizer.schedule.warmup_steps;
  s.decay_steps = cfg.optimizer.schedule.decay_steps;
  s.total_steps = cfg.train.steps;
  s.decay = optim::decay_from_name(std::string(enum_name(cfg.optimizer.schedule.decay)));
  return s;
}

mesh::ProcessGroupMesh create_job_mesh(const Config& cfg, comm::Group world) {
  const Layout layout = resolve_layout(cfg, world.size());
  std::vector<mesh::Axis> order;
  for (const std::string& axis : cfg.parallel.order) order.push_back(mesh::axis_from_name(axis));
  return mesh::ProcessGroupMesh::create(std::move(world), {layout.tp, layout.pp, layout.dp}, order);
}

Booster::Booster(const Config& cfg, std::unique_ptr<Plugin> plugin, Print print)
    : cfg_(cfg), plugin_(std::move(plugin)), print_(std::move(print)) {}

bool Booster::eval_due(int64_t step, int64_t last) const {
  if (cfg_.train.eval_every <= 0 || !plugin_->has_validation()) return false;
  return step % cfg_.train.eval_every == 0 || step == last;
}

std::string Booster::checkpoint(int64_t step, int64_t skipped) {
  const std::string dir = cfg_.checkpoint.dir + "/" + checkpoint::step_dir_name(step);
  Timer timer;
  plugin_->save_checkpoint(dir, step, skipped);
  if (logger_) print_(fmt::format("checkpoint {} written in {:.1f} s", dir, timer.seconds()));
  return dir;
}

TrainSummary Booster::train(const std::string& metrics_path, const TrainerState& resumed) {
  // Every rank runs the loop; only the logging rank (a non-empty path) writes and prints.
  std::unique_ptr<MetricsWriter> metrics;
  logger_ = !metrics_path.empty();
  std::unique_ptr<TensorBoardWriter> tb;
  if (logger_ && cfg_.log.tensorboard) tb = std::make_unique<TensorBoardWriter>(cfg_.log.dir + "/tb");
  if (logger_) metrics = std::make_unique<MetricsWriter>(metrics_path);
  const optim::LrSchedule schedule = lr_schedule(cfg_);
  const int64_t last = cfg_.train.stop_at_step > 0 ? cfg_.train.stop_at_step : cfg_.train.steps;
  if (metrics && !blas_core_restart_note().empty()) print_("blas: " + blas_core_restart_note());
  double peak = cfg_.runtime.peak_flops;
  if (peak <= 0 && resumed.step < last && plugin_->device().is_cuda()) {  // the GPU's datasheet peak
    const std::string gpu = cuda_backend().device_name(plugin_->device().index);
    peak = gpu_bf16_dense_peak_flops(gpu);
    if (peak <= 0)
      config_fail(cfg_, "runtime.peak_flops",
                  fmt::format("is 0 (look it up), and the peak table does not know GPU '{}' — set runtime.peak_flops "
                              "to its dense bf16 FLOP/s",
                              gpu));
    if (metrics)
      print_(fmt::format("peak: {:.0f} TFLOP/s per rank ({}, dense bf16 datasheet); mfu is relative to it", peak / 1e12,
                         gpu));
  } else if (peak <= 0 && resumed.step < last) {  // the CPU: measured
    peak = measure_sgemm_flops();
    // Its three 1024^2 matrices are not training's: peak_mem_bytes starts after them.
    reset_peak_memory(Device::cpu());
    if (metrics)
      print_(fmt::format("peak: {:.1f} GFLOP/s per rank measured ({} 1024^3); mfu is relative to it", peak / 1e9,
                         cpu::matmul_dtype() == DType::bf16  ? "bf16 matmul"
                         : cpu::matmul_dtype() == DType::f16 ? "fp16-rounded sgemm"
                                                             : "sgemm"));
  }
  TrainSummary sum;
  sum.steps_done = resumed.step;
  int64_t skipped = resumed.skipped_steps;
  double elapsed = 0;
  std::string removed_note;  // log.dir went away under the run
  for (int64_t step = resumed.step + 1; step <= last; ++step) {
    Timer timer;
    const double lr = optim::learning_rate(schedule, step);
    StepStats s = plugin_->execute_pipeline(step);
    UpdateStats u = plugin_->optimizer_step(step, lr);
    // Every per-step maximum over the ranks in one collective: the slowest
    // rank's step time, the largest peak memory, exposed sync time and pipeline
    // idle fraction, the stop request (a signal may reach the ranks at different steps; all must
    // stop after the same one), and on CUDA the memory pool's high watermark.
    const Device device = plugin_->device();
    const double pool_peak = device.is_cuda() ? double(cuda_backend().pool_used_peak_bytes(device.index)) : -1.0;
    const std::vector<double> m =
        plugin_->max_over_ranks({timer.seconds(), double(plugin_->local_peak_mem_bytes()), s.grad_sync_s, s.bubble,
                                 stop_requested() ? 1.0 : 0.0, pool_peak});
    const double dt = m[0];
    const bool stop = m[4] > 0;
    elapsed += dt;
    skipped += u.skipped ? 1 : 0;

    TrainRecord r;
    r.step = step;
    // No token to average over (a BERT batch without a masked token): no loss, not 0 (null in metrics.jsonl).
    r.loss = s.valid_tokens > 0 ? s.loss_sum / double(s.valid_tokens) : std::nan("");
    r.lr = lr;
    r.grad_norm = u.grad_norm;
    r.loss_scale = u.loss_scale;
    r.tokens = s.tokens;
    r.tokens_per_s = double(s.tokens) / dt;
    r.step_ms = dt * 1e3;
    r.mfu = plugin_->flops_per_token() * double(s.tokens) / dt / peak;
    r.peak_mem_bytes = int64_t(m[1]);
    r.device_pool_peak_bytes = int64_t(m[5]);
    r.skipped = skipped;
    r.bubble = m[3];
    r.bubble_theory = s.bubble_theory;
    r.grad_sync_ms = m[2] * 1e3;
    sum.steps_done = step;
    sum.final_loss = r.loss;
    ++sum.steps_run;
    sum.steps_skipped += u.skipped ? 1 : 0;
    if (metrics && (step % cfg_.log.every == 0 || step == 1 || step == last)) {
      metrics->log_train(r);
      if (tb) tb->scalars(step, tensorboard_scalars(r));
      print_(progress_line(r, last, elapsed / double(step - resumed.step) * double(last - step)));
    }
    if (metrics && removed_note.empty() && metrics->removed()) {  // the next step stops with a checkpoint
      removed_note = fmt::format("log.dir: '{}' was removed while the run wrote it (the metrics so far are gone)",
                                 metrics->path());
      print_(removed_note + " — stopping after the next step with a checkpoint");
      request_stop(SIGTERM);
    }
    if (eval_due(step, last)) {
      double val = plugin_->evaluate(cfg_.train.eval_steps);  // collective
      if (metrics) {
        metrics->log_eval(step, val);
        if (tb) tb->scalars(step, {{"val/loss", float(val)}});
        print_(fmt::format("step {}/{} | val_loss {}", step, last, finite_or_dash(val, "{:.6f}")));
      }
      sum.last_val_loss = val;
    }
    const int every = cfg_.checkpoint.every;
    // The run's last step: a checkpoint unless checkpoint.at_end is false and
    // it is the horizon (an early end, train.stop_at_step, must resume).
    const bool at_last = step == last && (cfg_.checkpoint.at_end || last != cfg_.train.steps);
    if (stop || at_last || (every > 0 && step % every == 0)) sum.last_checkpoint = checkpoint(step, skipped);
    if (stop) {
      if (logger_)
        print_(fmt::format(
            "stopping after step {} {}; start the same command again to resume (checkpoint.resume: "
            "auto)",
            step, removed_note.empty() ? "on a stop request (SIGUSR1 or SIGTERM)" : "(" + removed_note + ")"));
      sum.stopped = true;
      break;
    }
  }
  return sum;
}

}  // namespace lattice
