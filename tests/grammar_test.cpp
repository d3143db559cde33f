// Schema -> grammar at the byte level: for each schema, instances that must be accepted (valid, in
// the policy's canonical order and whitespace) and strings that must be rejected (invalid JSON,
// wrong types, missing/extra/out-of-order keys, bad escapes and UTF-8, too much whitespace), and
// the errors for schemas the compiler refuses. No tokenizer involved (grammar_mask_test.cpp).
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace fak::grammar {
namespace {

struct Case {
  std::string schema;
  std::vector<std::string> accept, reject;
};

void expect_cases(const Case& c) {
  auto grammar = compile_json_schema_text(c.schema);
  for (const auto& text : c.accept)
    EXPECT_TRUE(grammar_matches(*grammar, text)) << c.schema << "\n  should accept: " << text;
  for (const auto& text : c.reject)
    EXPECT_FALSE(grammar_matches(*grammar, text)) << c.schema << "\n  should reject: " << text;
}

TEST(GrammarBytes, ObjectWithRequiredProperties) {
  expect_cases(
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                  "required":["name","age"],"additionalProperties":false})",
       {R"({"name":"Bob","age":42})", R"({"name": "Bob", "age": 42})",
        "{\n  \"name\": \"Bob\",\n  \"age\": -7\n}", R"({ "name" : "" , "age" : 0 })",
        R"({"name":"\u00e9\n\t\"\\\/\b\f\r","age":1})",
        "{\"name\":\"h\xC3\xA9llo \xF0\x9F\x98\x80\",\"age\":1}",
        R"({"name":"\ud83d\ude00","age":1})", "{\"name\":\"\x7F\",\"age\":1}"},
       {R"({"name":"Bob"})",
        R"({"age":42,"name":"Bob"})",
        R"({"name":"Bob","age":42,"x":1})",
        R"({"name":"Bob","age":4.2})",
        R"({"name":"Bob","age":1e3})",
        R"({"name":"Bob","age":042})",
        R"({"name":"Bob","age":42,})",
        R"({"name":"Bob",,"age":42})",
        R"({"name":"B\qb","age":1})",
        R"({"name":"a\u12","age":1})",
        "{\"name\":\"a\nb\",\"age\":1}",
        R"({"name":Bob,"age":1})",
        R"({"name":"Bob","age":"42"})",
        R"({"name":"Bob","age":42})"
        " ",
        R"( {"name":"Bob","age":42})",
        R"({"name":  "Bob","age":1})",
        "{\"name\":\n\n\"Bob\",\"age\":1}",
        "{\"name\":\r\n\"Bob\",\"age\":1}",
        R"({"name":"\ud800","age":1})",
        R"({"name":"\udc00","age":1})",
        R"({"name":"\ud800x","age":1})",
        R"({"name":"\ud800\u0041","age":1})",
        "{\"name\":\"\xC0\xAF\",\"age\":1}",
        "{\"name\":\"\xED\xA0\x80\",\"age\":1}",
        "{\"name\":\"\xF5\x80\x80\x80\",\"age\":1}",
        "{\"name\":\"\xE4\xB8\",\"age\":1}",
        "{\"name\":\"\x80\",\"age\":1}",
        R"({"name":"Bob","age":42}})",
        R"({"name":"Bob","age":42)",
        R"({"nam":"Bob","age":42})",
        R"({"name" "Bob","age":42})"}});
}

TEST(GrammarBytes, OptionalPropertiesComeInSchemaOrderAtMostOnce) {
  expect_cases({R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
                   "c":{"type":"boolean"},"d":{"type":"null"}},"required":["c"]})",
                {R"({"c":true})", R"({"a":1,"c":false})", R"({"b":"x","c":true})",
                 R"({"a":1,"b":"","c":true})", R"({"c":true,"d":null})",
                 R"({"a":1,"b":"","c":true,"d":null})"},
                {R"({})", R"({"a":1})", R"({"b":"x","a":1,"c":true})", R"({"a":1,"a":2,"c":true})",
                 R"({"c":true,"a":1})", R"({"d":null,"c":true})", R"({"c":true,"d":null,"d":null})",
                 R"({"c":true,})", R"({"c":tru})", R"({"c":True})"}});
  // No required property: {} and any ordered subset.
  expect_cases({R"({"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}}})",
                {"{}", "{ }", R"({"x":1})", R"({"y":2})", R"({"x":1,"y":2})"},
                {R"({"y":2,"x":1})", R"({"z":1})", R"({"x":1,})"}});
}

TEST(GrammarBytes, ArraysAndNumbers) {
  expect_cases({R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})",
                {"[1]", "[1, 2.5, -3e10]", "[ 1 ]", "[0,-0,1E-2]", "[1.5e+3]", "[\n  1,\n  2\n]"},
                {"[]", "[1,2,3,4]", "[1,]", "[,1]", "[\"a\"]", "[01]", "[1.]", "[.5]", "[+1]",
                 "[1e]", "[--1]", "[1.5.2]", "[NaN]", "[1 2]", "[1", "1", "[1234567890123456]"}});
  expect_cases({R"({"type":"integer"})",
                {"0", "-12", "123456789012345"},
                {"1.0", "1e2", "-", "00", "1234567890123456", "", " 1"}});
  expect_cases({R"({"type":"array","maxItems":0})", {"[]"}, {"[1]", "[ ]x"}});
  expect_cases({R"({"type":"array","items":false})", {"[]"}, {"[null]"}});
}

TEST(GrammarBytes, EnumConstBooleanNull) {
  expect_cases({R"({"enum":["red","green",1,null,{"k":[true]}]})",
                {R"("red")", R"("green")", "1", "null", R"({"k":[true]})"},
                {R"("blue")", R"("re")", "2", "10", "NULL", R"({"k": [true]})", R"("red" )"}});
  expect_cases({R"({"type":"string","enum":["a",1,"b"]})", {R"("a")", R"("b")"}, {"1"}});
  expect_cases({R"({"const":"fixed"})", {R"("fixed")"}, {R"("fixe")", R"("fixed2")"}});
  expect_cases({R"({"type":"boolean"})", {"true", "false"}, {"null", "1", "tru", "truee"}});
  expect_cases({R"({"type":"null"})", {"null"}, {"nul", "false"}});
  expect_cases(
      {R"({"type":["string","null"],"maxLength":2})", {R"("ab")", "null"}, {R"("abc")", "1"}});
}

TEST(GrammarBytes, StringLengthsCountCodePoints) {
  expect_cases({R"({"type":"string","minLength":2,"maxLength":3})",
                {R"("ab")", "\"\xC3\xA9\xF0\x9F\x98\x80\"", R"("a\nb")", R"("\ud83d\ude00x")",
                 R"("\u0041bc")"},
                {R"("a")", R"("abcd")", "\"\xF0\x9F\x98\x80\"", R"("")", R"("ab\n\n")"}});
  expect_cases({R"({"type":"string","maxLength":0})", {R"("")"}, {R"("a")"}});
}

TEST(GrammarBytes, AnyOfOneOfAndOverlappingAlternatives) {
  expect_cases({R"({"anyOf":[{"type":"string","maxLength":3},{"type":"integer"},
                   {"type":"object","properties":{"x":{"type":"null"}},"required":["x"]}]})",
                {R"("abc")", "12", R"({"x":null})"},
                {R"("abcd")", "1.5", "{}", "true"}});
  // Both alternatives start alike; they part at the second key.
  expect_cases({R"({"oneOf":[
        {"type":"object","properties":{"k":{"type":"string"},"a":{"type":"integer"}},"required":["k","a"]},
        {"type":"object","properties":{"k":{"type":"string"},"b":{"type":"boolean"}},"required":["k","b"]}]})",
                {R"({"k":"x","a":1})", R"({"k":"x","b":true})"},
                {R"({"k":"x","a":true})", R"({"k":"x","b":1})", R"({"k":"x","a":1,"b":true})",
                 R"({"k":"x"})"}});
}

TEST(GrammarBytes, RefsDefsAndRecursion) {
  expect_cases(
      {R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
                   "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"]}},
                   "$ref":"#/$defs/node"})",
       {R"({"value":1})", R"({"value":1,"children":[{"value":2},{"value":3,"children":[]}]})"},
       {R"({"value":1,"children":[{"children":[]}]})", R"({"children":[]})"}});
  expect_cases({R"({"type":"object","properties":{"p":{"$ref":"#/definitions/point"},
                   "q":{"allOf":[{"$ref":"#/definitions/point"}],"description":"pydantic style"}},
                   "required":["p","q"],
                   "definitions":{"point":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2}}})",
                {R"({"p":[1,2],"q":[3,4]})"},
                {R"({"p":[1],"q":[3,4]})", R"({"p":[1,2]})"}});
  // The root itself, recursively: a linked list.
  expect_cases(
      {R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})",
       {R"({"next":null})", R"({"next":{"next":{"next":null}}})"},
       {R"({"next":{}})"}});
}

TEST(GrammarBytes, UntypedAndInferredSchemas) {
  expect_cases(
      {"{}", {"1", R"("s")", "null", R"({"a":[1,{"b":false}]})", "[]"}, {"", "nul", "{]"}});
  expect_cases({"true", {"[1,2]"}, {"[1,2"}});
  expect_cases(
      {R"({"properties":{"a":{"type":"string"}},"required":["a"]})", {R"({"a":"x"})"}, {R"("x")"}});
  expect_cases({R"({"type":"object","additionalProperties":{"type":"integer"}})",
                {"{}", R"({"any key":1,"other":2})"},
                {R"({"k":"v"})", R"({"k":1,})"}});
  expect_cases({R"({"type":"object","additionalProperties":false})", {"{}"}, {R"({"k":1})"}});
  expect_cases(
      {R"({"description":"annotations only","title":"t","format":"date-time","type":"string"})",
       {R"("2024-01-01")"},
       {"1"}});
}

TEST(GrammarBytes, WhitespaceIsBounded) {
  auto grammar =
      compile_json_schema_text(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const std::string indent20(20, ' '), indent21(21, ' ');
  EXPECT_TRUE(grammar_matches(*grammar, "{\n" + indent20 + "\"a\": 1\n}"));
  EXPECT_TRUE(grammar_matches(*grammar, "{\n\t\t\"a\":\t1}") ==
              false);  // a tab alone is not a run start
  EXPECT_FALSE(grammar_matches(*grammar, "{\n" + indent21 + "\"a\": 1\n}"));
  EXPECT_FALSE(grammar_matches(*grammar, "{  \"a\": 1}"));
  EXPECT_FALSE(grammar_matches(*grammar, "{ \n\"a\": 1}"));
  EXPECT_TRUE(grammar_matches(*grammar, "{\n\t\t\"a\": 1}"));
}

TEST(GrammarBytes, AnyJsonObject) {
  auto grammar = any_json_object_grammar();
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}],"c":"d","e":true,"f":-1.5e3})", R"({"":{}})"})
    EXPECT_TRUE(grammar_matches(*grammar, ok)) << ok;
  for (const char* bad : {"[]", R"("x")", R"({"a":})", R"({"a":1,})", R"({a:1})", "1"})
    EXPECT_FALSE(grammar_matches(*grammar, bad)) << bad;
  // Nesting stops at the depth limit (no unbounded stack), well beyond what JSON output needs.
  std::string deep_ok = "{\"a\":", deep_bad = "{\"a\":";
  for (int i = 0; i < 20; ++i) deep_ok += "[";
  for (int i = 0; i < 20; ++i) deep_ok += "]";
  deep_ok += "}";
  for (int i = 0; i < 100; ++i) deep_bad += "[";
  for (int i = 0; i < 100; ++i) deep_bad += "]";
  deep_bad += "}";
  EXPECT_TRUE(grammar_matches(*grammar, deep_ok));
  EXPECT_FALSE(grammar_matches(*grammar, deep_bad));
}

// At the depth limit a recursive schema must still let every open value finish: the deepest
// "next" can only be null, and no prefix on the way ever has nothing allowed.
TEST(GrammarBytes, DepthLimitNeverLeavesADeadEnd) {
  auto grammar = compile_json_schema_text(
      R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]},
          "more":{"type":"array","items":{"$ref":"#"}}},"required":["next"]})");
  GrammarMatcher matcher(grammar, nullptr, {});
  int levels = 0;
  while (matcher.advance_bytes("{\"next\":")) {
    ASSERT_TRUE(matcher.can_continue()) << levels;
    ++levels;
    if (GrammarMatcher probe(matcher); !probe.advance_bytes("{")) break;
  }
  EXPECT_GT(levels, 20);  // deep nesting works ...
  EXPECT_LT(levels, 60);  // ... up to the limit
  GrammarMatcher at_limit(matcher);
  EXPECT_FALSE(at_limit.advance_bytes("{"));  // no deeper object
  EXPECT_TRUE(at_limit.advance_bytes("null"));
  EXPECT_TRUE(at_limit.can_continue());
  // The optional array of nodes cannot open an item there either, only stay empty.
  GrammarMatcher array(at_limit);
  EXPECT_TRUE(array.advance_bytes(",\"more\":["));
  EXPECT_FALSE(GrammarMatcher(array).advance_bytes("{"));
  EXPECT_TRUE(array.advance_bytes("]}"));
  const std::string close(size_t(levels - 1), '}');
  EXPECT_TRUE(at_limit.advance_bytes("}" + close));
  EXPECT_TRUE(at_limit.is_complete());
  // No finite value at all, and too deep from the start.
  EXPECT_THROW(compile_json_schema_text(
                   R"({"type":"object","properties":{"self":{"$ref":"#"}},"required":["self"]})"),
               Error);
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 60; ++i) deep = R"({"type":"array","minItems":1,"items":)" + deep + "}";
  EXPECT_THROW(compile_json_schema_text(deep), Error);
}

TEST(GrammarBytes, ResponseFormat) {
  EXPECT_EQ(compile_response_format(fak::ojson::parse(R"({"type":"text"})")), nullptr);
  auto object = compile_response_format(fak::ojson::parse(R"({"type":"json_object"})"));
  EXPECT_TRUE(grammar_matches(*object, R"({"k":1})"));
  auto schema = compile_response_format(fak::ojson::parse(
      R"({"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object",
          "properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}})"));
  EXPECT_TRUE(grammar_matches(*schema, R"({"ok":true})"));
  EXPECT_FALSE(grammar_matches(*schema, R"({"ok":1})"));
  EXPECT_THROW(compile_response_format(fak::ojson::parse(R"({"type":"yaml"})")), Error);
}

TEST(GrammarBytes, ToolCalls) {
  const auto tools = fak::ojson::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}},
    {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}},
    {"type":"function","function":{"name":"ping"}}])");
  auto calls = compile_tool_calls(tools);
  for (const char* ok : {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "\"Paris\"}}\n</tool_call>",
                         "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\","
                         "\"unit\":\"c\"}}\n</tool_call>",
                         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                         "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"})
    EXPECT_TRUE(grammar_matches(*calls, ok)) << ok;
  for (const char* bad :
       {"<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}, \"name\": "
        "\"get_weather\"}\n</tool_call>",
        "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n",
        "<tool_call>\n{\"name\": \"ping\"}\n</tool_call>",
        "{\"name\": \"ping\", \"arguments\": {}}"})
    EXPECT_FALSE(grammar_matches(*calls, bad)) << bad;

  const std::string ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  ToolCallOptions up_to_two;
  up_to_two.max_calls = 2;
  auto two = compile_tool_calls(tools, up_to_two);
  EXPECT_TRUE(grammar_matches(*two, ping));
  EXPECT_TRUE(grammar_matches(*two, ping + "\n" + ping));
  EXPECT_FALSE(grammar_matches(*two, ping + "\n" + ping + "\n" + ping));
  EXPECT_FALSE(grammar_matches(*two, ping + "\n"));

  ToolCallOptions only_ping;
  only_ping.only_function = "ping";
  auto only = compile_tool_calls(tools, only_ping);
  EXPECT_TRUE(grammar_matches(*only, ping));
  EXPECT_FALSE(grammar_matches(
      *only, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  ToolCallOptions unknown;
  unknown.only_function = "nope";
  EXPECT_THROW(compile_tool_calls(tools, unknown), Error);
  EXPECT_THROW(compile_tool_calls(fak::ojson::array()), Error);
}

// A refused schema names the keyword (or the problem) and where it is.
void expect_error(const std::string& schema, const std::vector<std::string>& words) {
  try {
    compile_json_schema_text(schema);
    ADD_FAILURE() << "no error for " << schema;
  } catch (const Error& e) {
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what() << " lacks " << w;
  }
}

TEST(GrammarBytes, RefusedSchemasSayWhy) {
  expect_error(R"({"type":"object","properties":{"code":{"type":"string","pattern":"^(a)\\1$"}}})",
               {"'pattern'", "backreferences", "#/properties/code"});
  expect_error(R"({"type":"integer","multipleOf":2})", {"'multipleOf'", "at #"});
  expect_error(R"({"type":"array","uniqueItems":true})", {"'uniqueItems'"});
  expect_error(R"({"$ref":"https://example.com/s.json"})", {"https://example.com/s.json"});
  expect_error(R"({"$ref":"#/$defs/missing"})", {"#/$defs/missing", "points to nothing"});
  expect_error(R"({"type":"object","properties":{"a":{}},"required":["b"]})", {"'b'"});
  expect_error(R"({"type":"string","minLength":5,"maxLength":2})", {"minLength"});
  expect_error(R"({"type":"strnig"})", {"strnig"});
  expect_error(R"({"allOf":[{"type":"string"},{"maxLength":2}]})", {"allOf"});
  expect_error(R"({"$ref":"#"})", {"refers to itself"});
  expect_error(R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", {"refers to itself"});
  expect_error(R"({"type":"array","items":[{"type":"string"}]})", {"items"});
  expect_error(R"({"enum":[1,2],"maxLength":3})", {"enum", "maxLength"});
  expect_error(R"({"type":"string","enum":[1,2]})", {"enum"});
  expect_error(R"(false)", {"admits no value"});
  expect_error(R"({"type":"object","properties":{"a":false},"required":["a"]})",
               {"#/properties/a"});
  expect_error(R"({"type":"string","maxLength":-1})", {"maxLength"});
  expect_error(R"({"type":"object",)", {"not valid JSON"});
  // Lenient mode drops what it cannot enforce and keeps the rest.
  auto lenient = compile_json_schema_text(R"({"type":"integer","multipleOf":3,"x-custom":1})",
                                          SchemaOptions{.ignore_unsupported_keywords = true});
  EXPECT_TRUE(grammar_matches(*lenient, "5"));
  EXPECT_FALSE(grammar_matches(*lenient, "\"5\""));
}

}  // namespace
}  // namespace fak::grammar
