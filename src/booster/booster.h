// Booster: the training loop. It talks to a Plugin only, so the same loop
// runs every layout:
//
//   for step in [first, last]:
//     lr = schedule(step)
//     plugin.execute_pipeline(step); plugin.optimizer_step(step, lr)
//     log metrics (metrics.jsonl + one progress line), evaluate when due
//     checkpoint every checkpoint.every steps, at `last`, and on a stop
//     request (booster/stop_signal.h, agreed over all ranks), then return
//
// first = the resumed checkpoint's step + 1; last = train.stop_at_step or
// train.steps.
//
// Library code never prints: progress lines go to the `print` callback the
// application gives (the CLI prints them on rank 0).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "booster/metrics.h"
#include "booster/plugin.h"
#include "config/config.h"
#include "mesh/process_group_mesh.h"
#include "optim/lr_schedule.h"

namespace lattice {

// The learning-rate schedule the config describes (warm-up, decay, horizon train.steps).
optim::LrSchedule lr_schedule(const Config& cfg);
// The mesh of a job: the config's layout over `world` (sizes from resolve_layout, parallel.order).
mesh::ProcessGroupMesh create_job_mesh(const Config& cfg, comm::Group world);

struct TrainSummary {
  int64_t steps_done = 0;       // the last step completed (the resumed step when none ran)
  bool stopped = false;         // ended early by a stop request (SIGUSR1 / SIGTERM)
  std::string last_checkpoint;  // the step directory written last ("" if none)
  double final_loss = 0;
  double last_val_loss = -1;  // -1: never evaluated
  int64_t steps_run = 0;      // steps this call ran
  int64_t steps_skipped = 0;  // of those, skipped on non-finite gradients (fp16)
};

class Booster {
 public:
  using Print = std::function<void(const std::string&)>;
  Booster(const Config& cfg, std::unique_ptr<Plugin> plugin, Print print);
  // Runs steps resumed.step + 1 .. (stop_at_step or steps) on every rank of
  // the job; the logging rank passes `metrics_path` (others "") and is the
  // only one that writes metrics and prints.
  TrainSummary train(const std::string& metrics_path, const TrainerState& resumed = {});
  Plugin& plugin() { return *plugin_; }

 private:
  bool eval_due(int64_t step, int64_t last) const;
  std::string checkpoint(int64_t step, int64_t skipped);  // collective; returns the step directory
  Config cfg_;
  std::unique_ptr<Plugin> plugin_;
  Print print_;
  bool logger_ = false;  // this rank writes metrics and prints
};

}  // namespace lattice
