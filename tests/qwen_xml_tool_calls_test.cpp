// Qwen3-Coder / Qwen3.5 / Qwen3.6 tool calls (chat_format.h, qwen_xml_tool_calls.cpp): the
// published templates say the format; a reply's calls are read whole and streamed at every split
// point alike, with values typed as vLLM's qwen3_coder parser types them; a call the template
// renders (turn 2) is a sentence of the forced grammar and reads back to the same arguments; and
// served, forced calls on the OpenAI, Anthropic and Responses APIs come back as calls that match
// their schemas, written in the model's own syntax.
#include <gtest/gtest.h>

#include "chat/chat_format.h"
#include "chat/chat_template.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {
      "path": {"type": "string"},
      "content": {"type": "string"},
      "mode": {"type": "integer"},
      "ratio": {"type": "number"},
      "force": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "meta": {"type": "object", "properties": {"lines": {"type": "integer"}}}},
    "required": ["path", "content"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "list_dir", "parameters": {
    "type": "object", "properties": {"depth": {"type": "integer"}}, "required": ["depth"]}}}
])");

std::string published(const std::string& name) {
  return read_file(data_path("templates/" + name + ".jinja"));
}

TEST(QwenXmlFormat, ThePublishedTemplatesSayIt) {
  for (const char* name : {"qwen3-coder-30b-a3b", "qwen3-coder-30b-a3b-initial", "qwen3.5"})
    EXPECT_EQ(chat::format_for_template(published(name)).name(), "qwen_xml") << name;
  EXPECT_EQ(chat::format_for_template(published("qwen3")).name(), "hermes");
  EXPECT_EQ(chat::format_for_template(published("glm-4.5")).name(), "glm45");
  EXPECT_EQ(chat::format_for_template(published("gpt-oss")).name(), "harmony");
}

const std::string kReply =
    "I will write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a <b>.py\n"
    "</parameter>\n<parameter=content>\ndef f(x):\n    return x < 2  # <not a tag>\n\n"
    "</parameter>\n<parameter=mode>\n644\n</parameter>\n<parameter=ratio>\n2.0\n</parameter>\n"
    "<parameter=force>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
    "<parameter=meta>\n{\"lines\": 3}\n</parameter>\n<parameter=extra>\nnull\n</parameter>\n"
    "</function>\n</tool_call>\n<tool_call>\n<function=list_dir>\n<parameter=depth>\n2\n"
    "</parameter>\n</function>\n</tool_call>";

TEST(QwenXmlToolCalls, ValuesAreTypedByTheSchemaAsVllmTypesThem) {
  const chat::ToolCallsFinal f = chat::read_tool_calls(chat::qwen_xml_format(), kReply, kTools);
  EXPECT_EQ(f.content, "I will write it.");
  ASSERT_EQ(f.tool_calls.size(), 2u);
  EXPECT_EQ(f.tool_calls[0]["function"]["name"], "write_file");
  const ojson args = ojson::parse(f.tool_calls[0]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(args["path"], "src/a <b>.py");
  EXPECT_EQ(args["content"], "def f(x):\n    return x < 2  # <not a tag>\n");
  EXPECT_EQ(args["mode"], 644);
  EXPECT_EQ(args["ratio"], 2);  // a number with no fraction becomes an integer (vLLM)
  EXPECT_EQ(args["force"], true);
  EXPECT_EQ(args["tags"], ojson::parse(R"(["a", "b"])"));
  EXPECT_EQ(args["meta"], ojson::parse(R"({"lines": 3})"));
  EXPECT_TRUE(args["extra"].is_null());
  EXPECT_EQ(f.tool_calls[1]["function"]["arguments"], R"({"depth":2})");
}

TEST(QwenXmlToolCalls, WholeAndStreamedAtEverySplitAgree) {
  const chat::ChatFormat& xml = chat::qwen_xml_format();
  const chat::ToolCallsFinal whole = chat::read_tool_calls(xml, kReply, kTools);
  const size_t open = kReply.find("<tool_call>");
  const std::string from_call = kReply.substr(open);
  for (size_t cut = 0; cut <= from_call.size(); cut += 3) {
    std::unique_ptr<chat::ToolCallReader> r = xml.tool_call_reader(kTools);
    std::vector<chat::ToolCallDelta> deltas = r->push(from_call.substr(0, cut));
    for (auto& d : r->push(from_call.substr(cut))) deltas.push_back(d);
    const chat::ToolCallsFinal f = r->finish(false);
    for (auto& d : f.deltas) deltas.push_back(d);
    // The deltas of each call, joined, are its final arguments; names come once, first.
    std::vector<std::string> args(2), names(2);
    for (const auto& d : deltas) {
      ASSERT_LT(d.index, 2);
      if (!d.name.empty()) names[size_t(d.index)] += d.name;
      args[size_t(d.index)] += d.arguments;
    }
    ASSERT_EQ(f.tool_calls.size(), 2u) << cut;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(names[i], whole.tool_calls[i]["function"]["name"]) << cut;
      EXPECT_EQ(ojson::parse(args[i]),
                ojson::parse(whole.tool_calls[i]["function"]["arguments"].get<std::string>()))
          << cut;
      EXPECT_EQ(f.tool_calls[i]["function"]["arguments"],
                whole.tool_calls[i]["function"]["arguments"]);
    }
  }
}

TEST(QwenXmlToolCalls, WhatIsNotACallStaysTextAndACutCallIsDropped) {
  const chat::ChatFormat& xml = chat::qwen_xml_format();
  const chat::ToolCallsFinal text =
      chat::read_tool_calls(xml, "Use <tool_call> tags like this: <tool_call>hello</tool_call>");
  EXPECT_TRUE(text.tool_calls.empty());
  EXPECT_EQ(text.content, "Use <tool_call> tags like this: <tool_call>hello</tool_call>");
  auto r = xml.tool_call_reader(kTools);
  r->push("<tool_call>\n<function=list_dir>\n<parameter=depth>\n3");
  const chat::ToolCallsFinal cut = r->finish(/*cut=*/true);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_TRUE(cut.dropped);
}

// Turn 2: the template renders a past call (arguments as an object, as the server normalises
// them); that text is a sentence of the forced grammar, and reads back to the same arguments.
TEST(QwenXmlToolCalls, TheTemplatesOwnRenderingIsTheGrammarsAndReadsBack) {
  for (const char* name : {"qwen3-coder-30b-a3b", "qwen3.5"}) {
    const ChatTemplate t = ChatTemplate::parse(published(name));
    const ojson args = ojson::parse(
        R"({"path": "a.py", "content": "x = 1\nif x < 2:\n    pass", "mode": 7, "force": false})");
    const ojson messages = ojson::parse(R"([{"role": "user", "content": "write it"}])");
    ojson with_call = messages;
    with_call.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          {{{"type", "function"}, {"function", {{"name", "write_file"}, {"arguments", args}}}}}}});
    const std::string before = t.render(messages, kTools, true);
    const std::string after = t.render(with_call, kTools, false);
    ASSERT_EQ(after.rfind(before.substr(0, before.size() - 40), 0), 0u) << name;
    const size_t open = after.find("<tool_call>", before.size() - 40);
    const size_t close = after.find("</tool_call>", open) + std::string("</tool_call>").size();
    const std::string call = after.substr(open, close - open);
    grammar::ToolCallOptions options;
    options.only_function = "write_file";
    const auto g = chat::qwen_xml_format().forced_calls(kTools, options);
    // The template writes every argument given; the grammar asks the required ones, in the
    // schema's order, then allows what the model stops at: the rendering of just those matches.
    const ojson required = {{"path", "a.py"}, {"content", "x = 1\nif x < 2:\n    pass"}};
    with_call.back()["tool_calls"][0]["function"]["arguments"] = required;
    const std::string rendered_required = t.render(with_call, kTools, false);
    const size_t o2 = rendered_required.find("<tool_call>", before.size() - 40);
    const size_t c2 = rendered_required.find("</tool_call>", o2) + 12;
    EXPECT_TRUE(grammar::grammar_matches(*g, rendered_required.substr(o2, c2 - o2)))
        << name << ":\n"
        << rendered_required.substr(o2, c2 - o2);
    const chat::ToolCallsFinal f = chat::read_tool_calls(chat::qwen_xml_format(), call, kTools);
    ASSERT_EQ(f.tool_calls.size(), 1u) << name;
    EXPECT_EQ(ojson::parse(f.tool_calls[0]["function"]["arguments"].get<std::string>()), args)
        << name;
  }
}

// Deltas of one streamed chat completion, merged per call index.
ojson merged_calls(const std::string& raw, std::string& finish) {
  ojson calls = ojson::array();
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    const std::string payload = raw.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") continue;
    const ojson e = ojson::parse(payload);
    const ojson& delta = e["choices"][0]["delta"];
    if (delta.contains("tool_calls"))
      for (const ojson& d : delta["tool_calls"]) {
        const size_t i = d["index"].get<size_t>();
        while (calls.size() <= i)
          calls.push_back({{"function", {{"name", ""}, {"arguments", ""}}}});
        if (d["function"].contains("name"))
          calls[i]["function"]["name"] = calls[i]["function"]["name"].get<std::string>() +
                                         d["function"]["name"].get<std::string>();
        if (d["function"].contains("arguments"))
          calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                              d["function"]["arguments"].get<std::string>();
      }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  return calls;
}

TEST(QwenXmlToolCallsServed, ForcedCallsOnEveryApiComeBackAsCallsInTheModelsSyntax) {
  const auto model = temp_dir() / "qwen-xml-model";
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  write_file(model / "chat_template.jinja", published("qwen3-coder-30b-a3b"));
  ServerSetup setup;
  setup.ctx = 4096;  // the template's tool instructions alone are ~600 tokens
  ServerProcess server("-m " + model.string() + " --parallel 2", setup);
  ASSERT_NE(server.port(), 0);
  const Headers key = bearer("key-a");
  auto check_args = [&](const std::string& name, const ojson& args) {
    const ojson& schema = kTools[name == "write_file" ? 0 : 1]["function"]["parameters"];
    EXPECT_EQ(grammar::schema_violation(args, schema, {.strict = true}), "") << args.dump();
  };
  for (bool stream : {false, true}) {
    ojson req = {{"model", "qwen-xml-model"},
                 {"max_tokens", 300},
                 {"messages", {{{"role", "user"}, {"content", "List the folder."}}}},
                 {"tools", kTools},
                 {"tool_choice", "required"},
                 {"parallel_tool_calls", false}};
    ojson calls;
    std::string finish;
    if (!stream) {
      const HttpReply r = post_json(server.port(), "/v1/chat/completions", req, key);
      ASSERT_EQ(r.status, 200) << r.body;
      calls = r.j()["choices"][0]["message"]["tool_calls"];
      finish = r.j()["choices"][0]["finish_reason"];
    } else {
      req["stream"] = true;
      calls = merged_calls(post_stream(server.port(), "/v1/chat/completions", req, key), finish);
    }
    ASSERT_EQ(finish, "tool_calls") << "stream " << stream;
    ASSERT_EQ(calls.size(), 1u);
    check_args(calls[0]["function"]["name"],
               ojson::parse(calls[0]["function"]["arguments"].get<std::string>()));
  }
  // The model's own syntax, token by token.
  {
    const ojson req = {
        {"model", "qwen-xml-model"},
        {"max_tokens", 300},
        {"logprobs", true},
        {"messages", {{{"role", "user"}, {"content", "How deep?"}}}},
        {"tools", kTools},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "list_dir"}}}}}};
    const HttpReply r = post_json(server.port(), "/v1/chat/completions", req, key);
    ASSERT_EQ(r.status, 200) << r.body;
    std::string text;
    const ojson reply = r.j();  // note: not r.j()[...] in the loop: a dangling temporary
    for (const ojson& t : reply["choices"][0]["logprobs"]["content"])
      text += t["token"].get<std::string>();
    EXPECT_EQ(text.rfind("<tool_call>\n<function=list_dir>\n<parameter=depth>\n", 0), 0u) << text;
    EXPECT_NE(text.find("\n</parameter>\n</function>\n</tool_call>"), std::string::npos) << text;
  }
  // Anthropic Messages (tool_choice any) and Responses (required).
  {
    ojson tools = ojson::array();
    for (const ojson& t : kTools)
      tools.push_back(
          {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
    const ojson req = {{"model", "qwen-xml-model"},
                       {"max_tokens", 300},
                       {"messages", {{{"role", "user"}, {"content", "Write main.py"}}}},
                       {"tools", tools},
                       {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}}};
    const HttpReply r = post_json(server.port(), "/v1/messages", req, {{"x-api-key", "key-a"}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["stop_reason"], "tool_use") << r.body;
    const ojson last = r.j()["content"].back();
    ASSERT_EQ(last["type"], "tool_use") << r.body;
    check_args(last["name"], last["input"]);
  }
  {
    ojson tools = ojson::array();
    for (const ojson& t : kTools)
      tools.push_back({{"type", "function"},
                       {"name", t["function"]["name"]},
                       {"parameters", t["function"]["parameters"]}});
    const ojson req = {{"model", "qwen-xml-model"},    {"max_output_tokens", 300},
                       {"input", "List it, depth 2."}, {"tools", tools},
                       {"tool_choice", "required"},    {"parallel_tool_calls", false}};
    const HttpReply r = post_json(server.port(), "/v1/responses", req, key);
    ASSERT_EQ(r.status, 200) << r.body;
    const ojson call = r.j()["output"].back();
    ASSERT_EQ(call["type"], "function_call") << r.body;
    check_args(call["name"], ojson::parse(call["arguments"].get<std::string>()));
  }
}

}  // namespace
}  // namespace fak::test
