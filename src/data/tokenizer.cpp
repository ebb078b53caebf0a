#include "data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "data/gpt2_tokenizer.h"

namespace lattice::data {

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode_into(text, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  const int32_t base = base_vocab_size();
  for (int32_t id : ids) {
    if (id >= 0 && id < base) {
      append_base_token(id, out);
    } else if (id >= base && id < vocab_size()) {
      out += specials_[size_t(id - base)].first;
    } else {
      LATTICE_INPUT_FAIL("tokenizer {}: cannot decode id {}: outside the vocabulary [0, {})", name(), id, vocab_size());
    }
  }
  return out;
}

void Tokenizer::set_specials(const std::vector<std::string>& names) {
  specials_.clear();
  for (size_t i = 0; i < names.size(); ++i) specials_.emplace_back(names[i], base_vocab_size() + int32_t(i));
}

void Tokenizer::add_specials(const std::vector<std::string_view>& names) {
  for (std::string_view n : names) {
    LATTICE_CHECK(!find_special(n), "tokenizer {}: special token '{}' is already defined", name(), n);
    specials_.emplace_back(std::string(n), vocab_size());
  }
}

std::optional<int32_t> Tokenizer::find_special(std::string_view name) const {
  for (const auto& [n, id] : specials_)
    if (n == name) return id;
  return std::nullopt;
}

int32_t Tokenizer::special_id(std::string_view name) const {
  if (auto id = find_special(name)) return *id;
  std::string known;
  for (const auto& [n, id] : specials_) known += (known.empty() ? "" : ", ") + n;
  LATTICE_INPUT_FAIL("tokenizer {} has no special token '{}' (it has: {})", this->name(), name,
                     known.empty() ? "none" : known);
}

// ---------------------------------------------------------------- bytes

BytesTokenizer::BytesTokenizer() { set_specials({std::string(kEndOfText)}); }

void BytesTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(int32_t(uint8_t(c)));
}

void BytesTokenizer::append_base_token(int32_t id, std::string& out) const { out.push_back(char(uint8_t(id))); }

// ---------------------------------------------------------------- factory

namespace {

std::unique_ptr<Tokenizer> make_base_tokenizer(std::string_view name, const std::string& vocab_dir) {
  if (name == "bytes") return std::make_unique<BytesTokenizer>();
  if (name == "gpt2") {
    for (const char* file : {"encoder.json", "vocab.bpe"}) {
      std::filesystem::path p = std::filesystem::path(vocab_dir) / file;
      if (vocab_dir.empty() || !std::filesystem::is_regular_file(p))
        LATTICE_INPUT_FAIL(
            "tokenizer gpt2: vocab file {} not found; set data.vocab_dir (--vocab-dir) "
            "to a folder holding encoder.json and vocab.bpe",
            vocab_dir.empty() ? std::string(file) + " (no vocab dir given)" : p.string());
    }
    return std::make_unique<Gpt2Tokenizer>(vocab_dir);
  }
  LATTICE_INPUT_FAIL("unknown tokenizer '{}'; expected gpt2 or bytes", name);
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& vocab_dir,
                                          const std::vector<std::string_view>& model_specials) {
  std::unique_ptr<Tokenizer> t = make_base_tokenizer(name, vocab_dir);
  t->add_specials(model_specials);
  return t;
}

}  // namespace lattice::data
