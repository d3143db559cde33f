// Inside a TokenIndex: the vocabulary as a byte trie laid out in preorder (a rejected byte skips a
// whole subtree with one jump), each token's bytes, and the cache of grammar-independent mask
// parts (part_cache.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/nodes.h"
#include "grammar/part_cache.h"

namespace fak::grammar {

struct TrieNode {
  uint32_t end = 0;           // one past the last node of this subtree (preorder)
  uint32_t tokens_begin = 0;  // this node's tokens: node_tokens[tokens_begin, + n_tokens)
  uint8_t n_tokens = 0;       // tokens whose bytes are exactly the path to here
  uint8_t byte = 0;
  uint8_t depth = 0;  // 1 for the children of the (implicit) root
};

struct TokenIndex::Impl {
  int32_t vocab = 0;
  std::vector<TrieNode> nodes;
  std::vector<int32_t> node_tokens;
  std::vector<std::string> token_bytes;  // per id
  std::vector<uint8_t> in_trie;          // per id: not special, not empty, UTF-8's bytes only
  // The special tokens by text, for grammars that write them (Grammar::special_tokens).
  std::vector<std::pair<std::string, int32_t>> specials;
  uint32_t longest_token = 0;  // bytes

  uint64_t uid = 0;  // unique per index: scopes grammars' cached parts

  // Parts of grammar-independent frames (strings, numbers, shared automata), for every grammar.
  // Limited strings make one part per (characters needed, room left) pair, and automata one per
  // state, hence a budget.
  PartCache shared_parts{size_t(96) << 20};
};

}  // namespace fak::grammar
