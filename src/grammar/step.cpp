// One byte through one frame, per node kind; see step.h. The phases below are each kind's states;
// every accepted byte leaves a frame from which the value can still be finished (no dead ends),
// which is what lets a token mask be "every token that keeps us alive".
#include "grammar/step.h"

#include <algorithm>

#include "grammar/automaton.h"

namespace fak::grammar {

namespace {

StepResult reject() {
  return {StepKind::kReject};
}
StepResult consume() {
  return {StepKind::kConsume};
}
StepResult consume_pop() {
  return {StepKind::kConsumePop};
}
StepResult pass() {
  return {StepKind::kPass};
}
StepResult push(uint32_t node) {
  return {StepKind::kPush, node};
}

bool is_ws(int byte) {
  return byte == ' ' || byte == '\n' || byte == '\t' || byte == '\r';
}

// ws run state: 0 nothing yet, 1 one space (nothing more), 2 + k a newline and k indent bytes.
StepResult take_ws(uint8_t& ws, int byte) {
  if (byte == ' ' && ws == 0) {
    ws = 1;
    return consume();
  }
  if (byte == '\n' && ws == 0) {
    ws = 2;
    return consume();
  }
  if ((byte == ' ' || byte == '\t') && ws >= 2 && ws < 2 + kMaxIndent) {
    ++ws;
    return consume();
  }
  return reject();  // '\r', a second newline, a space after a space, too deep an indent
}

bool is_digit(int byte) {
  return byte >= '0' && byte <= '9';
}
bool is_hex(int byte) {
  return is_digit(byte) || (byte >= 'a' && byte <= 'f') || (byte >= 'A' && byte <= 'F');
}

// ---- strings ---------------------------------------------------------------------------------

enum StringPhase : uint8_t { kStrOpen, kStrBody };

// String body states (Frame::aux). A UTF-8 character's continuation bytes are checked with the
// lead byte's restricted first range (no overlongs, no surrogates, nothing past U+10FFFF). \u
// escapes of a high surrogate must be followed by an escaped low one (lone surrogates would make
// the output unparsable for strict JSON readers).
enum StringState : uint8_t {
  kBoundary,
  kCont1,     // one more 80-BF
  kCont2,     // two more 80-BF
  kCont2E0,   // A0-BF, then one
  kCont2ED,   // 80-9F, then one
  kCont3,     // three more 80-BF
  kCont3F0,   // 90-BF, then two
  kCont3F4,   // 80-8F, then two
  kEscape,    // after a backslash
  kHex0,      // \u, first hex digit
  kHex1,      // second digit, not a surrogate
  kHex1D,     // second digit after 'D'
  kHex2,      // third digit
  kHex3,      // fourth digit
  kHex2High,  // third digit of a high surrogate
  kHex3High,  // fourth digit of a high surrogate
  kPairBackslash,
  kPairU,
  kLow0,  // must be D
  kLow1,  // must be C-F
  kLow2,
  kLow3,
  kStringStates,
};

// A new character: counts against the room left and toward the length still needed.
bool take_char(Frame& f) {
  if (f.b == 0) return false;
  if (f.b != kUnbounded) --f.b;
  if (f.a > 0) --f.a;
  return true;
}

StepResult step_string(Frame& f, int byte) {
  if (f.phase == kStrOpen) {
    if (byte != '"') return reject();
    f.phase = kStrBody;
    return consume();
  }
  if (byte == kEndOfInput) return reject();
  const auto set = [&](uint8_t state) {
    f.aux = state;
    return consume();
  };
  const auto in = [&](int lo, int hi) { return byte >= lo && byte <= hi; };
  switch (f.aux) {
    case kBoundary:
      if (byte == '"') return f.a == 0 ? consume_pop() : reject();
      if (byte < 0x20) return reject();
      if (!(in(0xC2, 0xF4) || byte < 0x80)) return reject();
      if (!take_char(f)) return reject();
      if (byte == '\\') return set(kEscape);
      if (byte < 0x80) return consume();
      if (byte <= 0xDF) return set(kCont1);
      if (byte == 0xE0) return set(kCont2E0);
      if (byte == 0xED) return set(kCont2ED);
      if (byte <= 0xEF) return set(kCont2);
      if (byte == 0xF0) return set(kCont3F0);
      if (byte == 0xF4) return set(kCont3F4);
      return set(kCont3);
    case kCont1:
      return in(0x80, 0xBF) ? set(kBoundary) : reject();
    case kCont2:
      return in(0x80, 0xBF) ? set(kCont1) : reject();
    case kCont2E0:
      return in(0xA0, 0xBF) ? set(kCont1) : reject();
    case kCont2ED:
      return in(0x80, 0x9F) ? set(kCont1) : reject();
    case kCont3:
      return in(0x80, 0xBF) ? set(kCont2) : reject();
    case kCont3F0:
      return in(0x90, 0xBF) ? set(kCont2) : reject();
    case kCont3F4:
      return in(0x80, 0x8F) ? set(kCont2) : reject();
    case kEscape:
      switch (byte) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          return set(kBoundary);
        case 'u':
          return set(kHex0);
        default:
          return reject();
      }
    case kHex0:
      if (byte == 'D' || byte == 'd') return set(kHex1D);
      return is_hex(byte) ? set(kHex1) : reject();
    case kHex1:
      return is_hex(byte) ? set(kHex2) : reject();
    case kHex1D:
      if (in('0', '7')) return set(kHex2);
      if (in('8', '9') || in('a', 'b') || in('A', 'B')) return set(kHex2High);
      return reject();  // DC00-DFFF alone is a lone low surrogate
    case kHex2:
      return is_hex(byte) ? set(kHex3) : reject();
    case kHex3:
      return is_hex(byte) ? set(kBoundary) : reject();
    case kHex2High:
      return is_hex(byte) ? set(kHex3High) : reject();
    case kHex3High:
      return is_hex(byte) ? set(kPairBackslash) : reject();
    case kPairBackslash:
      return byte == '\\' ? set(kPairU) : reject();
    case kPairU:
      return byte == 'u' ? set(kLow0) : reject();
    case kLow0:
      return byte == 'D' || byte == 'd' ? set(kLow1) : reject();
    case kLow1:
      return in('c', 'f') || in('C', 'F') ? set(kLow2) : reject();
    case kLow2:
      return is_hex(byte) ? set(kLow3) : reject();
    case kLow3:
      return is_hex(byte) ? set(kBoundary) : reject();
  }
  return reject();
}

// ---- numbers ---------------------------------------------------------------------------------

enum NumberPhase : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,  // integer part is "0": no more digits
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,
  kNumExpSign,
  kNumExpDigits,
};

StepResult step_number(Frame& f, int byte, bool integer) {
  const auto to = [&](uint8_t phase, uint32_t digits) {
    f.phase = phase;
    f.a = digits;
    return consume();
  };
  const bool exponent_start = !integer && (byte == 'e' || byte == 'E');
  switch (f.phase) {
    case kNumStart:
      if (byte == '-') return to(kNumMinus, 0);
      [[fallthrough]];
    case kNumMinus:
      if (byte == '0') return to(kNumZero, 1);
      if (is_digit(byte)) return to(kNumInt, 1);
      return reject();
    case kNumZero:
    case kNumInt:
      if (f.phase == kNumInt && is_digit(byte) && f.a < kMaxIntDigits) return to(kNumInt, f.a + 1);
      if (!integer && byte == '.') return to(kNumDot, 0);
      if (exponent_start) return to(kNumExp, 0);
      return pass();
    case kNumDot:
      return is_digit(byte) ? to(kNumFrac, 1) : reject();
    case kNumFrac:
      if (is_digit(byte) && f.a < kMaxFracDigits) return to(kNumFrac, f.a + 1);
      if (exponent_start) return to(kNumExp, 0);
      return pass();
    case kNumExp:
      if (byte == '+' || byte == '-') return to(kNumExpSign, 0);
      [[fallthrough]];
    case kNumExpSign:
      return is_digit(byte) ? to(kNumExpDigits, 1) : reject();
    case kNumExpDigits:
      if (is_digit(byte) && f.a < kMaxExpDigits) return to(kNumExpDigits, f.a + 1);
      return pass();
  }
  return reject();
}

// ---- literal sets ----------------------------------------------------------------------------

StepResult step_literals(const Node& node, Frame& f, int byte) {
  const ByteTrie::State& here = node.literals.states[f.a];
  const int64_t next = byte == kEndOfInput ? -1 : node.literals.step(f.a, uint8_t(byte));
  if (next < 0) return here.value >= 0 ? pass() : reject();
  f.a = uint32_t(next);
  const ByteTrie::State& there = node.literals.states[f.a];
  return there.value >= 0 && there.next.empty() ? consume_pop() : consume();
}

// ---- byte automata ---------------------------------------------------------------------------

// Like a literal set: a byte with a way on is taken; an accepting state leaves any other byte to
// the parent (a number ends), and a state with no way on at all ends the value (a closing quote).
StepResult step_automaton(const ByteDfa& dfa, Frame& f, int byte) {
  if (byte != kEndOfInput) {
    const uint32_t next = dfa.step(f.a, uint8_t(byte));
    if (next != ByteDfa::kNone) {
      f.a = next;
      return dfa.ends[next] ? consume_pop() : consume();
    }
  }
  return dfa.accepting[f.a] ? pass() : reject();
}

// ---- objects ---------------------------------------------------------------------------------

enum ObjectPhase : uint8_t {
  kObjOpen,
  kObjFirst,  // after '{'
  kObjKey,    // inside a listed key (b = keys trie state)
  kObjKeyChild,
  kObjAfterKey,
  kObjAfterColon,
  kObjValue,
  kObjAfterValue,
  kObjAfterComma,
};

// Listed properties come in schema order, each optional one at most once: after property i-1 the
// next key may be any property from i up to the first required one (skipping optional ones).
bool required_left(const Node& node, uint32_t next) {
  return node.listed && node.next_required[next] < node.properties.size();
}

// A key may go on when some property it can still become is in the window and its value fits
// under the depth limit (required ones always do: the object itself was checked to fit).
bool key_reachable(const Grammar& grammar, const Node& node, const Frame& f, uint32_t state) {
  const auto& below = node.keys.states[state].values_below;
  const uint32_t last = std::min<uint32_t>(node.next_required[f.a], node.properties.size() - 1);
  for (auto it = std::lower_bound(below.begin(), below.end(), f.a);
       it != below.end() && *it <= last; ++it)
    if (grammar.fits(node.properties[*it].value, f.depth + 1u)) return true;
  return false;
}

StepResult start_key(const Grammar& grammar, const Node& node, Frame& f) {
  if (!node.listed) {
    if (!grammar.fits(node.extra_value, f.depth + 1u)) return reject();
    f.phase = kObjKeyChild;
    return {StepKind::kPush, kNoNode};  // the caller substitutes the grammar's key string node
  }
  if (f.a >= node.properties.size()) return reject();
  const int64_t state = node.keys.step(0, '"');
  if (state < 0 || !key_reachable(grammar, node, f, uint32_t(state))) return reject();
  f.phase = kObjKey;
  f.b = uint32_t(state);
  return consume();
}

StepResult step_object(const Grammar& grammar, const Node& node, Frame& f, int byte) {
  if (f.phase != kObjOpen && f.phase != kObjKey && is_ws(byte)) return take_ws(f.aux, byte);
  const auto to = [&](uint8_t phase) {
    f.phase = phase;
    f.aux = 0;
    return consume();
  };
  switch (f.phase) {
    case kObjOpen:
      return byte == '{' ? to(kObjFirst) : reject();
    case kObjFirst:
    case kObjAfterComma:
      if (byte == '}' && f.phase == kObjFirst && !required_left(node, f.a)) return consume_pop();
      if (byte != '"') return reject();
      if (StepResult r = start_key(grammar, node, f); r.kind == StepKind::kPush) {
        return push(grammar.key_string);
      } else {
        return r;
      }
    case kObjKey: {
      const int64_t next = byte == kEndOfInput ? -1 : node.keys.step(f.b, uint8_t(byte));
      if (next < 0 || !key_reachable(grammar, node, f, uint32_t(next))) return reject();
      const int32_t property = node.keys.states[next].value;
      if (property < 0) {
        f.b = uint32_t(next);
        return consume();
      }
      f.b = uint32_t(property);
      f.a = uint32_t(property) + 1;
      return to(kObjAfterKey);
    }
    case kObjAfterKey:
      return byte == ':' ? to(kObjAfterColon) : reject();
    case kObjAfterColon:
      if (byte == kEndOfInput) return reject();
      f.phase = kObjValue;
      return push(node.listed ? node.properties[f.b].value : node.extra_value);
    case kObjAfterValue:
      if (byte == ',') {  // only when some key can follow
        const bool more = node.listed ? key_reachable(grammar, node, f, 0)
                                      : grammar.fits(node.extra_value, f.depth + 1u);
        return more ? to(kObjAfterComma) : reject();
      }
      if (byte == '}' && !required_left(node, f.a)) return consume_pop();
      return reject();
  }
  return reject();  // kObjKeyChild / kObjValue wait for a child and never see bytes
}

// ---- arrays ----------------------------------------------------------------------------------

enum ArrayPhase : uint8_t { kArrOpen, kArrFirst, kArrItem, kArrAfterItem, kArrAfterComma };

StepResult step_array(const Grammar& grammar, const Node& node, Frame& f, int byte) {
  if (f.phase != kArrOpen && is_ws(byte)) return take_ws(f.aux, byte);
  switch (f.phase) {
    case kArrOpen:
      if (byte != '[') return reject();
      f.phase = kArrFirst;
      f.aux = 0;
      return consume();
    case kArrFirst:
      if (byte == ']') return node.min_items == 0 ? consume_pop() : reject();
      if (node.max_items == 0) return reject();
      [[fallthrough]];
    case kArrAfterComma:
      if (byte == kEndOfInput) return reject();
      f.phase = kArrItem;
      return push(node.items);
    case kArrAfterItem:
      if (byte == ',' && f.a < node.max_items && grammar.fits(node.items, f.depth + 1u)) {
        f.phase = kArrAfterComma;
        f.aux = 0;
        return consume();
      }
      if (byte == ']' && f.a >= node.min_items) return consume_pop();
      return reject();
  }
  return reject();
}

// ---- sequences -------------------------------------------------------------------------------

enum SequencePhase : uint8_t { kSeqBytes, kSeqChild };

// Frame: a = item index (== size: between repetitions, b = offset into the separator), b = offset
// into the current literal, aux = repetitions finished.
bool finish_item(const Node& node, Frame& f) {
  ++f.a;
  f.b = 0;
  if (f.a < node.sequence.size()) return false;
  ++f.aux;
  return f.aux >= node.max_repeat;
}

StepResult step_sequence(const Node& node, Frame& f, int byte) {
  if (f.a == node.sequence.size()) {  // a whole repetition is done: the separator, or the end
    if (f.b == 0 && byte != uint8_t(node.separator[0])) return pass();
    if (byte != uint8_t(node.separator[f.b])) return reject();
    if (++f.b == node.separator.size()) f.a = f.b = 0;
    return consume();
  }
  const SequenceItem& item = node.sequence[f.a];
  if (item.node != kNoNode) {
    if (byte == kEndOfInput) return reject();
    f.phase = kSeqChild;
    return push(item.node);
  }
  if (byte != uint8_t(item.literal[f.b])) return reject();
  if (++f.b < item.literal.size()) return consume();
  return finish_item(node, f) ? consume_pop() : consume();
}

}  // namespace

std::vector<Frame> string_body_frames() {
  std::vector<Frame> frames;
  for (uint8_t state = 0; state < kStringStates; ++state) {
    Frame f;
    f.kind = NodeKind::kString;
    f.phase = kStrBody;
    f.aux = state;
    f.b = kUnbounded;
    frames.push_back(f);
  }
  return frames;
}

Frame initial_frame(const Grammar& grammar, uint32_t node_id, uint8_t depth) {
  const Node& node = grammar.nodes[node_id];
  Frame f;
  f.node = node_id;
  f.kind = node.kind;
  f.depth = depth;
  if (node.kind == NodeKind::kString) {
    f.a = node.min_length;
    f.b = node.max_length;
  }
  return f;
}

StepResult step_frame(const Grammar& grammar, Frame& frame, int byte) {
  switch (frame.kind) {
    case NodeKind::kString:
      return step_string(frame, byte);
    case NodeKind::kNumber:
      return step_number(frame, byte, false);
    case NodeKind::kInteger:
      return step_number(frame, byte, true);
    case NodeKind::kLiterals:
      return step_literals(grammar.nodes[frame.node], frame, byte);
    case NodeKind::kObject:
      return step_object(grammar, grammar.nodes[frame.node], frame, byte);
    case NodeKind::kArray:
      return step_array(grammar, grammar.nodes[frame.node], frame, byte);
    case NodeKind::kSequence:
      return step_sequence(grammar.nodes[frame.node], frame, byte);
    case NodeKind::kAutomaton:
      return step_automaton(*grammar.nodes[frame.node].automaton, frame, byte);
    case NodeKind::kAnyOf:
      break;
  }
  return reject();
}

bool child_done(const Grammar& grammar, Frame& frame) {
  switch (frame.kind) {
    case NodeKind::kObject:
      frame.phase = frame.phase == kObjKeyChild ? kObjAfterKey : kObjAfterValue;
      frame.aux = 0;
      return false;
    case NodeKind::kArray: {
      // Counting stops where it stops mattering (at minItems when there is no maximum), so
      // frames after 3 or 30 items are the same frame and share cached masks.
      const Node& node = grammar.nodes[frame.node];
      const uint32_t limit = node.max_items == kUnbounded ? node.min_items : node.max_items;
      frame.phase = kArrAfterItem;
      frame.aux = 0;
      if (frame.a < limit) ++frame.a;
      return false;
    }
    case NodeKind::kSequence:
      frame.phase = kSeqBytes;
      return finish_item(grammar.nodes[frame.node], frame);
    default:
      return false;  // leaf kinds never push
  }
}

}  // namespace fak::grammar
