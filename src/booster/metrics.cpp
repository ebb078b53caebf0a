#include "booster/metrics.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace lattice {

namespace {
// JSON has no NaN/Inf: write null so the file stays valid JSON.
std::string num(double v, const char* spec = "{:.9g}") {
  if (!std::isfinite(v)) return "null";
  return fmt::format(fmt::runtime(spec), v);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  LATTICE_CHECK(f_ != nullptr, "cannot open metrics file '{}' for writing", path);
}

bool MetricsWriter::removed() const {
  struct stat st {};
  return ::fstat(::fileno(f_), &st) == 0 && st.st_nlink == 0;
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

std::string MetricsWriter::train_json(const TrainRecord& r) {
  // The keys of some runs only: pipelines, fp16, CUDA.
  std::string optional;
  if (r.bubble >= 0)
    optional +=
        fmt::format(", \"bubble\": {}, \"bubble_theory\": {}", num(r.bubble, "{:.4g}"), num(r.bubble_theory, "{:.4g}"));
  if (r.loss_scale > 0) optional += fmt::format(", \"loss_scale\": {}", num(r.loss_scale));
  if (r.device_pool_peak_bytes >= 0)
    optional += fmt::format(", \"device_pool_peak_bytes\": {}", r.device_pool_peak_bytes);
  return fmt::format(
      "{{\"step\": {}, \"loss\": {}, \"lr\": {}, \"grad_norm\": {}, \"tokens\": {}, \"tokens_per_s\": {}, "
      "\"step_ms\": {}, \"mfu\": {}, \"peak_mem_bytes\": {}, \"skipped\": {}, \"grad_sync_ms\": {}{}}}",
      r.step, num(r.loss), num(r.lr), num(r.grad_norm), r.tokens, num(r.tokens_per_s, "{:.6g}"),
      num(r.step_ms, "{:.6g}"), num(r.mfu, "{:.6g}"), r.peak_mem_bytes, r.skipped, num(r.grad_sync_ms, "{:.4g}"),
      optional);
}

std::string MetricsWriter::eval_json(int64_t step, double val_loss) {
  return fmt::format("{{\"step\": {}, \"val_loss\": {}}}", step, num(val_loss));
}

void MetricsWriter::write_line(const std::string& line) {
  errno = 0;
  if (std::fputs((line + "\n").c_str(), f_) >= 0 && std::fflush(f_) == 0) return;
  LATTICE_INPUT_FAIL(
      "log.dir: cannot write '{}': {} — free space (or fix the disk) and start the same command again: "
      "it resumes from the last checkpoint",
      path_, errno ? std::strerror(errno) : "write error");
}

void MetricsWriter::log_train(const TrainRecord& r) { write_line(train_json(r)); }
void MetricsWriter::log_eval(int64_t step, double val_loss) { write_line(eval_json(step, val_loss)); }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const TrainRecord& r) {
  std::vector<std::pair<std::string, float>> v = {{"train/loss", float(r.loss)},
                                                  {"train/lr", float(r.lr)},
                                                  {"train/grad_norm", float(r.grad_norm)},
                                                  {"train/tokens", float(r.tokens)},
                                                  {"train/skipped", float(r.skipped)},
                                                  {"perf/tokens_per_s", float(r.tokens_per_s)},
                                                  {"perf/step_ms", float(r.step_ms)},
                                                  {"perf/mfu", float(r.mfu)},
                                                  {"perf/peak_mem_bytes", float(r.peak_mem_bytes)},
                                                  {"perf/grad_sync_ms", float(r.grad_sync_ms)}};
  if (r.loss_scale > 0) v.emplace_back("train/loss_scale", float(r.loss_scale));
  if (r.bubble >= 0) v.emplace_back("perf/bubble", float(r.bubble));
  if (r.bubble_theory >= 0) v.emplace_back("perf/bubble_theory", float(r.bubble_theory));
  if (r.device_pool_peak_bytes >= 0) v.emplace_back("perf/device_pool_peak_bytes", float(r.device_pool_peak_bytes));
  return v;
}

std::string finite_or_dash(double v, const char* spec) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-";
}

std::string progress_line(const TrainRecord& r, int64_t total_steps, double eta_s) {
  return fmt::format("step {}/{} | loss {} | lr {:.3e} | norm {} | {:.0f} tok/s | {:.1f} ms | ETA {}", r.step,
                     total_steps, finite_or_dash(r.loss, "{:.6f}"), r.lr, finite_or_dash(r.grad_norm, "{:.3f}"),
                     r.tokens_per_s, r.step_ms, format_duration(eta_s));
}

}  // namespace lattice
