// Token shards in the llm.c format.
//
// Layout (little-endian): a header of 256 x int32 -- [0] magic 20240520,
// [1] version 1, [2] token count N, the rest zero -- then N x uint16 tokens.
// Shards are interchangeable with llm.c's `dev/data` output. Lattice's own
// writer also records the tokenizer in two header ints llm.c leaves zero:
// [3] kShardTokenizerTag, [4] the tokenizer (1 bytes, 2 gpt2), so a run
// whose data.tokenizer is another is refused (data/loader.h); a shard
// without the tag (llm.c's, or written before 2026-12-02) is not checked.
//
// Invariants: a Shard is a read-only memory map of a file that passed every
// check below; its tokens stay valid while the Shard lives. Every malformed
// file is one lattice::Error line that names the file, what was found, what
// was expected and how to fix it (regenerate with `lattice data prepare`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace lattice::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
inline constexpr int64_t kShardMaxTokens = INT32_MAX;  // the count is an int32
inline constexpr int32_t kShardMaxTokenId = UINT16_MAX;
inline constexpr int32_t kShardTokenizerTag = 0x4C415454;  // "LATT": header[4] names the tokenizer

// Streams tokens into one shard: the header is written with a zero count on
// open and rewritten with the true count by close(). Ids must fit uint16.
class ShardWriter {
 public:
  // tokenizer: "bytes" or "gpt2" is recorded in the header; "" records none.
  explicit ShardWriter(std::string path, std::string tokenizer = "");
  ~ShardWriter();  // closes silently if close() was not called (no throw)
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  void close();  // writes the header; errors (e.g. disk full) name the file
  int64_t tokens() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  void write_header();
  std::string path_, tokenizer_;
  std::FILE* file_ = nullptr;
  int64_t count_ = 0;
};

// Writes a whole shard at once.
void write_shard(const std::string& path, std::span<const int32_t> tokens, const std::string& tokenizer = "");

// A validated, memory-mapped shard. Move-only.
// A mapped shard that shrinks under the run (truncated or rewritten in
// place) ends the process with one line naming it, from a SIGBUS handler
// installed with the first mapping. A rank other than 0 waits `seconds`
// before that line, so a job whose ranks all read the shard prints it once
// (rank 0's exit ends the job first), as fail_job does.
void set_fault_report_delay(unsigned seconds);

class Shard {
 public:
  static Shard open(const std::string& path);
  Shard() = default;
  ~Shard();
  Shard(Shard&& o) noexcept;
  Shard& operator=(Shard&& o) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return n_tokens_; }
  std::span<const uint16_t> tokens() const { return {tokens_, size_t(n_tokens_)}; }
  // The tokenizer the header records ("bytes", "gpt2"), or "" when it records none.
  const std::string& tokenizer() const { return tokenizer_; }

 private:
  void release();
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t n_tokens_ = 0;
  std::string tokenizer_;
};

}  // namespace lattice::data
