// Mask parts (what one frame decides about the vocabulary on its own) and the bounded, locked
// cache that holds them. Two caches exist: the TokenIndex's, for frames that never read their
// grammar (strings, numbers, shared automata), shared by every grammar; and each Grammar's own,
// for its frames, freed with the grammar.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/nodes.h"

namespace fak::grammar {

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
  bool pinned = false;  // made with the index; survives its cache starting over
  size_t bytes() const {
    return sizeof(MaskPart) + dense.size() * 4 + sparse.size() * 4 + frontier.size() * 4 +
           string_chars.size() * 2 + frontier_chars.size() * 2;
  }
};

struct MaskKey {
  uint64_t scope;  // in a grammar's cache: the TokenIndex's uid; in the index's cache: 0, or
                   // an automaton's uid with the top bit set
  Frame frame;
  bool operator==(const MaskKey& other) const;
};

struct MaskKeyHash {
  size_t operator()(const MaskKey& key) const;
};

class PartCache {
 public:
  explicit PartCache(size_t budget_bytes) : budget_(budget_bytes) {}
  std::shared_ptr<const MaskPart> find(const MaskKey& key) const;
  // Returns the cached part (another thread's, when it got there first). Over budget, the cache
  // starts over, pinned parts aside; parts in use stay alive through their shared_ptr.
  std::shared_ptr<const MaskPart> store(const MaskKey& key, MaskPart part) const;

 private:
  size_t budget_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<MaskKey, std::shared_ptr<const MaskPart>, MaskKeyHash> parts_;
  mutable size_t bytes_ = 0;
};

}  // namespace fak::grammar
