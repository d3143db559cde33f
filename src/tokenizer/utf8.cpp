// UTF-8 validation, NFC and the streaming cut; see utf8.h.
#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace fak {
namespace {

enum class SeqKind { kValid, kInvalid, kIncomplete };
struct Seq {
  SeqKind kind;
  size_t len;  // bytes of the valid sequence, or of the maximal ill-formed subpart
};

// Table 3-7 of the Unicode standard (well-formed byte sequences). The narrowed second-byte ranges
// after E0, ED, F0 and F4 are what excludes overlongs, surrogates and code points past U+10FFFF.
Seq classify(const unsigned char* p, size_t avail) {
  unsigned c = p[0];
  if (c < 0x80) return {SeqKind::kValid, 1};
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {SeqKind::kInvalid, 1};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= avail) return {SeqKind::kIncomplete, i};
    unsigned b = p[i];
    if (b < lo || b > hi) return {SeqKind::kInvalid, i};
    lo = 0x80;
    hi = 0xBF;
  }
  return {SeqKind::kValid, need + 1};
}

constexpr uint64_t kHighBits = 0x8080808080808080ull;

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    // Most text is ASCII: skip it eight bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & kHighBits) == 0) {
        i += 8;
        continue;
      }
    }
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    Seq s = classify(p + i, n - i);
    if (s.kind != SeqKind::kValid) return i;
    i += s.len;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view text, std::string_view what) {
  size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[bad]));
  fail("invalid UTF-8 in " + std::string(what) + " at byte offset " + std::to_string(bad) +
       " (byte " + hex + ")");
}

bool is_ascii(std::string_view text) {
  size_t i = 0, n = text.size();
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    if (word & kHighBits) return false;
  }
  for (; i < n; ++i)
    if (static_cast<unsigned char>(text[i]) >= 0x80) return false;
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool nfc_is_trivial(std::string_view valid_utf8) {
  // U+0300 encodes as CC 80; every lead byte below CC starts a code point below U+0300, and
  // continuation bytes are at most BF, so one byte comparison decides.
  for (unsigned char c : valid_utf8)
    if (c >= 0xCC) return false;
  return true;
}

namespace {

std::string utf8proc_nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail(std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Only the stretches around code points >= U+0300 go through utf8proc (mostly-ASCII text with a
  // few symbols would otherwise pay full price). Cutting right before an ASCII character is safe:
  // ASCII has combining class 0, blocks composition across it, and is the second half of no
  // canonical composition. A stretch starts at the ASCII character before the non-ASCII run (it
  // may be the base of a combining mark) and ends before the next ASCII character.
  std::string out;
  size_t n = text.size(), copied = 0, i = 0;
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  while (true) {
    while (i < n && byte(i) < 0xCC) ++i;
    if (i == n) break;
    size_t begin = i;
    while (begin > copied && byte(begin - 1) >= 0x80) --begin;
    if (begin > copied) --begin;  // the ASCII character in front
    size_t end = i;
    while (end < n && byte(end) >= 0x80) ++end;
    if (out.empty()) out.reserve(n + 16);
    out.append(text, copied, begin - copied);
    out += utf8proc_nfc(text.substr(begin, end - begin));
    copied = i = end;
  }
  if (copied == 0) return std::string(text);
  out.append(text, copied, n - copied);
  return out;
}

std::string take_complete_utf8(std::string& pending, bool flush) {
  const auto* p = reinterpret_cast<const unsigned char*>(pending.data());
  size_t n = pending.size(), i = 0;
  std::string out;
  out.reserve(n);
  while (i < n) {
    Seq s = classify(p + i, n - i);
    if (s.kind == SeqKind::kValid) {
      out.append(pending, i, s.len);
    } else if (s.kind == SeqKind::kInvalid) {
      out += "\xEF\xBF\xBD";
    } else {  // incomplete: only possible at the end
      if (!flush) break;
      out += "\xEF\xBF\xBD";
    }
    i += s.len;
  }
  pending.erase(0, i);
  return out;
}

}  // namespace fak
