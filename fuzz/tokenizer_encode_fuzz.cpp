// libFuzzer: arbitrary bytes through encode() with a small pycoder-shaped vocabulary. Checks, for
// each of the known split patterns:
//  - invalid UTF-8 throws fak::Error, valid UTF-8 never does;
//  - decode(encode(x)) == NFC(x) and the streaming decoder yields the same bytes;
//  - the hand-written splitter and PCRE2 cut NFC(x) into the same pieces.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fuzz_spec.h"

namespace {

struct Pattern {
  fak::Tokenizer tokenizer;
  fak::PreTokenizer hand, regex;
};

Pattern make(std::string_view pattern) {
  return {fak::Tokenizer::from_spec(fak::fuzz::small_spec(pattern)), fak::PreTokenizer(pattern),
          fak::PreTokenizer::regex_only(pattern)};
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_encode_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Pattern patterns[] = {make(fak::kQwen2Pattern), make(fak::kLlama3Pattern),
                               make(fak::kGpt2Pattern)};
  if (size == 0) return 0;
  Pattern& p = patterns[data[0] % 3];
  bool parse_special = data[0] & 4;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  bool valid = fak::find_invalid_utf8(text) == std::string_view::npos;
  std::vector<int32_t> ids;
  try {
    ids = p.tokenizer.encode(text, parse_special);
  } catch (const fak::Error&) {
    check(!valid, "valid UTF-8 was rejected");
    return 0;
  }
  check(valid, "invalid UTF-8 was accepted");
  std::string normalized = fak::nfc(text);
  check(p.tokenizer.decode(ids) == normalized, "decode(encode(x)) != NFC(x)");

  fak::StreamDecoder stream(p.tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    std::string chunk = stream.push(id);
    check(fak::find_invalid_utf8(chunk) == std::string_view::npos, "stream chunk is not UTF-8");
    streamed += chunk;
  }
  streamed += stream.flush();
  check(streamed == normalized, "streamed text differs");

  std::vector<std::string_view> a, b;
  p.hand.split(normalized, a);
  p.regex.split(normalized, b);
  check(a == b, "hand-written splitter and PCRE2 disagree");
  return 0;
}
