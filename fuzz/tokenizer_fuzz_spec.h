// A small in-code vocabulary shaped like the bundled pycoder tokenizer (all 256 byte tokens, a few
// merges, <|endoftext|>/<|im_start|>/<|im_end|>), for fuzz targets that cannot read files.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace fak::fuzz {

inline TokenizerSpec small_spec(std::string_view pattern) {
  TokenizerSpec spec;
  spec.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(bytes_to_byte_level(std::string(1, char(b))));
  // Merges in rank order; each result is appended to the vocab.
  const std::pair<const char*, const char*> merges[] = {
      {"Ġ", "Ġ"},  {"ĠĠ", "ĠĠ"},     {"i", "n"},  {"Ġ", "t"},   {"e", "r"}, {"Ġ", "a"},
      {"o", "n"},  {"r", "e"},       {"Ġt", "h"}, {"Ġth", "e"}, {"Ġ", "i"}, {"in", "g"},
      {"Ċ", "Ċ"},  {"Ġ", "d"},       {"e", "f"},  {"Ġd", "ef"}, {"Ġ", "("}, {")", ":"},
      {"):", "Ċ"}, {"ĠĠĠĠ", "ĠĠĠĠ"}, {"Ã", "©"}};
  for (auto [l, r] : merges) {
    spec.merges.emplace_back(l, r);
    spec.tokens.push_back(std::string(l) + r);
  }
  spec.added = {{0, "<|endoftext|>", true}, {1, "<|im_start|>", true}, {2, "<|im_end|>", true}};
  spec.eos_id = 0;
  spec.pre_regex = std::string(pattern);
  return spec;
}

}  // namespace fak::fuzz
