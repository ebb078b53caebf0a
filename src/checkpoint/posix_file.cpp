#include "checkpoint/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace lattice::checkpoint {

namespace {

// One write(2)/read(2) moves at most this much (Linux caps a call near 2 GiB).
constexpr size_t kMaxIo = size_t(1) << 30;

// open(2), retried on EINTR: the descriptor, or -1 with errno set.
int open_retrying(const std::string& path, int flags) {
  int fd;
  do fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  while (fd < 0 && errno == EINTR);
  return fd;
}

int open_or_throw(const std::string& path, int flags, const char* what) {
  int fd = open_retrying(path, flags);
  if (fd < 0) LATTICE_FAIL("{}: cannot open {}: {}", path, what, std::strerror(errno));
  return fd;
}

}  // namespace

void throw_write_error(const std::string& path, const std::string& what, int error_number, const char* file, int line) {
  std::string f = file;  // from src/ on, as LATTICE_FAIL reports it
  if (auto pos = f.find("/src/"); pos != std::string::npos) f = f.substr(pos + 1);
  throw WriteError(fmt::format("{}: {}: {}", path, what, std::strerror(error_number)), path, error_number, f.c_str(),
                   line);
}

void fail_output_write(const WriteError& e, const std::string& dir, const std::string& after) {
  const int err = e.error_number();
  const std::string fix = err == ENOSPC || err == EDQUOT                 ? "free space (or fix the disk)"
                          : err == EACCES || err == EPERM || err == EROFS ? fmt::format("make '{}' writable", dir)
                                                                          : std::string("fix the disk");
  LATTICE_INPUT_FAIL("{} — {} and run the command again; {}", e.message(), fix, after);
}

PosixFile PosixFile::open_read(const std::string& path) {
  return PosixFile(open_or_throw(path, O_RDONLY, "for reading"), path);
}
PosixFile PosixFile::create(const std::string& path) {
  int fd = open_retrying(path, O_WRONLY | O_CREAT | O_TRUNC);
  if (fd < 0) throw_write_error(path, "cannot create", errno, __FILE__, __LINE__);
  return PosixFile(fd, path);
}
PosixFile PosixFile::open_dir(const std::string& path) {
  return PosixFile(open_or_throw(path, O_RDONLY | O_DIRECTORY, "as a directory"), path);
}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}
PosixFile::PosixFile(PosixFile&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
PosixFile& PosixFile::operator=(PosixFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

uint64_t PosixFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) LATTICE_FAIL("{}: cannot stat: {}", path_, std::strerror(errno));
  return uint64_t(st.st_size);
}

size_t PosixFile::read_some(void* buf, size_t bytes) {
  for (;;) {
    ssize_t got = ::read(fd_, buf, std::min(bytes, kMaxIo));
    if (got >= 0) return size_t(got);
    if (errno != EINTR) LATTICE_FAIL("{}: read failed: {}", path_, std::strerror(errno));
  }
}

void PosixFile::write_all(const void* buf, size_t bytes) {
  auto* p = static_cast<const char*>(buf);
  while (bytes > 0) {
    ssize_t put = ::write(fd_, p, std::min(bytes, kMaxIo));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw_write_error(path_, "write failed", put < 0 ? errno : EIO, __FILE__, __LINE__);
    p += put;
    bytes -= size_t(put);
  }
}

void PosixFile::sync() {
  if (::fsync(fd_) != 0) throw_write_error(path_, "fsync failed", errno, __FILE__, __LINE__);
}

void PosixFile::close() {
  int fd = std::exchange(fd_, -1);
  if (fd >= 0 && ::close(fd) != 0) throw_write_error(path_, "close failed", errno, __FILE__, __LINE__);
}

void fsync_path(const std::string& path) {
  PosixFile f = PosixFile::open_read(path);
  f.sync();
  f.close();
}

void write_file_synced(const std::string& path, std::string_view contents) {
  PosixFile f = PosixFile::create(path);
  f.write_all(contents.data(), contents.size());
  f.sync();
  f.close();
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  PosixFile f = PosixFile::open_read(path);
  uint64_t size = f.size();
  if (size > max_bytes) LATTICE_FAIL("{}: {} bytes, more than the {} expected of this file", path, size, max_bytes);
  std::string text(size_t(size), '\0');
  size_t have = 0;
  while (have < text.size()) {
    size_t got = f.read_some(text.data() + have, text.size() - have);
    if (got == 0) break;
    have += got;
  }
  text.resize(have);
  return text;
}

}  // namespace lattice::checkpoint
