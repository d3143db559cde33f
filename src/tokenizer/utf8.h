// UTF-8 for the tokenizer: strict validation (errors say the byte offset), code point decoding,
// the White_Space set the split regexes mean by \s, NFC (utf8proc) with a fast path, and the
// "complete characters only" cut a streaming decoder needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fak {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or std::string_view::npos when all is valid.
size_t find_invalid_utf8(std::string_view text);

// Throws fak::Error("invalid UTF-8 in <what> at byte offset N (byte 0xXX)") on the first bad byte.
void check_utf8(std::string_view text, std::string_view what);

bool is_ascii(std::string_view text);

// Decodes one code point of *valid* UTF-8 at p and advances p past it.
inline char32_t next_code_point(const unsigned char*& p) {
  unsigned c = p[0];
  if (c < 0x80) {
    p += 1;
    return c;
  }
  if (c < 0xE0) {
    char32_t cp = ((c & 0x1F) << 6) | (p[1] & 0x3F);
    p += 2;
    return cp;
  }
  if (c < 0xF0) {
    char32_t cp = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    p += 3;
    return cp;
  }
  char32_t cp = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  p += 4;
  return cp;
}

// Appends the UTF-8 encoding of cp (assumed a valid scalar value).
void append_utf8(std::string& out, char32_t cp);

// Unicode White_Space: what Oniguruma (the regex engine HF tokenizers uses) matches with \s and
// what Rust's char::is_whitespace (used for added-token lstrip/rstrip) accepts.
// note: PCRE2 10.42 also counts U+180E as \s; Unicode dropped it from White_Space in 6.3.
inline bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// NFC of valid UTF-8. Text whose code points are all below U+0300 is returned unchanged without
// calling utf8proc: no character there decomposes, and every combining mark (the only things that
// compose onto a previous starter) lies at or above U+0300.
std::string nfc(std::string_view valid_utf8);
bool nfc_is_trivial(std::string_view valid_utf8);

// For streaming: moves out of `pending` the longest prefix made of whole characters, with each
// ill-formed part replaced by U+FFFD (one per maximal subpart, as the Unicode standard recommends).
// An incomplete but still possible sequence at the end stays in `pending` unless `flush`, in which
// case it becomes U+FFFD too.
std::string take_complete_utf8(std::string& pending, bool flush);

}  // namespace fak
