// Safe commit of checkpoint step directories (issue 6, item 3).
//
// A checkpoint is a directory `<parent>/step_NNNNNNN` (step_%07d: the state
// after NNNNNNN optimizer updates). CheckpointWriter commits one like this:
//   1. begin(final_dir) creates `final_dir.tmp/` (a stale one left by a crash
//      is removed); callers write their files into it (file_path(name));
//   2. commit() fsyncs every file, then writes manifest.json LAST -- each
//      file's size and Checksum64 (XXH64, see checksum.h) -- and fsyncs it and
//      the directory;
//   3. renames `final_dir.tmp` to `final_dir` and fsyncs the parent;
//   4. replaces `<parent>/latest` atomically (latest.tmp, fsync, rename, fsync
//      the parent) with the name of the directory just committed.
// Invariants: a directory is complete iff its name is step_NNNNNNN (no
// suffix) and it holds manifest.json; a crash at any moment leaves every
// complete directory intact, and at worst a `.tmp` directory or a stale
// `latest` that the readers below skip. The files are flat (no subfolders).
//
// manifest.json:
//   {"format": "lattice-checkpoint-manifest", "version": 1, "checksum": "xxh64",
//    "files": {"model.safetensors": {"size": 123, "xxh64": "0123456789abcdef"}, ...}}
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"

namespace lattice::checkpoint {

inline constexpr std::string_view kManifestName = "manifest.json";
inline constexpr std::string_view kLatestName = "latest";

std::string step_dir_name(int64_t step);  // "step_0000010"
// The step of a name "step_" + at least 7 digits (nothing else); nullopt otherwise.
std::optional<int64_t> parse_step_dir_name(std::string_view name);
// Whether the directory `step_dir` (a trailing '/' or not) is an entry of
// the existing directory `parent`, however either is spelled.
bool is_entry_of(const std::string& step_dir, const std::string& parent);
// The step of the directory `dir` (its last component a step_NNNNNNN name,
// with a trailing '/' or not); nullopt otherwise.
std::optional<int64_t> step_of_dir(const std::string& dir);
// The steps of the step_NNNNNNN directories in `parent` (complete or not; no
// .tmp / .old leftovers), ascending; none when `parent` does not exist.
std::vector<int64_t> list_step_dirs(const std::string& parent);

class CheckpointWriter {
 public:
  // Starts a checkpoint whose committed path will be `final_dir`; abandons
  // any checkpoint this writer had begun and not committed.
  void begin(const std::string& final_dir);
  bool active() const { return active_; }
  const std::string& final_dir() const { return final_dir_; }
  std::string tmp_dir() const { return final_dir_ + ".tmp"; }
  std::string file_path(const std::string& name) const;  // where to write `name`

  // Records the digest of a file the caller wrote into tmp_dir(), so commit()
  // need not read it back. Files not recorded are read and checksummed.
  void add_file(const std::string& name, FileDigest digest);
  // Conveniences that write (and fsync) a file in tmp_dir() and record it.
  void write_file(const std::string& name, std::string_view contents);
  void write_safetensors(const std::string& name, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {});

  // Steps 2-4 above. Returns final_dir(). An existing final_dir (a step
  // written again) is replaced.
  std::string commit();

 private:
  bool active_ = false;
  std::string final_dir_;
  std::map<std::string, FileDigest> recorded_;
};

// Deletes the oldest complete step directories of `parent` so that at most
// `n` remain (n <= 0 keeps all); the one `latest` names is never deleted.
// Also removes `.tmp` / `.old` / `.deleting` leftovers of steps older than the newest
// complete one. Returns the paths removed.
std::vector<std::string> keep_last(const std::string& parent, int n);

// Removes the step_NNNNNNN.tmp directories of `parent`: writes a job did not
// finish (killed, or refused by a full disk), whose partial files would
// otherwise hold the space until the same step is written again. Only for
// the job that holds `parent`'s lock (no one else is writing). Returns the
// paths removed.
std::vector<std::string> remove_unfinished_writes(const std::string& parent);

// Throws one Error line naming the file when `dir` is not a complete,
// intact checkpoint: manifest missing or malformed, a file missing, of the
// wrong size (truncated) or with the wrong checksum.
void verify_checkpoint_dir(const std::string& dir);

struct LatestCheckpoint {
  std::string dir;  // the path of the step directory
  int64_t step = 0;
  std::vector<std::string> skipped;  // one line per newer candidate that failed (or a stale latest), saying why
  std::vector<std::string> damaged;  // the names of the newer step directories that failed to verify
};

// The resume: auto rule. The newest step directory that verifies (a step
// directory exists only once committed, so a newer one than `latest` names is
// complete: a crash between the rename and latest's update leaves latest
// behind, and latest is then only noted); nullopt if none, with `failures`
// (when given) then one line per candidate saying why.
std::optional<LatestCheckpoint> find_latest_complete(const std::string& parent,
                                                     std::vector<std::string>* failures = nullptr);

}  // namespace lattice::checkpoint
