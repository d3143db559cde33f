// JSON-schema `pattern`: an ECMA-262 regular expression, read with the "u" flag as JSON Schema
// 2020-12 asks (code points, not UTF-16 units), compiled into the byte automaton of a JSON string
// literal whose decoded value it matches (automaton.h). The subset:
//
// - Supported: literal characters; escapes \d \D \w \W \s \S (ECMA-262's sets: ASCII digits and
//   word characters, Unicode white space), \n \r \t \v \f \0 \xHH \uHHHH (a surrogate pair of
//   them is one character) \u{H...} \cX, and a backslash before any other non-alphanumeric
//   character (itself); classes [...] and [^...] with ranges and escapes (\b in a class is
//   U+0008); `.` (any character but \n \r U+2028 U+2029); groups ( ), (?: ), (?<name> );
//   alternation |; quantifiers ? * + {m} {m,} {m,n} (counts up to kMaxRepeat); ^ at the start
//   of the pattern or of one of its top-level alternatives, $ at the end of one; lookaheads (?= )
//   and (?! ) right after such a ^ (zod's email pattern starts so), which intersect the language.
// - Search semantics: a top-level alternative without ^ may start anywhere in the string, one
//   without $ may end anywhere ("ab" is matched as [\s\S]*ab[\s\S]*).
// - Refused, with an error naming the construct and where it is: backreferences, lookbehinds,
//   lookaheads anywhere else, lazy quantifiers, \b \B, Unicode property escapes \p \P, ^ and $
//   anywhere else, unknown letter escapes, and '{' that does not start a quantifier.
//
// The JSON spelling inside such a string is fixed, so that the automaton can read decoded
// characters off the bytes: every character is written as itself in UTF-8, except `"` and `\`
// (written \" and \\) and control characters (\b \f \n \r \t, the others \u00XX, either hex case).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/automaton.h"

namespace fak::grammar {

inline constexpr uint32_t kMaxRepeat = 1000;

// Code points, as sorted disjoint inclusive ranges; never surrogates.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

struct RegexNode {
  enum Kind : uint8_t { kEmpty, kChars, kConcat, kAlternation, kRepeat };
  Kind kind = kEmpty;
  CodeRanges chars;                 // kChars: one character of these
  std::vector<RegexNode> children;  // kConcat, kAlternation; kRepeat: the one repeated
  uint32_t min = 0, max = 0;        // kRepeat; max == kUnboundedRepeat: no limit
};
inline constexpr uint32_t kUnboundedRepeat = 0xFFFFFFFFu;

struct RegexLookahead;

struct RegexBranch {
  bool anchored_start = false, anchored_end = false;
  std::vector<RegexLookahead> lookaheads;  // only with anchored_start
  RegexNode body;
};

struct RegexLookahead {
  bool negative = false;
  std::vector<RegexBranch> branches;  // never anchored at the start, never with lookaheads
};

struct Regex {
  std::vector<RegexBranch> branches;  // top-level alternatives
};

// Throws fak::Error ("pattern \"...\": <what> at character N") for what the subset refuses.
Regex parse_regex(std::string_view pattern);

// The JSON string literals (quotes included) whose value matches `pattern` and has between
// min_length and max_length code points (kUnbounded: no maximum). Throws fak::Error when the
// pattern is refused, when no string qualifies, or when the automaton would be too large.
std::shared_ptr<const ByteDfa> pattern_string_automaton(std::string_view pattern,
                                                        uint32_t min_length, uint32_t max_length);

}  // namespace fak::grammar
