// The pushdown part: a matcher state is a set of frame stacks (more than one only while anyOf
// alternatives are still undecided), and Machine feeds it one byte at a time, pushing children,
// popping finished frames and forking on anyOf. A stack with no frames left is a finished
// sentence; an empty set is a dead state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "grammar/nodes.h"
#include "grammar/step.h"

namespace fak::grammar {

struct StackSet {
  std::vector<Frame> frames;   // the stacks one after another, bottom first
  std::vector<uint32_t> ends;  // stack k is frames[ends[k-1] (or 0) .. ends[k])

  bool dead() const { return ends.empty(); }
  size_t count() const { return ends.size(); }
  size_t begin_of(size_t k) const { return k == 0 ? 0 : ends[k - 1]; }
  size_t size_of(size_t k) const { return ends[k] - begin_of(k); }
  const Frame* stack(size_t k) const { return frames.data() + begin_of(k); }
  void clear() {
    frames.clear();
    ends.clear();
  }
  void add(const Frame* stack_frames, size_t n) {
    frames.insert(frames.end(), stack_frames, stack_frames + n);
    ends.push_back(uint32_t(frames.size()));
  }
  bool operator==(const StackSet&) const = default;
};

// Where the bottom frame went, when a walk treats it as a local root (token_mask.cpp): it finished
// after taking the byte (consumed), or finished and left the byte to its parent (passed).
struct BottomPops {
  bool consumed = false;
  bool passed = false;
};

class Machine {
 public:
  explicit Machine(const Grammar& grammar);

  // The stacks of `in` after `byte` (0-255, or kEndOfInput) go to `out`, duplicates removed.
  // With `bottom_pops`, a stack whose bottom frame finishes is reported there and dropped
  // instead of becoming a finished sentence.
  void advance(const StackSet& in, int byte, StackSet& out, BottomPops* bottom_pops = nullptr);

  // The stack of `in` that starts the grammar.
  void start(StackSet& out);

  const Grammar& grammar() const { return grammar_; }

 private:
  void feed(size_t level, int byte, StackSet& out, BottomPops* bottom_pops);
  std::vector<Frame>& work(size_t level);
  void dedupe(StackSet& set);

  const Grammar& grammar_;
  std::vector<std::vector<Frame>> work_;  // one scratch stack per fork level, reused
  StackSet dedupe_scratch_;
  std::vector<uint32_t> order_;
};

}  // namespace fak::grammar
