#include "booster/run_dir.h"

#include <mpi.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "booster/version_info.h"
#include "core/error.h"
#include "core/threads.h"

namespace lattice {

namespace fs = std::filesystem;

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  LATTICE_CHECK(f.good(), "cannot write '{}'", path);
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
  j["blas_core"] = blas_core();  // the kernel set OpenBLAS picked for this CPU
  j["mpi"] = mpi_library_version();
  j["config"] = cfg.source;
  j["layout"] = {{"world", info.world_size}, {"tp", info.tp}, {"pp", info.pp}, {"dp", info.dp}};
  j["device"] = info.device;
  j["threads_per_rank"] = info.threads;
  j["host"] = host_name();
  j["started_unix"] = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
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
  } else if (fs::exists(r.metrics_path, ec) && fs::file_size(r.metrics_path, ec) > 0)
    config_fail(cfg, "log.dir",
                fmt::format("'{}' already holds metrics.jsonl from an earlier run; pick a new directory "
                            "(log.dir=...) or move that one away",
                            r.dir));
  fs::create_directories(r.dir, ec);
  LATTICE_CHECK(!ec, "log.dir: cannot create '{}': {}", r.dir, ec.message());
  write_file(r.config_path, to_yaml(cfg));
  write_file(r.run_info_path, run_info_json(cfg, info));
  return r;
}

}  // namespace lattice
