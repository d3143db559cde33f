// Llama 3.x tool calls (chat_format.h, llama_json_tool_calls.cpp) and the reasoning a client
// sends back: the published Llama 3.1 / 3.2 templates say the JSON format; replies are read
// whole and streamed alike; the template's own rendering of a past call is a sentence of the
// forced grammar; and served, a forced call is a call. Reasoning sent back as reasoning_content,
// reasoning or thinking reaches a template under the name it reads (gpt-oss replays it as the
// analysis before each earlier tool call).
#include <gtest/gtest.h>

#include "chat/chat_format.h"
#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak::test {
namespace {

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"], "additionalProperties": false}}}
])");

std::string published(const std::string& name) {
  return read_file(data_path("templates/" + name + ".jinja"));
}

TEST(LlamaJsonFormat, ThePublishedTemplatesSayIt) {
  for (const char* name : {"llama-3.1", "llama-3.2"})
    EXPECT_EQ(chat::format_for_template(published(name)).name(), "llama3_json") << name;
}

TEST(LlamaJsonToolCalls, WholeStreamedAndWhatIsNotACall) {
  const std::string reply =
      R"({"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; )"
      R"({"name": "get_weather", "arguments": {"city": "Oslo"}})";
  const chat::ChatFormat& llama = chat::llama_json_format();
  const chat::ToolCallsFinal whole = chat::read_tool_calls(llama, reply, kTools);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_EQ(whole.tool_calls[0]["function"]["arguments"], R"({"city":"Paris","days":2})");
  EXPECT_EQ(whole.tool_calls[1]["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(whole.content, "");
  for (size_t cut = 0; cut <= reply.size(); ++cut) {
    auto r = llama.tool_call_reader(kTools);
    r->push(reply.substr(0, cut));
    r->push(reply.substr(cut));
    const chat::ToolCallsFinal f = r->finish(false);
    ASSERT_EQ(f.tool_calls.size(), 2u) << cut;
    EXPECT_EQ(f.tool_calls[1]["function"]["arguments"],
              whole.tool_calls[1]["function"]["arguments"]);
  }
  const chat::ToolCallsFinal prose =
      chat::read_tool_calls(llama, "The weather is nice. {\"name\": \"x\"} is JSON.");
  EXPECT_TRUE(prose.tool_calls.empty());
  EXPECT_EQ(prose.content, "The weather is nice. {\"name\": \"x\"} is JSON.");
  auto r = llama.tool_call_reader(kTools);
  r->push(R"({"name": "get_weather", "parameters": {"city": "Par)");
  EXPECT_TRUE(r->finish(true).dropped);
}

TEST(LlamaJsonToolCalls, TheTemplatesOwnRenderingIsTheGrammars) {
  const ChatTemplate t = ChatTemplate::parse(published("llama-3.1"));
  ojson messages = ojson::parse(R"([{"role": "user", "content": "Weather?"}])");
  const std::string before = t.render(messages, kTools, true);
  messages.push_back(
      {{"role", "assistant"},
       {"tool_calls",
        {{{"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}});
  const std::string after = t.render(messages, kTools, false);
  ASSERT_EQ(after.rfind(before, 0), 0u);
  std::string call = after.substr(before.size());
  call = call.substr(0, call.find("<|eot_id|>"));
  const auto g = chat::llama_json_format().forced_calls(kTools, {});
  EXPECT_TRUE(grammar::grammar_matches(*g, call)) << call;
  const chat::ToolCallsFinal f = chat::read_tool_calls(chat::llama_json_format(), call, kTools);
  ASSERT_EQ(f.tool_calls.size(), 1u);
  EXPECT_EQ(f.tool_calls[0]["function"]["arguments"], R"({"city":"Paris"})");
}

TEST(LlamaJsonToolCallsServed, AForcedCallIsACall) {
  const auto model = temp_dir() / "llama-json-model";
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  write_file(model / "chat_template.jinja", published("llama-3.1"));
  ServerSetup setup;
  setup.ctx = 2048;
  ServerProcess server("-m " + model.string(), setup);
  ASSERT_NE(server.port(), 0);
  const ojson req = {{"model", "llama-json-model"},
                     {"max_tokens", 120},
                     {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                     {"tools", kTools},
                     {"tool_choice", "required"},
                     {"parallel_tool_calls", false}};
  const HttpReply r = post_json(server.port(), "/v1/chat/completions", req, bearer("key-a"));
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson reply = r.j();
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "tool_calls") << r.body;
  const ojson calls = reply["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << r.body;
  const ojson args = ojson::parse(calls[0]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(grammar::schema_violation(args, kTools[0]["function"]["parameters"], {.strict = true}),
            "")
      << args.dump();
}

// gpt-oss's template reads `thinking`; clients send reasoning_content (or reasoning, or thinking).
TEST(ReasoningSentBack, ReachesTheTemplateUnderTheNameItReads) {
  const Tokenizer tok = Tokenizer::from_dir(data_path("oracle/gpt-oss-tiny"));
  const chat::ChatPrompt prompt(tok, {});
  const ojson call = {
      {{"id", "c1"},
       {"type", "function"},
       {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}};
  for (const char* field : {"reasoning_content", "thinking"}) {
    const ojson messages = {{{"role", "user"}, {"content", "Weather?"}},
                            {{"role", "assistant"},
                             {"content", ""},
                             {field, "I should look up Paris first."},
                             {"tool_calls", call}},
                            {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "21C"}}};
    ojson normalised = messages;
    if (std::string(field) == "thinking") {
      // What the server's request parser does with any of the names (openai_request.cpp).
      normalised[1]["reasoning_content"] = normalised[1]["thinking"];
      normalised[1].erase("thinking");
    }
    const std::string text =
        prompt.render(normalised, kTools, true, nullptr, ContentTokens::Special);
    EXPECT_NE(text.find("<|channel|>analysis<|message|>I should look up Paris first."),
              std::string::npos)
        << field << ":\n"
        << text;
  }
}

}  // namespace
}  // namespace fak::test
