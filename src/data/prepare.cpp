#include "data/prepare.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include "core/error.h"
#include "data/shard.h"

namespace lattice::data {

namespace fs = std::filesystem;

namespace {

bool safe_byte(char c) { return c >= 0x21 && c <= 0x7E; }

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

// Encodes each chunk on a small pool of threads; result i holds chunk i's ids.
std::vector<std::vector<int32_t>> encode_chunks(const Tokenizer& tok, const std::vector<std::string_view>& chunks,
                                                int threads) {
  std::vector<std::vector<int32_t>> ids(chunks.size());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (size_t i; !failed && (i = next.fetch_add(1)) < chunks.size();) {
      try {
        tok.encode_into(chunks[i], ids[i]);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
  };
  const int n = std::min<int>(threads, int(chunks.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return ids;
}

std::string read_document(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) LATTICE_INPUT_FAIL("data prepare: cannot read input file {}: {}", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::string text(size_t(in.tellg()), '\0');
  in.seekg(0);
  in.read(text.data(), std::streamsize(text.size()));
  LATTICE_INPUT_CHECK(in.good() || text.empty(), "data prepare: short read from input file {}", path);
  return text;
}

std::string shard_path(const std::string& prefix, const char* split, int index) {
  return fmt::format("{}_{}_{:06d}.bin", prefix, split, index);
}

// Routes the token stream into val shards (the first val_tokens) and then
// train shards, at most shard_tokens per shard.
class SplitWriter {
 public:
  SplitWriter(const PrepareOptions& o, PrepareSummary& s) : opts_(o), summary_(s) {}

  void append(std::span<const int32_t> ids) {
    while (!ids.empty()) {
      const bool val = summary_.val_tokens < opts_.val_tokens;
      int64_t room = opts_.shard_tokens - (shard_ ? shard_->tokens() : 0);
      if (val) room = std::min(room, opts_.val_tokens - summary_.val_tokens);
      if (!shard_) open(val);
      const size_t n = size_t(std::min<int64_t>(room, int64_t(ids.size())));
      shard_->append(ids.first(n));
      (val ? summary_.val_tokens : summary_.train_tokens) += int64_t(n);
      ids = ids.subspan(n);
      if (int64_t(n) == room) close();  // shard full, or the val split complete
    }
  }

  void close() {
    if (!shard_) return;
    shard_->close();
    shard_.reset();
  }

  // Each shard is written as PATH.tmp (open below): commit() renames them all
  // once the prepare worked; discard() removes them after a failure, so the
  // shards of an earlier prepare stay as they were.
  void commit() {
    close();
    for (const auto* list : {&summary_.val_shards, &summary_.train_shards})
      for (const std::string& path : *list) {
        std::error_code ec;
        summary_.replaced += fs::exists(path, ec) ? 1 : 0;
        fs::rename(path + ".tmp", path);
      }
  }
  void discard() noexcept {
    shard_.reset();
    std::error_code ec;
    for (const auto* list : {&summary_.val_shards, &summary_.train_shards})
      for (const std::string& path : *list) fs::remove(path + ".tmp", ec);
  }

 private:
  void open(bool val) {
    auto& list = val ? summary_.val_shards : summary_.train_shards;
    list.push_back(shard_path(opts_.out_prefix, val ? "val" : "train", int(list.size())));
    shard_.emplace(list.back() + ".tmp", opts_.tokenizer);  // the header records the tokenizer
  }

  const PrepareOptions& opts_;
  PrepareSummary& summary_;
  std::optional<ShardWriter> shard_;
};

// Deletes PREFIX_{val,train}_NNNNNN.bin files that this run did not write.
void remove_stale_shards(PrepareSummary& s, const std::string& prefix) {
  fs::path p(prefix);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string stem = p.filename().string();
  std::set<std::string> ours;
  for (const auto* list : {&s.val_shards, &s.train_shards})
    for (const auto& k : *list) ours.insert(fs::path(k).filename().string());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    for (const char* split : {"_val_", "_train_"}) {
      const std::string head = stem + split;
      const bool numbered = name.size() == head.size() + 10 && name.starts_with(head) && name.ends_with(".bin") &&
                            name.find_first_not_of("0123456789", head.size()) == head.size() + 6;
      if (!numbered) continue;
      const std::string path = (dir / name).string();
      if (!ours.contains(name)) {
        fs::remove(path);
        s.removed_stale.push_back(path);
      }
    }
  }
}

void check_options(const PrepareOptions& o, const Tokenizer& tok) {
  LATTICE_INPUT_CHECK(!o.inputs.empty(), "data prepare: no input files (--input FILE...)");
  LATTICE_INPUT_CHECK(!o.out_prefix.empty(), "data prepare: no output prefix (--out PREFIX)");
  LATTICE_INPUT_CHECK(o.val_tokens >= 0, "data prepare: --val-tokens {} must be >= 0", o.val_tokens);
  LATTICE_INPUT_CHECK(o.shard_tokens >= 1 && o.shard_tokens <= kShardMaxTokens,
                      "data prepare: --shard-tokens {} must be in [1, {}] (the shard header's count is "
                      "an int32)",
                      o.shard_tokens, kShardMaxTokens);
  LATTICE_INPUT_CHECK(o.chunk_bytes >= 1, "data prepare: chunk_bytes {} must be >= 1", o.chunk_bytes);
  LATTICE_INPUT_CHECK(tok.vocab_size() <= kShardMaxTokenId + 1,
                      "data prepare: tokenizer {} has {} ids, but shards store uint16 ids (at most {})", tok.name(),
                      tok.vocab_size(), kShardMaxTokenId + 1);
  std::error_code ec;
  uintmax_t bytes = 0;
  for (const auto& in : o.inputs) {
    LATTICE_INPUT_CHECK(!fs::is_directory(in, ec),
                        "data prepare: input {} is a directory — pass the files in it ({}/*)", in, in);
    LATTICE_INPUT_CHECK(fs::is_regular_file(in, ec), "data prepare: input file {} not found", in);
    bytes += fs::file_size(in, ec);
  }
  LATTICE_INPUT_CHECK(bytes > 0, "data prepare: the {} input file(s) are empty — there is no text to tokenize",
                      o.inputs.size());
}

}  // namespace

std::vector<std::string_view> split_for_encoding(std::string_view text, int64_t target_bytes) {
  LATTICE_CHECK(target_bytes >= 1, "split_for_encoding: target_bytes {} must be >= 1", target_bytes);
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  const size_t target = size_t(target_bytes);
  while (text.size() - pos > target) {
    // The first safe cut at or after pos + target: p with text[p-1] == '\n'.
    size_t p = std::max<size_t>(pos + target, 2);
    size_t cut = std::string_view::npos;
    while (p < text.size()) {
      size_t nl = text.find('\n', p - 1);
      if (nl == std::string_view::npos || nl + 1 >= text.size()) break;
      if (nl >= 1 && safe_byte(text[nl - 1]) && safe_byte(text[nl + 1])) {
        cut = nl + 1;
        break;
      }
      p = nl + 2;
    }
    if (cut == std::string_view::npos) break;
    pieces.push_back(text.substr(pos, cut - pos));
    pos = cut;
  }
  pieces.push_back(text.substr(pos));
  return pieces;
}

std::vector<int32_t> encode_parallel(const Tokenizer& tokenizer, std::string_view text, int threads,
                                     int64_t chunk_bytes) {
  auto chunks = encode_chunks(tokenizer, split_for_encoding(text, chunk_bytes), resolve_threads(threads));
  std::vector<int32_t> ids;
  for (const auto& c : chunks) ids.insert(ids.end(), c.begin(), c.end());
  return ids;
}

namespace {

// Reads, encodes and writes every document, joined by the tokenizer's end of text.
void encode_into(const PrepareOptions& o, const Tokenizer& tok, int threads, SplitWriter& writer,
                 PrepareSummary& summary) {
  const int32_t eot = tok.eot_id();
  // Documents are read and encoded in batches of about batch_bytes, so memory
  // stays bounded while every thread has work.
  const int64_t batch_bytes = std::max<int64_t>(int64_t(64) << 20, int64_t(threads) * o.chunk_bytes * 4);
  size_t next_doc = 0;
  while (next_doc < o.inputs.size()) {
    std::vector<std::string> docs;
    int64_t bytes = 0;
    while (next_doc < o.inputs.size() && (docs.empty() || bytes < batch_bytes)) {
      docs.push_back(read_document(o.inputs[next_doc++]));
      bytes += int64_t(docs.back().size());
    }
    std::vector<std::string_view> chunks;
    std::vector<size_t> first_chunk;  // per document
    for (const auto& d : docs) {
      first_chunk.push_back(chunks.size());
      for (auto c : split_for_encoding(d, o.chunk_bytes)) chunks.push_back(c);
    }
    first_chunk.push_back(chunks.size());
    auto ids = encode_chunks(tok, chunks, threads);
    for (size_t d = 0; d < docs.size(); ++d) {
      if (summary.documents++ > 0) writer.append(std::span(&eot, 1));
      for (size_t c = first_chunk[d]; c < first_chunk[d + 1]; ++c) writer.append(ids[c]);
    }
    summary.input_bytes += bytes;
  }
}

}  // namespace

PrepareSummary prepare_data(const PrepareOptions& o) {
  std::unique_ptr<Tokenizer> tok = make_tokenizer(o.tokenizer, o.vocab_dir);
  check_options(o, *tok);
  const int threads = resolve_threads(o.threads);
  if (fs::path(o.out_prefix).has_parent_path()) fs::create_directories(fs::path(o.out_prefix).parent_path());

  PrepareSummary summary;
  summary.tokenizer = tok->name();
  summary.vocab_size = tok->vocab_size();
  SplitWriter writer(o, summary);
  try {
    encode_into(o, *tok, threads, writer, summary);
    LATTICE_INPUT_CHECK(summary.train_tokens > 0,
                        "data prepare: --val-tokens {} takes all {} tokens of the input, leaving none to train on — "
                        "pass at most {}",
                        o.val_tokens, summary.val_tokens, summary.val_tokens - 1);
    writer.commit();
  } catch (...) {
    writer.discard();
    throw;
  }
  remove_stale_shards(summary, o.out_prefix);
  return summary;
}

}  // namespace lattice::data
