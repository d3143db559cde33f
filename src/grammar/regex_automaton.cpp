// A parsed pattern -> the byte automaton of a JSON string literal (regex.h). Three steps:
// - a Thompson NFA over bytes, where each character of a class is the bytes of its one JSON
//   spelling (UTF-8, or an escape), so the subsets below read decoded characters off the bytes;
//   top-level alternatives get [\s\S]* where they are not anchored, and each lookahead after a
//   leading ^ is an NFA of its own that runs from the same start (with [\s\S]* after it);
// - subsets of NFA states (only those with byte edges or marking an end), accepted when some
//   alternative's end is in the subset with its positive lookaheads' ends and none of its negative
//   ones' — the intersections;
// - with minLength/maxLength, each subset paired with the characters read so far (a character
//   starts where the NFA leaves the start of a character's spelling), capped at minLength when
//   there is no maximum. The opening and closing quotes wrap it all; finish_dfa trims.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "grammar/nodes.h"
#include "grammar/regex.h"

namespace fak::grammar {

namespace {

constexpr size_t kMaxNfaStates = size_t(1) << 18;
constexpr size_t kMaxSubsets = size_t(1) << 16;
constexpr size_t kMaxStates = size_t(1) << 17;
constexpr size_t kMaxWork = size_t(32) << 20;  // NFA states and edges visited making subsets
constexpr uint32_t kNone = ByteDfa::kNone;

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    uint32_t to;
  };
  struct State {
    std::vector<uint32_t> eps;
    std::vector<Edge> edges;
    bool char_start = false;  // its edges read the first byte of a character
  };
  std::vector<State> states;
};

struct Fragment {
  uint32_t start, end;
};

using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

int encode_utf8(uint32_t c, uint8_t* out) {
  if (c < 0x80) {
    out[0] = uint8_t(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = uint8_t(0xC0 | c >> 6);
    out[1] = uint8_t(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = uint8_t(0xE0 | c >> 12);
    out[1] = uint8_t(0x80 | (c >> 6 & 0x3F));
    out[2] = uint8_t(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = uint8_t(0xF0 | c >> 18);
  out[1] = uint8_t(0x80 | (c >> 12 & 0x3F));
  out[2] = uint8_t(0x80 | (c >> 6 & 0x3F));
  out[3] = uint8_t(0x80 | (c & 0x3F));
  return 4;
}

// The UTF-8 encodings of [lo, hi] as sequences of byte ranges: split where the encoded length
// changes, then until every continuation byte spans whole 64-blocks, when each byte position of
// the two ends gives one range (the way RE2 and Rust's regex compile classes to bytes).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= edge && hi > edge) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  if (hi < 0x80) {
    out.push_back({{uint8_t(lo), uint8_t(hi)}});
    return;
  }
  const int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, out);
      utf8_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, out);
      utf8_sequences(hi & ~m, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  encode_utf8(lo, a);
  encode_utf8(hi, b);
  ByteSeq seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

const CodeRanges& any_char() {
  static const CodeRanges all = {{0, 0xD7FF}, {0xE000, 0x10FFFF}};
  return all;
}

class NfaBuilder {
 public:
  explicit NfaBuilder(const std::string& what) : what_(what) {}

  Nfa nfa;

  Fragment build(const RegexNode& node) {
    switch (node.kind) {
      case RegexNode::kEmpty:
        return empty();
      case RegexNode::kChars:
        return chars(node.chars);
      case RegexNode::kConcat: {
        Fragment f = empty();
        for (const auto& child : node.children) f = concat(f, build(child));
        return f;
      }
      case RegexNode::kAlternation: {
        const uint32_t start = add(), end = add();
        for (const auto& child : node.children) {
          const Fragment f = build(child);
          eps(start, f.start);
          eps(f.end, end);
        }
        return {start, end};
      }
      case RegexNode::kRepeat:
        return repeat(node.children[0], node.min, node.max);
    }
    return empty();
  }

  Fragment any_string() { return star(chars(any_char())); }

  Fragment concat(Fragment a, Fragment b) {
    eps(a.end, b.start);
    return {a.start, b.end};
  }

 private:
  uint32_t add() {
    if (nfa.states.size() >= kMaxNfaStates) fail(what_ + ": too large (repetitions expand it)");
    nfa.states.emplace_back();
    return uint32_t(nfa.states.size() - 1);
  }
  void eps(uint32_t from, uint32_t to) { nfa.states[from].eps.push_back(to); }
  void edge(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    nfa.states[from].edges.push_back({lo, hi, to});
  }

  Fragment empty() {
    const uint32_t s = add();
    return {s, s};
  }

  Fragment star(Fragment f) {
    const uint32_t start = add(), end = add();
    eps(start, f.start);
    eps(start, end);
    eps(f.end, f.start);
    eps(f.end, end);
    return {start, end};
  }

  Fragment repeat(const RegexNode& child, uint32_t min, uint32_t max) {
    Fragment f = empty();
    for (uint32_t i = 0; i < min; ++i) f = concat(f, build(child));
    if (max == kUnboundedRepeat) return concat(f, star(build(child)));
    const uint32_t end = add();
    uint32_t at = f.end;
    for (uint32_t i = min; i < max; ++i) {
      const Fragment more = build(child);
      eps(at, more.start);
      eps(at, end);
      at = more.end;
    }
    eps(at, end);
    return {f.start, end};
  }

  // One character of `set`, in its JSON spelling (regex.h).
  Fragment chars(const CodeRanges& set) {
    const uint32_t start = add(), end = add();
    nfa.states[start].char_start = true;
    uint32_t backslash = kNone, unicode = kNone;
    uint32_t high_nibble[2] = {kNone, kNone};
    const auto after_backslash = [&] {
      if (backslash == kNone) {
        backslash = add();
        edge(start, '\\', '\\', backslash);
      }
      return backslash;
    };
    const auto escaped = [&](uint8_t letter) { edge(after_backslash(), letter, letter, end); };
    const auto control = [&](uint32_t c) {
      switch (c) {
        case 0x08:
          return escaped('b');
        case 0x09:
          return escaped('t');
        case 0x0A:
          return escaped('n');
        case 0x0C:
          return escaped('f');
        case 0x0D:
          return escaped('r');
        default:
          break;
      }
      if (unicode == kNone) {  // \u00
        const uint32_t u = add(), zero = add();
        unicode = add();
        edge(after_backslash(), 'u', 'u', u);
        edge(u, '0', '0', zero);
        edge(zero, '0', '0', unicode);
      }
      uint32_t& high = high_nibble[c >> 4];
      if (high == kNone) {
        high = add();
        edge(unicode, uint8_t('0' + (c >> 4)), uint8_t('0' + (c >> 4)), high);
      }
      const uint32_t low = c & 15;
      if (low < 10) {
        edge(high, uint8_t('0' + low), uint8_t('0' + low), end);
      } else {
        edge(high, uint8_t('a' + low - 10), uint8_t('a' + low - 10), end);
        edge(high, uint8_t('A' + low - 10), uint8_t('A' + low - 10), end);
      }
    };
    std::vector<ByteSeq> seqs;
    const auto raw = [&](uint32_t lo, uint32_t hi) {
      if (lo <= hi) utf8_sequences(lo, hi, seqs);
    };
    for (auto [lo, hi] : set) {
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x1F); ++c) control(c);
      if (lo <= '"' && '"' <= hi) escaped('"');
      if (lo <= '\\' && '\\' <= hi) escaped('\\');
      lo = std::max<uint32_t>(lo, 0x20);
      // [lo, hi] without '"' and '\', which the checks above spelled as escapes
      uint32_t from = lo;
      for (uint32_t cut : {uint32_t('"'), uint32_t('\\')}) {
        if (cut < from || cut > hi) continue;
        raw(from, cut - 1);
        from = cut + 1;
      }
      raw(from, hi);
    }
    for (const ByteSeq& seq : seqs) {
      uint32_t at = start;
      for (size_t i = 0; i + 1 < seq.size(); ++i) {
        const uint32_t next = add();
        edge(at, seq[i].first, seq[i].second, next);
        at = next;
      }
      edge(at, seq.back().first, seq.back().second, end);
    }
    return {start, end};
  }

  const std::string& what_;
};

// Acceptance of one top-level alternative: its end, and its lookaheads' ends (negative or not).
struct Alternative {
  uint32_t end;
  std::vector<std::pair<uint32_t, bool>> lookaheads;
};

class SubsetBuilder {
 public:
  SubsetBuilder(const Nfa& nfa, std::vector<Alternative> alternatives, uint32_t min_length,
                uint32_t max_length, const std::string& what)
      : nfa_(nfa),
        alternatives_(std::move(alternatives)),
        min_length_(min_length),
        max_length_(max_length),
        what_(what),
        mark_(nfa.states.size(), 0) {
    for (const auto& alt : alternatives_) {
      marker_.push_back(alt.end);
      for (const auto& [end, negative] : alt.lookaheads) marker_.push_back(end);
    }
    std::sort(marker_.begin(), marker_.end());
  }

  DfaDraft build(const std::vector<uint32_t>& starts) {
    const uint32_t open = draft_.add_state(false);  // before the opening quote
    final_ = draft_.add_state(true);                // after the closing one
    keys_.resize(2);
    const uint32_t start_subset = subset(starts);
    for (uint32_t i = 0; i < subsets_.size(); ++i) expand_subset(i);  // grows as it goes
    measure_remaining();
    if (remaining_[start_subset] == kNone) return std::move(draft_);  // nothing matches
    draft_.add_edge(open, '"', '"', state(start_subset, 0));
    for (uint32_t s = 2; s < keys_.size(); ++s) expand(s);
    return std::move(draft_);
  }

 private:
  struct Move {
    uint8_t lo, hi;
    uint32_t subset;
    bool starts_char;
  };
  struct Subset {
    std::vector<uint32_t> states;  // sorted
    bool accepting = false;
    std::vector<Move> moves;
  };

  // Closes `states` under epsilon edges and interns the subset of those that matter.
  uint32_t subset(const std::vector<uint32_t>& states) {
    ++stamp_;
    stack_.clear();
    kept_.clear();
    for (uint32_t s : states)
      if (mark_[s] != stamp_) {
        mark_[s] = stamp_;
        stack_.push_back(s);
      }
    while (!stack_.empty()) {
      const uint32_t s = stack_.back();
      stack_.pop_back();
      const auto& st = nfa_.states[s];
      if (!st.edges.empty() || std::binary_search(marker_.begin(), marker_.end(), s))
        kept_.push_back(s);
      for (uint32_t t : st.eps)
        if (mark_[t] != stamp_) {
          mark_[t] = stamp_;
          stack_.push_back(t);
        }
      spend(1 + st.eps.size());
    }
    std::sort(kept_.begin(), kept_.end());
    key_.assign(reinterpret_cast<const char*>(kept_.data()), kept_.size() * sizeof(uint32_t));
    if (auto it = subset_ids_.find(key_); it != subset_ids_.end()) return it->second;
    if (subsets_.size() >= kMaxSubsets) fail(what_ + ": its automaton is too large");
    const auto id = uint32_t(subsets_.size());
    subset_ids_.emplace(key_, id);
    Subset sub;
    sub.states = kept_;
    sub.accepting = accepting(sub.states);
    subsets_.push_back(std::move(sub));
    return id;
  }

  // Patterns whose subsets are many and large (an unanchored start before a long run of
  // overlapping classes) are refused before they cost a request more than about 0.2 s.
  void spend(size_t units) {
    work_ += units;
    if (work_ > kMaxWork) fail(what_ + ": its automaton is too large to build");
  }

  bool accepting(const std::vector<uint32_t>& states) const {
    const auto has = [&](uint32_t s) {
      return std::binary_search(states.begin(), states.end(), s);
    };
    for (const auto& alt : alternatives_) {
      if (!has(alt.end)) continue;
      bool ok = true;
      for (const auto& [end, negative] : alt.lookaheads) ok = ok && has(end) != negative;
      if (ok) return true;
    }
    return false;
  }

  // The subset's moves on byte ranges (computed once, shared by its states of every count).
  void expand_subset(uint32_t id) {
    raw_.clear();
    for (uint32_t s : subsets_[id].states)
      for (const auto& e : nfa_.states[s].edges)
        raw_.push_back({e.lo, e.hi, e.to, nfa_.states[s].char_start});
    cuts_.clear();
    for (const auto& r : raw_) {
      cuts_.push_back(r.lo);
      cuts_.push_back(r.hi + 1);
    }
    std::sort(cuts_.begin(), cuts_.end());
    cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
    const size_t pieces = cuts_.empty() ? 0 : cuts_.size() - 1;
    if (covering_.size() < pieces) covering_.resize(pieces);
    for (size_t k = 0; k < pieces; ++k) covering_[k].clear();
    for (size_t k = 0; k < raw_.size(); ++k) {
      auto at = size_t(std::lower_bound(cuts_.begin(), cuts_.end(), raw_[k].lo) - cuts_.begin());
      for (; at + 1 < cuts_.size() && cuts_[at] <= raw_[k].hi; ++at) covering_[at].push_back(k);
    }
    std::vector<Move> moves;
    for (size_t k = 0; k < pieces; ++k) {
      if (covering_[k].empty()) continue;
      targets_.clear();
      const bool starts_char = raw_[covering_[k][0]].starts_char;
      for (uint32_t r : covering_[k]) {
        targets_.push_back(raw_[r].to);
        // A byte is the first of a character for every alternative or for none: the spellings
        // form a prefix code, and all NFAs read the same bytes.
        if (raw_[r].starts_char != starts_char) fail(what_ + ": inconsistent character boundary");
      }
      spend(targets_.size());
      const uint32_t to = subset(targets_);
      moves.push_back({uint8_t(cuts_[k]), uint8_t(cuts_[k + 1] - 1), to, starts_char});
    }
    subsets_[id].moves = std::move(moves);
  }

  // Per subset, the fewest characters that lead to acceptance (kNone: none do): a breadth-first
  // search backwards where a move that starts a character costs 1 and the others 0. The pairs with
  // counts below skip what cannot finish, so the product stays near the size of what survives.
  void measure_remaining() {
    std::vector<std::vector<std::pair<uint32_t, bool>>> into(subsets_.size());
    for (uint32_t i = 0; i < subsets_.size(); ++i)
      for (const Move& m : subsets_[i].moves) into[m.subset].push_back({i, m.starts_char});
    remaining_.assign(subsets_.size(), kNone);
    std::vector<uint32_t> level, next_level;
    for (uint32_t i = 0; i < subsets_.size(); ++i)
      if (subsets_[i].accepting) level.push_back(i);
    for (uint32_t cost = 0; !level.empty(); ++cost) {
      // Within one cost, free moves spread first; moves that start a character go to the next.
      for (size_t k = 0; k < level.size(); ++k) {
        const uint32_t i = level[k];
        if (remaining_[i] != kNone) continue;
        remaining_[i] = cost;
        for (const auto& [from, starts_char] : into[i]) {
          if (remaining_[from] != kNone) continue;
          (starts_char ? next_level : level).push_back(from);
        }
      }
      level.swap(next_level);
      next_level.clear();
    }
  }

  uint32_t state(uint32_t subset_id, uint32_t count) {
    const uint64_t key = uint64_t(subset_id) << 32 | count;
    auto [it, fresh] = state_ids_.emplace(key, uint32_t(keys_.size()));
    if (fresh) {
      if (keys_.size() >= kMaxStates)
        fail(what_ + ": its automaton with minLength/maxLength is too large");
      keys_.push_back({subset_id, count});
      draft_.add_state(false);
    }
    return it->second;
  }

  void expand(uint32_t s) {
    const auto [subset_id, count] = keys_[s];
    bool quote_taken = false;
    for (const Move& m : subsets_[subset_id].moves) {
      uint32_t next = count + (m.starts_char ? 1 : 0);
      if (remaining_[m.subset] == kNone) continue;
      if (max_length_ != kUnbounded && uint64_t(next) + remaining_[m.subset] > max_length_)
        continue;
      if (max_length_ == kUnbounded) next = std::min(next, min_length_);
      draft_.add_edge(s, m.lo, m.hi, state(m.subset, next));
      quote_taken = quote_taken || (m.lo <= '"' && '"' <= m.hi);
    }
    if (subsets_[subset_id].accepting && count >= min_length_) {
      if (quote_taken) fail(what_ + ": a quote inside a character's spelling");
      draft_.add_edge(s, '"', '"', final_);
    }
  }

  struct Raw {
    uint8_t lo, hi;
    uint32_t to;
    bool starts_char;
  };

  const Nfa& nfa_;
  std::vector<Alternative> alternatives_;
  uint32_t min_length_, max_length_;
  const std::string& what_;
  std::vector<uint32_t> marker_;  // sorted ends of alternatives and lookaheads
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  size_t work_ = 0;
  // Scratch, reused from subset to subset.
  std::vector<uint32_t> stack_, kept_, targets_;
  std::string key_;
  std::vector<Raw> raw_;
  std::vector<int> cuts_;
  std::vector<std::vector<uint32_t>> covering_;
  std::vector<Subset> subsets_;
  std::vector<uint32_t> remaining_;  // per subset: fewest characters to acceptance
  std::unordered_map<std::string, uint32_t> subset_ids_;
  std::vector<std::pair<uint32_t, uint32_t>> keys_;  // per draft state: subset, count
  std::unordered_map<uint64_t, uint32_t> state_ids_;
  DfaDraft draft_;
  uint32_t final_ = 0;
};

}  // namespace

std::shared_ptr<const ByteDfa> pattern_string_automaton(std::string_view pattern,
                                                        uint32_t min_length, uint32_t max_length) {
  const Regex regex = parse_regex(pattern);
  const std::string what = "'pattern' \"" + std::string(pattern) + "\"";
  NfaBuilder builder(what);
  std::vector<uint32_t> starts;
  std::vector<Alternative> alternatives;
  for (const RegexBranch& branch : regex.branches) {
    Fragment f = builder.build(branch.body);
    if (!branch.anchored_start) f = builder.concat(builder.any_string(), f);
    if (!branch.anchored_end) f = builder.concat(f, builder.any_string());
    starts.push_back(f.start);
    Alternative alt{f.end, {}};
    for (const RegexLookahead& la : branch.lookaheads) {
      RegexNode either;
      either.kind = RegexNode::kAlternation;
      for (const RegexBranch& b : la.branches) {
        RegexNode seq;
        seq.kind = RegexNode::kConcat;
        seq.children.push_back(b.body);
        if (!b.anchored_end) {  // [\s\S]*
          RegexNode any;
          any.kind = RegexNode::kChars;
          any.chars = any_char();
          RegexNode rest;
          rest.kind = RegexNode::kRepeat;
          rest.max = kUnboundedRepeat;
          rest.children.push_back(std::move(any));
          seq.children.push_back(std::move(rest));
        }
        either.children.push_back(std::move(seq));
      }
      const Fragment g = builder.build(either);
      starts.push_back(g.start);
      alt.lookaheads.push_back({g.end, la.negative});
    }
    alternatives.push_back(std::move(alt));
  }
  SubsetBuilder subsets(builder.nfa, std::move(alternatives), min_length, max_length, what);
  const DfaDraft draft = subsets.build(starts);
  auto dfa = finish_dfa(draft, what);
  if (!dfa) {
    std::string lengths;
    if (min_length > 0) lengths += " and minLength " + std::to_string(min_length);
    if (max_length != kUnbounded) lengths += " and maxLength " + std::to_string(max_length);
    fail(what + ": no string matches it" + lengths);
  }
  return dfa;
}

}  // namespace fak::grammar
