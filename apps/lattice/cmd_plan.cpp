// lattice plan CONFIG [--world N] [key=value ...]
// A dry run in one process: no MPI, no model, no data. The world size is
// --world, or tp * pp * dp from the config (tp * pp when dp is derived).
#include <fmt/format.h>

#include <cstdio>

#include "args.h"
#include "booster/plan.h"
#include "cli.h"
#include "config/config.h"

namespace lattice::cli {

namespace {

struct PlanArgs {
  ConfigArgs config;
  int world = 0;  // 0: from the config
};

PlanArgs parse_plan_args(const Args& args) {
  PlanArgs p;
  ArgReader r("plan", "lattice plan CONFIG [--world N] [key=value ...]", args);
  p.config = read_config_args(r, [&](ArgReader& o) {
    if (!o.is("--world")) return false;
    p.world = o.number(1, 1 << 24, "a rank count in [1, 16777216]");
    return true;
  });
  return p;
}

}  // namespace

int plan(const Args& args) {
  PlanArgs a = parse_plan_args(args);
  const Config cfg = load_config(a.config.path, a.config.overrides);
  const int world = a.world > 0 ? a.world : default_world_size(cfg);
  const JobPlan job = make_job_plan(cfg, world);
  std::string text = fmt::format("lattice plan {} on {} rank(s): a dry run, nothing allocated\n\n", cfg.source, world);
  text += format_job_plan(job);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace lattice::cli
