// lattice train CONFIG [key=value ...] [--print-config]
#include <fmt/format.h>

#include <cstdio>

#include "booster/booster.h"
#include "booster/hybrid_parallel_plugin.h"
#include "booster/run_dir.h"
#include "cli.h"
#include "core/threads.h"

namespace lattice::cli {

int train(const Args& args) {
  std::string path;
  std::vector<std::string> overrides;
  bool print_config = false;
  for (const std::string& a : args) {
    if (a == "--print-config") {
      print_config = true;
    } else if (a.rfind("--", 0) == 0) {
      LATTICE_FAIL("train: unknown option '{}' (usage: lattice train CONFIG [key=value ...] [--print-config])", a);
    } else if (path.empty()) {
      path = a;
    } else {
      overrides.push_back(a);
    }
  }
  if (path.empty()) LATTICE_FAIL("train: no config file given (usage: lattice train CONFIG [key=value ...])");
  Config cfg = load_config(path, overrides);
  if (print_config) {
    std::fputs(to_yaml(cfg).c_str(), stdout);
    return 0;
  }
  set_num_threads(cfg.runtime.threads);
  auto print = [](const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  };
  // The plugin opens and checks the data before the run directory is written.
  auto plugin = std::make_unique<HybridParallelPlugin>(cfg, 1);
  RunInfo info;
  info.threads = num_threads();
  RunDir run = prepare_run_dir(cfg, info);
  print(fmt::format("lattice train {} | {} | {} threads | run dir {}", cfg.source, plugin->describe(),
                    info.threads, run.dir));
  Booster booster(cfg, std::move(plugin), print);
  TrainSummary s = booster.train(run.metrics_path);
  print(fmt::format("done: {} steps, final loss {:.6f}{}", s.steps_done, s.final_loss,
                    s.last_val_loss >= 0 ? fmt::format(", val_loss {:.6f}", s.last_val_loss) : ""));
  return 0;
}

}  // namespace lattice::cli
