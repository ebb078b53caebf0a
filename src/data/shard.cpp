#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lattice::data {

namespace {

constexpr const char* kFix = "regenerate it with `lattice data prepare`";

// A shard truncated or rewritten in place while it is mapped: reading its
// lost pages raises SIGBUS, which killed the rank with a backtrace and no
// word about the data. The handler names the shard in one line and ends the
// process (the launcher then ends the job); a fault elsewhere goes to the
// handler that was there before (Open MPI's, or the default).
struct MappedRange {
  const char* begin = nullptr;
  const char* end = nullptr;
  char* path = nullptr;  // strdup'd: the handler only reads it
};
std::array<MappedRange, 8192> g_mapped;  // more shards than this go unnamed, not unread
std::mutex g_mapped_mutex;
struct sigaction g_previous_sigbus {};

unsigned g_report_delay_s = 0;

// Appends `s` to buf[0, cap) at *n (async-signal-safe: no allocation).
void append(char* buf, size_t cap, size_t* n, const char* s) {
  while (*s != '\0' && *n + 1 < cap) buf[(*n)++] = *s++;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const char* at = static_cast<const char*>(info->si_addr);
  for (const MappedRange& m : g_mapped) {
    if (m.begin == nullptr || at < m.begin || at >= m.end) continue;
    char line[4096];  // one write: lines of several ranks do not interleave
    size_t n = 0;
    append(line, sizeof line, &n, "lattice: error: data: shard ");
    append(line, sizeof line, &n, m.path);
    append(line, sizeof line, &n,
           " shrank while the run read it (SIGBUS): it was truncated or rewritten in place — write shards to new "
           "files (lattice data prepare writes and renames) and start the same command again to resume\n");
    // Another rank's report ends the job first (its launcher's SIGTERM only
    // interrupts the sleep; its SIGKILL follows).
    for (unsigned left = g_report_delay_s; left > 0;) left = ::sleep(left);
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, n);
    ::_exit(1);
  }
  ::sigaction(sig, &g_previous_sigbus, nullptr);  // not a shard: returning faults again, into that handler
  (void)context;
}

void register_mapping(const void* map, size_t bytes, const std::string& path) {
  std::lock_guard lock(g_mapped_mutex);
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(SIGBUS, &sa, &g_previous_sigbus) == 0;
  }();
  (void)installed;
  for (MappedRange& m : g_mapped) {
    if (m.begin != nullptr) continue;
    m.path = ::strdup(path.c_str());
    m.end = static_cast<const char*>(map) + bytes;
    m.begin = static_cast<const char*>(map);
    return;
  }
}

void unregister_mapping(const void* map) {
  std::lock_guard lock(g_mapped_mutex);
  for (MappedRange& m : g_mapped) {
    if (m.begin != map) continue;
    m.begin = m.end = nullptr;
    std::free(std::exchange(m.path, nullptr));
    return;
  }
}

}  // namespace

void set_fault_report_delay(unsigned seconds) { g_report_delay_s = seconds; }

// ---------------------------------------------------------------- writing

namespace {

// The header's tokenizer codes (shard.h): index = code.
constexpr std::array<const char*, 3> kTokenizerCodes = {"", "bytes", "gpt2"};

int32_t tokenizer_code(const std::string& name) {
  for (size_t i = 1; i < kTokenizerCodes.size(); ++i)
    if (name == kTokenizerCodes[i]) return int32_t(i);
  LATTICE_FAIL("shard: no header code for tokenizer '{}'", name);
}

}  // namespace

ShardWriter::ShardWriter(std::string path, std::string tokenizer)
    : path_(std::move(path)), tokenizer_(std::move(tokenizer)) {
  if (!tokenizer_.empty()) tokenizer_code(tokenizer_);  // a name the header can hold, before the file exists
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) LATTICE_INPUT_FAIL("shard {}: cannot create: {}", path_, std::strerror(errno));
  write_header();
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
}

void ShardWriter::write_header() {
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(count_);
  if (!tokenizer_.empty()) {
    header[3] = kShardTokenizerTag;
    header[4] = tokenizer_code(tokenizer_);
  }
  if (std::fseek(file_, 0, SEEK_SET) != 0 ||
      std::fwrite(header.data(), sizeof(int32_t), header.size(), file_) != header.size())
    LATTICE_INPUT_FAIL("shard {}: cannot write the header: {}", path_, std::strerror(errno));
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  LATTICE_CHECK(file_, "shard {}: append after close", path_);
  LATTICE_INPUT_CHECK(count_ + int64_t(tokens.size()) <= kShardMaxTokens,
                      "shard {}: {} tokens exceed the format's limit of {} per shard", path_,
                      count_ + int64_t(tokens.size()), kShardMaxTokens);
  std::vector<uint16_t> buf(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    if (id < 0 || id > kShardMaxTokenId)
      LATTICE_INPUT_FAIL(
          "shard {}: token {} has id {}, which does not fit the uint16 shard format "
          "(0..{}); use a tokenizer with at most 65536 ids",
          path_, count_ + int64_t(i), id, kShardMaxTokenId);
    buf[i] = uint16_t(id);
  }
  if (std::fwrite(buf.data(), sizeof(uint16_t), buf.size(), file_) != buf.size())
    LATTICE_INPUT_FAIL("shard {}: write failed: {}", path_, std::strerror(errno));
  count_ += int64_t(tokens.size());
}

void ShardWriter::close() {
  if (!file_) return;
  write_header();
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) LATTICE_INPUT_FAIL("shard {}: close failed: {}", path_, std::strerror(errno));
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, const std::string& tokenizer) {
  ShardWriter w(path, tokenizer);
  w.append(tokens);
  w.close();
}

// ---------------------------------------------------------------- reading

Shard Shard::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) LATTICE_INPUT_FAIL("shard {}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    LATTICE_INPUT_FAIL("shard {}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    LATTICE_INPUT_FAIL("shard {}: not a regular file", path);
  }
  int64_t bytes = st.st_size;
  if (bytes < kShardHeaderBytes) {
    ::close(fd);
    LATTICE_INPUT_FAIL("shard {}: file is {} bytes, shorter than the {}-byte header; {}", path, bytes,
                       kShardHeaderBytes, kFix);
  }
  void* map = ::mmap(nullptr, size_t(bytes), PROT_READ, MAP_SHARED, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) LATTICE_FAIL("shard {}: mmap failed: {}", path, std::strerror(map_err));

  Shard s;
  s.path_ = path;
  s.map_ = map;
  s.map_bytes_ = size_t(bytes);
  register_mapping(map, size_t(bytes), path);
  const auto* header = static_cast<const int32_t*>(map);
  if (header[0] != kShardMagic)
    LATTICE_INPUT_FAIL("shard {}: magic {}, expected {} (not a token shard in the llm.c format); {}", path, header[0],
                       kShardMagic, kFix);
  if (header[1] != kShardVersion)
    LATTICE_INPUT_FAIL("shard {}: version {}, expected {}; {}", path, header[1], kShardVersion, kFix);
  int64_t count = header[2];
  int64_t expected_bytes = kShardHeaderBytes + 2 * count;
  if (count < 0 || expected_bytes != bytes)
    LATTICE_INPUT_FAIL(
        "shard {}: header says {} tokens ({} bytes with the header) but the file is {} "
        "bytes (truncated or corrupt); {}",
        path, count, expected_bytes, bytes, kFix);
  s.n_tokens_ = count;
  if (header[3] == kShardTokenizerTag) {
    if (header[4] < 1 || size_t(header[4]) >= kTokenizerCodes.size())
      LATTICE_INPUT_FAIL("shard {}: the header names tokenizer code {}, which this build does not know (1 bytes, "
                         "2 gpt2); {}",
                         path, header[4], kFix);
    s.tokenizer_ = kTokenizerCodes[size_t(header[4])];
  }
  s.tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kShardHeaderBytes);
  return s;
}

Shard::~Shard() { release(); }

Shard::Shard(Shard&& o) noexcept { *this = std::move(o); }

Shard& Shard::operator=(Shard&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    tokens_ = std::exchange(o.tokens_, nullptr);
    n_tokens_ = std::exchange(o.n_tokens_, 0);
    tokenizer_ = std::move(o.tokenizer_);
  }
  return *this;
}

void Shard::release() {
  if (map_) {
    unregister_mapping(map_);
    ::munmap(map_, map_bytes_);
  }
  map_ = nullptr;
  tokens_ = nullptr;
  n_tokens_ = 0;
}

}  // namespace lattice::data
