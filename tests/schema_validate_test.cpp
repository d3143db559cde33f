// The referee used by grammar_mask_test.cpp: the validator must accept valid instances and name
// the violation in invalid ones, keyword by keyword.
#include "grammar/schema_validate.h"

#include <gtest/gtest.h>

namespace fak::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::string violation(const char* instance, const char* schema, bool strict = false) {
  return schema_violation(ojson::parse(instance), ojson::parse(schema), {.strict = strict});
}

TEST(SchemaValidate, Types) {
  EXPECT_EQ(violation("1", R"({"type":"integer"})"), "");
  EXPECT_EQ(violation("1.0", R"({"type":"integer"})"), "");  // JSON Schema: zero fraction
  EXPECT_NE(violation("1.5", R"({"type":"integer"})"), "");
  EXPECT_EQ(violation("1.5", R"({"type":"number"})"), "");
  EXPECT_NE(violation("\"1\"", R"({"type":"number"})"), "");
  EXPECT_EQ(violation("null", R"({"type":["string","null"]})"), "");
  EXPECT_NE(violation("true", R"({"type":["string","null"]})"), "");
  EXPECT_EQ(violation("{}", "true"), "");
  EXPECT_NE(violation("{}", "false"), "");
}

TEST(SchemaValidate, ObjectsAndStrictMode) {
  const char* schema =
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]})";
  EXPECT_EQ(violation(R"({"a":"x","b":2})", schema), "");
  EXPECT_NE(violation(R"({"b":2})", schema).find("missing required"), std::string::npos);
  EXPECT_NE(violation(R"({"a":1})", schema), "");
  EXPECT_EQ(violation(R"({"a":"x","c":0})", schema), "");  // extra keys allowed by default
  EXPECT_NE(violation(R"({"a":"x","c":0})", schema, true), "");
  EXPECT_NE(
      violation(R"({"a":"x","c":0})", R"({"properties":{"a":{}},"additionalProperties":false})"),
      "");
  EXPECT_NE(violation(R"({"k":"v"})", R"({"additionalProperties":{"type":"integer"}})"), "");
}

TEST(SchemaValidate, ArraysStringsEnumsCombinators) {
  EXPECT_NE(violation("[]", R"({"minItems":1})"), "");
  EXPECT_NE(violation("[1,2,3]", R"({"maxItems":2})"), "");
  EXPECT_NE(violation(R"([1,"a"])", R"({"items":{"type":"integer"}})"), "");
  EXPECT_EQ(violation("\"\xC3\xA9\xC3\xA9\"", R"({"maxLength":2})"), "");  // code points
  EXPECT_NE(violation("\"abc\"", R"({"maxLength":2})"), "");
  EXPECT_NE(violation("\"a\"", R"({"minLength":2})"), "");
  EXPECT_EQ(violation("2", R"({"enum":[1,2.0]})"), "");
  EXPECT_NE(violation("3", R"({"enum":[1,2]})"), "");
  EXPECT_NE(violation("\"y\"", R"({"const":"x"})"), "");
  EXPECT_EQ(violation("1", R"({"anyOf":[{"type":"string"},{"type":"integer"}]})"), "");
  EXPECT_NE(violation("1", R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"), "");
  EXPECT_NE(violation("\"abc\"", R"({"allOf":[{"type":"string"},{"maxLength":2}]})"), "");
  EXPECT_NE(
      violation(R"({"v":"x"})",
                R"({"$defs":{"n":{"properties":{"v":{"type":"integer"}}}},"$ref":"#/$defs/n"})"),
      "");
}

}  // namespace
}  // namespace fak::grammar
