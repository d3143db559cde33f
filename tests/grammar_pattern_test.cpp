// `pattern` at the byte level: zod's patterns as it writes them (email, uuid, ...), JSON escaping
// inside the string (the pattern reads decoded characters), ECMA-262 details (search semantics,
// `.`, \s, classes), minLength/maxLength together with a pattern, and the refusals; then two
// differential checks against the validator's PCRE2 (schema_validate.h): every string over a
// small alphabet up to a length, and random walks through the automaton's bytes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/nodes.h"
#include "grammar/schema_validate.h"

namespace fak::grammar {
namespace {

using ojson = fak::ojson;

// zod 4's regexes (packages/zod/src/v4/core/regexes.ts), as .source puts them into "pattern".
const char* kZodEmail =
    R"(^(?!\.)(?!.*\.\.)([A-Za-z0-9_'+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$)";
const char* kZodUuid =
    R"(^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$)";
const char* kZodGuid =
    R"(^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$)";
const char* kZodCuid = R"(^[cC][^\s-]{8,}$)";
const char* kZodNanoid = R"(^[a-zA-Z0-9_-]{21}$)";
const char* kZodIpv4 =
    R"(^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$)";
const char* kZodE164 = R"(^\+(?:[0-9]){6,14}[0-9]$)";
const char* kZodDate =
    R"(^((\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|(02)-(0[1-9]|1\d|2[0-8])))$)";
const char* kZodTime = R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?$)";

std::string string_schema(const std::string& pattern, const std::string& extra = "") {
  return R"({"type":"string","pattern":)" + ojson(pattern).dump() + extra + "}";
}

void expect_cases(const std::string& schema, const std::vector<std::string>& accept,
                  const std::vector<std::string>& reject) {
  auto grammar = compile_json_schema_text(schema);
  for (const auto& text : accept)
    EXPECT_TRUE(grammar_matches(*grammar, text)) << schema << "\n  should accept: " << text;
  for (const auto& text : reject)
    EXPECT_FALSE(grammar_matches(*grammar, text)) << schema << "\n  should reject: " << text;
}

TEST(GrammarPattern, ZodFormats) {
  // z.email(): format and pattern; the lookaheads after ^ are intersections.
  expect_cases(string_schema(kZodEmail, R"(,"format":"email")"),
               {R"("ada@example.com")", R"("a.b@example.com")", R"("a_b+c@x-y.io")",
                R"("o'neil@mail.example.co.uk")", R"("a@b.co")"},
               {R"(".ada@example.com")", R"("a..b@example.com")", R"("ad.@x.io")",
                R"("ada@example")", R"("ada@ex.c")", R"("ada@-x.io")", R"("ada example@x.io")",
                R"("ada@example.com ")", R"("")"});
  expect_cases(
      string_schema(kZodUuid, R"(,"format":"uuid")"),
      {R"("123e4567-e89b-12d3-a456-426614174000")", R"("00000000-0000-0000-0000-000000000000")",
       R"("123E4567-E89B-72D3-B456-426614174000")"},
      {R"("123e4567-e89b-02d3-a456-426614174000")", R"("123e4567-e89b-12d3-c456-426614174000")",
       R"("123e4567-e89b-12d3-a456-42661417400")", R"("123e4567e89b12d3a456426614174000")",
       R"("{123e4567-e89b-12d3-a456-426614174000}")"});
  expect_cases(string_schema(kZodGuid), {R"("ffffffff-ffff-ffff-ffff-ffffffffffff")"},
               {R"("gfffffff-ffff-ffff-ffff-ffffffffffff")"});
  expect_cases(
      string_schema(kZodCuid), {R"("cjld2cjxh0000qzrmn831i7rn")", R"("C12345678")"},
      {R"("c1234567")", R"("cjld2cjxh-000")", R"("cjld2cjx h0000")", R"("xjld2cjxh0000")"});
  expect_cases(string_schema(kZodNanoid), {R"("V1StGXR8_Z5jdHi6B-myT")"},
               {R"("V1StGXR8_Z5jdHi6B-my")", R"("V1StGXR8_Z5jdHi6B-myT!")"});
  expect_cases(string_schema(kZodIpv4),
               {R"("192.168.0.1")", R"("255.255.255.255")", R"("0.0.0.0")"},
               {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")", R"("1.2.3.4.")"});
  expect_cases(string_schema(kZodE164), {R"("+14155552671")"}, {R"("14155552671")", R"("+1415")"});
  expect_cases(string_schema(kZodDate), {R"("2024-02-29")", R"("2023-12-31")", R"("2000-02-29")"},
               {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")"});
  expect_cases(string_schema(kZodTime), {R"("23:59:59")", R"("00:00:00.123")"},
               {R"("24:00:00")", R"("12:60:00")", R"("12:00:00.")"});
  // z.string().regex(...) together with .min()/.max()
  expect_cases(string_schema("^[a-z]+$", R"(,"minLength":2,"maxLength":4)"),
               {R"("ab")", R"("abcd")"}, {R"("a")", R"("abcde")", R"("ab1")", R"("")"});
}

TEST(GrammarPattern, TheValueIsMatchedNotItsJsonSpelling) {
  // A quote and a backslash are in the value once; in the JSON text they are escaped.
  expect_cases(string_schema(R"(^a"b\\c$)"), {R"("a\"b\\c")"},
               {R"("a"b\c")", R"("a\u0022b\\c")", R"("a\"b\\\\c")"});
  expect_cases(string_schema(R"(^\d+$)"), {R"("123")"}, {R"("\u0031")", R"("12a")"});
  // Control characters: the short escapes, else \u00XX in either case; never raw.
  expect_cases(string_schema(R"(^[\x00-\x1f]+$)"),
               {R"("\n\t\r\b\f")", R"("\u0001\u001f\u001F\u000b")"},
               {"\"\x01\"", R"("\u000a")", R"("\u0008")", R"("x")"});
  // One spelling for everything else: itself.
  expect_cases(string_schema("^/\xC3\xA9$"), {"\"/\xC3\xA9\""}, {R"("\/é")", R"("/\u00e9")"});
  // The pattern \\ means one backslash in the value, written \\ in JSON.
  expect_cases(string_schema(R"(^\\+$)"), {R"("\\")", R"("\\\\")"}, {R"("\")", R"("")"});
}

TEST(GrammarPattern, EcmaScriptSemantics) {
  // No anchors: the match may be anywhere (search, as RegExp.test does).
  expect_cases(string_schema("ab"), {R"("ab")", R"("xxaby")", R"("\nab\n")"},
               {R"("a b")", R"("")"});
  expect_cases(string_schema("^ab"), {R"("abc")"}, {R"("xab")"});
  expect_cases(string_schema("ab$"), {R"("xab")"}, {R"("abx")"});
  expect_cases(string_schema("^a$|b"), {R"("a")", R"("xbx")"}, {R"("ax")"});
  // `.` is anything but a line terminator; a code point, not a byte or a UTF-16 unit.
  expect_cases(string_schema("^.{2}$"), {R"("ab")", "\"\xC3\xA9\xF0\x9F\x98\x80\"", R"("\t ")"},
               {R"("a\n")", R"("\r\r")", "\"a\xE2\x80\xA8\"", "\"\xF0\x9F\x98\x80\""});
  // \s is Unicode white space (no-break space, U+2028, BOM); \d and \w are ASCII.
  expect_cases(string_schema(R"(^\s+$)"), {R"(" \t\n")", "\"\xC2\xA0\xE2\x80\xA8\xEF\xBB\xBF\""},
               {R"("x")", R"("")"});
  expect_cases(string_schema(R"(^\w\d$)"), {R"("_1")", R"("a9")"},
               {"\"\xC3\xA9"
                "1\"",
                R"("a٣")"});
  // Classes: ranges, negation, escapes inside, [] (nothing) and [^] (anything).
  expect_cases(string_schema(R"(^[^a-c\d]$)"), {R"("d")", "\"\xE4\xB8\xAD\"", R"("\n")"},
               {R"("a")", R"("5")", R"("")"});
  expect_cases(string_schema(R"(^[\w.-]+@[^]$)"), {R"("a.b-c@\n")"}, {R"("a b@x")"});
  expect_cases(string_schema(R"(^a[]?$)"), {R"("a")"}, {R"("ab")"});
  expect_cases(string_schema(R"(^\u{1F600}\uD83D\uDE00\x41\u0042$)"),
               {"\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80"
                "AB\""},
               {R"("AB")"});
  expect_cases(string_schema(R"(^(?:a|bc){2,3}(?<tail>x)?$)"),
               {R"("aa")", R"("abca")", R"("bcbcbcx")"}, {R"("a")", R"("aaaa")", R"("bcx")"});
}

TEST(GrammarPattern, LengthsTogetherWithAPattern) {
  expect_cases(string_schema("^(ab)+$", R"(,"minLength":3,"maxLength":6)"),
               {R"("abab")", R"("ababab")"}, {R"("ab")", R"("abababab")", R"("aba")"});
  expect_cases(string_schema("^.*$", R"(,"maxLength":2)"),
               {R"("")", "\"\xF0\x9F\x98\x80\xC3\xA9\"", R"("\"\\")"}, {R"("abc")"});
  // Unanchored with lengths: the match plus whatever surrounds it must fit.
  expect_cases(string_schema("x", R"(,"minLength":2,"maxLength":3)"), {R"("xa")", R"("axa")"},
               {R"("x")", R"("aaaa")", R"("aaax")", R"("ab")"});
  // zod's .email().max(255): the same pattern, counted.
  std::string local(250, 'a');
  expect_cases(string_schema(kZodEmail, R"(,"maxLength":255)"), {"\"" + local + "@b.co\""},
               {"\"" + local + "a@b.co\""});
}

TEST(GrammarPattern, EnumValuesMustMatch) {
  expect_cases(R"({"enum":["ab","cd","a\"b",1],"pattern":"^[a-c\"]+$"})",
               {R"("ab")", R"("a\"b")", "1"}, {R"("cd")"});
}

std::string error_of(const std::string& schema, const SchemaOptions& options = {}) {
  try {
    compile_json_schema_text(schema, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarPattern, RefusedPatternsSayWhy) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "lookbehind"},
      {"a(?=b)", "lookahead is only supported right after a leading '^'"},
      {"^a(?!b)", "lookahead is only supported right after a leading '^'"},
      {R"((a)\1)", "backreferences"},
      {R"((?<n>a)\k<n>)", "named backreferences"},
      {"a+?", "lazy quantifiers"},
      {"a{2,3}?", "lazy quantifiers"},
      {R"(\p{L}+)", "Unicode property escapes"},
      {R"(\bword\b)", "word boundary"},
      {"a^b", "'^' is only supported"},
      {"(^a)", "'^' is only supported"},
      {"a$b", "'$' is only supported"},
      {"(a$)", "'$' is only supported"},
      {"a{", "'{' that does not start a quantifier"},
      {"*a", "nothing to repeat"},
      {"a**", "nothing to repeat"},
      {"(ab", "missing ')'"},
      {"ab)", "unbalanced ')'"},
      {"[z-a]", "out of order"},
      {"a{3,2}", "out of order"},
      {"a{1001}", "above 1000"},
      {R"(\01)", "octal"},
      {R"(\q)", "unknown escape"},
      {R"([\d-z])", "class escape"},
      {R"(\uD800)", "lone surrogate"},
      {"^(a|b)*a(a|b){20}$", "too large"},
      {"(?i)abc", "unsupported group"},
  };
  for (const auto& [pattern, words] : refused) {
    const std::string schema =
        R"({"type":"object","properties":{"code":{"type":"string","pattern":)" +
        ojson(pattern).dump() + "}}}";
    const std::string e = error_of(schema);
    EXPECT_NE(e.find("'pattern'"), std::string::npos) << pattern << ": " << e;
    EXPECT_NE(e.find(words), std::string::npos) << pattern << ": " << e;
    EXPECT_NE(e.find("#/properties/code"), std::string::npos) << pattern << ": " << e;
    // Lenient mode skips the pattern and keeps the rest.
    auto lenient = compile_json_schema_text(schema, {.ignore_unsupported_keywords = true});
    EXPECT_TRUE(grammar_matches(*lenient, R"({"code":"anything"})")) << pattern;
  }
  EXPECT_NE(error_of(string_schema("^(ab)+$", R"(,"minLength":3,"maxLength":3)"))
                .find("no string matches it and minLength 3 and maxLength 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","pattern":5})").find("'pattern' must be a string"),
            std::string::npos);
}

// The referee: PCRE2 through the validator, on a decoded value.
bool pcre_says(const ojson& schema, const std::string& value) {
  return schema_violation(ojson(value), schema).empty();
}

// Every string over a small alphabet up to a length: the grammar (on the string's JSON text)
// and PCRE2 (on the string) agree both ways.
TEST(GrammarPattern, AllShortStringsAgreeWithPcre2) {
  const std::vector<std::string> alphabet = {"a", "b", ".", "\n", "\"", "\xC3\xA9"};
  const char* patterns[] = {
      "^(ab|a)*b?$",    "a.b",
      "^[^a\"]*$",      R"(^(?!a)(?!.*\.\.)[a.\n"]*$)",
      "b$|^a",          R"(^(?=.*b)[ab]{2,3}$)",
      R"(^[\s\S]?\.$)", "^(a|ab)(c|bcd)?$",
      "é.|\"",
  };
  for (const char* pattern : patterns) {
    for (const char* lengths : {"", R"(,"minLength":2,"maxLength":3)"}) {
      const ojson schema = ojson::parse(string_schema(pattern, lengths));
      auto grammar = compile_json_schema(schema);
      std::vector<std::string> layer = {""};
      int agreed = 0, matched = 0;
      for (int length = 0; length <= 5; ++length) {
        std::vector<std::string> longer;
        for (const std::string& s : layer) {
          const bool expected = pcre_says(schema, s);
          ASSERT_EQ(grammar_matches(*grammar, ojson(s).dump()), expected)
              << pattern << lengths << " on " << ojson(s).dump();
          ++agreed;
          matched += expected;
          for (const auto& c : alphabet) longer.push_back(s + c);
        }
        layer = std::move(longer);
      }
      EXPECT_GT(matched, 0) << pattern << lengths;
      EXPECT_GT(agreed - matched, 0) << pattern << lengths;
    }
  }
}

// Random walks through the string automaton's bytes (uniform at first, then only bytes that get
// closer to the closing quote, so every walk ends): every string so made is valid JSON, the
// grammar takes it, and PCRE2 says it matches.
TEST(GrammarPattern, RandomWalksMatchForPcre2) {
  const std::vector<std::string> patterns = {kZodEmail,
                                             kZodUuid,
                                             kZodCuid,
                                             kZodIpv4,
                                             kZodDate,
                                             kZodTime,
                                             "ab",
                                             "^[^\"\\\\]{3,}x$",
                                             R"(^(\w+\s?)+[.!?]$)",
                                             R"(^[\x00-\x1f"\\]{1,4}$)",
                                             "^.{0,6}$|^z"};
  std::mt19937 rng(5);
  for (const std::string& pattern : patterns) {
    for (const char* lengths : {"", R"(,"minLength":1,"maxLength":12)"}) {
      const ojson schema = ojson::parse(string_schema(pattern, lengths));
      std::shared_ptr<const Grammar> grammar;
      try {
        grammar = compile_json_schema(schema);
      } catch (const Error& e) {
        continue;  // no string of that pattern fits the lengths (uuid)
      }
      const Node& root = grammar->nodes[grammar->nodes[grammar->root].leaves.at(0)];
      ASSERT_EQ(root.kind, NodeKind::kAutomaton);
      const ByteDfa& dfa = *root.automaton;
      // Bytes to the end from each state, backwards from the accepting ones.
      std::vector<uint32_t> to_end(dfa.size(), ByteDfa::kNone);
      for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t st = 0; st < dfa.size(); ++st) {
          uint32_t best = dfa.accepting[st] ? 0 : ByteDfa::kNone;
          for (int b = 0; b < 256; ++b) {
            const uint32_t next = dfa.step(st, uint8_t(b));
            if (next != ByteDfa::kNone && to_end[next] != ByteDfa::kNone)
              best = std::min(best, to_end[next] + 1);
          }
          if (best < to_end[st]) {
            to_end[st] = best;
            changed = true;
          }
        }
      }
      for (int walk = 0; walk < 40; ++walk) {
        const size_t wander = rng() % 40;
        std::string text;
        uint32_t st = 0;
        while (!dfa.ends[st]) {
          ASSERT_NE(to_end[st], ByteDfa::kNone) << pattern << " dead end after " << text;
          std::vector<int> bytes;
          for (int b = 0; b < 256; ++b) {
            const uint32_t next = dfa.step(st, uint8_t(b));
            if (next != ByteDfa::kNone && (text.size() < wander || to_end[next] < to_end[st]))
              bytes.push_back(b);
          }
          const int b = bytes[rng() % bytes.size()];
          text += char(b);
          st = dfa.step(st, uint8_t(b));
        }
        EXPECT_TRUE(grammar_matches(*grammar, text)) << text;
        ojson value;
        ASSERT_NO_THROW(value = ojson::parse(text)) << text;
        EXPECT_EQ(schema_violation(value, schema), "") << pattern << lengths << ": " << text;
      }
    }
  }
}

}  // namespace
}  // namespace fak::grammar
