// Finding added tokens (<|im_start|>, <think>, ...) inside text before anything else touches it,
// with HF tokenizers' AddedVocabulary rules: leftmost-longest match, lstrip/rstrip eat whitespace
// next to the token, single_word only matches between non-word characters.
//
// The tokens live in one byte trie built as they are added (HF builds one Aho-Corasick automaton),
// so a position costs the length of the longest token that starts like the text there, not a
// comparison per token: 20,000 added tokens (Gemma 3 has 6,415) cost no more than 20.
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

  // Throws fak::Error for a token longer than kMaxTokenBytes (a position could cost that much).
  void add(Token token);
  bool empty() const { return tokens_.empty(); }
  static constexpr size_t kMaxTokenBytes = 4096;

  // Appends the segments of `text` (valid UTF-8) in order; they cover it except for whitespace an
  // lstrip/rstrip token absorbed. With skip_special, special tokens stay text.
  // note: like HF's aho-corasick pass, a skipped match is not searched again for shorter tokens.
  void split(std::string_view text, bool skip_special, std::vector<Segment>& out) const;
  // Whether some token's content begins at text[pos] (whatever its flags would make of it there).
  bool starts_at(std::string_view text, size_t pos) const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> next;  // sorted by byte (not the root's)
    uint32_t token = kNone;                                // index into tokens_ ending here
  };
  // The longest token whose content starts text[pos..]; nullptr when none does.
  const Token* longest_at(std::string_view text, size_t pos) const;
  uint32_t child(uint32_t node, unsigned char byte) const;

  std::vector<Token> tokens_;
  std::vector<Node> nodes_ = std::vector<Node>(1);  // nodes_[0]: the root
  std::array<uint32_t, 256> root_next_;             // the root's children, by byte
  bool root_ready_ = false;
};

}  // namespace fak
