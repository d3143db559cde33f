// The grammar graph's small helpers: byte tries for literal sets and keys, and the final pass that
// flattens anyOf nodes and refuses anyOf cycles; see nodes.h.
#include "grammar/nodes.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "grammar/part_cache.h"

namespace fak::grammar {

namespace {

void insert_sorted(std::vector<uint32_t>& values, uint32_t value) {
  auto it = std::lower_bound(values.begin(), values.end(), value);
  if (it == values.end() || *it != value) values.insert(it, value);
}

}  // namespace

void ByteTrie::add(std::string_view bytes, uint32_t value) {
  uint32_t state = 0;
  insert_sorted(states[0].values_below, value);
  for (unsigned char byte : bytes) {
    auto& next = states[state].next;
    auto it = std::lower_bound(next.begin(), next.end(), byte,
                               [](const auto& edge, uint8_t b) { return edge.first < b; });
    if (it == next.end() || it->first != byte) {
      const uint32_t fresh = uint32_t(states.size());
      next.insert(it, {byte, fresh});
      states.emplace_back();  // note: invalidates `next`; not used below
      state = fresh;
    } else {
      state = it->second;
    }
    insert_sorted(states[state].values_below, value);
  }
  states[state].value = int32_t(value);
}

int64_t ByteTrie::step(uint32_t state, uint8_t byte) const {
  const auto& next = states[state].next;
  for (const auto& [b, to] : next) {
    if (b == byte) return to;
    if (b > byte) break;
  }
  return -1;
}

// Parts of one grammar's frames are small (a few token ids each); the budget only guards against
// a grammar that lives for a very long time.
Grammar::Grammar() : mask_parts(std::make_unique<PartCache>(size_t(16) << 20)) {}
Grammar::~Grammar() = default;

uint32_t Grammar::add(Node node) {
  nodes.push_back(std::move(node));
  return uint32_t(nodes.size() - 1);
}

std::string Grammar::special_token(const std::string& text) {
  size_t k = 0;
  while (k < special_tokens.size() && special_tokens[k] != text) ++k;
  if (k == special_tokens.size()) {
    check(k < 256, "grammar: more than 256 special tokens");
    special_tokens.push_back(text);
  }
  return std::string{char(kSpecialTokenByte), char(uint8_t(k))};
}

void Grammar::finish() {
  // Flatten anyOf into leaves; an anyOf reached again while being flattened is a cycle that
  // consumes nothing (e.g. {"$ref": "#"} as its own alternative), which would push forever.
  std::vector<uint8_t> mark(nodes.size(), 0);  // 0 new, 1 in progress, 2 done
  std::function<void(uint32_t)> flatten = [&](uint32_t id) {
    if (mark[id] == 2) return;
    check(mark[id] == 0, "JSON schema refers to itself without any content in between");
    mark[id] = 1;
    std::vector<uint32_t> leaves;
    for (uint32_t alt : nodes[id].alternatives) {
      if (nodes[alt].kind == NodeKind::kAnyOf) {
        flatten(alt);
        leaves.insert(leaves.end(), nodes[alt].leaves.begin(), nodes[alt].leaves.end());
      } else {
        leaves.push_back(alt);
      }
    }
    std::vector<uint32_t> unique;
    for (uint32_t leaf : leaves)
      if (std::find(unique.begin(), unique.end(), leaf) == unique.end()) unique.push_back(leaf);
    check(!unique.empty(), "JSON schema: anyOf admits no value");
    nodes[id].leaves = std::move(unique);
    mark[id] = 2;
  };
  for (uint32_t id = 0; id < nodes.size(); ++id)
    if (nodes[id].kind == NodeKind::kAnyOf) flatten(id);

  // min_depth by fixpoint from "no finite value": recursion through optional properties, empty
  // arrays or anyOf alternatives gets finite depths, recursion through required ones does not.
  const auto plus_one = [](uint32_t d) { return d == kUnbounded ? kUnbounded : d + 1; };
  const auto min_depth_of = [&](const Node& node) -> uint32_t {
    uint32_t deepest = 0;
    switch (node.kind) {
      case NodeKind::kObject:
        if (!node.listed) return 1;  // {} at the least
        for (const Property& p : node.properties)
          if (p.required) deepest = std::max(deepest, nodes[p.value].min_depth);
        return plus_one(deepest);
      case NodeKind::kArray:
        return node.min_items > 0 ? plus_one(nodes[node.items].min_depth) : 1;
      case NodeKind::kAnyOf:
        deepest = kUnbounded;
        for (uint32_t leaf : node.leaves) deepest = std::min(deepest, nodes[leaf].min_depth);
        return deepest;
      case NodeKind::kSequence:
        for (const SequenceItem& item : node.sequence)
          if (item.node != kNoNode) deepest = std::max(deepest, nodes[item.node].min_depth);
        return plus_one(deepest);
      default:
        return 1;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& node : nodes) {
      const uint32_t d = min_depth_of(node);
      if (d < node.min_depth) {
        node.min_depth = d;
        changed = true;
      }
    }
  }
  check(nodes[root].min_depth != kUnbounded,
        "JSON schema admits no finite value (a required property recurses forever)");
  check(fits(root, 0), "JSON schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
}

}  // namespace fak::grammar
