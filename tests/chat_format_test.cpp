// Chat formats (src/chat/chat_format.h): which format a template writes, GLM-4.5's tool calls read
// whole and streamed at every split, its forced-call grammar, and end to end: a model whose
// template writes GLM calls, served, answers forced tool choices on the OpenAI, Anthropic and
// Responses APIs with calls that match their schemas.
#include "chat/chat_format.h"

#include <gtest/gtest.h>

#include "chat/chat_prompt.h"
#include "chat/harmony.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak::test {
namespace {

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
      "city": {"type": "string", "maxLength": 12},
      "unit": {"enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer"}},
    "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}}}
])");

// A GLM-4.5-style template's tool-call part, as its chat_template writes calls.
const char* kGlmTemplate = R"({%- if tools -%}<|system|>
# Tools
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}Call a function as <tool_call>{function-name}
<arg_key>{arg-key}</arg_key>
<arg_value>{arg-value}</arg_value>
</tool_call>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>
{{ m.content }}
{%- elif m.role == 'assistant' -%}<|assistant|>
{{ m.content or '' }}
{%- if m.tool_calls -%}{%- for tc in m.tool_calls -%}{%- set f = tc.function -%}
<tool_call>{{ f.name }}
{%- for k, v in f.arguments.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson if v is not string else v }}</arg_value>
{%- endfor %}
</tool_call>{%- endfor -%}{%- endif -%}
{%- elif m.role == 'tool' -%}<|observation|>
<tool_response>
{{ m.content }}
</tool_response>
{%- elif m.role == 'system' -%}<|system|>
{{ m.content }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>
{% endif -%})";

// The tool-call deltas of an OpenAI chat stream (each call whole in one delta, as the GLM and
// harmony readers announce them), and its finish_reason.
ojson streamed_calls(const std::string& raw, std::string& finish) {
  ojson calls = ojson::array();
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    const std::string payload = raw.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") continue;
    const ojson e = ojson::parse(payload);
    const ojson& delta = e["choices"][0]["delta"];
    if (delta.contains("tool_calls"))
      for (const ojson& d : delta["tool_calls"]) calls.push_back(d);
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  return calls;
}

TEST(ChatFormat, TheTemplateSaysWhichFormat) {
  EXPECT_EQ(chat::format_for_template(kGlmTemplate).name(), "glm45");
  EXPECT_EQ(
      chat::format_for_template(
          R"({{- "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args>}\n</tool_call>" }})")
          .name(),
      "hermes");
  EXPECT_EQ(chat::format_for_template("{% for m in messages %}{{ m.content }}{% endfor %}").name(),
            "hermes");
}

const std::string kGlmReply =
    "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>42 Rue "
    "Nord</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n<arg_key>days</"
    "arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time<arg_key>zone</"
    "arg_key><arg_value>-5</arg_value></tool_call>";

// Read whole, then streamed in two pieces at every byte: the same calls, ids aside.
TEST(GlmToolCalls, WholeAndStreamedAtEverySplitAgree) {
  const chat::ChatFormat& glm = chat::glm45_format();
  const chat::ToolCallsFinal whole = chat::read_tool_calls(glm, kGlmReply, kTools);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_EQ(whole.content, "Let me look.");
  EXPECT_EQ(whole.tool_calls[0]["function"]["name"], "get_weather");
  // A parameter that takes only strings (a string, an enum of strings) keeps its text, a
  // number-looking address too; the others are JSON.
  EXPECT_EQ(ojson::parse(whole.tool_calls[0]["function"]["arguments"].get<std::string>()),
            ojson::parse(R"({"city": "42 Rue Nord", "unit": "celsius", "days": 3})"));
  EXPECT_EQ(ojson::parse(whole.tool_calls[1]["function"]["arguments"].get<std::string>()),
            ojson::parse(R"({"zone": -5})"));
  const size_t open = kGlmReply.find("<tool_call>");
  const std::string captured = kGlmReply.substr(open);
  for (size_t cut = 0; cut <= captured.size(); ++cut) {
    std::unique_ptr<chat::ToolCallReader> r = glm.tool_call_reader(kTools);
    std::vector<chat::ToolCallDelta> deltas = r->push(captured.substr(0, cut));
    for (auto& d : r->push(captured.substr(cut))) deltas.push_back(d);
    chat::ToolCallsFinal f = r->finish(false);
    for (auto& d : f.deltas) deltas.push_back(d);
    ASSERT_EQ(f.tool_calls.size(), 2u) << cut;
    ASSERT_EQ(deltas.size(), 2u) << cut;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(deltas[size_t(i)].index, i);
      EXPECT_EQ(deltas[size_t(i)].id, f.tool_calls[size_t(i)]["id"]);
      EXPECT_EQ(deltas[size_t(i)].arguments, whole.tool_calls[size_t(i)]["function"]["arguments"]);
    }
    EXPECT_EQ(f.content, "") << cut;
  }
}

TEST(GlmToolCalls, WhatIsNotACallStaysTextAndACutCallIsDropped) {
  const chat::ChatFormat& glm = chat::glm45_format();
  // No name, or a key without its value: text.
  for (const char* text :
       {"<tool_call>\n<arg_key>a</arg_key></tool_call>",
        "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",
        "<tool_call>f\nstray words<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"}) {
    const chat::ToolCallsFinal f = chat::read_tool_calls(glm, text);
    EXPECT_TRUE(f.tool_calls.empty()) << text;
    EXPECT_EQ(f.content, text);
  }
  // Cut by max_tokens inside a block: dropped, never text. An end token right after the last
  // pair (the block not closed) still gives the call.
  const std::string half =
      "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>2</arg_value>\n";
  {
    auto r = glm.tool_call_reader(kTools);
    r->push(half);
    const chat::ToolCallsFinal f = r->finish(/*cut=*/true);
    EXPECT_TRUE(f.tool_calls.empty());
    EXPECT_TRUE(f.dropped);
    EXPECT_EQ(f.content, "");
  }
  {
    auto r = glm.tool_call_reader(kTools);
    r->push(half);
    const chat::ToolCallsFinal f = r->finish(/*cut=*/false);
    ASSERT_EQ(f.tool_calls.size(), 1u);
    EXPECT_EQ(f.tool_calls[0]["function"]["arguments"], R"({"zone":2})");
  }
}

TEST(GlmToolCalls, TheForcedGrammarTakesCallsInTheFormatOnly) {
  const auto g = chat::glm45_format().forced_calls(kTools, {});
  EXPECT_TRUE(grammar::grammar_matches(
      *g,
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lyon</arg_value>\n<arg_key>unit"
      "</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>"));
  EXPECT_TRUE(grammar::grammar_matches(
      *g, "<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>7</arg_value>\n</tool_call>"));
  for (const char* bad :
       {"<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>\"7\"</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>A much longer city name"
        "</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lyon</"
        "arg_value>\n<arg_key>unit"
        "</arg_key>\n<arg_value>\"celsius\"</arg_value>\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": 7}}\n</tool_call>",
        "<tool_call>get_date\n</tool_call>"})
    EXPECT_FALSE(grammar::grammar_matches(*g, bad)) << bad;
  grammar::ToolCallOptions only;
  only.only_function = "get_time";
  const auto named = chat::glm45_format().forced_calls(kTools, only);
  EXPECT_FALSE(grammar::grammar_matches(
      *named,
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Lyon</arg_value>\n<arg_key>unit"
      "</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>"));
}

// The bundled model with a GLM-style template, served: forced calls on three APIs come back as
// calls whose arguments match their schemas.
TEST(GlmToolCallsServed, ForcedCallsOnEveryApiMatchTheirSchemas) {
  const auto model = temp_dir() / "glm-format-model";
  std::filesystem::remove_all(model);
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  ojson config = ojson::parse(read_file(model / "tokenizer_config.json"));
  config["chat_template"] = kGlmTemplate;
  write_file(model / "tokenizer_config.json", config.dump());
  ServerProcess server("-m " + model.string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  const Headers key = bearer("key-a");
  auto check_args = [&](const std::string& name, const ojson& args) {
    const ojson& schema = kTools[name == "get_weather" ? 0 : 1]["function"]["parameters"];
    EXPECT_EQ(grammar::schema_violation(args, schema, {.strict = true}), "") << args.dump();
  };
  // OpenAI chat completions, whole and streamed.
  for (bool stream : {false, true}) {
    ojson req = {{"model", "glm-format-model"},
                 {"max_tokens", 240},
                 {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                 {"tools", kTools},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
    ojson calls = ojson::array();
    std::string finish;
    if (!stream) {
      const HttpReply r = post_json(server.port(), "/v1/chat/completions", req, key);
      ASSERT_EQ(r.status, 200) << r.body;
      calls = r.j()["choices"][0]["message"]["tool_calls"];
      finish = r.j()["choices"][0]["finish_reason"];
    } else {
      req["stream"] = true;
      calls = streamed_calls(post_stream(server.port(), "/v1/chat/completions", req, key), finish);
    }
    ASSERT_EQ(finish, "tool_calls") << "stream " << stream;
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    check_args("get_weather", ojson::parse(calls[0]["function"]["arguments"].get<std::string>()));
  }
  // What the model wrote is GLM's syntax (its tokens, through logprobs).
  {
    ojson req = {{"model", "glm-format-model"},
                 {"max_tokens", 240},
                 {"logprobs", true},
                 {"messages", {{{"role", "user"}, {"content", "Weather in Lyon?"}}}},
                 {"tools", kTools},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
    const HttpReply r = post_json(server.port(), "/v1/chat/completions", req, key);
    ASSERT_EQ(r.status, 200) << r.body;
    const ojson reply = r.j();
    std::string text;
    for (const ojson& t : reply["choices"][0]["logprobs"]["content"])
      text += t["token"].get<std::string>();
    EXPECT_EQ(text.rfind("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>", 0), 0u)
        << text;
    EXPECT_NE(text.find("</arg_value>\n</tool_call>"), std::string::npos) << text;
  }
  // Anthropic Messages: tool_choice any.
  {
    ojson tools = ojson::array();
    for (const ojson& t : kTools)
      tools.push_back(
          {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
    const ojson req = {{"model", "glm-format-model"},
                       {"max_tokens", 240},
                       {"messages", {{{"role", "user"}, {"content", "What time is it?"}}}},
                       {"tools", tools},
                       {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}}};
    const HttpReply r = post_json(server.port(), "/v1/messages", req, {{"x-api-key", "key-a"}});
    ASSERT_EQ(r.status, 200) << r.body;
    const ojson m = r.j();
    EXPECT_EQ(m["stop_reason"], "tool_use") << r.body;
    const ojson last = m["content"].back();
    ASSERT_EQ(last["type"], "tool_use") << r.body;
    check_args(last["name"], last["input"]);
  }
  // Responses: tool_choice required.
  {
    ojson tools = ojson::array();
    for (const ojson& t : kTools)
      tools.push_back({{"type", "function"},
                       {"name", t["function"]["name"]},
                       {"parameters", t["function"]["parameters"]}});
    const ojson req = {{"model", "glm-format-model"},
                       {"max_output_tokens", 240},
                       {"input", "What time is it in zone 3?"},
                       {"tools", tools},
                       {"tool_choice", "required"},
                       {"parallel_tool_calls", false}};
    const HttpReply r = post_json(server.port(), "/v1/responses", req, key);
    ASSERT_EQ(r.status, 200) << r.body;
    const ojson call = r.j()["output"].back();
    ASSERT_EQ(call["type"], "function_call") << r.body;
    check_args(call["name"], ojson::parse(call["arguments"].get<std::string>()));
  }
}

// gpt-oss's own template (the fixture's tokenizer_config.json: the one shipped with
// openai/gpt-oss-120b) says harmony.
TEST(ChatFormat, GptOssTemplateIsHarmony) {
  const ojson config =
      ojson::parse(read_file(data_path("oracle/gpt-oss-tiny/tokenizer_config.json")));
  EXPECT_EQ(chat::format_for_template(config["chat_template"].get<std::string>()).name(),
            "harmony");
}

const std::string kHarmonyReply =
    "<|channel|>analysis<|message|>The user wants weather; call the tool.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Checking now.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|call|>";

chat::ReplyParts read_all(const std::string& text, size_t cut, bool max_tokens,
                          chat::HarmonyReader& r) {
  chat::ReplyParts all;
  for (std::string_view piece :
       {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)}) {
    chat::ReplyParts p = r.push(piece);
    all.reasoning += p.reasoning;
    all.content += p.content;
    for (auto& c : p.calls) all.calls.push_back(c);
  }
  chat::ReplyParts p = r.finish(max_tokens);
  all.reasoning += p.reasoning;
  all.content += p.content;
  for (auto& c : p.calls) all.calls.push_back(c);
  return all;
}

// Reasoning from the analysis channel, a commentary preamble as content, the call to
// functions.get_weather with its JSON arguments; the same however the text is split.
TEST(HarmonyReader, ChannelsAndCallsWhateverTheSplit) {
  for (size_t cut = 0; cut <= kHarmonyReply.size(); ++cut) {
    chat::HarmonyReader r;
    const chat::ReplyParts all = read_all(kHarmonyReply, cut, false, r);
    EXPECT_EQ(all.reasoning, "The user wants weather; call the tool.") << cut;
    EXPECT_EQ(all.content, "Checking now.") << cut;
    ASSERT_EQ(all.calls.size(), 1u) << cut;
    EXPECT_EQ(all.calls[0].name, "get_weather");
    EXPECT_EQ(ojson::parse(all.calls[0].arguments),
              ojson::parse(R"({"city": "Paris", "unit": "celsius"})"));
    ASSERT_EQ(r.calls().size(), 1u);
    EXPECT_EQ(r.calls()[0]["id"], all.calls[0].id);
    EXPECT_FALSE(r.dropped());
  }
}

TEST(HarmonyReader, FinalAnswersRecipientsBeforeTheChannelAndCutCalls) {
  {  // An answer: analysis then final, ended by <|return|> (a stop token, so maybe not in the
     // text).
    chat::HarmonyReader r;
    const chat::ReplyParts all = read_all(
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4",
        10, false, r);
    EXPECT_EQ(all.reasoning, "Easy.");
    EXPECT_EQ(all.content, "4");
    EXPECT_TRUE(all.calls.empty());
  }
  {  // The recipient in the header before the channel, as the template writes past calls.
    chat::HarmonyReader r;
    const chat::ReplyParts all = read_all(
        "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"zone\": "
        "2}",
        5, false, r);
    ASSERT_EQ(all.calls.size(), 1u);
    EXPECT_EQ(all.calls[0].name, "get_time");
    EXPECT_EQ(all.calls[0].arguments, R"({"zone":2})");
  }
  {  // max_tokens inside a call: dropped, never content.
    chat::HarmonyReader r;
    const chat::ReplyParts all =
        read_all("<|channel|>commentary to=functions.get_time<|message|>{\"zo", 3, true, r);
    EXPECT_TRUE(all.calls.empty());
    EXPECT_EQ(all.content, "");
    EXPECT_TRUE(r.dropped());
  }
  {  // No harmony header at all: the text is the answer.
    chat::HarmonyReader r;
    EXPECT_EQ(read_all("plain words", 4, false, r).content, "plain words");
  }
}

// A tokenizer that has harmony's special tokens: <|end|> ends a message, not the turn, so it is not
// a stop; <|return|> and <|call|> are.
TEST(HarmonyPrompt, StopsAtReturnAndCallNotAtEnd) {
  const auto dir = data_path("oracle/gpt-oss-tiny");
  ojson tok = ojson::parse(read_file(dir / "tokenizer.json"));
  add_tokens(tok, 512,
             {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
              "<|call|>"},
             /*special=*/true);
  const Tokenizer t = Tokenizer::from_json(tok.dump(), read_file(dir / "tokenizer_config.json"));
  const chat::ChatPrompt prompt(t, {0});
  EXPECT_EQ(prompt.format().name(), "harmony");
  const std::vector<int32_t> stops = prompt.stop_ids();
  auto has = [&](const char* s) {
    return std::find(stops.begin(), stops.end(), *t.token_id(s)) != stops.end();
  };
  EXPECT_TRUE(has("<|return|>"));
  EXPECT_TRUE(has("<|call|>"));
  EXPECT_FALSE(has("<|end|>"));
  // The prompt for a turn ends where the model writes its first header.
  // (gpt-oss's template needs every tool's description, as jinja2 does.)
  ojson tools = kTools;
  for (ojson& tool : tools) tool["function"]["description"] = "A tool.";
  const std::string text =
      prompt.render(ojson::parse(R"([{"role": "user", "content": "hi"}])"), tools, true);
  EXPECT_EQ(text.substr(text.size() - std::string("<|start|>assistant").size()),
            "<|start|>assistant");
  EXPECT_NE(text.find("type get_weather"), std::string::npos);
  // reasoning_effort (OpenAI's parameter, Responses' reasoning.effort) reaches its system message.
  const std::string high = prompt.render(ojson::parse(R"([{"role": "user", "content": "hi"}])"),
                                         nullptr, true, {{"reasoning_effort", "high"}});
  EXPECT_NE(high.find("Reasoning: high"), std::string::npos) << high;
}

// The bundled model as a harmony model: gpt-oss's own template, harmony's special tokens on the
// embedding's padded rows. A forced call of a named function ends its prompt inside the call's
// header; the grammar holds the recipient and the arguments and then allows only <|call|>: the
// reply is that call, read back through the harmony reader, whole and streamed, on OpenAI chat,
// Responses and Anthropic Messages, for a named function and for any of the listed ones.
TEST(HarmonyServed, AForcedCallIsTheCall) {
  const auto model = temp_dir() / "harmony-model";
  std::filesystem::remove_all(model);
  std::filesystem::copy(source_path("models/pycoder-6m"), model);
  ojson tok = ojson::parse(read_file(model / "tokenizer.json"));
  add_tokens(tok, 8128,
             {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
              "<|call|>"},
             /*special=*/true);
  write_file(model / "tokenizer.json", tok.dump());
  ojson config = ojson::parse(read_file(model / "tokenizer_config.json"));
  config["chat_template"] = ojson::parse(
      read_file(data_path("oracle/gpt-oss-tiny/tokenizer_config.json")))["chat_template"];
  write_file(model / "tokenizer_config.json", config.dump());
  ServerProcess server("-m " + model.string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  ojson tools = kTools;
  for (ojson& t : tools) t["function"]["description"] = "A tool.";
  const ojson& schema = tools[1]["function"]["parameters"];
  for (bool stream : {false, true}) {
    ojson req = {{"model", "harmony-model"},
                 {"max_tokens", 60},
                 {"messages", {{{"role", "user"}, {"content", "What time is it?"}}}},
                 {"tools", tools},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}};
    ojson calls = ojson::array();
    std::string finish;
    if (!stream) {
      const HttpReply r = post_json(server.port(), "/v1/chat/completions", req);
      ASSERT_EQ(r.status, 200) << r.body;
      const ojson reply = r.j();
      calls = reply["choices"][0]["message"]["tool_calls"];
      finish = reply["choices"][0]["finish_reason"];
    } else {
      req["stream"] = true;
      calls = streamed_calls(post_stream(server.port(), "/v1/chat/completions", req), finish);
    }
    ASSERT_EQ(finish, "tool_calls") << "stream " << stream;
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["function"]["name"], "get_time");
    const ojson args = ojson::parse(calls[0]["function"]["arguments"].get<std::string>());
    EXPECT_EQ(grammar::schema_violation(args, schema, {.strict = true}), "") << args.dump();
  }
  // Responses, a named function too.
  ojson rtools = ojson::array();
  for (const ojson& t : tools)
    rtools.push_back({{"type", "function"},
                      {"name", t["function"]["name"]},
                      {"description", "A tool."},
                      {"parameters", t["function"]["parameters"]}});
  const ojson rreq = {{"model", "harmony-model"},
                      {"max_output_tokens", 60},
                      {"input", "What time is it?"},
                      {"tools", rtools},
                      {"tool_choice", {{"type", "function"}, {"name", "get_time"}}}};
  const HttpReply r = post_json(server.port(), "/v1/responses", rreq);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson call = r.j()["output"].back();
  ASSERT_EQ(call["type"], "function_call") << r.body;
  EXPECT_EQ(call["name"], "get_time");
  // Any listed function ("required"): the model picks the recipient inside the header, whose
  // <|constrain|> and <|message|> the grammar writes as the special tokens they are. On chat
  // completions (whole and streamed), Responses and Anthropic Messages.
  auto check_call = [&](const std::string& name, const ojson& args) {
    const auto it = std::find_if(tools.begin(), tools.end(),
                                 [&](const ojson& t) { return t["function"]["name"] == name; });
    ASSERT_NE(it, tools.end()) << name;
    EXPECT_EQ(grammar::schema_violation(args, (*it)["function"]["parameters"], {.strict = true}),
              "")
        << args.dump();
  };
  for (bool stream : {false, true}) {
    ojson req = {{"model", "harmony-model"},
                 {"max_tokens", 60},
                 {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"tools", tools},
                 {"tool_choice", "required"},
                 {"logprobs", !stream}};
    ojson calls = ojson::array();
    std::string finish;
    if (!stream) {
      const HttpReply r = post_json(server.port(), "/v1/chat/completions", req);
      ASSERT_EQ(r.status, 200) << r.body;
      const ojson reply = r.j();
      calls = reply["choices"][0]["message"]["tool_calls"];
      finish = reply["choices"][0]["finish_reason"];
      // The header's markers were generated as the special tokens, not spelled out in text.
      std::vector<std::string> pieces;
      for (const ojson& t : reply["choices"][0]["logprobs"]["content"])
        pieces.push_back(t["token"].get<std::string>());
      EXPECT_NE(std::find(pieces.begin(), pieces.end(), "<|constrain|>"), pieces.end());
      EXPECT_NE(std::find(pieces.begin(), pieces.end(), "<|message|>"), pieces.end());
    } else {
      req["stream"] = true;
      calls = streamed_calls(post_stream(server.port(), "/v1/chat/completions", req), finish);
    }
    ASSERT_EQ(finish, "tool_calls") << "stream " << stream;
    ASSERT_EQ(calls.size(), 1u);
    check_call(calls[0]["function"]["name"],
               ojson::parse(calls[0]["function"]["arguments"].get<std::string>()));
  }
  {
    ojson req = rreq;
    req["tool_choice"] = "required";
    req["input"] = "hi";
    const HttpReply rr = post_json(server.port(), "/v1/responses", req);
    ASSERT_EQ(rr.status, 200) << rr.body;
    const ojson out = rr.j()["output"].back();
    ASSERT_EQ(out["type"], "function_call") << rr.body;
    check_call(out["name"], ojson::parse(out["arguments"].get<std::string>()));
  }
  {
    ojson atools = ojson::array();
    for (const ojson& t : tools)
      atools.push_back({{"name", t["function"]["name"]},
                        {"description", "A tool."},
                        {"input_schema", t["function"]["parameters"]}});
    const ojson req = {{"model", "harmony-model"},
                       {"max_tokens", 60},
                       {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                       {"tools", atools},
                       {"tool_choice", {{"type", "any"}}}};
    const HttpReply ar = post_json(server.port(), "/v1/messages", req);
    ASSERT_EQ(ar.status, 200) << ar.body;
    const ojson m = ar.j();
    EXPECT_EQ(m["stop_reason"], "tool_use") << ar.body;
    const ojson last = m["content"].back();
    ASSERT_EQ(last["type"], "tool_use") << ar.body;
    check_call(last["name"], last["input"]);
  }
}

}  // namespace
}  // namespace fak::test
