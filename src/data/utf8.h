// UTF-8 validity, by the rule PCRE2 applies in UTF mode (RFC 3629): no
// overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no
// truncated sequences. The GPT-2 tokenizer uses it to cut text into valid
// runs (handed to PCRE2 with PCRE2_NO_UTF_CHECK) and single invalid bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lattice::data {

// Byte length of the valid UTF-8 character starting at p[0] (n > 0 bytes
// available), or 0 when p[0] does not start one.
int utf8_char_length(const uint8_t* p, size_t n);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);

// Appends code point `cp` (< 0x110000, not a surrogate) as UTF-8.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace lattice::data
