// Constrained decoding on thinking models (issue 23): with <think>/</think> in the tokenizer, a
// json_schema, a json_object or a forced tool call holds from the reply's first token unless the
// model opens a reasoning block (an optional leading block is part of the grammar). A model that
// never opens one (Qwen3 -Instruct-2507, /no_think, a small model) used to be left free, and the
// AI SDK threw on its prose; here every API gets valid output.
#include <gtest/gtest.h>

#include <cstring>

#include "core/json.h"
#include "grammar/schema_validate.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

const ojson kSchema = ojson::parse(R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}},
  "required": ["name", "count"], "additionalProperties": false})");

// thinking_model() with a template that never opens a reasoning block, as the -Instruct-2507
// models have it: the tokenizer still knows <think> (8128) and </think> (8129).
std::filesystem::path instruct_model() {
  const auto dir = thinking_model();
  ojson config = ojson::parse(read_file(dir / "tokenizer_config.json"));
  config["chat_template"] =
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  write_file(dir / "tokenizer_config.json", config.dump());
  return dir;
}

// bf16 <-> float, for editing the embedding.
float from_bf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// The instruct model, with <think>'s embedding row (tied to the output layer) set to twice the
// row of `token`: where `token` is the model's best first token, <think> is better still, so the
// model opens a reasoning block on its own.
std::filesystem::path model_that_opens_think(int32_t token) {
  const auto dir = instruct_model();
  std::string st = read_file(dir / "model.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, st.data(), 8);
  const ojson h = ojson::parse(st.substr(8, header));
  const ojson& e = h["model.embed_tokens.weight"];
  EXPECT_EQ(e["dtype"], "BF16");
  const size_t dim = e["shape"][1], base = 8 + header + e["data_offsets"][0].get<size_t>();
  for (size_t i = 0; i < dim; ++i) {
    uint16_t v;
    std::memcpy(&v, st.data() + base + (size_t(token) * dim + i) * 2, 2);
    v = to_bf16(2 * from_bf16(v));
    std::memcpy(st.data() + base + (8128 * dim + i) * 2, &v, 2);
  }
  write_file(dir / "model.safetensors", st);
  return dir;
}

ojson user(const std::string& text) {
  return ojson::array({{{"role", "user"}, {"content", text}}});
}

void expect_valid(const std::string& text, const std::string& what) {
  const ojson value = ojson::parse(text, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << what << ": " << text;
  EXPECT_EQ(grammar::schema_violation(value, kSchema, {.strict = true}), "")
      << what << ": " << text;
}

TEST(ThinkingConstraints, HoldFromTheFirstTokenWhenTheModelDoesNotThink) {
  ServerProcess server("-m " + instruct_model().string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  const int port = server.port();
  const ojson format = {{"type", "json_schema"},
                        {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", kSchema}}}};
  // OpenAI chat: json_schema, json_object, a forced tool call.
  ojson chat = {{"model", "thinker"}, {"max_tokens", 400}, {"messages", user("a count please")}};
  chat["response_format"] = format;
  HttpReply r = post_json(port, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "stop") << r.body;
  expect_valid(r.j()["choices"][0]["message"]["content"], "chat json_schema");
  // json_object: greedy, this model nests objects until max_tokens; what it writes is a JSON
  // object's beginning all the same (unconstrained, it writes Python).
  chat["response_format"] = {{"type", "json_object"}};
  chat["max_tokens"] = 30;
  r = post_json(port, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string object = r.j()["choices"][0]["message"]["content"];
  EXPECT_EQ(object.substr(0, 1), "{") << r.body;
  chat["max_tokens"] = 400;
  chat.erase("response_format");
  chat["tools"] = {
      {{"type", "function"}, {"function", {{"name", "count_it"}, {"parameters", kSchema}}}}};
  chat["tool_choice"] = "required";
  r = post_json(port, "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "tool_calls") << r.body;
  expect_valid(r.j()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
               "chat tool call");
  // Anthropic: a forced tool and an output format.
  ojson msg = {{"model", "thinker"},
               {"max_tokens", 400},
               {"messages", user("a count please")},
               {"tools", {{{"name", "count_it"}, {"input_schema", kSchema}}}},
               {"tool_choice", {{"type", "any"}}}};
  r = post_json(port, "/v1/messages", msg);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["stop_reason"], "tool_use") << r.body;
  msg.erase("tools");
  msg.erase("tool_choice");
  msg["output_config"] = {{"format", {{"type", "json_schema"}, {"schema", kSchema}}}};
  r = post_json(port, "/v1/messages", msg);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["content"].back()["type"], "text") << r.body;
  expect_valid(r.j()["content"].back()["text"], "messages output_config");
  // Responses: text.format.
  ojson resp = {
      {"model", "thinker"},
      {"max_output_tokens", 400},
      {"input", "a count please"},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", kSchema}}}}}};
  r = post_json(port, "/v1/responses", resp);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  const ojson out = r.j();
  for (const ojson& item : out["output"])
    if (item["type"] == "message") text = item["content"][0]["text"];
  expect_valid(text, "responses text.format");
}

// A model that does open a block: it reasons freely first, and the grammar holds once the block
// is closed (here by Anthropic's thinking budget).
TEST(ThinkingConstraints, AnOptionalLeadingBlockIsFreeThenTheGrammarHolds) {
  int32_t first = -1;
  {
    // The instruct model's best first token for this conversation.
    ServerProcess probe("-m " + instruct_model().string());
    ASSERT_NE(probe.port(), 0);
    const HttpReply s =
        post_json(probe.port(), "/v1/fak/sessions",
                  ojson{{"messages", user("a count please")}, {"add_generation_prompt", true}});
    ASSERT_EQ(s.status, 201) << s.body;
    const HttpReply g =
        post_json(probe.port(), "/v1/fak/sessions/" + s.j()["id"].get<std::string>() + "/generate",
                  ojson{{"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_EQ(g.status, 200) << g.body;
    first = g.j()["ids"][0];
  }
  ServerProcess server("-m " + model_that_opens_think(first).string());
  ASSERT_NE(server.port(), 0);
  const ojson format = {{"type", "json_schema"}, {"schema", kSchema}};
  ojson msg = {{"model", "thinker"},
               {"max_tokens", 160},
               {"temperature", 0},
               {"messages", user("a count please")},
               {"thinking", {{"type", "enabled"}, {"budget_tokens", 6}}},
               {"output_config", {{"format", format}}}};
  const HttpReply r = post_json(server.port(), "/v1/messages", msg);
  ASSERT_EQ(r.status, 200) << r.body;
  const ojson content = r.j()["content"];
  ASSERT_EQ(content.size(), 2u) << r.body;
  EXPECT_EQ(content[0]["type"], "thinking") << r.body;
  EXPECT_FALSE(content[0]["thinking"].get<std::string>().empty());
  ASSERT_EQ(content[1]["type"], "text");
  expect_valid(content[1]["text"], "after the block");
  // Without a budget the block is the model's to close: what it writes meanwhile is reasoning,
  // not a broken answer.
  ojson chat = {{"model", "thinker"},
                {"max_tokens", 20},
                {"temperature", 0},
                {"messages", user("a count please")},
                {"response_format", {{"type", "json_object"}}}};
  const HttpReply c = post_json(server.port(), "/v1/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.body;
  const ojson m = c.j()["choices"][0]["message"];
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty()) << c.body;
  EXPECT_TRUE(m["content"].is_null() || m["content"] == "") << c.body;
}

}  // namespace
}  // namespace fak::test
