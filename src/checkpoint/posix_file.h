// PosixFile: an owned file descriptor with the few POSIX calls that the
// checkpoint code needs. Every failure is a lattice::Error that names the file
// and the system's reason; partial writes and EINTR are retried. A failure to
// create, write, sync or close is a WriteError, which also carries the path and
// errno, so the caller that knows which setting chose the directory can say
// how to fix it (save_checkpoint: checkpoint.dir).
//
// Invariants: write_all() either writes every byte or throws; sync() is
// fsync(2), so after it returns the bytes are on stable storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace lattice::checkpoint {

class WriteError : public Error {
 public:
  WriteError(std::string message, std::string path, int error_number, const char* file, int line)
      : Error(std::move(message), "", file, line), path_(std::move(path)), errno_(error_number) {}
  const std::string& path() const { return path_; }
  int error_number() const { return errno_; }  // ENOSPC, EACCES, ...

 private:
  std::string path_;
  int errno_;
};
// Throws WriteError("`path`: `what`: <strerror(error_number)>").
[[noreturn]] void throw_write_error(const std::string& path, const std::string& what, int error_number,
                                    const char* file, int line);

// A command's output write that the system refused, as one InputError line:
// the failure, the fix for its errno (free space; make `dir` writable; fix the
// disk) and `after` (what the command left, how to go on).
[[noreturn]] void fail_output_write(const WriteError& e, const std::string& dir, const std::string& after);

class PosixFile {
 public:
  static PosixFile open_read(const std::string& path);
  static PosixFile create(const std::string& path);  // write-only, truncated, mode 0644
  static PosixFile open_dir(const std::string& path);
  PosixFile() = default;
  ~PosixFile();  // closes without checking; call close() to see errors
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const;
  size_t read_some(void* buf, size_t bytes);  // 0 at end of file
  void write_all(const void* buf, size_t bytes);
  void sync();
  void close();

 private:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// fsync(2) of a file or a directory (a directory's entries: creations, renames).
void fsync_path(const std::string& path);
// Creates or truncates `path`, writes `contents`, fsyncs and closes it.
void write_file_synced(const std::string& path, std::string_view contents);
// The whole file; files over max_bytes are an error naming the file.
std::string read_text_file(const std::string& path, size_t max_bytes);

}  // namespace lattice::checkpoint
