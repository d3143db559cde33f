// Finding added tokens (<|im_start|>, <think>, ...) inside text before anything else touches it,
// with HF tokenizers' AddedVocabulary rules: leftmost-longest match, lstrip/rstrip eat whitespace
// next to the token, single_word only matches between non-word characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fak {

class AddedTokenMatcher {
 public:
  struct Token {
    int32_t id;
    std::string content;  // valid UTF-8, non-empty
    bool special, lstrip, rstrip, single_word;
  };
  struct Segment {
    int32_t id;  // the added token, or -1 for text between tokens
    size_t begin, end;
  };

  void add(Token token);
  bool empty() const { return tokens_.empty(); }

  // Appends the segments of `text` (valid UTF-8) in order; they cover it except for whitespace an
  // lstrip/rstrip token absorbed. With skip_special, special tokens stay text.
  // note: like HF's aho-corasick pass, a skipped match is not searched again for shorter tokens.
  void split(std::string_view text, bool skip_special, std::vector<Segment>& out) const;
  // Whether some token's content begins at text[pos] (whatever its flags would make of it there).
  bool starts_at(std::string_view text, size_t pos) const;

 private:
  std::vector<Token> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace fak
