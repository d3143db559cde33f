// One byte through one frame: the character-level automaton of each node kind (JSON strings with
// UTF-8 and escapes, numbers, objects, arrays, literal sets, sequences) and the bounded-whitespace
// rule. The stack around it (pushes, pops, forks) is stack_set.h's business.
#pragma once

#include <vector>

#include "grammar/nodes.h"

namespace fak::grammar {

// A pseudo-byte for "the input ends here": frames that could end pass it on, the rest reject it.
inline constexpr int kEndOfInput = 256;

enum class StepKind : uint8_t {
  kReject,
  kConsume,     // the frame took the byte and goes on
  kConsumePop,  // the frame took the byte and is finished
  kPass,        // the frame is finished; the byte belongs to its parent
  kPush,        // the byte starts a child value (node); the frame now waits for it
};

struct StepResult {
  StepKind kind;
  uint32_t node = kNoNode;  // kPush: the child's node (maybe an anyOf)
};

// Fresh frame for a non-anyOf node.
Frame initial_frame(const Grammar& grammar, uint32_t node, uint8_t depth);

StepResult step_frame(const Grammar& grammar, Frame& frame, int byte);

// Every state inside a string's body, without length limits (for precomputing their masks).
std::vector<Frame> string_body_frames();

// The child this frame pushed has finished. True when that finishes the frame too.
bool child_done(const Grammar& grammar, Frame& frame);

}  // namespace fak::grammar
