// ReplyBlocks, the layout shared by the Anthropic and responses front ends: reasoning, text, tool
// calls in the order they were written; whitespace alone never opens a text block beside others;
// and a stream cut into any pieces (tool-call arguments too) reports the same blocks as the whole
// reply, each opened, grown and closed once.
#include "server/reply_blocks.h"

#include <gtest/gtest.h>

namespace fak::test {
namespace {

using server::Generation;
using server::ReplyBlock;
using server::ReplyBlocks;
using Kind = ReplyBlock::Kind;

// Records the events as text ("open 0 text", "delta 0 'x'", "close 0 'xy'").
struct Recorder : ReplyBlocks::Sink {
  std::vector<std::string> events;
  static const char* name(Kind k) {
    return k == Kind::Reasoning ? "reasoning" : k == Kind::Text ? "text" : "tool";
  }
  void open(int i, const ReplyBlock& b) override {
    EXPECT_TRUE(b.text.empty());
    events.push_back("open " + std::to_string(i) + " " + name(b.kind));
  }
  void delta(int i, const ReplyBlock&, std::string_view text) override {
    events.push_back("delta " + std::to_string(i) + " '" + std::string(text) + "'");
  }
  void close(int i, const ReplyBlock& b) override {
    events.push_back("close " + std::to_string(i) + " '" + b.text + "'");
  }
};

Generation::Choice choice(std::string reasoning, std::string content, server::ojson calls = {}) {
  Generation::Choice c;
  c.reasoning = std::move(reasoning);
  c.content = std::move(content);
  c.done = true;
  if (calls.is_array()) c.tool_calls.tool_calls = calls;
  return c;
}

// Streams the choice in pieces of `step` bytes as Generation releases it: reasoning, text, then
// each tool call (id and name first, its arguments in pieces).
std::vector<ReplyBlock> streamed(const Generation::Choice& c, size_t step, Recorder* rec) {
  ReplyBlocks b(rec);
  for (size_t i = 0; i < c.reasoning.size(); i += step) b.push(c.reasoning.substr(i, step), "");
  for (size_t i = 0; i < c.content.size(); i += step) b.push("", c.content.substr(i, step));
  const server::ojson& calls = c.tool_calls.tool_calls;
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string args = calls[k]["function"]["arguments"];
    b.push_tool_call({int(k), calls[k]["id"], calls[k]["function"]["name"], ""});
    for (size_t i = 0; i < args.size(); i += step)
      b.push_tool_call({int(k), "", "", args.substr(i, step)});
  }
  b.finish(c);
  return b.blocks();
}

void expect_same(const std::vector<ReplyBlock>& a, const std::vector<ReplyBlock>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].text, b[i].text);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].call_id, b[i].call_id);
  }
}

const server::ojson kCall = server::ojson::parse(
    R"([{"id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": "{\"x\":1}"}}])");

TEST(ReplyBlocks, ReasoningTextAndCallsInOrder) {
  const Generation::Choice c = choice("plan it", "Calling f.", kCall);
  const std::vector<ReplyBlock> whole = ReplyBlocks::of(c);
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(whole[0].kind, Kind::Reasoning);
  EXPECT_EQ(whole[0].text, "plan it");
  EXPECT_EQ(whole[1].kind, Kind::Text);
  EXPECT_EQ(whole[1].text, "Calling f.");
  EXPECT_EQ(whole[2].kind, Kind::ToolCall);
  EXPECT_EQ(whole[2].name, "f");
  EXPECT_EQ(whole[2].text, "{\"x\":1}");
  EXPECT_EQ(whole[2].call_id, "call_1");  // the call's own id, as the stream announced it
  Recorder rec;
  expect_same(streamed(c, 3, &rec), whole);
  const std::vector<std::string> expected = {
      "open 0 reasoning",  "delta 0 'pla'",  "delta 0 'n i'",        "delta 0 't'",
      "close 0 'plan it'", "open 1 text",    "delta 1 'Cal'",        "delta 1 'lin'",
      "delta 1 'g f'",     "delta 1 '.'",    "close 1 'Calling f.'", "open 2 tool",
      "delta 2 '{\"x'",    "delta 2 '\":1'", "delta 2 '}'",          "close 2 '{\"x\":1}'"};
  EXPECT_EQ(rec.events, expected);
}

TEST(ReplyBlocks, WhitespaceAloneOpensNoBlockBesideOthers) {
  // Whitespace before a tool call: no text block, streamed or whole.
  for (size_t step : {1, 2, 100}) {
    Recorder rec;
    const Generation::Choice c = choice("", " \n", kCall);
    const std::vector<ReplyBlock> s = streamed(c, step, &rec);
    expect_same(s, ReplyBlocks::of(c));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].kind, Kind::ToolCall);
  }
  // After reasoning, likewise.
  EXPECT_EQ(ReplyBlocks::of(choice("think", "\n\n")).size(), 1u);
  // Leading whitespace before words stays in the text.
  const std::vector<ReplyBlock> lead = streamed(choice("", "\n  x"), 1, nullptr);
  ASSERT_EQ(lead.size(), 1u);
  EXPECT_EQ(lead[0].text, "\n  x");
  // Nothing at all: one empty text block, so a reply always has content.
  const std::vector<ReplyBlock> empty = ReplyBlocks::of(choice("", ""));
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].kind, Kind::Text);
  EXPECT_EQ(empty[0].text, "");
  EXPECT_EQ(ReplyBlocks::of(choice("", "  ")).at(0).text, "  ");
}

TEST(ReplyBlocks, TextOnlyTheChoiceHoldsComesAtTheEnd) {
  // Generation adds to the choice, at its close, text no delta carried (a <tool_call> block that
  // did not parse), and the text after parsed calls: both reach the blocks, in the order they
  // were written.
  Generation::Choice c = choice("", "before <tool_call>{broken</tool_call>");
  ReplyBlocks b;
  b.push("", "before ");
  b.finish(c);
  ASSERT_EQ(b.blocks().size(), 1u);
  EXPECT_EQ(b.blocks()[0].text, "before <tool_call>{broken</tool_call>");
  Generation::Choice calls = choice("", "a", kCall);
  calls.tool_calls.content = "b";
  const std::vector<ReplyBlock> whole = ReplyBlocks::of(calls);
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(whole[0].text, "a");
  EXPECT_EQ(whole[1].kind, Kind::ToolCall);
  EXPECT_EQ(whole[2].text, "b");
  expect_same(streamed(calls, 1, nullptr), whole);
}

}  // namespace
}  // namespace fak::test
