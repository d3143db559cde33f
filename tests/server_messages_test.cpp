// Anthropic's Messages API on the real `fak serve` binary (issue 18): the message object, the event
// stream in Anthropic's exact order (reassembled, it equals the whole reply under greedy
// decoding), forced tool use validated against its input_schema by an independent validator, a
// tool_result turn, system prompts, stop sequences, max_tokens, count_tokens against usage, the
// prefix cache seen in cache_read_input_tokens, errors in Anthropic's shape, x-api-key auth, and
// thinking blocks from a model that thinks. In-process checks of the request translation too.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

const Headers kKeyA = {{"x-api-key", "key-a"}, {"anthropic-version", "2023-06-01"}};

ojson user_says(const std::string& text, int max_tokens) {
  return {{"model", "pycoder-6m"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"messages", {{{"role", "user"}, {"content", text}}}}};
}

const ojson kWeatherTools = ojson::parse(R"([
  {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": false}},
  {"name": "get_time", "input_schema": {
    "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}}
])");

// A stream checked against Anthropic's event grammar and folded back into the message it
// describes: message_start (empty content), then for each block content_block_start, deltas of
// its own kind and content_block_stop, one block at a time with increasing indices, then
// message_delta and message_stop last. Pings only after message_start.
ojson reassemble(const std::string& raw) {
  ojson msg;
  std::string json_buf;
  int open = -1;
  bool delta_seen = false, stopped = false;
  for (const SseEvent& e : sse_events(raw)) {
    if (e.name.empty()) {
      EXPECT_TRUE(msg.is_null()) << "a comment after message_start: " << e.comment;
      continue;
    }
    EXPECT_FALSE(stopped) << "an event after message_stop: " << e.name;
    EXPECT_EQ(e.data["type"], e.name);
    if (e.name == "message_start") {
      EXPECT_TRUE(msg.is_null());
      msg = e.data["message"];
      EXPECT_EQ(msg["content"], ojson::array());
      EXPECT_TRUE(msg["stop_reason"].is_null());
      continue;
    }
    EXPECT_FALSE(msg.is_null()) << e.name << " before message_start";
    if (msg.is_null()) return msg;
    if (e.name == "ping") continue;
    if (e.name == "content_block_start") {
      EXPECT_EQ(open, -1) << "a block opened inside another";
      EXPECT_FALSE(delta_seen);
      open = e.data["index"];
      EXPECT_EQ(size_t(open), msg["content"].size());
      msg["content"].push_back(e.data["content_block"]);
      json_buf.clear();
    } else if (e.name == "content_block_delta") {
      EXPECT_EQ(e.data["index"], open);
      if (open < 0) continue;
      ojson& block = msg["content"][size_t(open)];
      const ojson& d = e.data["delta"];
      if (block["type"] == "text") {
        EXPECT_EQ(d["type"], "text_delta");
        block["text"] = block["text"].get<std::string>() + d["text"].get<std::string>();
      } else if (block["type"] == "thinking") {
        EXPECT_EQ(d["type"], "thinking_delta");
        block["thinking"] = block["thinking"].get<std::string>() + d["thinking"].get<std::string>();
      } else {
        EXPECT_EQ(block["type"], "tool_use");
        EXPECT_EQ(d["type"], "input_json_delta");
        json_buf += d["partial_json"].get<std::string>();
      }
    } else if (e.name == "content_block_stop") {
      EXPECT_EQ(e.data["index"], open);
      if (open >= 0 && msg["content"][size_t(open)]["type"] == "tool_use")
        msg["content"][size_t(open)]["input"] = ojson::parse(json_buf.empty() ? "{}" : json_buf);
      open = -1;
    } else if (e.name == "message_delta") {
      EXPECT_EQ(open, -1) << "message_delta with a block open";
      EXPECT_FALSE(delta_seen);
      delta_seen = true;
      msg["stop_reason"] = e.data["delta"]["stop_reason"];
      msg["stop_sequence"] = e.data["delta"]["stop_sequence"];
      msg["usage"] = e.data["usage"];
    } else if (e.name == "message_stop") {
      EXPECT_TRUE(delta_seen) << "message_stop without message_delta";
      stopped = true;
    } else {
      ADD_FAILURE() << "unexpected event " << e.name;
    }
  }
  EXPECT_TRUE(stopped) << raw.substr(0, 400);
  return msg;
}

// Ids are fresh per reply; everything else must agree.
ojson without_ids(ojson m) {
  m.erase("id");
  for (ojson& b : m["content"]) b.erase("id");
  return m;
}

class ServerMessages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess("--parallel 4"); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static HttpReply messages(const ojson& body, const Headers& h = kKeyA) {
    return post_json(port(), "/v1/messages", body, h);
  }
  static int count_tokens(ojson body, const Headers& h = kKeyA) {
    body.erase("max_tokens");
    body.erase("temperature");
    const HttpReply r = post_json(port(), "/v1/messages/count_tokens", body, h);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.j()["input_tokens"].get<int>() : -1;
  }
  static ServerProcess* server_;
};
ServerProcess* ServerMessages::server_ = nullptr;

TEST_F(ServerMessages, ReplyIsAnAnthropicMessage) {
  const HttpReply r = messages(user_says("reverse a string", 5));
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson m = r.j();
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "pycoder-6m");
  ASSERT_EQ(m["content"].size(), 1u);
  EXPECT_EQ(m["content"][0]["type"], "text");
  EXPECT_FALSE(m["content"][0]["text"].get<std::string>().empty());
  // The bundled model says more than five tokens about this: the limit ends it.
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  const ojson& u = m["usage"];
  EXPECT_EQ(u["output_tokens"], 5);
  EXPECT_EQ(u["cache_creation_input_tokens"], 0);
  EXPECT_GT(u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>(), 5);
  EXPECT_EQ(u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>(),
            count_tokens(user_says("reverse a string", 5)));
}

TEST_F(ServerMessages, StreamReassemblesToTheWholeReply) {
  for (const ojson& req : {user_says("print hello world", 24), user_says("sort a list", 40)}) {
    const HttpReply whole = messages(req);
    ASSERT_EQ(whole.status, 200) << whole.body;
    ojson s = req;
    s["stream"] = true;
    const std::string raw = post_stream(port(), "/v1/messages", s, kKeyA);
    const ojson streamed = reassemble(raw);
    ojson a = without_ids(whole.j()), b = without_ids(streamed);
    // message_start carries the prompt's usage before any output; message_delta all of it.
    EXPECT_EQ(a["content"], b["content"]) << raw.substr(0, 600);
    EXPECT_EQ(a["stop_reason"], b["stop_reason"]);
    EXPECT_EQ(a["stop_sequence"], b["stop_sequence"]);
    EXPECT_EQ(a["usage"]["output_tokens"], b["usage"]["output_tokens"]);
    EXPECT_EQ(a["model"], b["model"]);
    EXPECT_EQ(raw.find("event: message_start"), 0u);
  }
}

TEST_F(ServerMessages, SystemPromptIsRendered) {
  ojson plain = user_says("add two numbers", 12);
  ojson with_string = plain;
  with_string["system"] = "You write short Python. Never explain.";
  ojson with_blocks = plain;
  with_blocks["system"] = {{{"type", "text"}, {"text", "You write short Python. Never explain."}}};
  const int n_plain = count_tokens(plain), n_string = count_tokens(with_string);
  EXPECT_GT(n_string, n_plain + 5);
  EXPECT_EQ(count_tokens(with_blocks), n_string);  // the same prompt whichever way it is sent
  const HttpReply a = messages(with_string), b = messages(with_blocks);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["content"], b.j()["content"]);
  // A system prompt in the messages, as newer clients send it, is the same system prompt.
  ojson in_messages = plain;
  in_messages["messages"].insert(in_messages["messages"].begin(),
                                 ojson{{"role", "system"}, {"content", with_string["system"]}});
  EXPECT_EQ(count_tokens(in_messages), n_string);
}

TEST_F(ServerMessages, StopSequencesEndTheReplyAndAreNamed) {
  const HttpReply free = messages(user_says("write a class for a stack", 40));
  ASSERT_EQ(free.status, 200) << free.body;
  const std::string text = free.j()["content"][0]["text"];
  ASSERT_GT(text.size(), 20u) << text;
  // A stop string from the middle of the greedy reply: the reply ends just before it.
  const std::string stop = text.substr(10, 4);
  const size_t cut = text.find(stop);
  for (bool stream : {false, true}) {
    ojson req = user_says("write a class for a stack", 40);
    req["stop_sequences"] = {"never appears in this reply", stop};
    ojson m;
    if (stream) {
      req["stream"] = true;
      m = reassemble(post_stream(port(), "/v1/messages", req, kKeyA));
    } else {
      const HttpReply r = messages(req);
      ASSERT_EQ(r.status, 200) << r.body;
      m = r.j();
    }
    EXPECT_EQ(m["stop_reason"], "stop_sequence") << m.dump();
    EXPECT_EQ(m["stop_sequence"], stop);
    ASSERT_FALSE(m["content"].empty());
    EXPECT_EQ(m["content"][0]["text"], text.substr(0, cut)) << "stream " << stream;
  }
}

TEST_F(ServerMessages, ForcedToolUseMatchesItsInputSchema) {
  for (const ojson& choice : {ojson{{"type", "any"}, {"disable_parallel_tool_use", true}},
                              ojson{{"type", "tool"}, {"name", "get_time"}}}) {
    for (bool stream : {false, true}) {
      ojson req = user_says("What is the weather in Paris?", 80);
      req["tools"] = kWeatherTools;
      req["tool_choice"] = choice;
      ojson m;
      if (stream) {
        req["stream"] = true;
        m = reassemble(post_stream(port(), "/v1/messages", req, kKeyA));
      } else {
        const HttpReply r = messages(req);
        ASSERT_EQ(r.status, 200) << r.body;
        m = r.j();
      }
      ASSERT_EQ(m["stop_reason"], "tool_use") << m.dump();
      const ojson& last = m["content"].back();
      ASSERT_EQ(last["type"], "tool_use") << m.dump();
      EXPECT_EQ(last["id"].get<std::string>().rfind("toolu_", 0), 0u);
      const std::string name = last["name"];
      if (choice["type"] == "tool") {
        EXPECT_EQ(name, "get_time");
      }
      ASSERT_TRUE(last["input"].is_object());
      const ojson& schema = kWeatherTools[name == "get_weather" ? 0 : 1]["input_schema"];
      EXPECT_EQ(grammar::schema_violation(last["input"], schema, {.strict = true}), "")
          << last["input"].dump();
    }
  }
}

TEST_F(ServerMessages, ToolResultTurnReusesTheCachedPrefix) {
  // A fresh tenant: nothing of this conversation is cached before its first turn.
  const Headers key_b = {{"x-api-key", "key-b"}};
  ojson req = user_says("What is the weather in Lyon? Use the tool.", 60);
  req["system"] = "You are a weather agent.";
  req["tools"] = kWeatherTools;
  req["tool_choice"] = {{"type", "tool"}, {"name", "get_weather"}};
  const HttpReply first = messages(req, key_b);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.j()["usage"]["cache_read_input_tokens"], 0);
  const ojson call = first.j()["content"].back();
  ASSERT_EQ(call["type"], "tool_use");

  ojson next = req;
  next.erase("tool_choice");
  next["messages"].push_back({{"role", "assistant"}, {"content", first.j()["content"]}});
  next["messages"].push_back(
      {{"role", "user"},
       {"content",
        {{{"type", "tool_result"}, {"tool_use_id", call["id"]}, {"content", "21 degrees, sunny"}},
         {{"type", "text"}, {"text", "Thanks. And tomorrow?"}}}}});
  const HttpReply second = messages(next, key_b);
  ASSERT_EQ(second.status, 200) << second.body;
  const ojson u = second.j()["usage"];
  // The first turn's prompt is read from the cache (its reply too, as far as the template
  // renders it the same way).
  // note: the cache shares whole blocks of 32 tokens.
  const int first_prompt = first.j()["usage"]["input_tokens"];
  EXPECT_GE(u["cache_read_input_tokens"].get<int>(), first_prompt - 32) << u.dump();
  EXPECT_EQ(u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>(),
            count_tokens(next, key_b));
  // The tool result is in the prompt: a longer one makes a longer prompt.
  ojson longer = next;
  longer["messages"][2]["content"][0]["content"] = {
      {{"type", "text"}, {"text", "21 degrees, sunny, light wind from the west"}}};
  EXPECT_GT(count_tokens(longer, key_b), count_tokens(next, key_b));
  // A failed tool says so.
  ojson failed = next;
  failed["messages"][2]["content"][0]["is_error"] = true;
  EXPECT_GT(count_tokens(failed, key_b), count_tokens(next, key_b));
  EXPECT_EQ(messages(failed, key_b).status, 200);
}

TEST_F(ServerMessages, AssistantPrefillIsContinued) {
  ojson req = user_says("reverse a string", 8);
  const int without = count_tokens(req);
  const HttpReply free = messages(req);
  req["messages"].push_back({{"role", "assistant"}, {"content", "def reverse(s):"}});
  // The prefill follows the generation prompt, token for token.
  const HttpReply alone =
      post_json(port(), "/v1/completions",
                ojson{{"model", "pycoder-6m"}, {"prompt", "def reverse(s):"}, {"max_tokens", 1}});
  ASSERT_EQ(alone.status, 200) << alone.body;
  EXPECT_EQ(count_tokens(req) - without, alone.j()["usage"]["prompt_tokens"].get<int>());
  const HttpReply r = messages(req);
  ASSERT_EQ(r.status, 200) << r.body;
  // Only the continuation comes back, and it is not the reply without the prefill.
  const std::string text = r.j()["content"][0]["text"];
  EXPECT_NE(text.rfind("def reverse(s):", 0), 0u) << text;
  EXPECT_NE(text, free.j()["content"][0]["text"]);
  // A conversation that is only the prefill (with tools, which the bundled template gets written
  // into a system message) is served too.
  ojson only = user_says("", 4);
  only["messages"] = ojson::parse(R"([{"role": "assistant", "content": "def f"}])");
  only["tools"] = kWeatherTools;
  const HttpReply alone_prefill = messages(only);
  ASSERT_EQ(alone_prefill.status, 200) << alone_prefill.body;
  EXPECT_EQ(alone_prefill.j()["usage"]["output_tokens"], 4);
}

TEST_F(ServerMessages, ThinkingIsAcceptedByAModelThatDoesNotThink) {
  ojson req = user_says("sort a list", 10);
  const HttpReply plain = messages(req);
  req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  req["metadata"] = {{"user_id", "someone"}};
  const HttpReply thinking = messages(req);
  ASSERT_EQ(thinking.status, 200) << thinking.body;
  EXPECT_EQ(thinking.j()["content"], plain.j()["content"]);
}

TEST_F(ServerMessages, MistakesAre400sInAnthropicsShape) {
  const ojson ok = user_says("hi", 4);
  auto with = [&](const std::string& key, const ojson& value) {
    ojson b = ok;
    b[key] = value;
    return b;
  };
  auto no = [&](const std::string& key) {
    ojson b = ok;
    b.erase(key);
    return b;
  };
  struct Case {
    ojson body;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {no("max_tokens"), "max_tokens"},
      {no("messages"), "messages"},
      {with("messages", ojson::array()), "messages"},
      {with("max_tokens", 0), "max_tokens"},
      {with("temperature", 1.5), "temperature"},
      {with("messages", {{{"role", "robot"}, {"content", "x"}}}), "messages[0].role"},
      {with("messages", ojson::parse(R"([{"role": "user", "content": [
         {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}])")),
       "image"},
      {with("messages", ojson::parse(R"([{"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "toolu_1",
          "content": [{"type": "image", "source": {}}]}]}])")),
       "image"},
      {with("messages", ojson::parse(R"([{"role": "assistant", "content": [
         {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}])")),
       "tool_result"},
      {with("tools", ojson::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])")),
       "tools[0]"},
      {with("tools", ojson::parse(R"([{"name": "f"}])")), "input_schema"},
      {with("tool_choice", {{"type", "any"}}), "tool_choice"},
      {[&] {
         ojson b = with("tools", kWeatherTools);
         b["tool_choice"] = {{"type", "tool"}, {"name", "nope"}};
         return b;
       }(),
       "nope"},
      {with("thinking", {{"type", "enabled"}}), "budget_tokens"},
      {with("stop_sequences", "STOP"), "stop_sequences"},
      {with("system", 5), "system"},
      {with("mcp_servers", {{{"url", "http://x"}}}), "mcp_servers"},
  };
  for (const Case& c : cases) {
    const HttpReply r = messages(c.body);
    ASSERT_EQ(r.status, 400) << c.body.dump() << " -> " << r.body;
    const ojson e = r.j();
    EXPECT_EQ(e["type"], "error") << r.body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.mentions), std::string::npos)
        << c.mentions << " in " << r.body;
  }
  const HttpReply not_json = post_json(port(), "/v1/messages", std::string("{oops"), kKeyA);
  EXPECT_EQ(not_json.status, 400);
  EXPECT_EQ(not_json.j()["error"]["type"], "invalid_request_error");
  ojson other_model = ok;
  other_model["model"] = "claude-sonnet-4-5";
  const HttpReply missing = messages(other_model);
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.j()["error"]["type"], "not_found_error");
  // Anthropic's wording for a prompt beyond the context: Claude Code compacts on it.
  std::string words;
  for (int i = 0; i < 400; ++i) words += " word" + std::to_string(i);
  const HttpReply too_long = messages(user_says(words, 4));
  ASSERT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_EQ(too_long.j()["error"]["message"].get<std::string>().rfind("prompt is too long: ", 0),
            0u)
      << too_long.body;
}

TEST_F(ServerMessages, KeysAreAcceptedEitherWay) {
  const ojson req = user_says("a tuple of three", 3);
  const HttpReply none = messages(req, {});
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.j()["type"], "error");
  EXPECT_EQ(none.j()["error"]["type"], "authentication_error");
  EXPECT_EQ(messages(req, {{"x-api-key", "key-c"}}).status, 401);
  EXPECT_EQ(post_json(port(), "/v1/messages/count_tokens", req, {}).status, 401);
  // x-api-key and a bearer token name the same tenant: one's cache serves the other (a prompt
  // of a few 32-token blocks).
  std::string words;
  for (int i = 0; i < 40; ++i) words += " prime" + std::to_string(i * 7);
  ojson unique = user_says(words, 3);
  const HttpReply by_header = messages(unique, {{"x-api-key", "key-a"}});
  ASSERT_EQ(by_header.status, 200) << by_header.body;
  const HttpReply by_bearer = messages(unique, bearer("key-a"));
  ASSERT_EQ(by_bearer.status, 200) << by_bearer.body;
  EXPECT_GT(by_bearer.j()["usage"]["cache_read_input_tokens"].get<int>(), 0);
}

TEST(ServerMessagesKeepAlive, StreamsPingWhileTheyWait) {
  // The model's whole context: the busy stream must outlast many keep-alive intervals however
  // fast the machine (the bundled model decodes ~3,000 tokens/s on an idle core).
  ServerSetup setup;
  setup.ctx = 4096;
  ServerProcess server("--parallel 1 --sse-keepalive 0.05", setup);
  ASSERT_NE(server.port(), 0);
  // A long generation, already streaming, fills the batch; a second request waits thousands of
  // steps in the queue, then pings once it has started.
  LongStream busy(server.port(), 4000);
  ASSERT_TRUE(busy.started());
  ojson req = user_says("x = 1", 60);
  req["stream"] = true;
  const std::string raw = post_stream(server.port(), "/v1/messages", req, kKeyA);
  busy.join();
  const ojson m = reassemble(raw);  // comments only before message_start, pings after
  EXPECT_FALSE(m["content"].empty());
  EXPECT_NE(raw.find(": keep-alive\n\n"), std::string::npos) << raw.substr(0, 300);
}

TEST(ServerMessagesThinking, ThinkingBlocksFromAThinkingModel) {
  const auto model = thinking_model();
  ServerProcess server("-m " + model.string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  ojson req = user_says("sort a list", 12);
  req["model"] = "thinker";
  req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 2000}};
  const HttpReply r = post_json(server.port(), "/v1/messages", req, kKeyA);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson content = r.j()["content"];
  ASSERT_EQ(content.size(), 1u) << r.body;
  EXPECT_EQ(content[0]["type"], "thinking");
  EXPECT_FALSE(content[0]["thinking"].get<std::string>().empty());
  EXPECT_EQ(content[0]["signature"], "");
  req["stream"] = true;
  const ojson streamed = reassemble(post_stream(server.port(), "/v1/messages", req, kKeyA));
  EXPECT_EQ(streamed["content"], content);
  // Thinking off: the template closes the block, and the same words come back as text.
  req["stream"] = false;
  req["thinking"] = {{"type", "disabled"}};
  const HttpReply off = post_json(server.port(), "/v1/messages", req, kKeyA);
  ASSERT_EQ(off.status, 200) << off.body;
  ASSERT_EQ(off.j()["content"].size(), 1u);
  EXPECT_EQ(off.j()["content"][0]["type"], "text");

  // A budget of 4 tokens: the scheduler closes the block after the model's first 4 (greedy: the
  // same 4 as above), and the rest of max_tokens is the answer.
  req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 4}};
  const HttpReply small = post_json(server.port(), "/v1/messages", req, kKeyA);
  ASSERT_EQ(small.status, 200) << small.body;
  const ojson parts = small.j()["content"];
  ASSERT_EQ(parts.size(), 2u) << small.body;
  ASSERT_EQ(parts[0]["type"], "thinking");
  EXPECT_EQ(parts[1]["type"], "text");
  EXPECT_FALSE(parts[1]["text"].get<std::string>().empty());
  const std::string unbounded = content[0]["thinking"], bounded = parts[0]["thinking"];
  EXPECT_LT(bounded.size(), unbounded.size());
  EXPECT_EQ(unbounded.rfind(bounded, 0), 0u) << bounded << " | " << unbounded;
  EXPECT_EQ(small.j()["usage"]["output_tokens"], 12);  // the closing tag counts as one
  req["stream"] = true;
  EXPECT_EQ(reassemble(post_stream(server.port(), "/v1/messages", req, kKeyA))["content"], parts);
}

// The translation into chat messages, in process.
TEST(AnthropicRequest, BlocksBecomeChatMessages) {
  const std::string body = R"({
    "model": "m", "max_tokens": 10,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "<reminder>"},
                                   {"type": "text", "text": "weather?", "cache_control": {"type": "ephemeral"}}]},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "need the tool", "signature": "abc"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21C"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
        {"type": "text", "text": "and tomorrow?"}]},
      {"role": "assistant", "content": "Tomorrow it"}],
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "top_k": 5})";
  const server::MessagesRequest r = server::parse_messages_request(body, {}, false);
  const ojson expected = ojson::parse(R"([
    {"role": "system", "content": "Be brief.\n\nUse tools."},
    {"role": "user", "content": "<reminder>\n\nweather?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "toolu_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
     "reasoning_content": "need the tool"},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "21C"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
    {"role": "user", "content": "and tomorrow?"}])");
  EXPECT_EQ(r.turn.messages, expected) << r.turn.messages.dump(1);
  EXPECT_EQ(r.turn.prefill, "Tomorrow it");
  EXPECT_EQ(r.turn.tools[0]["function"]["parameters"], ojson::parse(R"({"type": "object"})"));
  EXPECT_EQ(r.turn.tool_choice, "required");
  EXPECT_EQ(r.turn.max_tool_calls, 1);
  EXPECT_FALSE(r.turn.strict_tool_schemas);
  EXPECT_EQ(r.turn.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.turn.sampling.top_k, 5);
  EXPECT_EQ(*r.turn.max_tokens, 10);
  // Thinking maps onto the template only for a model that thinks.
  const std::string thinking =
      R"({"model": "m", "max_tokens": 5, "thinking": {"type": "disabled"},
          "messages": [{"role": "user", "content": "x"}]})";
  EXPECT_TRUE(server::parse_messages_request(thinking, {}, false).turn.template_kwargs.is_null());
  EXPECT_EQ(server::parse_messages_request(thinking, {}, true).turn.template_kwargs,
            ojson::parse(R"({"enable_thinking": false})"));
  // count_tokens has no max_tokens; messages does.
  const std::string counted = R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})";
  EXPECT_NO_THROW(server::parse_messages_request(counted, {}, false, true));
  EXPECT_THROW(server::parse_messages_request(counted, {}, false), server::ApiError);
}

}  // namespace
}  // namespace fak::test
