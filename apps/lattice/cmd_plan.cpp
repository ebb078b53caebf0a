// lattice plan CONFIG [--world N] [key=value ...]
// A dry run in one process: no MPI, no model, no data. The world size is
// --world, or tp * pp * dp from the config (tp * pp when dp is derived).
#include <fmt/format.h>

#include <cstdio>

#include "booster/plan.h"
#include "cli.h"
#include "config/config.h"

namespace lattice::cli {

namespace {

constexpr const char* kPlanUsage = "usage: lattice plan CONFIG [--world N] [key=value ...]";

struct PlanArgs {
  std::string path;
  std::vector<std::string> overrides;
  int world = 0;  // 0: from the config
};

int parse_world(const std::string& text) {
  size_t used = 0;
  long n = 0;
  try {
    n = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1 || n > (1 << 24))
    LATTICE_INPUT_FAIL("plan: --world expects a positive rank count, got '{}' ({})", text, kPlanUsage);
  return int(n);
}

PlanArgs parse_plan_args(const Args& args) {
  PlanArgs p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--world") {
      if (i + 1 == args.size()) LATTICE_INPUT_FAIL("plan: --world needs a rank count ({})", kPlanUsage);
      p.world = parse_world(args[++i]);
    } else if (a.rfind("--world=", 0) == 0) {
      p.world = parse_world(a.substr(8));
    } else if (a.rfind("--", 0) == 0) {
      LATTICE_INPUT_FAIL("plan: unknown option '{}' ({})", a, kPlanUsage);
    } else if (p.path.empty()) {
      p.path = a;
    } else {
      p.overrides.push_back(a);
    }
  }
  if (p.path.empty()) LATTICE_INPUT_FAIL("plan: no config file given ({})", kPlanUsage);
  return p;
}

}  // namespace

int plan(const Args& args) {
  PlanArgs a = parse_plan_args(args);
  const Config cfg = load_config(a.path, a.overrides);
  const int world = a.world > 0 ? a.world : default_world_size(cfg);
  const JobPlan job = make_job_plan(cfg, world);
  std::string text = fmt::format("lattice plan {} on {} rank(s): a dry run, nothing allocated\n\n", cfg.source, world);
  text += format_job_plan(job);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace lattice::cli
