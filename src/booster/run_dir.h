// The run directory (ARCHITECTURE.md §5): log.dir holds config.yaml (the
// effective config), run_info.json (provenance), metrics.jsonl, and later
// tb/ and checkpoints/. A directory that already holds metrics is refused
// unless the run resumes, so no earlier run is overwritten.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace lattice {

struct RunDir {
  std::string dir, config_path, run_info_path, metrics_path;
};

struct RunInfo {
  int world_size = 1, tp = 1, pp = 1, dp = 1, threads = 1;
  std::string device = "cpu";
};

// Creates log.dir (and parents) and writes config.yaml and run_info.json.
// resume_step >= 0: the run resumes from that step's checkpoint; metrics.jsonl
// keeps its lines up to that step (later ones are logged again). Otherwise an
// existing metrics.jsonl is refused.
RunDir prepare_run_dir(const Config& cfg, const RunInfo& info, int64_t resume_step = -1);
// The provenance JSON (version, git commit, build flags, BLAS and MPI versions, layout).
std::string run_info_json(const Config& cfg, const RunInfo& info);

}  // namespace lattice
