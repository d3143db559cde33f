// Inside a TokenIndex: the vocabulary as a byte trie laid out in preorder (a rejected byte skips a
// whole subtree with one jump), each token's bytes, and the shared cache of per-frame mask parts
// (see token_mask.h for what a part is).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/nodes.h"

namespace fak::grammar {

struct TrieNode {
  uint32_t end = 0;           // one past the last node of this subtree (preorder)
  uint32_t tokens_begin = 0;  // this node's tokens: node_tokens[tokens_begin, + n_tokens)
  uint8_t n_tokens = 0;       // tokens whose bytes are exactly the path to here
  uint8_t byte = 0;
  uint8_t depth = 0;  // 1 for the children of the (implicit) root
};

// The part of a token mask that one frame decides alone, walking the trie with that frame as the
// bottom of its stack: the tokens it accepts without ever finishing, and the trie nodes where it
// finishes (after which the rest of the stack decides; "frontier").
struct MaskPart {
  std::vector<uint32_t> dense;     // bitmask, when many tokens are accepted
  std::vector<int32_t> sparse;     // token ids, when few are
  std::vector<uint32_t> frontier;  // trie node << 1 | 1 when the node's byte goes to the parent
  // Only in the part of a string frame with no length limits in reach: per token id, the
  // characters it adds to the string (| kClosesString when its last byte is the closing quote;
  // kNotAccepted when it is not accepted), and per frontier node the characters before the
  // quote. Parts of length-limited strings are filtered from these (token_mask.cpp).
  static constexpr uint16_t kClosesString = 0x8000, kNotAccepted = 0xFFFF;
  std::vector<uint16_t> string_chars, frontier_chars;
  size_t bytes() const {
    return sizeof(MaskPart) + dense.size() * 4 + sparse.size() * 4 + frontier.size() * 4 +
           string_chars.size() * 2 + frontier_chars.size() * 2;
  }
};

struct MaskKey {
  uint64_t grammar_uid;  // 0 for frames that never look at their grammar (strings, numbers)
  Frame frame;
  bool operator==(const MaskKey& other) const;
};

struct MaskKeyHash {
  size_t operator()(const MaskKey& key) const;
};

struct TokenIndex::Impl {
  int32_t vocab = 0;
  std::vector<TrieNode> nodes;
  std::vector<int32_t> node_tokens;
  std::vector<std::string> token_bytes;  // per id
  std::vector<uint8_t> in_trie;          // per id: not special, not empty
  uint32_t longest_token = 0;            // bytes

  // Mask parts are shared by every matcher of every grammar using this tokenizer. Bounded: when
  // the budget is exceeded the cache starts over (parts in use stay alive through shared_ptr).
  static constexpr size_t kCacheBudget = size_t(96) << 20;
  std::shared_ptr<const MaskPart> find(const MaskKey& key) const;
  std::shared_ptr<const MaskPart> store(const MaskKey& key, MaskPart part) const;

 private:
  mutable std::mutex mutex_;
  mutable std::unordered_map<MaskKey, std::shared_ptr<const MaskPart>, MaskKeyHash> cache_;
  mutable size_t cache_bytes_ = 0;
};

}  // namespace fak::grammar
