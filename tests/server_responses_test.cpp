// OpenAI's Responses API on the real `fak serve` binary (issue 18): the response object, the named
// and numbered event stream (checked event by event and reassembled: it equals the whole reply
// under greedy decoding), function calls forced by tool_choice and validated against their
// parameters, a function_call_output turn served from the prefix cache, text.format JSON
// schemas, instructions as the system prompt, max_output_tokens as an incomplete response,
// reasoning items from a model that thinks, and the refusals (previous_response_id, tools fak does
// not run, images). In-process checks of the input translation too.
#include <gtest/gtest.h>

#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server/api_error.h"
#include "server/responses_request.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

ojson ask(const std::string& text, int max_tokens) {
  return {{"model", "pycoder-6m"},
          {"max_output_tokens", max_tokens},
          {"temperature", 0},
          {"input", text}};
}

const ojson kTools = ojson::parse(R"([
  {"type": "function", "name": "get_weather", "description": "The weather in a city",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "maxLength": 12},
     "unit": {"enum": ["celsius", "fahrenheit"]}},
   "required": ["city", "unit"], "additionalProperties": false}},
  {"type": "function", "name": "get_time", "parameters": {
   "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"],
   "additionalProperties": false}}
])");

bool starts_with(const ojson& s, const std::string& prefix) {
  return s.is_string() && s.get<std::string>().rfind(prefix, 0) == 0;
}

// A stream checked against the Responses event grammar and folded back into the response it
// describes: response.created and response.in_progress first; each item added, its content part
// added, deltas, the .done events whose text is what the deltas added up to, the item done; every
// event numbered 0, 1, 2, ... and named as its type; the last one response.completed (or
// .incomplete) with a response whose output is what the events built.
ojson reassemble(const std::string& raw) {
  ojson built = ojson::array();
  ojson last;
  int expect_seq = 0;
  bool finished = false;
  for (const SseEvent& e : sse_events(raw)) {
    if (e.name.empty()) continue;  // a keep-alive comment
    EXPECT_FALSE(finished) << "an event after the response ended: " << e.name;
    const ojson& d = e.data;
    EXPECT_EQ(d["type"], e.name);
    EXPECT_EQ(d["sequence_number"], expect_seq++) << e.name;
    if (expect_seq == 1) {
      EXPECT_EQ(e.name, "response.created");
      EXPECT_EQ(d["response"]["status"], "in_progress");
      EXPECT_EQ(d["response"]["output"], ojson::array());
    } else if (expect_seq == 2) {
      EXPECT_EQ(e.name, "response.in_progress");
    }
    if (e.name == "response.output_item.added") {
      EXPECT_EQ(d["output_index"], built.size());
      built.push_back(d["item"]);
    } else if (e.name == "response.content_part.added") {
      ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(d["item_id"], item["id"]);
      EXPECT_EQ(d["content_index"], item["content"].size());
      item["content"].push_back(d["part"]);
    } else if (e.name == "response.output_text.delta" ||
               e.name == "response.reasoning_text.delta") {
      ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(d["item_id"], item["id"]);
      ojson& part = item["content"][d["content_index"].get<size_t>()];
      part["text"] = part["text"].get<std::string>() + d["delta"].get<std::string>();
    } else if (e.name == "response.output_text.done" || e.name == "response.reasoning_text.done") {
      const ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(d["text"], item["content"][d["content_index"].get<size_t>()]["text"]);
    } else if (e.name == "response.content_part.done") {
      const ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(d["part"], item["content"][d["content_index"].get<size_t>()]);
    } else if (e.name == "response.function_call_arguments.delta") {
      ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(item["type"], "function_call");
      item["arguments"] = item["arguments"].get<std::string>() + d["delta"].get<std::string>();
    } else if (e.name == "response.function_call_arguments.done") {
      const ojson& item = built[d["output_index"].get<size_t>()];
      EXPECT_EQ(d["arguments"], item["arguments"]);
      EXPECT_EQ(d["name"], item["name"]);
    } else if (e.name == "response.output_item.done") {
      ojson& item = built[d["output_index"].get<size_t>()];
      ojson done = d["item"];
      item["status"] = done.value("status", ojson());
      if (!done.contains("status")) item.erase("status");
      EXPECT_EQ(done, item);
    } else if (e.name == "response.completed" || e.name == "response.incomplete") {
      finished = true;
      last = d["response"];
      EXPECT_EQ(last["status"], e.name == "response.completed" ? "completed" : "incomplete");
      EXPECT_EQ(last["output"], built);
    } else if (e.name != "response.created" && e.name != "response.in_progress") {
      ADD_FAILURE() << "unexpected event " << e.name << ": " << d.dump();
    }
  }
  EXPECT_TRUE(finished) << raw.substr(0, 400);
  return last;
}

ojson without_ids(ojson r) {
  r.erase("id");
  r.erase("created_at");
  for (ojson& item : r["output"]) {
    item.erase("id");
    item.erase("call_id");
  }
  return r;
}

class ServerResponses : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess("--parallel 4"); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static HttpReply responses(const ojson& body, const Headers& h = bearer("key-a")) {
    return post_json(port(), "/v1/responses", body, h);
  }
  static ojson stream(ojson body, const Headers& h = bearer("key-a")) {
    body["stream"] = true;
    return reassemble(post_stream(port(), "/v1/responses", body, h));
  }
  static ServerProcess* server_;
};
ServerProcess* ServerResponses::server_ = nullptr;

TEST_F(ServerResponses, ResponseObjectAndIncompleteAtTheLimit) {
  const HttpReply r = responses(ask("reverse a string", 5));
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson j = r.j();
  EXPECT_TRUE(starts_with(j["id"], "resp_"));
  EXPECT_EQ(j["object"], "response");
  EXPECT_GT(j["created_at"].get<int64_t>(), 1600000000);
  EXPECT_EQ(j["model"], "pycoder-6m");
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["max_output_tokens"], 5);
  EXPECT_EQ(j["store"], false);
  ASSERT_EQ(j["output"].size(), 1u);
  const ojson& msg = j["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_TRUE(starts_with(msg["id"], "msg_"));
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "incomplete");
  ASSERT_EQ(msg["content"].size(), 1u);
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["annotations"], ojson::array());
  EXPECT_FALSE(msg["content"][0]["text"].get<std::string>().empty());
  const ojson& u = j["usage"];
  EXPECT_EQ(u["output_tokens"], 5);
  EXPECT_GT(u["input_tokens"].get<int>(), 5);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int>() + 5);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_TRUE(u["input_tokens_details"]["cached_tokens"].is_number_integer());
  // Room to finish: completed.
  const HttpReply done = responses(ask("x = 1", 200));
  ASSERT_EQ(done.status, 200) << done.body;
  if (done.j()["usage"]["output_tokens"].get<int>() < 200) {
    EXPECT_EQ(done.j()["status"], "completed");
    EXPECT_TRUE(done.j()["incomplete_details"].is_null());
  }
}

TEST_F(ServerResponses, StreamReassemblesToTheWholeResponse) {
  for (const ojson& req : {ask("print hello world", 24), ask("sort a list", 40)}) {
    const HttpReply whole = responses(req);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const ojson streamed = stream(req);
    ojson a = without_ids(whole.j()), b = without_ids(streamed);
    EXPECT_EQ(a["output"], b["output"]);
    EXPECT_EQ(a["status"], b["status"]);
    EXPECT_EQ(a["usage"]["output_tokens"], b["usage"]["output_tokens"]);
    EXPECT_EQ(a["model"], b["model"]);
  }
}

TEST_F(ServerResponses, InstructionsAreTheSystemPrompt) {
  auto input_tokens = [&](const ojson& req) {
    const HttpReply r = responses(req);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.j()["usage"]["input_tokens"].get<int>();
  };
  ojson plain = ask("add two numbers", 2);
  ojson with_instructions = plain;
  with_instructions["instructions"] = "You write short Python. Never explain.";
  ojson as_developer = plain;
  as_developer["input"] = ojson::parse(R"([
    {"role": "developer", "content": "You write short Python. Never explain."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add two numbers"}]}])");
  const int n = input_tokens(with_instructions);
  EXPECT_GT(n, input_tokens(plain) + 5);
  EXPECT_EQ(input_tokens(as_developer), n);
  // Instructions and a developer message both: one system turn, the two joined.
  ojson both = as_developer;
  both["instructions"] = "Be careful.";
  EXPECT_GT(input_tokens(both), n);
}

TEST_F(ServerResponses, ForcedFunctionCallsMatchTheirParameters) {
  for (const ojson& choice :
       {ojson("required"), ojson{{"type", "function"}, {"name", "get_time"}}}) {
    for (bool streamed : {false, true}) {
      ojson req = ask("What is the weather in Paris?", 80);
      req["tools"] = kTools;
      req["tool_choice"] = choice;
      req["parallel_tool_calls"] = false;
      ojson r;
      if (streamed) {
        r = stream(req);
      } else {
        const HttpReply reply = responses(req);
        ASSERT_EQ(reply.status, 200) << reply.body;
        r = reply.j();
      }
      EXPECT_EQ(r["status"], "completed") << r.dump();
      const ojson& call = r["output"].back();
      ASSERT_EQ(call["type"], "function_call") << r.dump();
      EXPECT_TRUE(starts_with(call["id"], "fc_"));
      EXPECT_TRUE(starts_with(call["call_id"], "call_"));
      EXPECT_EQ(call["status"], "completed");
      const std::string name = call["name"];
      if (choice.is_object()) {
        EXPECT_EQ(name, "get_time");
      }
      const ojson args = ojson::parse(call["arguments"].get<std::string>());
      const ojson& schema = kTools[name == "get_weather" ? 0 : 1]["parameters"];
      EXPECT_EQ(grammar::schema_violation(args, schema, {.strict = true}), "") << args.dump();
      EXPECT_EQ(r["tool_choice"], choice);
      EXPECT_EQ(r["tools"].size(), 2u);
    }
  }
}

TEST_F(ServerResponses, FunctionCallOutputTurnReusesTheCachedPrefix) {
  const Headers key_b = bearer("key-b");  // a fresh tenant: nothing cached before
  ojson req = ask("What is the weather in Lyon? Use the tool.", 60);
  req["instructions"] = "You are a weather agent.";
  req["tools"] = kTools;
  req["tool_choice"] = {{"type", "function"}, {"name", "get_weather"}};
  const HttpReply first = responses(req, key_b);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.j()["usage"]["input_tokens_details"]["cached_tokens"], 0);
  const ojson call = first.j()["output"].back();
  ASSERT_EQ(call["type"], "function_call");

  ojson next = req;
  next.erase("tool_choice");
  next["input"] = ojson::array();
  next["input"].push_back({{"role", "user"}, {"content", req["input"]}});
  next["input"].push_back({{"type", "function_call"},
                           {"call_id", call["call_id"]},
                           {"name", call["name"]},
                           {"arguments", call["arguments"]}});
  next["input"].push_back({{"type", "function_call_output"},
                           {"call_id", call["call_id"]},
                           {"output", "21 degrees, sunny"}});
  const HttpReply second = responses(next, key_b);
  ASSERT_EQ(second.status, 200) << second.body;
  const ojson u = second.j()["usage"];
  // note: the cache shares whole blocks of 32 tokens.
  EXPECT_GE(u["input_tokens_details"]["cached_tokens"].get<int>(),
            first.j()["usage"]["input_tokens"].get<int>() - 32)
      << u.dump();
  EXPECT_GT(u["input_tokens"].get<int>(), first.j()["usage"]["input_tokens"].get<int>());
}

TEST_F(ServerResponses, TextFormatJsonSchemaIsValidOutput) {
  const ojson schema = ojson::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "count": {"type": "integer"}},
    "required": ["name", "count"], "additionalProperties": false})");
  ojson req = ask("Describe the list as JSON.", 300);
  req["text"] = {
      {"format",
       {{"type", "json_schema"}, {"name", "summary"}, {"schema", schema}, {"strict", true}}}};
  for (bool streamed : {false, true}) {
    ojson r;
    if (streamed) {
      r = stream(req);
    } else {
      const HttpReply reply = responses(req);
      ASSERT_EQ(reply.status, 200) << reply.body;
      r = reply.j();
    }
    ASSERT_EQ(r["status"], "completed") << r.dump();
    const ojson value =
        ojson::parse(r["output"][0]["content"][0]["text"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << r.dump();
    EXPECT_EQ(grammar::schema_violation(value, schema, {.strict = true}), "") << value.dump();
    EXPECT_EQ(r["text"]["format"]["type"], "json_schema");
  }
}

TEST_F(ServerResponses, WhatNeedsStoredStateOrOtherToolsIsRefused) {
  const ojson ok = ask("hi", 4);
  auto with = [&](const std::string& key, const ojson& value) {
    ojson b = ok;
    b[key] = value;
    return b;
  };
  struct Case {
    ojson body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {with("previous_response_id", "resp_123"), "previous_response_id"},
      {with("conversation", "conv_1"), "conversation"},
      {with("background", true), "background"},
      {with("tools", ojson::parse(R"([{"type": "made_up_tool"}])")), "tools[0].type"},
      {with("tools", ojson::parse(R"([{"type": "namespace", "name": "fs"}])")), "tools[0].tools"},
      {with("input", ojson::parse(R"([{"role": "user", "content": [
         {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])")),
       "input[0].content[0].type"},
      {with("input", ojson::parse(R"([{"type": "item_reference", "id": "msg_1"}])")),
       "input[0].type"},
      {with("input", ojson::parse(R"([{"type": "web_search_call", "id": "ws_1"}])")),
       "input[0].type"},
      {with("input", ojson::array()), "input"},
      {with("input", 7), "input"},
      {with("tool_choice", ojson::parse(R"({"type": "function", "name": "nope"})")),
       "tool_choice.name"},
      {with("tool_choice", "required"), "tool_choice"},
      {with("text", ojson::parse(R"({"format": {"type": "xml"}})")), "text.format.type"},
      {with("text", ojson::parse(R"({"format": {"type": "json_schema", "name": "x"}})")),
       "text.format.schema"},
      {with("max_output_tokens", 0), "max_output_tokens"},
      {with("temperature", 3), "temperature"},
  };
  for (const Case& c : cases) {
    const HttpReply r = responses(c.body);
    ASSERT_EQ(r.status, 400) << c.body.dump() << " -> " << r.body;
    const ojson e = r.j()["error"];
    EXPECT_EQ(e["type"], "invalid_request_error") << r.body;
    EXPECT_EQ(e["param"], c.param) << r.body;
    EXPECT_FALSE(e["message"].get<std::string>().empty());
  }
  ojson no_input = ok;
  no_input.erase("input");
  EXPECT_EQ(responses(no_input).status, 400);
  const HttpReply model = responses(with("model", "gpt-5"));
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.j()["error"]["code"], "model_not_found");
  const HttpReply unauthorized = responses(ok, {});
  EXPECT_EQ(unauthorized.status, 401);
  EXPECT_EQ(unauthorized.j()["error"]["type"], "authentication_error");
  // A prompt beyond the context.
  std::string words;
  for (int i = 0; i < 400; ++i) words += " word" + std::to_string(i);
  const HttpReply too_long = responses(ask(words, 4));
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.j()["error"]["code"], "context_length_exceeded");
}

// Issue 33, item 4: what `codex exec` sends on its defaults: its MCP tools as a `namespace` tool
// and a hosted web_search it does not expect fak to run. The namespace's functions are shown to
// the model and a call comes back namespaced, as the Responses API defines it (name and namespace
// apart); the hosted tool is left out with a warning, and the turn completes. The next turn
// replays the namespaced call and its output.
TEST_F(ServerResponses, CodexNamespaceToolsAndHostedToolsCompleteATurn) {
  const ojson tools = ojson::parse(R"([
    {"type": "namespace", "name": "files", "description": "The repository's files",
     "tools": [{"type": "function", "name": "read_file", "description": "Read one file",
                "strict": false,
                "parameters": {"type": "object", "properties": {"path": {"type": "string",
                  "maxLength": 16}}, "required": ["path"], "additionalProperties": false}}]},
    {"type": "web_search", "external_web_access": false},
    {"type": "function", "name": "get_time", "parameters": {
      "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"],
      "additionalProperties": false}}
  ])");
  ojson body = ask("Read README.md", 60);
  body["tools"] = tools;
  body["tool_choice"] = {{"type", "function"}, {"name", "read_file"}, {"namespace", "files"}};
  httplib::Client c("127.0.0.1", port());
  c.set_read_timeout(60, 0);
  auto r =
      c.Post("/v1/responses", {{"Authorization", "Bearer key-a"}}, body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string warning = r->get_header_value("Fak-Warning");
  EXPECT_NE(warning.find("web_search"), std::string::npos) << warning;
  const ojson out = ojson::parse(r->body);
  ASSERT_FALSE(out["output"].empty()) << r->body;
  const ojson call = out["output"].back();
  ASSERT_EQ(call["type"], "function_call") << r->body;
  EXPECT_EQ(call["name"], "read_file");
  EXPECT_EQ(call["namespace"], "files");
  const ojson args = ojson::parse(call["arguments"].get<std::string>());
  EXPECT_TRUE(args["path"].is_string());
  EXPECT_EQ(out["tools"][0]["type"], "namespace");
  // Streamed: the same item, namespaced in output_item.added and .done.
  const ojson streamed = stream(body);
  EXPECT_EQ(streamed["output"].back()["namespace"], "files");
  EXPECT_EQ(streamed["output"].back()["name"], "read_file");
  // The next turn replays the namespaced call and its output.
  ojson next = ask("", 8);
  next["tools"] = tools;
  next["input"] = ojson::array(
      {{{"role", "user"}, {"content", "Read README.md"}},
       {{"type", "function_call"},
        {"call_id", call["call_id"]},
        {"name", "read_file"},
        {"namespace", "files"},
        {"arguments", call["arguments"]}},
       {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "# fak"}}});
  const HttpReply second = responses(next);
  EXPECT_EQ(second.status, 200) << second.body;
}

TEST(ResponsesRequest, HostedToolsAreLeftOutOrRefusedAsTheServerSays) {
  const std::string body = R"({"model": "m", "input": "hi", "tools": [
    {"type": "web_search", "external_web_access": false}, {"type": "code_interpreter"},
    {"type": "function", "name": "f", "parameters": {"type": "object"}}]})";
  const server::ResponsesRequest left = server::parse_responses_request(body, {}, false);
  ASSERT_EQ(left.turn.tools.size(), 1u);
  EXPECT_EQ(left.turn.tools[0]["function"]["name"], "f");
  ASSERT_EQ(left.warnings.size(), 1u);
  EXPECT_NE(left.warnings[0].find("web_search, code_interpreter"), std::string::npos);
  try {
    server::parse_responses_request(body, {}, false, /*refuse_hosted_tools=*/true);
    ADD_FAILURE() << "hosted tools accepted under --refuse-hosted-tools";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tools[0].type");
  }
}

TEST(ServerResponsesThinking, ReasoningItemsFromAThinkingModel) {
  const auto model = thinking_model();
  ServerProcess server("-m " + model.string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  ojson req = ask("sort a list", 12);
  req["model"] = "thinker";
  const HttpReply r = post_json(server.port(), "/v1/responses", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson output = r.j()["output"];
  ASSERT_EQ(output.size(), 1u) << r.body;
  EXPECT_EQ(output[0]["type"], "reasoning");
  EXPECT_TRUE(starts_with(output[0]["id"], "rs_"));
  EXPECT_EQ(output[0]["summary"], ojson::array());
  EXPECT_EQ(output[0]["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(r.j()["usage"]["output_tokens_details"]["reasoning_tokens"], 12);
  req["stream"] = true;
  const ojson streamed = reassemble(post_stream(server.port(), "/v1/responses", req));
  EXPECT_EQ(without_ids(streamed)["output"], without_ids(r.j())["output"]);
  // Effort none turns the thinking off: a message.
  req["stream"] = false;
  req["reasoning"] = {{"effort", "none"}};
  const HttpReply off = post_json(server.port(), "/v1/responses", req);
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(off.j()["output"][0]["type"], "message");
  EXPECT_EQ(off.j()["reasoning"]["effort"], "none");
}

// The translation into chat messages, in process.
TEST(ResponsesRequest, ItemsBecomeChatMessages) {
  const std::string body = R"({
    "model": "m", "instructions": "Be brief.",
    "input": [
      {"role": "developer", "content": "Sandboxed."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "use the tool"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
      {"role": "user", "content": "thanks"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": false},
              {"type": "function", "name": "get_time"}],
    "tool_choice": "required", "parallel_tool_calls": false,
    "text": {"format": {"type": "json_object"}}, "store": false,
    "reasoning": {"effort": "low", "summary": "auto"}, "include": ["reasoning.encrypted_content"]})";
  const server::ResponsesRequest r = server::parse_responses_request(body, {}, false);
  const ojson expected = ojson::parse(R"([
    {"role": "system", "content": "Be brief.\n\nSandboxed."},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": "", "reasoning_content": "use the tool", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    {"role": "assistant", "content": "Sunny."},
    {"role": "user", "content": "thanks"}])");
  EXPECT_EQ(r.turn.messages, expected) << r.turn.messages.dump(1);
  EXPECT_EQ(r.turn.tools[1]["function"]["parameters"], ojson::object());
  EXPECT_EQ(r.turn.tool_choice, "required");
  EXPECT_EQ(r.turn.max_tool_calls, 1);
  EXPECT_FALSE(r.turn.strict_tool_schemas);  // one tool is not strict
  EXPECT_EQ(r.turn.response_format, ojson::parse(R"({"type": "json_object"})"));
  EXPECT_EQ(r.echo["reasoning"], ojson::parse(R"({"effort": "low", "summary": "auto"})"));
  EXPECT_THROW(server::parse_responses_request(
                   R"({"model": "m", "input": "x", "previous_response_id": "r"})", {}, false),
               server::ApiError);
}

}  // namespace
}  // namespace fak::test
