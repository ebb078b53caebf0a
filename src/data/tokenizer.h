// Tokenizers: text <-> token ids.
//
//   bytes  one token per byte (ids 0..255); `<|endoftext|>` = 256.
//   gpt2   GPT-2's byte-level BPE from encoder.json + vocab.bpe (gpt2_tokenizer.h).
//
// Ids: the base vocabulary takes ids [0, base_vocab_size()); special tokens
// take the ids right after it, so vocab_size() = base + number of specials.
// For gpt2 this is GPT-2's own layout: 50256 base tokens and `<|endoftext|>`
// = 50256, the id encoder.json gives it, so ids match the released GPT-2.
//
// Special tokens are never produced by encode(): the literal text
// "<|endoftext|>" is encoded as ordinary text (as GPT-2 and tiktoken's
// encode_ordinary do). Callers insert eot_id() themselves (data prepare puts
// it between documents). decode() renders a special id as its name.
//
// Invariants: decode(encode(x)) == x for every byte string x, including
// invalid UTF-8. encode()/decode() are const and safe to call from several
// threads at once on one Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lattice::data {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string name() const = 0;
  // Appends the ids of `text` to `out`.
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const;
  // Errors on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  virtual int32_t base_vocab_size() const = 0;
  int32_t vocab_size() const { return base_vocab_size() + int32_t(specials_.size()); }

  int32_t eot_id() const { return special_id(kEndOfText); }
  // Appends a model's special tokens (e.g. BERT's [PAD] [MASK] [CLS] [SEP],
  // config's arch_traits) after the tokenizer's own; they get the next ids.
  void add_specials(const std::vector<std::string_view>& names);
  // The id of the special token `name`; one error line listing the known ones.
  int32_t special_id(std::string_view name) const;
  std::optional<int32_t> find_special(std::string_view name) const;
  // (name, id) in id order.
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const { return specials_; }

 protected:
  // Specials get ids base_vocab_size(), base_vocab_size() + 1, ... in order.
  void set_specials(const std::vector<std::string>& names);
  // Appends the bytes of base token `id` (0 <= id < base_vocab_size()).
  virtual void append_base_token(int32_t id, std::string& out) const = 0;

 private:
  std::vector<std::pair<std::string, int32_t>> specials_;
};

// name: "gpt2" (needs vocab_dir with encoder.json and vocab.bpe) or "bytes";
// model_specials are appended after its own specials (add_specials).
// Errors (one line): unknown name, missing vocab file.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& vocab_dir,
                                          const std::vector<std::string_view>& model_specials = {});

// One token per byte; `<|endoftext|>` = 256.
class BytesTokenizer final : public Tokenizer {
 public:
  BytesTokenizer();
  std::string name() const override { return "bytes"; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  int32_t base_vocab_size() const override { return 256; }

 protected:
  void append_base_token(int32_t id, std::string& out) const override;
};

}  // namespace lattice::data
