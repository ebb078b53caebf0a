#include "booster/run_dir.h"

#include <fcntl.h>
#include <glob.h>
#include <mpi.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "booster/metrics.h"
#include "booster/tensorboard.h"
#include "booster/version_info.h"
#include "checkpoint/atomic_dir.h"
#include "comm/gather_strings.h"
#include "core/allocator.h"
#include "core/blas_core.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"

namespace lattice {

namespace fs = std::filesystem;

namespace {

// A file of log.dir; one that cannot be written (a full disk, a read-only
// directory) is one line that says why.
void write_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f.good())
    LATTICE_INPUT_FAIL(
        "log.dir: cannot write '{}': {} — free space (or fix the disk, or the directory's "
        "permissions) and start the same command again",
        path, errno ? std::strerror(errno) : "write error");
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(buf, &len);  // allowed before MPI_Init
  std::string v(buf, size_t(len));
  if (auto nl = v.find('\n'); nl != std::string::npos) v.resize(nl);
  while (!v.empty() && (v.back() == ',' || v.back() == ' ' || v.back() == '\0')) v.pop_back();
  return v;
}

}  // namespace

std::string run_info_json(const Config& cfg, const RunInfo& info) {
  nlohmann::ordered_json j;
  j["version"] = kLatticeVersion;
  j["git_commit"] = kLatticeGitCommit;
  j["build"] = {{"type", kLatticeBuildType}, {"cxx_flags", kLatticeCxxFlags}, {"cuda", kLatticeCuda}};
  j["blas"] = blas_config();
  j["blas_core"] = blas_core();                    // the kernel set OpenBLAS runs on this CPU
  j["blas_core_note"] = blas_core_restart_note();  // "" unless lattice restarted for better kernels
  j["mpi"] = mpi_library_version();
  j["config"] = cfg.source;
  j["layout"] = {{"world", info.world_size}, {"tp", info.tp}, {"pp", info.pp}, {"dp", info.dp}};
  j["device"] = info.device;
  j["threads_per_rank"] = info.threads;
  j["mpi_progress_us"] = info.mpi_progress_us;
  j["host"] = host_name();
  j["started_unix"] =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return j.dump(2) + "\n";
}

namespace {

// Keeps the metrics lines of steps <= `step` (a run that died after its last
// checkpoint logged steps that the resumed run logs again), via a temporary
// file renamed over the original, so a crash here loses nothing.
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  std::string kept, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  in.close();
  write_file(path + ".tmp", kept);
  fs::rename(path + ".tmp", path);
}

// Whether log.dir's metrics are this run's own, started again with resume
// auto before any checkpoint was written: its config.yaml is this config but
// for what may change on resume (auto found no checkpoint to resume).
bool same_run_without_checkpoint(const Config& cfg, const std::string& config_path) {
  if (cfg.checkpoint.resume != "auto") return false;
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) return false;
  try {
    return !first_difference(with_resumable_settings(load_written_config(config_path), cfg), cfg).has_value();
  } catch (const Error&) {
    return false;  // not a config this version reads: not the same run
  }
}

}  // namespace

RunDir prepare_run_dir(const Config& cfg, const RunInfo& info, int64_t resume_step) {
  RunDir r;
  r.dir = cfg.log.dir;
  r.config_path = r.dir + "/config.yaml";
  r.run_info_path = r.dir + "/run_info.json";
  r.metrics_path = r.dir + "/metrics.jsonl";
  std::error_code ec;
  if (resume_step >= 0 && fs::exists(r.metrics_path, ec)) {
    truncate_metrics(r.metrics_path, resume_step);
    if (fs::is_directory(r.dir + "/tb", ec)) truncate_event_files(r.dir + "/tb", resume_step);  // likewise
  } else if (fs::exists(r.metrics_path, ec) && fs::file_size(r.metrics_path, ec) > 0) {
    if (!same_run_without_checkpoint(cfg, r.config_path))
      config_fail(cfg, "log.dir",
                  fmt::format("'{}' already holds metrics.jsonl from an earlier run; pick a new directory "
                              "(log.dir=...) or move that one away",
                              r.dir));
    int n = 1;
    while (fs::exists(fmt::format("{}.{}", r.metrics_path, n), ec) || fs::exists(fmt::format("{}/tb.{}", r.dir, n), ec))
      ++n;
    fs::rename(r.metrics_path, fmt::format("{}.{}", r.metrics_path, n), ec);
    LATTICE_INPUT_CHECK(!ec, "log.dir: cannot move '{}' aside: {}", r.metrics_path, ec.message());
    if (fs::is_directory(r.dir + "/tb", ec)) {
      fs::rename(r.dir + "/tb", fmt::format("{}/tb.{}", r.dir, n), ec);
      LATTICE_INPUT_CHECK(!ec, "log.dir: cannot move '{}/tb' aside: {}", r.dir, ec.message());
    }
    r.note = fmt::format(
        "log.dir: the earlier run of this config in '{}' wrote no checkpoint; it starts again from "
        "step 1 (its metrics.jsonl moved to metrics.jsonl.{})",
        r.dir, n);
  }
  fs::create_directories(r.dir, ec);
  LATTICE_CHECK(!ec, "log.dir: cannot create '{}': {}", r.dir, ec.message());
  write_file(r.config_path, to_yaml(cfg));
  write_file(r.run_info_path, run_info_json(cfg, info));
  return r;
}

// ---- locks ----

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

DirLock::DirLock(const Config& cfg, const std::string& key, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) config_fail(cfg, key, fmt::format("cannot create '{}': {}", dir, ec.message()));
  const std::string path = dir + "/lattice.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) config_fail(cfg, key, fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[256] = {};
    if (::pread(fd_, buf, sizeof buf - 1, 0) > 0) holder = buf;
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) config_fail(cfg, key, fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
    config_fail(cfg, key,
                fmt::format("'{}' is in use by a running job ({}) — wait for it to end, or pick another directory", dir,
                            holder.empty() ? "holder unknown" : holder));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = fmt::format("host {}, pid {}, since {}\n", host, ::getpid(), utc_now());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != ssize_t(who.size())) {
    // The lock holds without its note; a refused job then says "holder unknown".
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

std::vector<DirLock> lock_run_dirs(const Config& cfg) {
  std::vector<DirLock> locks;
  locks.emplace_back(cfg, "log.dir", cfg.log.dir);
  std::error_code ec;
  if (!fs::equivalent(cfg.log.dir, cfg.checkpoint.dir, ec))
    locks.emplace_back(cfg, "checkpoint.dir", cfg.checkpoint.dir);
  return locks;
}

void check_checkpoint_dir_shared(const Config& cfg, comm::Group& world) {
  if (world.size() == 1) return;
  // Rank 0's lock note (host, pid, start time) is unique to this job: a rank
  // that reads another one, or none, sees another directory.
  std::ifstream in(cfg.checkpoint.dir + "/lattice.lock");
  std::string note;
  std::getline(in, note);
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  const std::vector<std::string> seen = comm::all_gather_strings(world, note + '\0' + host_name() + '\0' + cwd);
  auto part = [](const std::string& s, int i) {
    size_t b = 0;
    for (int k = 0; k < i; ++k) b = s.find('\0', b) + 1;
    return s.substr(b, s.find('\0', b) - b);
  };
  for (int r = 1; r < world.size(); ++r) {
    if (part(seen[size_t(r)], 0) == part(seen[0], 0)) continue;
    config_fail(
        cfg, "checkpoint.dir",
        fmt::format("'{}' is not one directory for the whole job: rank {} (host {}, in {}) does not see the "
                    "lattice.lock that rank 0 (host {}) holds there — every rank writes its share of each "
                    "checkpoint there: put it on a file system all ranks share",
                    cfg.checkpoint.dir, r, part(seen[size_t(r)], 1), part(seen[size_t(r)], 2), part(seen[0], 1)));
  }
}

// ---- paths checked before anything is allocated ----

namespace {

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

std::string cwd() {
  std::error_code ec;
  return fs::current_path(ec).string();
}

// Every match of a shard glob must be a regular file this process can open.
void check_shards(const Config& cfg, const std::string& key, const std::string& pattern, const char* split) {
  if (pattern.empty()) return;
  std::vector<std::string> paths = glob_paths(pattern);
  if (paths.empty())
    config_fail(cfg, key,
                fmt::format("no file matches '{}' (relative to {}) — write shards with `lattice data prepare --out "
                            "PREFIX` and point {} at PREFIX_{}_*.bin",
                            pattern, cwd(), key, split));
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec))
      config_fail(cfg, key,
                  fmt::format("'{}' matches the directory '{}' — match shard files, e.g. '{}/PREFIX_{}_*.bin'", pattern,
                              p, p, split));
    if (fs::is_symlink(p, ec) && !fs::exists(p, ec))
      config_fail(cfg, key,
                  fmt::format("'{}' matches '{}', a link to nothing — remove it or restore its target", pattern, p));
    if (!fs::is_regular_file(p, ec))
      config_fail(cfg, key,
                  fmt::format("'{}' matches '{}', which is not a regular file — match shard files only", pattern, p));
    if (::access(p.c_str(), R_OK) != 0 || !std::ifstream(p, std::ios::binary))
      config_fail(cfg, key,
                  fmt::format("'{}' matches '{}', which cannot be read ({}) — check its permissions", pattern, p,
                              std::strerror(errno)));
  }
}

// A directory the run writes into, outside every checkpoint step directory:
// it exists as a writable directory, or it
// can be created: its nearest existing ancestor is a writable directory in
// which making a directory works (tried with a probe of this process's own,
// removed at once, so ranks checking at the same time never see each other's
// and a run that fails later leaves nothing behind; some file systems, /proc
// or a full disk, refuse what the permissions allow).
void check_output_dir(const Config& cfg, const std::string& key, const std::string& dir) {
  std::error_code ec;
  // A committed checkpoint is never written into: a run there would put its
  // own steps inside another run's, which that run's keep_last deletes with
  // it (checkpoint.dir=.../step_NNNNNNN, meant as checkpoint.resume=...).
  const fs::path self = fs::absolute(dir, ec).lexically_normal();
  for (fs::path p = self; !p.empty(); p = p.parent_path()) {
    if (checkpoint::step_of_dir(p.string()) && fs::exists(p / std::string(checkpoint::kManifestName), ec)) {
      const std::string step = p == self ? dir : p.string();
      config_fail(cfg, key,
                  fmt::format("'{}' is {} checkpoint step directory{}, which no run writes into — to continue from "
                              "that checkpoint set checkpoint.resume={} (to start from its weights, "
                              "checkpoint.init_from), and point {} at a directory of this run's own",
                              dir, p == self ? "a" : "inside the", p == self ? "" : " '" + step + "'", step, key));
    }
    if (p == p.parent_path()) break;  // the root
  }
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec))
      config_fail(cfg, key,
                  fmt::format("'{}' is a file, not a directory — point {} at a directory (it is created "
                              "when missing)",
                              dir, key));
    if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0)
      config_fail(cfg, key,
                  fmt::format("directory '{}' is not readable and writable ({}) — fix its permissions or "
                              "choose another {}",
                              dir, std::strerror(errno), key));
    return;
  }
  fs::path up = fs::path(dir).parent_path();
  while (!up.empty() && !fs::exists(up, ec)) up = up.parent_path();
  if (up.empty()) up = ".";
  if (!fs::is_directory(up, ec))
    config_fail(cfg, key,
                fmt::format("'{}' cannot be created: '{}' is a file, not a directory — choose another {}", dir,
                            up.string(), key));
  if (::access(up.c_str(), W_OK | X_OK) != 0)
    config_fail(cfg, key,
                fmt::format("'{}' cannot be created: '{}' is not writable ({}) — choose another {}", dir, up.string(),
                            std::strerror(errno), key));
  std::string probe = (up / ".lattice-probe-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr)
    config_fail(cfg, key,
                fmt::format("'{}' cannot be created: making a directory in '{}' fails ({}) — choose another {}", dir,
                            up.string(), std::strerror(errno), key));
  ::rmdir(probe.c_str());
}

std::string steps_text(const std::vector<int64_t>& steps) {
  const std::string first = checkpoint::step_dir_name(steps.front());
  return steps.size() == 1 ? first : fmt::format("{} to {}", first, checkpoint::step_dir_name(steps.back()));
}

// checkpoint.dir holds no checkpoint that this run would write over, or that
// checkpoint.keep_last would delete: none when the run starts fresh
// (resume: never) or from a checkpoint elsewhere, none past the step it
// resumes from when that is one of them. resume: auto continues whatever the
// directory holds (resolve_resume).
void check_checkpoint_dir_owner(const Config& cfg) {
  const std::string& r = cfg.checkpoint.resume;
  if (r == "auto") return;
  const std::vector<int64_t> steps = checkpoint::list_step_dirs(cfg.checkpoint.dir);
  if (steps.empty()) return;
  if (r == "never" || !checkpoint::is_entry_of(r, cfg.checkpoint.dir)) {
    const std::string start = r == "never" ? "starting fresh (checkpoint.resume: never)" : "resuming from '" + r + "'";
    config_fail(cfg, "checkpoint.dir",
                fmt::format("'{}' already holds the checkpoints of another run ({}), which this run, {}, would "
                            "overwrite or delete — pick a new directory (checkpoint.dir=...), move them away, or "
                            "continue that run with checkpoint.resume: auto",
                            cfg.checkpoint.dir, steps_text(steps), start));
  }
  const std::optional<int64_t> step = checkpoint::step_of_dir(r);
  std::vector<int64_t> later;
  for (int64_t s : steps)
    if (!step || s > *step) later.push_back(s);
  if (!later.empty())
    config_fail(
        cfg, "checkpoint.dir",
        fmt::format("'{}' holds checkpoints past the one this run resumes from ({}), which it would "
                    "overwrite — to branch from '{}' start new directories (log.dir=..., and checkpoint.dir=... "
                    "where it is set), or move {} away",
                    cfg.checkpoint.dir, steps_text(later), r, later.size() == 1 ? "it" : "them"));
}

void check_resume_path(const Config& cfg) {
  const std::string& r = cfg.checkpoint.resume;
  if (r == "auto" || r == "never") return;
  const char* fix = "name a checkpoint step directory (.../step_NNNNNNN), or use auto or never";
  std::error_code ec;
  if (!fs::exists(r, ec)) config_fail(cfg, "checkpoint.resume", fmt::format("'{}' does not exist — {}", r, fix));
  if (!fs::is_directory(r, ec))
    config_fail(cfg, "checkpoint.resume", fmt::format("'{}' is a file, not a directory — {}", r, fix));
  if (::access(r.c_str(), R_OK | X_OK) != 0)
    config_fail(cfg, "checkpoint.resume",
                fmt::format("directory '{}' cannot be read ({}) — fix its permissions", r, std::strerror(errno)));
  if (!fs::exists(fs::path(r) / std::string(checkpoint::kManifestName), ec))
    config_fail(
        cfg, "checkpoint.resume",
        fmt::format("'{}' holds no {}, so it is not a complete checkpoint — {}", r, checkpoint::kManifestName, fix));
}

// checkpoint.init_from: a readable directory (which checkpoint in it, and
// whether its model is this config's, is decided at start: lattice train).
void check_init_from_path(const Config& cfg) {
  const std::string& p = cfg.checkpoint.init_from;
  if (p.empty()) return;
  const char* fix = "name a step, checkpoint or run directory of the run whose weights start this one";
  std::error_code ec;
  if (!fs::is_directory(p, ec))
    config_fail(
        cfg, "checkpoint.init_from",
        fmt::format("'{}' {} — {}", p, fs::exists(p, ec) ? "is a file, not a directory" : "does not exist", fix));
  if (::access(p.c_str(), R_OK | X_OK) != 0)
    config_fail(cfg, "checkpoint.init_from",
                fmt::format("directory '{}' cannot be read ({}) — fix its permissions", p, std::strerror(errno)));
}

}  // namespace

void check_data_paths(const Config& cfg, bool train) {
  for (size_t s = 0; train && s < cfg.data.train.size(); ++s)
    check_shards(cfg, train_source_key(cfg, s), cfg.data.train[s].path, "train");
  check_shards(cfg, "data.val", cfg.data.val, "val");
  std::error_code ec;
  if (cfg.data.tokenizer == TokenizerName::gpt2 && !cfg.data.vocab_dir.empty() &&
      !fs::is_directory(cfg.data.vocab_dir, ec))
    config_fail(cfg, "data.vocab_dir",
                fmt::format("'{}' is not a directory — point it at the gpt2 tokenizer files (encoder.json, "
                            "vocab.bpe), or remove it: train reads token ids only",
                            cfg.data.vocab_dir));
}

void check_run_paths(const Config& cfg) {
  check_data_paths(cfg);
  check_resume_path(cfg);
  check_init_from_path(cfg);
  check_output_dir(cfg, "log.dir", cfg.log.dir);
  check_output_dir(cfg, "checkpoint.dir", cfg.checkpoint.dir);
  check_checkpoint_dir_owner(cfg);
}

// ---- per-rank logs ----

std::string rank_log_path(const Config& cfg, int rank) {
  return fmt::format("{}/ranks/rank_{:05d}.log", cfg.log.dir, rank);
}

RankLog::RankLog(const std::string& path, bool append) : path_(path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  LATTICE_CHECK(!ec, "log.per_rank: cannot create the directory of '{}': {}", path, ec.message());
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  LATTICE_CHECK(out_.good(), "log.per_rank: cannot open '{}' for writing", path);
}

void RankLog::line(const std::string& text) {
  out_ << text << '\n';
  out_.flush();
}

namespace {

class RankLogPlugin final : public Plugin {
 public:
  RankLogPlugin(std::unique_ptr<Plugin> inner, const Config& cfg, std::shared_ptr<RankLog> log)
      : inner_(std::move(inner)),
        log_(std::move(log)),
        every_(cfg.log.every),
        last_(cfg.train.stop_at_step > 0 ? cfg.train.stop_at_step : cfg.train.steps) {}

  std::string describe() const override { return inner_->describe(); }
  std::string stage_map() const override { return inner_->stage_map(); }
  StepStats execute_pipeline(int64_t step) override {
    timer_.reset();
    stats_ = inner_->execute_pipeline(step);
    return stats_;
  }
  UpdateStats optimizer_step(int64_t step, double lr) override {
    UpdateStats u = inner_->optimizer_step(step, lr);
    const double ms = timer_.seconds() * 1e3;
    step_ = step;
    if (step % every_ == 0 || step == 1 || step == last_) {  // the steps the Booster logs
      std::string loss =
          stats_.valid_tokens > 0 ? fmt::format("{:.6f}", stats_.loss_sum / double(stats_.valid_tokens)) : "-";
      log_->line(fmt::format("step {}/{} | loss {} | step_ms {:.1f} | peak_mem_mib {:.1f} | grad_norm {:.3f}{}", step,
                             last_, loss, ms, double(inner_->local_peak_mem_bytes()) / 1048576.0, u.grad_norm,
                             u.skipped ? " | skipped (non-finite gradients)" : ""));
    }
    return u;
  }
  double evaluate(int64_t batches) override {
    Timer t;
    double v = inner_->evaluate(batches);
    log_->line(fmt::format("step {}/{} | val_loss {} | eval_ms {:.1f}", step_, last_, finite_or_dash(v, "{:.6f}"),
                           t.seconds() * 1e3));
    return v;
  }
  bool has_validation() const override { return inner_->has_validation(); }
  int64_t param_count() const override { return inner_->param_count(); }
  double flops_per_token() const override { return inner_->flops_per_token(); }
  int64_t local_peak_mem_bytes() const override { return inner_->local_peak_mem_bytes(); }
  Device device() const override { return inner_->device(); }
  std::vector<double> max_over_ranks(std::vector<double> v) override { return inner_->max_over_ranks(std::move(v)); }
  void save_checkpoint(const std::string& step_dir, int64_t step, int64_t skipped) override {
    Timer t;
    inner_->save_checkpoint(step_dir, step, skipped);
    log_->line(fmt::format("checkpoint {} written in {:.1f} s", step_dir, t.seconds()));
  }
  TrainerState load_checkpoint(const std::string& step_dir) override { return inner_->load_checkpoint(step_dir); }
  bool write_trace(const std::string& path) const override {
    const bool wrote = inner_->write_trace(path);
    if (wrote) log_->line("timeline written to " + path);
    return wrote;
  }

 private:
  std::unique_ptr<Plugin> inner_;
  std::shared_ptr<RankLog> log_;
  int64_t every_, last_, step_ = 0;
  Timer timer_;
  StepStats stats_;
};

}  // namespace

std::unique_ptr<Plugin> with_rank_log(std::unique_ptr<Plugin> inner, const Config& cfg, std::shared_ptr<RankLog> log) {
  return std::make_unique<RankLogPlugin>(std::move(inner), cfg, std::move(log));
}

}  // namespace lattice
