// Feeding bytes to sets of frame stacks: push, pop, fork, deduplicate; see stack_set.h.
#include "grammar/stack_set.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace fak::grammar {

Machine::Machine(const Grammar& grammar) : grammar_(grammar) {
  work_.resize(8);
}

std::vector<Frame>& Machine::work(size_t level) {
  if (level >= work_.size()) work_.resize(level + 1);
  return work_[level];
}

void Machine::start(StackSet& out) {
  out.clear();
  const Node& root = grammar_.nodes[grammar_.root];
  if (root.kind != NodeKind::kAnyOf) {
    Frame f = initial_frame(grammar_, grammar_.root, 0);
    out.add(&f, 1);
    return;
  }
  for (uint32_t leaf : root.leaves) {
    if (!grammar_.fits(leaf, 0)) continue;
    Frame f = initial_frame(grammar_, leaf, 0);
    out.add(&f, 1);
  }
}

void Machine::advance(const StackSet& in, int byte, StackSet& out, BottomPops* bottom_pops) {
  out.clear();
  for (size_t k = 0; k < in.count(); ++k) {
    work(0).assign(in.stack(k), in.stack(k) + in.size_of(k));
    feed(0, byte, out, bottom_pops);
  }
  if (out.count() > 1) dedupe(out);
}

void Machine::feed(size_t level, int byte, StackSet& out, BottomPops* bottom_pops) {
  bool consumed = false;  // the byte has been taken by some frame
  const auto pop_finished = [&](std::vector<Frame>& w) {
    w.pop_back();
    while (!w.empty() && child_done(grammar_, w.back())) w.pop_back();
  };
  for (;;) {
    std::vector<Frame>& w = work_[level];
    if (w.empty()) {
      if (bottom_pops) {
        (consumed ? bottom_pops->consumed : bottom_pops->passed) = true;
      } else if (consumed || byte == kEndOfInput) {
        out.add(w.data(), 0);  // a finished sentence
      }
      return;
    }
    if (consumed) {
      out.add(w.data(), w.size());
      return;
    }
    const StepResult r = step_frame(grammar_, w.back(), byte);
    switch (r.kind) {
      case StepKind::kReject:
        return;
      case StepKind::kConsume:
        out.add(w.data(), w.size());
        return;
      case StepKind::kConsumePop:
        consumed = true;
        pop_finished(w);
        continue;
      case StepKind::kPass:
        pop_finished(w);
        continue;
      case StepKind::kPush: {
        const uint8_t depth = w.back().depth + 1;
        const Node& child = grammar_.nodes[r.node];
        if (child.kind != NodeKind::kAnyOf) {
          if (!grammar_.fits(r.node, depth)) return;
          w.push_back(initial_frame(grammar_, r.node, depth));
          continue;  // the child sees the same byte
        }
        for (uint32_t leaf : child.leaves) {
          if (!grammar_.fits(leaf, depth)) continue;
          work(level + 1) = work_[level];
          work_[level + 1].push_back(initial_frame(grammar_, leaf, depth));
          feed(level + 1, byte, out, bottom_pops);
        }
        return;
      }
    }
  }
}

// Alternatives that matched the same bytes can land on the same stack (both finished the value
// and popped back to the same parent); keeping one of each stops the set from growing.
void Machine::dedupe(StackSet& set) {
  order_.resize(set.count());
  std::iota(order_.begin(), order_.end(), 0u);
  const auto compare = [&](uint32_t x, uint32_t y) {
    const size_t nx = set.size_of(x), ny = set.size_of(y);
    if (nx != ny) return nx < ny ? -1 : 1;
    return std::memcmp(set.stack(x), set.stack(y), nx * sizeof(Frame));
  };
  std::sort(order_.begin(), order_.end(),
            [&](uint32_t x, uint32_t y) { return compare(x, y) < 0; });
  dedupe_scratch_.clear();
  for (size_t i = 0; i < order_.size(); ++i) {
    if (i > 0 && compare(order_[i - 1], order_[i]) == 0) continue;
    dedupe_scratch_.add(set.stack(order_[i]), set.size_of(order_[i]));
  }
  std::swap(set, dedupe_scratch_);
}

}  // namespace fak::grammar
