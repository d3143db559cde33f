// The referee used by grammar_mask_test.cpp: the validator must accept valid instances and name
// the violation in invalid ones, keyword by keyword.
#include "grammar/schema_validate.h"

#include <gtest/gtest.h>

#include "core/json.h"

namespace fak::grammar {
namespace {

using ojson = fak::ojson;

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

TEST(SchemaValidate, NumericBounds) {
  EXPECT_EQ(violation("0", R"({"minimum":0})"), "");
  EXPECT_NE(violation("-1", R"({"minimum":0})"), "");
  EXPECT_NE(violation("0", R"({"exclusiveMinimum":0})"), "");
  EXPECT_EQ(violation("0.5", R"({"exclusiveMinimum":0})"), "");
  EXPECT_EQ(violation("1.0", R"({"maximum":1})"), "");
  EXPECT_NE(violation("1.01", R"({"maximum":1})"), "");
  EXPECT_NE(violation("1", R"({"exclusiveMaximum":1.0})"), "");
  EXPECT_EQ(violation("0.999", R"({"exclusiveMaximum":1})"), "");
  // Draft 4: a boolean makes minimum / maximum exclusive.
  EXPECT_NE(violation("0", R"({"minimum":0,"exclusiveMinimum":true})"), "");
  EXPECT_EQ(violation("0", R"({"minimum":0,"exclusiveMinimum":false})"), "");
  EXPECT_NE(violation("5", R"({"maximum":5,"exclusiveMaximum":true})"), "");
  // Exact beyond doubles: 2^53 + 1 against 2^53 as a double.
  EXPECT_NE(violation("9007199254740993", R"({"maximum":9007199254740992.0})"), "");
  EXPECT_EQ(violation("-9007199254740991", R"({"minimum":-9007199254740991})"), "");
  EXPECT_NE(violation("18446744073709551615", R"({"exclusiveMaximum":18446744073709551615})"), "");
  // Not numbers: not concerned.
  EXPECT_EQ(violation("\"x\"", R"({"minimum":3})"), "");
}

TEST(SchemaValidate, PatternsWithEcmaScriptMeaning) {
  EXPECT_EQ(violation(R"("xaby")", R"({"pattern":"ab"})"), "");  // search, not whole match
  EXPECT_NE(violation(R"("xaby")", R"({"pattern":"^ab$"})"), "");
  EXPECT_NE(violation(R"("ab\n")", R"({"pattern":"^ab$"})"), "");     // $ is the very end
  EXPECT_NE(violation("\"a\\u2028\"", R"({"pattern":"^a.$"})"), "");  // . skips line terminators
  EXPECT_EQ(violation("\"\\u00e9\"", R"({"pattern":"^.$"})"), "");    // a code point, not a byte
  EXPECT_EQ(violation("\"\\ud83d\\ude00\"", R"({"pattern":"^.$"})"), "");
  EXPECT_EQ(violation("\"\\u00a0\\ufeff\"", R"({"pattern":"^\\s+$"})"), "");  // ECMA's \s
  EXPECT_NE(violation("\"\\u00a0\"", R"({"pattern":"^[\\S]$"})"), "");
  EXPECT_EQ(violation("\"x\"", R"({"pattern":"^[^\\S]|x$"})"), "");
  EXPECT_NE(violation("\"\\u0663\"", R"({"pattern":"^\\d$"})"), "");  // ASCII digits only
  EXPECT_EQ(violation("\"\\u000b\"", R"({"pattern":"^\\v$"})"), "");
  EXPECT_EQ(violation(R"("ab")", R"({"pattern":"^\\u0061\\u{62}$"})"), "");
  EXPECT_EQ(violation("\"\\ud83d\\ude00\"", R"({"pattern":"^\\uD83D\\uDE00$"})"), "");
  EXPECT_NE(violation(R"("a")", R"({"pattern":"^a[]$"})"), "");     // [] matches nothing
  EXPECT_EQ(violation("\"a\\n\"", R"({"pattern":"^a[^]$"})"), "");  // [^] anything
  EXPECT_EQ(violation(R"("[")", R"({"pattern":"^[[]$"})"), "");
  EXPECT_NE(violation(R"(".a@x.io")", R"({"pattern":"^(?!\\.)[a-z.]+@x\\.io$"})"), "");
  EXPECT_NE(violation(R"("abc")", R"({"pattern":"^a(b"})"), "");  // does not compile: invalid
  EXPECT_EQ(violation("12", R"({"pattern":"^a$"})"), "");         // not a string
}

}  // namespace
}  // namespace fak::grammar
