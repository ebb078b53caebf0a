#include "checkpoint/atomic_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "checkpoint/posix_file.h"
#include "core/error.h"

namespace lattice::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::string_view kManifestFormat = "lattice-checkpoint-manifest";
constexpr size_t kMaxManifestBytes = size_t(64) << 20;
constexpr size_t kMaxLatestBytes = 4096;

void check_flat_name(const std::string& name, const std::string& where) {
  bool ok = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
            name.find('\0') == std::string::npos && name != kManifestName;
  LATTICE_CHECK(ok, "{}: '{}' is not a usable checkpoint file name (one path component, not {})", where, name,
                kManifestName);
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw_write_error(to, "cannot rename " + from + " to it", errno, __FILE__, __LINE__);
}

std::string parent_of(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "a/b/" -> "a/b"
  fs::path parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

std::string base_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// {step, name} of the entries of `parent` named step_NNNNNNN + suffix.
std::vector<std::pair<int64_t, std::string>> list_step_entries(const std::string& parent, std::string_view suffix) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
    if (auto step = parse_step_dir_name(std::string_view(name).substr(0, name.size() - suffix.size())))
      out.emplace_back(*step, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string manifest_text(const std::map<std::string, FileDigest>& files) {
  json manifest = {{"format", kManifestFormat}, {"version", 1}, {"checksum", "xxh64"}, {"files", json::object()}};
  for (const auto& [name, d] : files) manifest["files"][name] = {{"size", d.size}, {"xxh64", checksum_hex(d.checksum)}};
  return manifest.dump(1) + "\n";
}

// The name `latest` holds, without the trailing newline.
std::string read_latest(const std::string& path) {
  std::string name = read_text_file(path, kMaxLatestBytes);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

std::map<std::string, FileDigest> read_manifest(const std::string& dir) {
  std::string path = dir + "/" + std::string(kManifestName);
  json manifest;
  try {
    manifest = json::parse(read_text_file(path, kMaxManifestBytes));
  } catch (const json::parse_error& e) {
    LATTICE_FAIL("checkpoint {}: not valid JSON (byte {}): the manifest is corrupted", path, e.byte);
  }
  bool ok = manifest.is_object() && manifest.value("format", "") == kManifestFormat &&
            manifest.value("checksum", "") == "xxh64" && manifest.contains("files") && manifest["files"].is_object();
  LATTICE_CHECK(ok, "checkpoint {}: not a Lattice manifest (expected format \"{}\", checksum \"xxh64\" and files)",
                path, kManifestFormat);
  std::map<std::string, FileDigest> files;
  for (const auto& [name, entry] : manifest["files"].items()) {
    FileDigest d;
    bool good = entry.is_object() && entry.contains("size") && entry["size"].is_number_unsigned() &&
                entry.contains("xxh64") && entry["xxh64"].is_string() &&
                parse_checksum_hex(entry["xxh64"].get<std::string>(), d.checksum);
    LATTICE_CHECK(good, "checkpoint {}: the entry for '{}' is {}, expected {{\"size\": N, \"xxh64\": \"16 hex\"}}",
                  path, name, entry.dump());
    check_flat_name(name, path);
    d.size = entry["size"].get<uint64_t>();
    files.emplace(name, d);
  }
  return files;
}

}  // namespace

std::string step_dir_name(int64_t step) {
  LATTICE_CHECK(step >= 0, "checkpoint step {} is negative", step);
  return fmt::format("step_{:07d}", step);
}

std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "step_";
  if (!name.starts_with(prefix)) return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  if (digits.size() < 7 || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

// ---------------------------------------------------------------- writer

void CheckpointWriter::begin(const std::string& final_dir) {
  LATTICE_CHECK(!base_name(final_dir).empty(), "checkpoint: '{}' is not a directory path", final_dir);
  final_dir_ = fs::path(final_dir).lexically_normal().string();
  if (final_dir_.size() > 1 && final_dir_.back() == '/') final_dir_.pop_back();
  recorded_.clear();
  std::error_code ec;
  fs::remove_all(tmp_dir(), ec);
  if (ec) throw_write_error(tmp_dir(), "cannot remove a stale directory", ec.value(), __FILE__, __LINE__);
  fs::create_directories(tmp_dir(), ec);
  if (ec) throw_write_error(tmp_dir(), "cannot create", ec.value(), __FILE__, __LINE__);
  active_ = true;
}

std::string CheckpointWriter::file_path(const std::string& name) const {
  LATTICE_CHECK(active_, "checkpoint: file_path('{}') before begin()", name);
  check_flat_name(name, tmp_dir());
  return tmp_dir() + "/" + name;
}

void CheckpointWriter::add_file(const std::string& name, FileDigest digest) {
  check_flat_name(name, tmp_dir());
  LATTICE_CHECK(active_, "checkpoint: add_file('{}') before begin()", name);
  recorded_[name] = digest;
}

void CheckpointWriter::write_file(const std::string& name, std::string_view contents) {
  write_file_synced(file_path(name), contents);
  add_file(name, {contents.size(), checksum64(contents.data(), contents.size())});
}

void CheckpointWriter::write_safetensors(const std::string& name, const NamedTensors& tensors,
                                         const std::map<std::string, std::string>& metadata) {
  add_file(name, checkpoint::write_safetensors(file_path(name), tensors, metadata));
}

std::string CheckpointWriter::commit() {
  LATTICE_CHECK(active_, "checkpoint: commit() before begin()");
  const std::string tmp = tmp_dir();
  std::map<std::string, FileDigest> files;
  std::error_code ec;
  fs::directory_iterator entries(tmp, ec);
  LATTICE_CHECK(!ec, "checkpoint {}: cannot list: {}", tmp, ec.message());
  for (const auto& entry : entries) {
    std::string name = entry.path().filename().string();
    LATTICE_CHECK(entry.is_regular_file(ec), "checkpoint {}: '{}' is not a regular file; checkpoints are flat", tmp,
                  name);
    check_flat_name(name, tmp);
    std::string path = tmp + "/" + name;
    auto it = recorded_.find(name);
    if (it == recorded_.end()) {
      files[name] = digest_file(path);
    } else {
      uint64_t size = entry.file_size(ec);
      LATTICE_CHECK(size == it->second.size, "checkpoint {}: {} bytes on disk, but {} were written", path, size,
                    it->second.size);
      files[name] = it->second;
    }
    fsync_path(path);
  }
  for (const auto& [name, d] : recorded_)
    LATTICE_CHECK(files.count(name), "checkpoint {}/{}: recorded but not on disk", tmp, name);

  write_file_synced(tmp + "/" + std::string(kManifestName), manifest_text(files));  // last
  fsync_path(tmp);

  const std::string parent = parent_of(final_dir_);
  std::string old = final_dir_ + ".old";
  bool replacing = fs::exists(final_dir_, ec);
  if (replacing) {
    fs::remove_all(old, ec);
    rename_or_throw(final_dir_, old);
  }
  rename_or_throw(tmp, final_dir_);
  fsync_path(parent);
  if (replacing) fs::remove_all(old, ec);

  const std::string latest = parent + "/" + std::string(kLatestName);
  write_file_synced(latest + ".tmp", base_name(final_dir_) + "\n");
  if (fs::is_directory(latest, ec)) fs::remove(latest, ec);  // an empty one only: a hint, never data
  rename_or_throw(latest + ".tmp", latest);
  fsync_path(parent);
  active_ = false;
  return final_dir_;
}

// ---------------------------------------------------------------- readers

void verify_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  LATTICE_CHECK(fs::is_directory(dir, ec), "checkpoint {}: not a directory", dir);
  LATTICE_CHECK(fs::exists(dir + "/" + std::string(kManifestName), ec),
                "checkpoint {}/{}: missing: the checkpoint was never committed (interrupted write?)", dir,
                kManifestName);
  for (const auto& [name, want] : read_manifest(dir)) {
    std::string path = dir + "/" + name;
    struct stat st {};
    LATTICE_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
                  "checkpoint {}: missing (the manifest lists {} bytes)", path, want.size);
    uint64_t size = uint64_t(st.st_size);
    LATTICE_CHECK(size >= want.size, "checkpoint {}: truncated: {} bytes, the manifest says {}", path, size, want.size);
    LATTICE_CHECK(size == want.size, "checkpoint {}: {} bytes, the manifest says {}", path, size, want.size);
    FileDigest got = digest_file(path);
    LATTICE_CHECK(got.size == want.size && got.checksum == want.checksum,
                  "checkpoint {}: checksum {} does not match the manifest's {}: the file is corrupted", path,
                  checksum_hex(got.checksum), checksum_hex(want.checksum));
  }
}

bool is_entry_of(const std::string& step_dir, const std::string& parent) {
  std::error_code ec;
  return fs::equivalent(parent_of(step_dir), parent, ec);
}

std::optional<int64_t> step_of_dir(const std::string& dir) { return parse_step_dir_name(base_name(dir)); }

std::vector<int64_t> list_step_dirs(const std::string& parent) {
  std::vector<int64_t> steps;
  for (const auto& [step, name] : list_step_entries(parent, "")) steps.push_back(step);
  return steps;
}

std::optional<LatestCheckpoint> find_latest_complete(const std::string& parent, std::vector<std::string>* failures) {
  LatestCheckpoint found;
  std::set<std::string> tried;
  auto attempt = [&](const std::string& name) {
    if (!tried.insert(name).second) return false;
    try {
      verify_checkpoint_dir(parent + "/" + name);
    } catch (const Error& e) {
      found.skipped.push_back(e.message());
      found.damaged.push_back(name);
      return false;
    }
    found.dir = parent + "/" + name;
    found.step = *parse_step_dir_name(name);
    return true;
  };

  auto dirs = list_step_entries(parent, "");
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (!attempt(it->second)) continue;
    // latest is a hint only: say when it names something else.
    const std::string latest_path = parent + "/" + std::string(kLatestName);
    std::error_code ec;
    if (!fs::exists(latest_path, ec)) return found;
    std::string name;
    try {
      name = read_latest(latest_path);
    } catch (const Error& e) {  // a directory, say: as unusable as any bad latest
      found.skipped.push_back(fmt::format("checkpoint {} (latest is only a hint)", e.message()));
      return found;
    }
    if (!parse_step_dir_name(name))
      found.skipped.push_back(
          fmt::format("checkpoint {}: names '{}', not a step_NNNNNNN directory", latest_path, name));
    else if (name != it->second && std::find(found.damaged.begin(), found.damaged.end(), name) == found.damaged.end())
      found.skipped.push_back(
          fmt::format("checkpoint {}: names {}, not the newest complete step directory (a "
                      "crash before latest was updated leaves it behind)",
                      latest_path, name));
    return found;
  }
  if (failures) *failures = std::move(found.skipped);
  return std::nullopt;
}

std::vector<std::string> remove_unfinished_writes(const std::string& parent) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& [step, name] : list_step_entries(parent, ".tmp")) {
    const std::string path = parent + "/" + name;
    fs::remove_all(path, ec);
    LATTICE_CHECK(!ec, "checkpoint {}: cannot remove an unfinished write: {} — remove it, then start again", path,
                  ec.message());
    removed.push_back(path);
  }
  return removed;
}

std::vector<std::string> keep_last(const std::string& parent, int n) {
  std::vector<std::string> removed;
  if (n <= 0) return removed;
  std::string keep_latest;
  std::error_code ec;
  std::string latest_path = parent + "/" + std::string(kLatestName);
  if (fs::is_regular_file(latest_path, ec)) keep_latest = read_latest(latest_path);

  std::vector<std::pair<int64_t, std::string>> complete;
  for (const auto& entry : list_step_entries(parent, ""))
    if (fs::exists(parent + "/" + entry.second + "/" + std::string(kManifestName), ec)) complete.push_back(entry);
  // A step directory is renamed out of the step_NNNNNNN names first, so a
  // kill during its removal leaves a `.deleting` directory (removed by the
  // next call) instead of a half-deleted checkpoint that looks like one.
  auto remove = [&](const std::string& name) {
    std::string path = parent + "/" + name;
    if (const std::optional<int64_t> step = parse_step_dir_name(name)) {
      const std::string doomed = parent + "/" + step_dir_name(*step) + ".deleting";
      fs::remove_all(doomed, ec);
      fs::rename(path, doomed, ec);
      LATTICE_CHECK(!ec, "checkpoint {}: cannot rename to {} to remove it: {}", path, doomed, ec.message());
      fsync_path(parent);
      path = doomed;
    }
    fs::remove_all(path, ec);
    LATTICE_CHECK(!ec, "checkpoint {}: cannot remove: {}", path, ec.message());
    removed.push_back(parent + "/" + name);
  };
  int excess = int(complete.size()) - n;
  for (int i = 0; i < excess; ++i)
    if (complete[size_t(i)].second != keep_latest) remove(complete[size_t(i)].second);
  if (!complete.empty()) {
    int64_t newest = complete.back().first;
    for (std::string_view suffix : {".tmp", ".old", ".deleting"})
      for (const auto& [step, name] : list_step_entries(parent, suffix))
        if (step < newest) remove(name);
  }
  if (!removed.empty()) fsync_path(parent);
  return removed;
}

}  // namespace lattice::checkpoint
