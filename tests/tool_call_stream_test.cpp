// Tool calls as agents that stream expect them (issue 23): each call's arguments arrive as
// they are generated (OpenAI `tool_calls[].function.arguments` deltas, Anthropic
// `input_json_delta`, Responses `function_call_arguments.delta`), adding up to what a whole reply
// holds; and a call cut off by max_tokens is "length", with no half call in the text. The reader
// in-process over awkward splits, then the server through every API.
#include "chat/tool_call_stream.h"

#include <gtest/gtest.h>

#include <array>

#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

using chat::ToolCallDelta;
using chat::ToolCallStream;

// Feeds text in pieces of `step` bytes; returns the deltas and the final state.
std::pair<std::vector<chat::ToolCallDelta>, chat::ToolCallStream::Final> read(
    const std::string& text, size_t step, bool cut) {
  chat::ToolCallStream s;
  std::vector<chat::ToolCallDelta> all;
  for (size_t at = 0; at < text.size(); at += step)
    for (chat::ToolCallDelta& d : s.push(text.substr(at, step))) all.push_back(std::move(d));
  chat::ToolCallStream::Final f = s.finish(cut);
  for (chat::ToolCallDelta& d : f.deltas) all.push_back(d);
  return {all, std::move(f)};
}

// The calls the deltas describe: {id, name, arguments} per index.
std::vector<std::array<std::string, 3>> replay(const std::vector<chat::ToolCallDelta>& deltas) {
  std::vector<std::array<std::string, 3>> calls;
  for (const chat::ToolCallDelta& d : deltas) {
    if (!d.id.empty()) {
      EXPECT_EQ(d.index, int(calls.size()));
      calls.push_back({d.id, d.name, ""});
    }
    EXPECT_LT(d.index, int(calls.size()));
    calls[size_t(d.index)][2] += d.arguments;
  }
  return calls;
}

const std::string kArgs = R"({"city": "Pa\"ris}", "n": [1, {"a": "{["}], "u": "é"})";

TEST(ToolCallStream, ArgumentsArriveAsTheyAreWrittenWhateverTheSplit) {
  const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kArgs +
                           "}\n</tool_call>\n<tool_call>\n{\"name\":\"b\",\"arguments\":{}}\n"
                           "</tool_call>\nthat is all";
  for (size_t step : {size_t(1), size_t(2), size_t(3), size_t(7), text.size()}) {
    auto [deltas, f] = read(text, step, false);
    const auto calls = replay(deltas);
    ASSERT_EQ(calls.size(), 2u) << step;
    EXPECT_EQ(calls[0][1], "get_weather");
    EXPECT_EQ(calls[0][2], kArgs);
    EXPECT_EQ(calls[1][1], "b");
    EXPECT_EQ(calls[1][2], "{}");
    ASSERT_EQ(f.tool_calls.size(), 2u);
    EXPECT_EQ(f.tool_calls[0]["id"], calls[0][0]);  // the whole reply agrees with the stream
    EXPECT_EQ(f.tool_calls[0]["function"]["arguments"], kArgs);
    EXPECT_EQ(f.content, "that is all");
    EXPECT_FALSE(f.dropped);
    if (step == 1) {
      EXPECT_GT(deltas.size(), 20u);  // many pieces, not one at the end
    }
  }
}

TEST(ToolCallStream, ACallCutOffIsDroppedNotText) {
  const std::string whole =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}\n</tool_call>";
  for (size_t cut_at : {size_t(11), size_t(20), size_t(50), size_t(70)}) {
    auto [deltas, f] = read(whole.substr(0, cut_at), 3, /*cut=*/true);
    EXPECT_TRUE(f.tool_calls.empty()) << cut_at;
    EXPECT_TRUE(f.dropped) << cut_at;
    EXPECT_EQ(f.content.find("<tool_call>"), std::string::npos) << cut_at;
    EXPECT_EQ(f.content, "") << cut_at;
  }
  // Whole arguments with the closing tag missing: a call.
  auto [deltas, f] = read(whole.substr(0, whole.size() - 13), 4, true);
  ASSERT_EQ(f.tool_calls.size(), 1u);
  EXPECT_FALSE(f.dropped);
}

TEST(ToolCallStream, OtherShapesAreParsedWholeAndBrokenBlocksStayText) {
  // Arguments before the name: not streamable, still a call at the end.
  auto [d1, f1] =
      read("<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>", 2, false);
  ASSERT_EQ(f1.tool_calls.size(), 1u);
  const auto calls = replay(d1);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0][1], "f");
  EXPECT_EQ(ojson::parse(calls[0][2]), ojson::parse(R"({"x": 1})"));
  // Not JSON: the text stays, untouched, when the model ended it itself.
  const std::string broken = "<tool_call>not json</tool_call> ok";
  auto [d2, f2] = read(broken, 5, false);
  EXPECT_TRUE(f2.tool_calls.empty());
  EXPECT_TRUE(d2.empty());
  EXPECT_EQ(f2.content, broken);
}

// The JSON payloads of an OpenAI stream, [DONE] left out.
std::vector<ojson> chunks(const std::string& raw) {
  std::vector<ojson> out;
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    const std::string payload = raw.substr(at + 6, end - at - 6);
    if (payload != "[DONE]") out.push_back(ojson::parse(payload));
    at = end;
  }
  return out;
}

// The server, with the bundled model forced into the tool-call grammar.
class ToolCallsServer : public TwoSlotServerSuite {
 protected:
};

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
  "days": {"type": "integer"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
  "required": ["city", "days", "unit"], "additionalProperties": false}}}])");

ojson chat_request(int max_tokens) {
  return {{"model", "pycoder-6m"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"tools", kTools},
          {"tool_choice", "required"},
          {"messages", {{{"role", "user"}, {"content", "weather in Paris for a week?"}}}}};
}

ojson anthropic_request(int max_tokens) {
  ojson tool = {{"name", "get_weather"}, {"input_schema", kTools[0]["function"]["parameters"]}};
  return {{"model", "pycoder-6m"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"tools", {tool}},
          {"tool_choice", {{"type", "any"}}},
          {"messages", {{{"role", "user"}, {"content", "weather in Paris for a week?"}}}}};
}

ojson responses_request(int max_tokens) {
  ojson tool = {{"type", "function"},
                {"name", "get_weather"},
                {"parameters", kTools[0]["function"]["parameters"]}};
  return {{"model", "pycoder-6m"},     {"max_output_tokens", max_tokens},
          {"temperature", 0},          {"tools", {tool}},
          {"tool_choice", "required"}, {"input", "weather in Paris for a week?"}};
}

TEST_F(ToolCallsServer, OpenAiStreamsArgumentsAsDeltas) {
  const HttpReply whole = post_json(port(), "/v1/chat/completions", chat_request(200));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const ojson choice = whole.j()["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << whole.body;
  const ojson call = choice["message"]["tool_calls"][0];
  ojson req = chat_request(200);
  req["stream"] = true;
  std::vector<ojson> deltas;
  std::string finish;
  for (const ojson& e : chunks(post_stream(port(), "/v1/chat/completions", req))) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const ojson& c = e["choices"][0];
    if (c["delta"].contains("tool_calls")) deltas.push_back(c["delta"]["tool_calls"][0]);
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
  }
  ASSERT_GE(deltas.size(), 3u) << "the call came in one piece";
  EXPECT_EQ(deltas[0]["index"], 0);
  EXPECT_EQ(deltas[0]["type"], "function");
  EXPECT_EQ(deltas[0]["function"]["name"], "get_weather");
  EXPECT_TRUE(deltas[0]["id"].is_string());
  std::string args;
  for (size_t i = 0; i < deltas.size(); ++i) {
    EXPECT_EQ(deltas[i]["index"], 0);
    if (i > 0) {
      EXPECT_FALSE(deltas[i].contains("id"));
    }
    args += deltas[i]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(args, call["function"]["arguments"]);  // greedy: the same call as the whole reply
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(ToolCallsServer, AnthropicAndResponsesStreamArgumentsAsDeltas) {
  ojson req = anthropic_request(200);
  const HttpReply whole = post_json(port(), "/v1/messages", req);
  ASSERT_EQ(whole.status, 200) << whole.body;
  ASSERT_EQ(whole.j()["stop_reason"], "tool_use") << whole.body;
  ojson input;
  const ojson reply = whole.j();
  for (const ojson& b : reply["content"])
    if (b["type"] == "tool_use") input = b["input"];
  req["stream"] = true;
  std::string partial;
  int pieces = 0;
  bool started = false;
  for (const SseEvent& e : sse_events(post_stream(port(), "/v1/messages", req))) {
    if (e.name == "content_block_start" && e.data["content_block"]["type"] == "tool_use") {
      started = true;
      EXPECT_EQ(e.data["content_block"]["name"], "get_weather");
      EXPECT_EQ(e.data["content_block"]["input"], ojson::object());
    }
    if (e.name == "content_block_delta" && e.data["delta"]["type"] == "input_json_delta") {
      EXPECT_TRUE(started);
      partial += e.data["delta"]["partial_json"].get<std::string>();
      ++pieces;
    }
  }
  EXPECT_GE(pieces, 3);
  EXPECT_EQ(ojson::parse(partial), input);

  ojson rreq = responses_request(200);
  rreq["stream"] = true;
  std::string args, done;
  pieces = 0;
  for (const SseEvent& e : sse_events(post_stream(port(), "/v1/responses", rreq))) {
    if (e.name == "response.function_call_arguments.delta") {
      args += e.data["delta"].get<std::string>();
      ++pieces;
    }
    if (e.name == "response.function_call_arguments.done") done = e.data["arguments"];
  }
  EXPECT_GE(pieces, 3);
  EXPECT_EQ(args, done);
}

// Cut off by max_tokens inside the call, at several places: the finish reason says so, and no
// part of the call shows as text or as a call, in any API, streamed or not.
TEST_F(ToolCallsServer, ACallCutByMaxTokensIsLengthWithNoHalfCall) {
  for (int max_tokens : {3, 8, 14, 20}) {
    SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
    const HttpReply chat = post_json(port(), "/v1/chat/completions", chat_request(max_tokens));
    ASSERT_EQ(chat.status, 200) << chat.body;
    const ojson c = chat.j()["choices"][0];
    EXPECT_EQ(c["finish_reason"], "length") << chat.body;
    EXPECT_FALSE(c["message"].contains("tool_calls")) << chat.body;
    EXPECT_EQ(chat.body.find("tool_call>"), std::string::npos) << chat.body;
    EXPECT_EQ(chat.body.find("get_weather"), std::string::npos) << chat.body;

    ojson streamed = chat_request(max_tokens);
    streamed["stream"] = true;
    std::string finish, text;
    for (const ojson& e : chunks(post_stream(port(), "/v1/chat/completions", streamed))) {
      if (!e.contains("choices") || e["choices"].empty()) continue;
      const ojson& d = e["choices"][0];
      if (d["delta"].contains("content") && d["delta"]["content"].is_string())
        text += d["delta"]["content"].get<std::string>();
      if (d["finish_reason"].is_string()) finish = d["finish_reason"];
    }
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(text.find("tool_call"), std::string::npos) << text;

    const HttpReply msg = post_json(port(), "/v1/messages", anthropic_request(max_tokens));
    ASSERT_EQ(msg.status, 200) << msg.body;
    EXPECT_EQ(msg.j()["stop_reason"], "max_tokens") << msg.body;
    EXPECT_EQ(msg.body.find("tool_call>"), std::string::npos) << msg.body;
    const ojson m = msg.j();
    for (const ojson& b : m["content"]) EXPECT_NE(b["type"], "tool_use") << msg.body;

    const HttpReply resp = post_json(port(), "/v1/responses", responses_request(max_tokens));
    ASSERT_EQ(resp.status, 200) << resp.body;
    EXPECT_EQ(resp.j()["status"], "incomplete") << resp.body;
    EXPECT_EQ(resp.body.find("tool_call>"), std::string::npos) << resp.body;
    const ojson out = resp.j();
    for (const ojson& item : out["output"]) EXPECT_NE(item["type"], "function_call");
  }
}

}  // namespace
}  // namespace fak::test
