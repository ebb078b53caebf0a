#include "data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/utf8.h"

namespace lattice::data {

namespace {

// GPT-2's pre-tokenization pattern (encoder.py)
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s spelled \p{White_Space}: GPT-2 ran it with Python's `regex` module,
// whose \s is Unicode's White_Space property, while PCRE2's \s (UCP) also
// takes U+180E (Perl's historical list). Needs PCRE2 >= 10.40.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
                                     R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) LATTICE_INPUT_FAIL("tokenizer gpt2: cannot read {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Inverse of gpt2_byte_to_unicode(): code point -> byte, -1 outside the alphabet.
std::array<int16_t, 512> unicode_to_byte() {
  std::array<int16_t, 512> inv;
  inv.fill(-1);
  auto fwd = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) inv[fwd[size_t(b)]] = int16_t(b);
  return inv;
}

// A token as written in encoder.json / vocab.bpe -> its bytes. False when a
// character is outside GPT-2's byte alphabet.
bool alphabet_to_bytes(std::string_view s, const std::array<int16_t, 512>& inv, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    int len = utf8_char_length(p + i, s.size() - i);
    uint32_t cp;
    if (len == 1) {
      cp = p[i];
    } else if (len == 2) {
      cp = (uint32_t(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
    } else {
      return false;  // the alphabet lies below U+0200: one or two bytes each
    }
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out.push_back(char(inv[cp]));
    i += size_t(len);
  }
  return true;
}

}  // namespace

std::array<uint32_t, 256> gpt2_byte_to_unicode() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    // Printable and not a space in Latin-1: '!'..'~' and U+00A1..U+00FF except
    // the soft hyphen U+00AD.
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b != 0xAD);
    map[b] = printable ? b : next++;
  }
  return map;
}

// ---------------------------------------------------------------- PCRE2 state

struct Gpt2Tokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

struct Gpt2Tokenizer::Scratch {
  explicit Scratch(const Pattern& p) {
    match = pcre2_match_data_create_from_pattern(p.code, nullptr);
    context = pcre2_match_context_create(nullptr);
    LATTICE_CHECK(match && context, "tokenizer gpt2: out of memory for PCRE2 state");
  }
  ~Scratch() {
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // The JIT's default 32 KiB stack suffices for ordinary text; a very long
  // whitespace run backtracks through `\s+(?!\S)` and needs more. Returns
  // false when the big stack is already in use.
  bool grow_jit_stack() {
    if (jit_stack) return false;
    jit_stack = pcre2_jit_stack_create(32 * 1024, 256 * 1024 * 1024, nullptr);
    LATTICE_CHECK(jit_stack, "tokenizer gpt2: out of memory for the PCRE2 JIT stack");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    return true;
  }

  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  // piece -> (offset, length) in `store`; keys view the text being encoded.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;
  std::vector<int32_t> store;
  std::vector<int32_t> word;
};

// ---------------------------------------------------------------- loading

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& vocab_dir) : pattern_(std::make_unique<Pattern>()) {
  BytesToId bytes_to_id = load_encoder(vocab_dir + "/encoder.json");
  load_merges(vocab_dir + "/vocab.bpe", bytes_to_id);
  set_specials({std::string(kEndOfText)});

  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!pattern_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    LATTICE_FAIL("tokenizer gpt2: PCRE2 rejects the pattern at offset {}: {}", err_offset,
                 reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: without it pcre2_match interprets.
  pcre2_jit_compile(pattern_->code, PCRE2_JIT_COMPLETE);
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer::BytesToId Gpt2Tokenizer::load_encoder(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    LATTICE_INPUT_FAIL("tokenizer gpt2: {} is not valid JSON: {}", path, e.what());
  }
  LATTICE_INPUT_CHECK(j.is_object(), "tokenizer gpt2: {} must hold one JSON object (token -> id)", path);
  const auto inv = unicode_to_byte();
  BytesToId bytes_to_id;
  int64_t eot = -1;
  std::string bytes;
  for (const auto& [key, value] : j.items()) {
    LATTICE_INPUT_CHECK(value.is_number_integer(), "tokenizer gpt2: {}: token '{}' has a non-integer id", path, key);
    int64_t id = value.get<int64_t>();
    if (key == kEndOfText) {
      eot = id;
      continue;
    }
    LATTICE_INPUT_CHECK(alphabet_to_bytes(key, inv, bytes),
                        "tokenizer gpt2: {}: token '{}' has a character outside GPT-2's byte alphabet", path, key);
    LATTICE_INPUT_CHECK(bytes_to_id.emplace(bytes, int32_t(id)).second, "tokenizer gpt2: {}: token '{}' appears twice",
                        path, key);
  }
  const int64_t base = int64_t(bytes_to_id.size());
  id_to_bytes_.assign(size_t(base), {});
  std::vector<bool> seen(size_t(base), false);
  for (const auto& [b, id] : bytes_to_id) {
    LATTICE_INPUT_CHECK(id >= 0 && id < base && !seen[size_t(id)],
                        "tokenizer gpt2: {}: ids of the {} base tokens must be 0..{} with no repeats "
                        "(found {})",
                        path, base, base - 1, id);
    seen[size_t(id)] = true;
    id_to_bytes_[size_t(id)] = b;
  }
  LATTICE_INPUT_CHECK(eot == -1 || eot == base,
                      "tokenizer gpt2: {}: {} has id {}, expected {} (right after the base vocabulary)", path,
                      kEndOfText, eot, base);
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, char(b)));
    LATTICE_INPUT_CHECK(it != bytes_to_id.end(), "tokenizer gpt2: {}: byte {} has no token", path, b);
    byte_id_[size_t(b)] = it->second;
  }
  return bytes_to_id;
}

void Gpt2Tokenizer::load_merges(const std::string& path, const BytesToId& bytes_to_id) {
  const std::string text = read_file(path);
  const auto inv = unicode_to_byte();
  std::string left, right;
  int32_t rank = 0;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;  // "#version: 0.2"
    size_t sp = line.find(' ');
    bool ok = sp != std::string_view::npos && line.find(' ', sp + 1) == std::string_view::npos &&
              alphabet_to_bytes(line.substr(0, sp), inv, left) && alphabet_to_bytes(line.substr(sp + 1), inv, right);
    LATTICE_INPUT_CHECK(ok, "tokenizer gpt2: {} line {}: expected 'LEFT RIGHT', got '{}'", path, line_no, line);
    auto l = bytes_to_id.find(left), r = bytes_to_id.find(right), m = bytes_to_id.find(left + right);
    LATTICE_INPUT_CHECK(l != bytes_to_id.end() && r != bytes_to_id.end() && m != bytes_to_id.end(),
                        "tokenizer gpt2: {} line {}: merge '{}' names a token missing from encoder.json", path, line_no,
                        line);
    merges_.emplace(pair_key(l->second, r->second), Merge{rank++, m->second});
  }
}

// ---------------------------------------------------------------- encoding

template <typename F>
void Gpt2Tokenizer::for_each_piece(std::string_view text, Scratch& s, F&& f) const {
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = utf8_valid_prefix(text.substr(i));
    if (valid == 0) {  // an invalid byte: a piece of its own
      f(text.substr(i, 1));
      ++i;
      continue;
    }
    const std::string_view run = text.substr(i, valid);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
    size_t offset = 0;
    while (offset < run.size()) {
      int rc = pcre2_match(pattern_->code, subject, run.size(), offset, PCRE2_NO_UTF_CHECK, s.match, s.context);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && s.grow_jit_stack()) continue;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        LATTICE_FAIL("tokenizer gpt2: pre-tokenization failed at byte {}: {}", i + offset,
                     reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
      // Every character matches some alternative, so matches tile the run.
      LATTICE_CHECK(ov[0] == offset && ov[1] > offset, "tokenizer gpt2: pre-tokenization skipped bytes {}..{}",
                    i + offset, i + ov[0]);
      f(run.substr(offset, ov[1] - offset));
      offset = ov[1];
    }
    i += valid;
  }
}

void Gpt2Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  Scratch s(*pattern_);
  out.reserve(out.size() + text.size() / 3);
  for_each_piece(text, s, [&](std::string_view piece) { encode_piece(piece, s, out); });
}

std::vector<std::string_view> Gpt2Tokenizer::pretokenize(std::string_view text) const {
  Scratch s(*pattern_);
  std::vector<std::string_view> pieces;
  for_each_piece(text, s, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, Scratch& s, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[uint8_t(piece[0])]);
    return;
  }
  if (auto it = s.cache.find(piece); it != s.cache.end()) {
    auto first = s.store.begin() + ptrdiff_t(it->second.first);
    out.insert(out.end(), first, first + ptrdiff_t(it->second.second));
    return;
  }
  std::vector<int32_t>& word = s.word;
  word.clear();
  for (char c : piece) word.push_back(byte_id_[uint8_t(c)]);
  bpe(word);
  s.cache.emplace(piece, std::pair{s.store.size(), word.size()});
  s.store.insert(s.store.end(), word.begin(), word.end());
  out.insert(out.end(), word.begin(), word.end());
}

// GPT-2's merge loop: find the adjacent pair with the lowest rank, merge every
// occurrence of it left to right, repeat until no pair has a rank.
void Gpt2Tokenizer::bpe(std::vector<int32_t>& word) const {
  while (word.size() > 1) {
    Merge best{INT32_MAX, -1};
    int32_t a = -1, b = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merges_.find(pair_key(word[i], word[i + 1]));
      if (it != merges_.end() && it->second.rank < best.rank) {
        best = it->second;
        a = word[i];
        b = word[i + 1];
      }
    }
    if (best.merged < 0) return;
    size_t j = 0;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        word[j++] = best.merged;
        i += 2;
      } else {
        word[j++] = word[i++];
      }
    }
    word.resize(j);
  }
}

void Gpt2Tokenizer::append_base_token(int32_t id, std::string& out) const { out += id_to_bytes_[size_t(id)]; }

}  // namespace lattice::data
