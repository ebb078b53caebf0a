// Training metrics: metrics.jsonl lines and the console progress line.
//
// One JSON object per logged training step (ARCHITECTURE.md §5): step
// (updates completed, from 1), loss (mean over the step's valid tokens, %.9g
// so it round-trips), lr, grad_norm (before clipping), tokens, tokens_per_s,
// step_ms, mfu (fraction of peak), peak_mem_bytes, skipped, grad_sync_ms
// (exposed tie + dp gradient communication), bubble and bubble_theory (pp > 1),
// loss_scale (fp16: the scale the step's loss was multiplied by),
// device_pool_peak_bytes (runtime.device cuda: the most device memory in use
// from the CUDA memory pool, which also holds the backend's scratch that
// peak_mem_bytes does not count). Evaluation lines
// carry step and val_loss and no loss. Lines are flushed as written, so a
// killed job keeps every line it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace lattice {

struct TrainRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;
  double tokens_per_s = 0, step_ms = 0, mfu = 0;
  int64_t peak_mem_bytes = 0;
  int64_t skipped = 0;
  double bubble = -1, bubble_theory = -1;  // pipeline runs only (written when >= 0)
  double grad_sync_ms = 0;  // exposed gradient synchronisation (tie + dp) after the schedule, slowest rank
  double loss_scale = 0;    // fp16 runs only (written when > 0): the step's loss scale
  // CUDA runs only (written when >= 0): the device memory pool's high watermark, largest rank
  // (CudaBackend::pool_used_peak_bytes: peak_mem_bytes' tensors plus the backend's scratch)
  int64_t device_pool_peak_bytes = -1;
};

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // appends
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void log_train(const TrainRecord& r);
  void log_eval(int64_t step, double val_loss);
  // The file was unlinked while open (log.dir deleted or moved away): what
  // is written goes nowhere a reader can find.
  bool removed() const;
  const std::string& path() const { return path_; }

  static std::string train_json(const TrainRecord& r);
  static std::string eval_json(int64_t step, double val_loss);

 private:
  void write_line(const std::string& line);
  std::FILE* f_ = nullptr;
  std::string path_;
};

// `v` in the fmt format `spec` ("{:.6f}"), or "-" when it is not finite (a
// step with no token to average over, a skipped fp16 step's norm).
std::string finite_or_dash(double v, const char* spec);
// "step 10/200 | loss 3.1234 | lr 3.00e-04 | 12.3k tok/s | 45.2 ms | ETA 1m23s"
std::string progress_line(const TrainRecord& r, int64_t total_steps, double eta_s);
// The TensorBoard scalars of one train record: every numeric metrics.jsonl key
// under train/ (loss, lr, grad_norm, tokens, skipped, loss_scale for fp16 runs)
// or perf/ (the rest; bubble and bubble_theory only for pipeline runs).
std::vector<std::pair<std::string, float>> tensorboard_scalars(const TrainRecord& r);
std::string format_duration(double seconds);

}  // namespace lattice
