// Token masks by trie walk, with cached per-frame parts; see token_mask.h.
#include "grammar/token_mask.h"

#include <algorithm>
#include <bit>

#include "grammar/automaton.h"

namespace fak::grammar {

MaskBuilder::MaskBuilder(const Grammar& grammar, const TokenIndex::Impl& index)
    : grammar_(grammar), index_(index), machine_(grammar) {
  levels_.resize(size_t(index.longest_token) + 1);
}

void MaskBuilder::allow_tokens_of(uint32_t node, std::vector<uint32_t>& mask) const {
  const TrieNode& n = index_.nodes[node];
  for (uint32_t t = 0; t < n.n_tokens; ++t) {
    const auto id = uint32_t(index_.node_tokens[n.tokens_begin + t]);
    mask[id >> 5] |= 1u << (id & 31);
  }
}

// Strings and numbers never read their grammar node, so their parts are keyed by the frame alone
// and shared across grammars in the index. A string's lengths only matter up to the longest token
// (one token cannot add more characters than it has bytes), so they are clamped there: a string
// with 10 or 10000 characters of room left is the same frame for masking. An automaton frame reads
// only its automaton, which grammars share when their schemas ask for the same one
// (shared_automaton): keyed by the automaton's uid, its parts serve them all.
bool MaskBuilder::grammar_independent(const Frame& frame) {
  return frame.kind == NodeKind::kString || frame.kind == NodeKind::kNumber ||
         frame.kind == NodeKind::kInteger || frame.kind == NodeKind::kAutomaton;
}

MaskKey MaskBuilder::key_for(const Frame& top) const {
  MaskKey key{index_.uid, top};
  if (grammar_independent(top)) {
    key.scope = 0;
    key.frame.node = 0;
    key.frame.depth = 0;
    if (top.kind == NodeKind::kString) {
      const uint32_t cap = index_.longest_token + 1;
      key.frame.a = std::min(key.frame.a, cap);
      key.frame.b = std::min(key.frame.b, cap);
    }
    if (top.kind == NodeKind::kAutomaton)  // top bit: never 0, the strings' and numbers' scope
      key.scope = grammar_.nodes[top.node].automaton->uid | uint64_t(1) << 63;
  }
  return key;
}

// The frame a part is computed from: as keyed, but an automaton frame keeps its node (the key's
// uid names the automaton; the walk needs the node that holds it).
Frame MaskBuilder::part_frame(const Frame& top, const MaskKey& key) {
  Frame frame = key.frame;
  if (top.kind == NodeKind::kAutomaton) frame.node = top.node;
  return frame;
}

std::shared_ptr<const MaskPart> MaskBuilder::part_for(const Frame& top) {
  const MaskKey key = key_for(top);
  const PartCache& cache = grammar_independent(top) ? index_.shared_parts : *grammar_.mask_parts;
  if (auto part = cache.find(key)) return part;
  return cache.store(key, make_part(part_frame(top, key)));
}

void MaskBuilder::pin_part(const Frame& top) {
  const MaskKey key = key_for(top);
  MaskPart part = make_part(part_frame(top, key));
  part.pinned = true;
  (grammar_independent(top) ? index_.shared_parts : *grammar_.mask_parts)
      .store(key, std::move(part));
}

MaskPart MaskBuilder::make_part(const Frame& frame) {
  const uint32_t cap = index_.longest_token + 1;
  if (frame.kind == NodeKind::kString && (frame.a != 0 || frame.b != cap)) {
    Frame unlimited = frame;
    unlimited.a = 0;
    unlimited.b = cap;
    return limited_string_part(*part_for(unlimited), frame.a, frame.b);
  }
  return compute_part(frame);
}

void MaskBuilder::finish_part(std::vector<uint32_t>& accepted, int32_t vocab, MaskPart& part) {
  size_t count = 0;
  for (uint32_t word : accepted) count += size_t(std::popcount(word));
  if (count * 32 < size_t(vocab)) {
    part.sparse.reserve(count);
    for (size_t w = 0; w < accepted.size(); ++w)
      for (uint32_t bits = accepted[w]; bits; bits &= bits - 1)
        part.sparse.push_back(int32_t(w * 32 + size_t(std::countr_zero(bits))));
  } else {
    part.dense = std::move(accepted);
  }
}

// The walk of compute_part for an automaton frame, by table lookups instead of the stack machine
// (7x faster: a pattern such as an email's local part accepts tens of thousands of tokens). Same
// outcome per trie node as step_automaton gives there: a byte with a way on goes on (or ends the
// value: a closing quote, accepted, the rest is the parent's), a byte without one passes to the
// parent when the state is accepting.
MaskPart MaskBuilder::compute_automaton_part(const Frame& bottom) {
  std::vector<uint32_t> accepted(mask_words(index_.vocab), 0);
  MaskPart part;
  const ByteDfa& dfa = *grammar_.nodes[bottom.node].automaton;
  std::vector<uint32_t>& at = automaton_levels_;
  at.assign(size_t(index_.longest_token) + 1, 0);
  at[0] = bottom.a;
  const auto& nodes = index_.nodes;
  for (uint32_t i = 0; i < nodes.size();) {
    const TrieNode& node = nodes[i];
    const uint32_t state = at[node.depth - 1];
    const uint32_t next = dfa.step(state, node.byte);
    if (next == ByteDfa::kNone) {
      if (dfa.accepting[state]) part.frontier.push_back(i << 1 | 1);
      i = node.end;
      continue;
    }
    allow_tokens_of(i, accepted);
    if (dfa.ends[next]) {
      part.frontier.push_back(i << 1);
      i = node.end;
      continue;
    }
    at[node.depth] = next;
    ++i;
  }
  finish_part(accepted, index_.vocab, part);
  return part;
}

MaskPart MaskBuilder::compute_part(const Frame& bottom) {
  if (bottom.kind == NodeKind::kAutomaton) return compute_automaton_part(bottom);
  std::vector<uint32_t> accepted(mask_words(index_.vocab), 0);
  MaskPart part;
  // A string frame (only ever walked here without limits in reach) also records how many
  // characters each token adds, so that limited strings can be filtered from this part.
  const bool string = bottom.kind == NodeKind::kString;
  const uint32_t cap = index_.longest_token + 1;
  const auto chars = [&](const StackSet& s) { return uint16_t(cap - s.frames[0].b); };
  if (string) part.string_chars.assign(size_t(index_.vocab), MaskPart::kNotAccepted);
  levels_[0].clear();
  levels_[0].add(&bottom, 1);
  const auto& nodes = index_.nodes;
  for (uint32_t i = 0; i < nodes.size();) {
    const TrieNode& node = nodes[i];
    BottomPops pops;
    const StackSet& before = levels_[node.depth - 1];
    StackSet& here = levels_[node.depth];
    machine_.advance(before, node.byte, here, &pops);
    if (pops.consumed) part.frontier.push_back(i << 1);
    if (pops.passed) part.frontier.push_back(i << 1 | 1);  // never for strings
    if (string && pops.consumed) part.frontier_chars.push_back(chars(before));
    const bool alive = !here.dead();
    // A token that finishes the frame on its last byte is accepted whatever lies below: the
    // parent always takes a finished child.
    if (alive || pops.consumed) {
      allow_tokens_of(i, accepted);
      if (string) {
        const uint16_t added =
            alive ? chars(here) : uint16_t(chars(before) | MaskPart::kClosesString);
        for (uint32_t t = 0; t < node.n_tokens; ++t)
          part.string_chars[size_t(index_.node_tokens[node.tokens_begin + t])] = added;
      }
    }
    i = alive ? i + 1 : node.end;
  }
  finish_part(accepted, index_.vocab, part);
  return part;
}

// Room only gates taking a character and need only gates the closing quote, and a token's
// character count only grows along its bytes: so a token is accepted with (need, room) exactly
// when it is without limits and its count fits.
MaskPart MaskBuilder::limited_string_part(const MaskPart& unlimited, uint32_t need,
                                          uint32_t room) const {
  std::vector<uint32_t> accepted(mask_words(index_.vocab), 0);
  MaskPart part;
  for (size_t id = 0; id < unlimited.string_chars.size(); ++id) {
    const uint16_t info = unlimited.string_chars[id];
    if (info == MaskPart::kNotAccepted) continue;
    const uint32_t added = info & ~MaskPart::kClosesString;
    if (added > room || ((info & MaskPart::kClosesString) && added < need)) continue;
    accepted[id >> 5] |= 1u << (id & 31);
  }
  for (size_t k = 0; k < unlimited.frontier.size(); ++k) {
    const uint32_t before_quote = unlimited.frontier_chars[k];
    if (before_quote <= room && before_quote >= need)
      part.frontier.push_back(unlimited.frontier[k]);
  }
  finish_part(accepted, index_.vocab, part);
  return part;
}

void MaskBuilder::walk_subtree(uint32_t begin, uint32_t end, uint8_t base_depth,
                               const StackSet& start, std::vector<uint32_t>& mask) {
  if (begin >= end) return;
  levels_[base_depth] = start;
  const auto& nodes = index_.nodes;
  for (uint32_t i = begin; i < end;) {
    const TrieNode& node = nodes[i];
    StackSet& here = levels_[node.depth];
    machine_.advance(levels_[node.depth - 1], node.byte, here);
    if (here.dead()) {
      i = node.end;
      continue;
    }
    allow_tokens_of(i, mask);
    ++i;
  }
}

void MaskBuilder::fill(const StackSet& state, std::vector<uint32_t>& mask, bool use_cache) {
  const auto& nodes = index_.nodes;
  for (size_t k = 0; k < state.count(); ++k) {
    const size_t depth = state.size_of(k);
    if (depth == 0) continue;  // a finished sentence: only stop ids, which the caller adds
    const Frame* stack = state.stack(k);
    const std::shared_ptr<const MaskPart> part =
        use_cache ? part_for(stack[depth - 1])
                  : std::make_shared<const MaskPart>(
                        make_part(part_frame(stack[depth - 1], key_for(stack[depth - 1]))));
    if (!part->dense.empty()) {
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= part->dense[w];
    }
    for (int32_t id : part->sparse) mask[uint32_t(id) >> 5] |= 1u << (uint32_t(id) & 31);
    if (part->frontier.empty()) continue;

    // The rest of the stack, told that its child finished.
    parent_.clear();
    parent_.frames.assign(stack, stack + depth - 1);
    while (!parent_.frames.empty() && child_done(grammar_, parent_.frames.back()))
      parent_.frames.pop_back();
    parent_.ends.push_back(uint32_t(parent_.frames.size()));

    for (uint32_t item : part->frontier) {
      const uint32_t i = item >> 1;
      const TrieNode& node = nodes[i];
      if (item & 1) {  // the node's own byte goes to the parent
        machine_.advance(parent_, node.byte, passed_);
        if (passed_.dead()) continue;
        allow_tokens_of(i, mask);
        walk_subtree(i + 1, node.end, node.depth, passed_, mask);
      } else {
        walk_subtree(i + 1, node.end, node.depth, parent_, mask);
      }
    }
  }
}

}  // namespace fak::grammar
