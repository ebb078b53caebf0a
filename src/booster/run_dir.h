// The run directory (ARCHITECTURE.md §5): log.dir holds config.yaml (the
// effective config), run_info.json (provenance), metrics.jsonl, and later
// tb/ and checkpoints/. A directory that already holds metrics is refused
// unless the run resumes, so no earlier run is overwritten.
//
// With log.per_rank, every rank also writes ranks/rank_NNNNN.log: what that
// rank would print (its header, one line per logged step with its own step
// time and peak memory, evaluations, checkpoints, the error that ended it).
// Lines are flushed as they are written, so a rank that dies keeps its log.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "booster/plugin.h"
#include "comm/communicator.h"
#include "config/config.h"

namespace lattice {

struct RunDir {
  std::string dir, config_path, run_info_path, metrics_path;
  std::string note;  // what was done to an earlier run's files, or ""
};

struct RunInfo {
  int world_size = 1, tp = 1, pp = 1, dp = 1, threads = 1;
  std::string device = "cpu";
  int64_t mpi_progress_us = 0;  // the MPI progress thread's interval; 0: off (comm/mpi_progress.h)
};

// Creates log.dir (and parents) and writes config.yaml and run_info.json.
// resume_step >= 0: the run resumes from that step's checkpoint; metrics.jsonl
// keeps its lines up to that step (later ones are logged again). Otherwise an
// existing metrics.jsonl is refused, except when the same run (the same
// config.yaml but for what may change on resume) is started again with
// checkpoint.resume auto before it wrote any checkpoint (killed, requeued):
// its metrics.jsonl and tb/ move aside to metrics.jsonl.N and tb.N, and
// RunDir::note says so.
RunDir prepare_run_dir(const Config& cfg, const RunInfo& info, int64_t resume_step = -1);
// The provenance JSON (version, git commit, build flags, BLAS and MPI versions, layout).
std::string run_info_json(const Config& cfg, const RunInfo& info);

// Checks, on every rank and before anything is allocated, that the paths the
// config names can be used: data.train and data.val match readable regular
// files, data.vocab_dir (gpt2 tokenizer) is a directory, checkpoint.resume
// (when a path) is a directory, and log.dir and checkpoint.dir are
// directories or can be created. Throws ConfigError (config_fail) naming the
// key, where it was set, the path and the fix.
void check_run_paths(const Config& cfg);
// Its data part alone (data.train, data.val, data.vocab_dir): verify-layout writes nothing.
// With train false, data.train is not checked (lattice eval reads data.val only).
void check_data_paths(const Config& cfg, bool train = true);

// An exclusive advisory lock (flock) on `<dir>/lattice.lock`, created with
// its directory, held until destruction or the process's end (a killed job
// releases it). Two jobs writing one log.dir or checkpoint.dir at once (a
// Slurm requeue while the old job still runs, two experiments sharing a
// directory) would interleave their checkpoints and metrics: the second is
// refused with one line naming `key`, the directory and the holder (host,
// pid, start time).
class DirLock {
 public:
  DirLock() = default;
  DirLock(const Config& cfg, const std::string& key, const std::string& dir);
  ~DirLock();
  DirLock(DirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  DirLock& operator=(DirLock&& o) noexcept;

 private:
  int fd_ = -1;
};
// Rank 0's locks on log.dir and checkpoint.dir for the job's life.
std::vector<DirLock> lock_run_dirs(const Config& cfg);

// Every rank writes its share of each checkpoint into checkpoint.dir, so it
// must be one directory for the whole job (not node-local scratch, nor a
// relative path read in different working directories): each rank must see
// the lattice.lock rank 0 holds there (lock_run_dirs first). A ConfigError
// naming the first rank that does not. Collective over `world`.
void check_checkpoint_dir_shared(const Config& cfg, comm::Group& world);

// <log.dir>/ranks/rank_NNNNN.log
std::string rank_log_path(const Config& cfg, int rank);

// One rank's log file. Not shared between ranks; not thread-safe.
class RankLog {
 public:
  // Creates the parent directory; `append` keeps the lines of an earlier
  // run (a resumed one), otherwise the file starts empty.
  RankLog(const std::string& path, bool append);
  void line(const std::string& text);  // writes text and a newline, flushed
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Wraps `inner` so that each step the Booster logs (step 1, every log.every-th
// and the last, as in metrics.jsonl) adds to `log` the line
//   step S/N | loss L | step_ms X | peak_mem_mib M | grad_norm G
// with this rank's own time from execute_pipeline to the end of
// optimizer_step and its allocator peak; loss is '-' when the step had no
// valid tokens. Evaluations, checkpoint saves and timelines add a line each.
// Every call is forwarded unchanged, so the loop computes the same run.
std::unique_ptr<Plugin> with_rank_log(std::unique_ptr<Plugin> inner, const Config& cfg, std::shared_ptr<RankLog> log);

}  // namespace lattice
