// Unit tests of the server's text handling: stop strings held back across tokens, tool-call
// extraction, request validation.
#include <gtest/gtest.h>

#include "chat/stop_filter.h"
#include "chat/tool_calls.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace fak::server {
namespace {

std::string feed(chat::StopFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  if (!f.stopped()) out += f.finish();
  return out;
}

TEST(StopFilter, StopSplitAcrossPiecesIsNeverShown) {
  chat::StopFilter f({"\n\n"});
  EXPECT_EQ(f.push("abc\n"), "abc");  // "\n" might start the stop string: held
  EXPECT_EQ(f.push("\nrest"), "");
  EXPECT_TRUE(f.stopped());
  chat::StopFilter g({"STOP"});
  EXPECT_EQ(feed(g, {"xx ST", "O", "P yy"}), "xx ");
}

TEST(StopFilter, HeldTextComesOutWhenItCannotMatch) {
  chat::StopFilter f({"END"});
  EXPECT_EQ(f.push("a E"), "a ");
  EXPECT_EQ(f.push("N"), "");
  EXPECT_EQ(f.push("x"), "ENx");
  EXPECT_EQ(f.finish(), "");
  chat::StopFilter g({"END"});
  EXPECT_EQ(feed(g, {"tail E"}), "tail E");
}

TEST(StopFilter, EarliestOfSeveralStops) {
  chat::StopFilter f({"bbb", "b c"});
  EXPECT_EQ(feed(f, {"aa b c bbb"}), "aa ");
}

TEST(StopFilter, CapturesFromMarker) {
  chat::StopFilter f({}, "<tool_call>");
  std::string shown = f.push("hi <tool");
  shown += f.push("_call>{\"name\"");
  shown += f.push(": \"f\"}</tool_call>");
  EXPECT_EQ(shown, "hi ");
  EXPECT_EQ(f.captured(), "<tool_call>{\"name\": \"f\"}</tool_call>");
}

TEST(ToolCalls, ExtractsHermesBlocks) {
  auto r = chat::extract_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"now\"}</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.tool_calls[0]["type"], "function");
  EXPECT_EQ(r.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.tool_calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.tool_calls[1]["function"]["arguments"], "{}");
  EXPECT_NE(r.tool_calls[0]["id"], r.tool_calls[1]["id"]);
}

TEST(ToolCalls, BrokenBlocksStayText) {
  auto r = chat::extract_tool_calls("x <tool_call>{not json</tool_call>");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "x <tool_call>{not json</tool_call>");
  auto u = chat::extract_tool_calls(
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}");  // cut off at the end
  EXPECT_EQ(u.tool_calls.size(), 1u);
}

TEST(ToolCalls, PlainTemplatesGetToolsAndCallsAsText) {
  ojson msgs = ojson::parse(R"([{"role":"user","content":"hi"},
    {"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]},
    {"role":"tool","content":"42"}])");
  ojson tools = ojson::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  ojson out = chat::messages_for_plain_template(msgs, tools);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_NE(out[0]["content"].get<std::string>().find("\"name\":\"f\""), std::string::npos);
  EXPECT_EQ(out[2]["content"],
            "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>");
  EXPECT_EQ(out[3]["content"], "<tool_response>\n42\n</tool_response>");
}

int status_of(const std::string& body, bool chat) {
  try {
    parse_completion_request(body, chat);
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

TEST(OpenAiRequest, Validation) {
  const std::string m = R"("model":"m","messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(status_of("{" + m + "}", true), 200);
  EXPECT_EQ(status_of("{" + m + R"(,"max_tokens":"ten"})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"max_tokens":0})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"temperature":"hot"})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"n":2})", true), 200);  // the scheduler bounds n
  EXPECT_EQ(status_of("{" + m + R"(,"n":0})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"best_of":2})", true), 400);  // a completions field
  EXPECT_EQ(status_of(R"({"model":"m","prompt":"x","best_of":2,"n":3})", false), 400);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":"x","best_of":3,"stream":true})", false), 400);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":"x","best_of":3,"n":2,"logprobs":2})", false), 200);
  EXPECT_EQ(status_of("{" + m + R"(,"top_logprobs":3})", true), 400);  // needs logprobs: true
  EXPECT_EQ(status_of("{" + m + R"(,"logprobs":true,"top_logprobs":21})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"logprobs":true,"top_logprobs":20})", true), 200);
  EXPECT_EQ(status_of("{" + m + R"(,"response_format":{"type":"xml"}})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"response_format":{"type":"json_schema"}})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"response_format":{"type":"json_object"}})", true), 200);
  EXPECT_EQ(
      status_of("{" + m + R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})", true),
      400);  // no such tool
  EXPECT_EQ(status_of("{" + m + R"(,"chat_template_kwargs":[1]})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"stop":5})", true), 400);
  EXPECT_EQ(status_of("{" + m + R"(,"stop":["a","b"],"seed":7,"stream":true})", true), 200);
  EXPECT_EQ(status_of(R"({"model":"m","messages":[]})", true), 400);
  EXPECT_EQ(status_of(R"({"model":"m","messages":"hi"})", true), 400);
  EXPECT_EQ(status_of(R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", true), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}]})", true), 400);
  EXPECT_EQ(status_of(R"([1,2])", true), 400);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":"x")", false), 400);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":[1,2,3]})", false), 200);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":["a","b"]})", false), 400);
  EXPECT_EQ(status_of("{\"model\":\"m\",\"prompt\":\"\xff\"}", false), 400);
  EXPECT_EQ(status_of(R"({"model":"m","prompt":"x","max_tokens":333E3333333})", false), 400);
  // Fields of the wrong JSON type inside messages and tools are refused as the field, not thrown
  // as a JSON library error.
  EXPECT_EQ(status_of(R"({"model":"m","messages":[{"role":"user","content":[{"type":5}]}]})", true),
            400);
  EXPECT_EQ(status_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                          "tools":[{"type":5,"function":{"name":"f"}}]})",
                      true),
            400);
  EXPECT_EQ(status_of(R"({"model":"m","messages":[{"role":"assistant","content":null,
                          "tool_calls":[{"id":7,"function":{"name":"f","arguments":"{}"}}]}]})",
                      true),
            200);
}

TEST(OpenAiRequest, ToolCallArgumentsBecomeObjects) {
  auto r = parse_completion_request(R"({"model":"m","messages":[{"role":"assistant","content":null,
    "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"z\":1,\"a\":2}"}}]}]})",
                                    true);
  EXPECT_EQ(r.messages[0]["content"], "");
  // Key order kept (ordered_json): templates render arguments as the client wrote them.
  EXPECT_EQ(r.messages[0]["tool_calls"][0]["function"]["arguments"].dump(), "{\"z\":1,\"a\":2}");
}

// reasoning_effort becomes the template variable gpt-oss's template reads; an explicit
// chat_template_kwargs value wins; anything else is a 400 naming it.
TEST(OpenAiRequest, ReasoningEffortReachesTheTemplate) {
  const std::string base = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  auto r = parse_completion_request(base + R"("reasoning_effort":"high"})", true);
  EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "high");
  r = parse_completion_request(
      base + R"("reasoning_effort":"high","chat_template_kwargs":{"reasoning_effort":"low"}})",
      true);
  EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "low");
  EXPECT_EQ(status_of(base + R"("reasoning_effort":"max"})", true), 400);
}

}  // namespace
}  // namespace fak::server
