// Byte automata: the values whose syntax is a regular language too rich for the hand-written steps
// of step.cpp, namely numbers with bounds (number_bounds.h) and strings with a pattern (regex.h),
// become one deterministic table each, read by a grammar node of kind kAutomaton. A DfaDraft is
// what the builders make; finish_dfa trims it (every state left is reachable from the start and can
// still reach acceptance, so a matcher that follows it never meets a dead end: the grammar's rule)
// and packs it over byte classes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fak::grammar {

struct ByteDfa {
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  // Unique per automaton made in this process: its states' mask parts are cached under it in the
  // TokenIndex, shared by every grammar that holds it (see shared_automaton).
  uint64_t uid = 0;
  std::array<uint8_t, 256> byte_class{};  // bytes that every state treats alike share a class
  uint32_t n_classes = 1;
  std::vector<uint32_t> next;      // [state * n_classes + class]: the next state, or kNone
  std::vector<uint8_t> accepting;  // per state: the value may end here
  // Per state: accepting with no way on, so the value is over with the byte that led here (a
  // string's closing quote; "0" of an integer in [0, 0]).
  std::vector<uint8_t> ends;

  uint32_t size() const { return uint32_t(accepting.size()); }
  uint32_t step(uint32_t state, uint8_t byte) const {
    return next[size_t(state) * n_classes + byte_class[byte]];
  }
};

// An automaton being built: states with transitions over byte ranges (no two ranges of one state
// overlap); state 0 is the start.
struct DfaDraft {
  struct Edge {
    uint8_t lo, hi;
    uint32_t to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<uint8_t> accepting;

  uint32_t add_state(bool accept) {
    edges.emplace_back();
    accepting.push_back(accept ? 1 : 0);
    return uint32_t(accepting.size() - 1);
  }
  void add_edge(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    edges[from].push_back({lo, hi, to});
  }
};

// Whether the automaton accepts exactly these bytes (an enum value checked against a pattern).
inline bool dfa_matches(const ByteDfa& dfa, std::string_view bytes) {
  uint32_t state = 0;
  for (unsigned char b : bytes) {
    state = dfa.step(state, b);
    if (state == ByteDfa::kNone) return false;
  }
  return dfa.accepting[state] != 0;
}

// Tables above this many entries (states x byte classes) are refused: a schema is a request's
// input, and its automaton is built per request.
inline constexpr size_t kMaxDfaTableEntries = size_t(1) << 22;

// The automaton made from `source` (a text that determines it: a pattern with its lengths, a
// type with its bounds), built by `build` on first need and kept for the grammars that ask later
// (the most recently asked, within 32 MiB). So the same schema sent again, as agents do on every
// request, finds its automata and their cached mask parts already made.
std::shared_ptr<const ByteDfa> shared_automaton(
    const std::string& source, const std::function<std::shared_ptr<const ByteDfa>()>& build);

// Trims, renumbers (the start stays 0) and packs the draft. nullptr when nothing is accepted at
// all. Throws fak::Error naming `what` when the table would pass kMaxDfaTableEntries.
std::shared_ptr<const ByteDfa> finish_dfa(const DfaDraft& draft, const std::string& what);

}  // namespace fak::grammar
