// What a compiled grammar is made of: a graph of typed nodes (string, number, object, array,
// literal set, alternatives, fixed sequence, byte automaton), plus the Frame, the per-node matching
// state that a pushdown stack holds. Internal to src/grammar; grammar.h is the public face.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fak::grammar {

struct ByteDfa;  // automaton.h

inline constexpr uint32_t kNoNode = std::numeric_limits<uint32_t>::max();
inline constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

// Whitespace between JSON tokens is bounded so generation cannot spin on it forever: nothing, one
// space, or one newline followed by up to kMaxIndent spaces/tabs (pretty-printed JSON nests that
// far). So at most 1 + kMaxIndent bytes between two structural tokens.
inline constexpr uint8_t kMaxIndent = 20;
// Stack depth: nested containers in "any JSON" and recursive $refs stop here.
inline constexpr uint8_t kMaxDepth = 48;
// Digits per number part: keeps numbers finite in length and exact in a double / int64.
inline constexpr uint32_t kMaxIntDigits = 15;
inline constexpr uint32_t kMaxFracDigits = 15;
inline constexpr uint32_t kMaxExpDigits = 2;

enum class NodeKind : uint8_t {
  kString,
  kNumber,
  kInteger,
  kLiterals,  // a fixed set of byte strings: enum, const, true/false, null, a tool's name
  kObject,
  kArray,
  kAnyOf,      // never on a stack: expanded into its alternatives when pushed
  kSequence,   // literal bytes and nodes in order, optionally repeated with a separator
  kAutomaton,  // a value read by a byte automaton: a number with bounds, a string with a pattern
};

// A small byte trie for literal sets and property keys.
struct ByteTrie {
  struct State {
    std::vector<std::pair<uint8_t, uint32_t>> next;  // sorted by byte
    int32_t value = -1;                              // >= 0: a string ends here
    std::vector<uint32_t> values_below;              // sorted values of strings through here
  };
  std::vector<State> states{State{}};  // state 0 is the root

  void add(std::string_view bytes, uint32_t value);
  int64_t step(uint32_t state, uint8_t byte) const;  // next state, or -1
};

struct Property {
  std::string name;
  uint32_t value = kNoNode;
  bool required = false;
};

struct SequenceItem {
  std::string literal;  // matched byte for byte when node == kNoNode
  uint32_t node = kNoNode;
};

struct Node {
  NodeKind kind = NodeKind::kString;
  // Stack frames a value of this node needs at the least, its own included (kUnbounded: it has
  // no finite value). Pushes, keys and commas that could not finish within kMaxDepth are refused
  // up front, so the depth limit never leaves a matcher with nothing allowed.
  uint32_t min_depth = kUnbounded;
  // kString (code points, as JSON Schema counts them)
  uint32_t min_length = 0, max_length = kUnbounded;
  // kArray
  uint32_t items = kNoNode, min_items = 0, max_items = kUnbounded;
  // kObject. With `listed`, only `properties`, in their order (keys trie = each key JSON-encoded
  // with both quotes, valued by property index). Otherwise free string keys with values of
  // `extra_value`.
  bool listed = true;
  std::vector<Property> properties;
  std::vector<uint32_t> next_required;  // [i]: first required property index >= i, or size
  ByteTrie keys;
  uint32_t extra_value = kNoNode;
  // kLiterals
  ByteTrie literals;
  // kAnyOf: alternatives as written; `leaves` flattens nested anyOf into non-anyOf nodes.
  std::vector<uint32_t> alternatives, leaves;
  // kSequence
  std::vector<SequenceItem> sequence;
  uint32_t max_repeat = 1;
  std::string separator;
  // kAutomaton (shared: the same table may serve several nodes)
  std::shared_ptr<const ByteDfa> automaton;
};

class PartCache;

// A special token a grammar writes (harmony's <|constrain|>, <|message|>): in literals it is the
// byte kSpecialTokenByte followed by its index in Grammar::special_tokens. No ordinary token can
// take that byte (TokenIndex leaves tokens holding bytes that valid UTF-8 never has out of its
// trie), so only the tokenizer's special token of that text writes it (GrammarMatcher).
inline constexpr uint8_t kSpecialTokenByte = 0xFF;

class Grammar {
 public:
  Grammar();
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  std::vector<Node> nodes;
  uint32_t root = kNoNode;
  uint32_t key_string = kNoNode;  // a plain string node, for free-form object keys
  uint32_t any_value = kNoNode;   // built on first need
  // Token-mask parts of this grammar's frames (token_mask.h), so they are freed with it.
  std::unique_ptr<PartCache> mask_parts;
  // The texts of the special tokens the grammar's literals write (see kSpecialTokenByte).
  std::vector<std::string> special_tokens;

  uint32_t add(Node node);
  // The literal bytes standing for the special token `text`, registering it.
  std::string special_token(const std::string& text);
  // Called once all nodes exist: fills anyOf leaves, refuses anyOf cycles (a schema that refers
  // to itself without consuming input), computes min_depth, and refuses a root with no value that
  // fits within kMaxDepth.
  void finish();
  // Whether a value of `node` can start at stack depth `depth` and still finish.
  bool fits(uint32_t node, uint32_t depth) const {
    const uint32_t need = nodes[node].min_depth;
    return need != kUnbounded && depth + need <= uint32_t(kMaxDepth) + 1;
  }
};

// One stack entry: which node, and where inside it. 16 bytes with no padding, compared and hashed
// as bytes. String and number frames carry everything they need (remaining lengths, digit counts)
// so their masks do not depend on the grammar they came from; automaton frames need only their
// automaton, which grammars share (automaton.h).
struct Frame {
  uint32_t node = 0;
  NodeKind kind = NodeKind::kString;
  uint8_t phase = 0;
  uint8_t aux = 0;  // whitespace run (containers), UTF-8/escape state (strings), repeats (seq)
  uint8_t depth = 0;
  uint32_t a = 0;  // string: chars still needed; number: digits in this part; object: next
                   // property index; array: items so far; literals/sequence: position;
                   // automaton: its state
  uint32_t b = 0;  // string: chars of room left; object: key trie state, then property index;
                   // sequence: offset in the current literal
};
static_assert(sizeof(Frame) == 16);

}  // namespace fak::grammar
