// GPT-2's byte-level BPE tokenizer, reading the released encoder.json and
// vocab.bpe from a vocab dir.
//
// encode(text):
//   1. Cut the bytes into maximal valid UTF-8 runs and single invalid bytes.
//   2. Pre-tokenize each valid run with GPT-2's pattern (PCRE2, UTF + UCP):
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      where \s means Unicode White_Space, as in the Python `regex` module
//      GPT-2 used (PCRE2's own \s also takes U+180E; see the .cpp). On valid
//      UTF-8 (all real text) this is exactly GPT-2's pre-tokenization.
//      Invalid bytes, which GPT-2's Python code cannot take at all, are pieces
//      of their own and still round-trip because BPE is byte-level: every
//      byte has a token. A valid run ends like the end of text for the
//      lookahead, so the spaces of "a  " before an invalid byte stay together.
//   3. BPE each piece: start from one token per byte and repeatedly merge
//      every occurrence of the adjacent pair with the lowest merge rank
//      (vocab.bpe line order), as GPT-2's encoder.py does. Pieces are cached
//      for the duration of one encode() call.
//
// Ids are GPT-2's own: 50256 base tokens, `<|endoftext|>` = 50256 (its id in
// encoder.json), vocab_size() = 50257. encode() never emits it (tokenizer.h).
// Thread safety: the tables and the compiled pattern are immutable after
// construction; each encode() call has its own match data and cache.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace lattice::data {

// GPT-2's printable stand-in for each byte (the alphabet of encoder.json and
// vocab.bpe): printable, non-space Latin-1 bytes stand for themselves, the
// other 68 bytes take code points 256, 257, ... in byte order.
std::array<uint32_t, 256> gpt2_byte_to_unicode();

class Gpt2Tokenizer final : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(const std::string& vocab_dir);
  ~Gpt2Tokenizer() override;

  std::string name() const override { return "gpt2"; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  int32_t base_vocab_size() const override { return int32_t(id_to_bytes_.size()); }

  // The pieces step 2 produces (their concatenation is `text`). For tests and
  // for checking where text may be split without changing the encoding.
  std::vector<std::string_view> pretokenize(std::string_view text) const;

 protected:
  void append_base_token(int32_t id, std::string& out) const override;

 private:
  struct Pattern;  // the compiled PCRE2 pattern
  struct Scratch;  // per-call match data and word cache
  struct Merge {
    int32_t rank, merged;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  using BytesToId = std::unordered_map<std::string, int32_t>;
  BytesToId load_encoder(const std::string& path);
  void load_merges(const std::string& path, const BytesToId& bytes_to_id);
  template <typename F>
  void for_each_piece(std::string_view text, Scratch& s, F&& f) const;
  void encode_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& out) const;
  void bpe(std::vector<int32_t>& word) const;

  std::vector<std::string> id_to_bytes_;        // bytes of each base token
  std::array<int32_t, 256> byte_id_{};          // id of each single byte
  std::unordered_map<uint64_t, Merge> merges_;  // (left, right) -> rank, merged id
  std::unique_ptr<Pattern> pattern_;
};

}  // namespace lattice::data
