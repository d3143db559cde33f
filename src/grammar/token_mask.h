// Token masks: which token ids keep a matcher state alive, found by walking the vocabulary trie
// with the state machine. The walk is split so that most of it is cached: the top frame of each
// stack alone decides every token that does not finish it (a "mask part", part_cache.h, shared by
// every sequence whose top frame is the same), and only the tokens that finish it are walked
// again with the rest of the stack, from the trie nodes where it finished.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/stack_set.h"
#include "grammar/token_index.h"

namespace fak::grammar {

class MaskBuilder {
 public:
  MaskBuilder(const Grammar& grammar, const TokenIndex::Impl& index);

  // Sets the bits of the tokens allowed after `state` (stop ids aside) in `mask`, which must be
  // zeroed and mask_words(vocab) long. use_cache = false recomputes the top frames' parts
  // (benchmarks of the first visit to a state; a limited string still reuses the cached
  // unlimited part it is filtered from).
  void fill(const StackSet& state, std::vector<uint32_t>& mask, bool use_cache = true);

  // The mask part of one frame, from the cache or computed (and cached).
  std::shared_ptr<const MaskPart> part_for(const Frame& top);
  // Computes and caches a part that the cache never drops.
  void pin_part(const Frame& top);

 private:
  static bool grammar_independent(const Frame& frame);
  MaskKey key_for(const Frame& top) const;
  static Frame part_frame(const Frame& top, const MaskKey& key);
  MaskPart make_part(const Frame& frame);  // frame as keyed (key_for), see part_frame
  MaskPart compute_part(const Frame& bottom);
  MaskPart compute_automaton_part(const Frame& bottom);
  // A length-limited string's part, from the unlimited one by character counts.
  MaskPart limited_string_part(const MaskPart& unlimited, uint32_t need, uint32_t room) const;
  static void finish_part(std::vector<uint32_t>& accepted, int32_t vocab, MaskPart& part);
  // Walks trie nodes [begin, end), all below a node of depth base_depth, from `start`.
  void walk_subtree(uint32_t begin, uint32_t end, uint8_t base_depth, const StackSet& start,
                    std::vector<uint32_t>& mask);
  void allow_tokens_of(uint32_t node, std::vector<uint32_t>& mask) const;

  const Grammar& grammar_;
  const TokenIndex::Impl& index_;
  Machine machine_;
  std::vector<StackSet> levels_;            // state after the trie path down to each depth
  std::vector<uint32_t> automaton_levels_;  // the same, for an automaton frame alone
  StackSet parent_, passed_;
};

}  // namespace fak::grammar
