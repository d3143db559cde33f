// Grammars that write special tokens (harmony's call header: NAME <|constrain|>json<|message|>),
// on the real Qwen vocabulary with harmony's markers added as special tokens:
// - where the grammar names a special token, the mask holds that token's id and no ordinary
//   token, so the marker can be neither spelled out in text nor started by a raw byte;
// - a token holding a byte UTF-8 never has (0xFF, the grammar's own marker byte) is never allowed;
// - sampling uniformly among the allowed tokens until <|call|> always gives a listed name, the
//   header with its two special tokens, and arguments valid under that tool's schema;
// - a tokenizer without the special token is refused, naming it.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "tokenizer_fixtures.h"

namespace fak::grammar {
namespace {

using ojson = fak::ojson;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "get_time"}}
])");

// The Qwen tokenizer with harmony's markers as special tokens.
const Tokenizer& harmony_qwen() {
  static const Tokenizer tokenizer = [] {
    ojson tok = ojson::parse(test::read_file(test::data_path("tokenizer/qwen/tokenizer.json")));
    test::add_tokens(tok, 151665, {"<|constrain|>", "<|message|>", "<|call|>"}, /*special=*/true);
    return Tokenizer::from_json(
        tok.dump(), test::read_file(test::data_path("tokenizer/qwen/tokenizer_config.json")));
  }();
  return tokenizer;
}

const std::shared_ptr<const TokenIndex>& index() {
  static const auto built = TokenIndex::build(harmony_qwen());
  return built;
}

int32_t id_of(const char* text) {
  return *harmony_qwen().token_id(text);
}

bool bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[uint32_t(id) >> 5] >> (uint32_t(id) & 31)) & 1u;
}

std::vector<int32_t> allowed(const GrammarMatcher& m) {
  std::vector<uint32_t> mask;
  m.allowed_tokens(mask);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < harmony_qwen().vocab_size(); ++id)
    if (bit(mask, id)) ids.push_back(id);
  return ids;
}

void take_text(GrammarMatcher& m, const std::string& text) {
  for (int32_t id : harmony_qwen().encode(text)) ASSERT_TRUE(m.advance_token(id)) << text;
}

TEST(GrammarSpecialTokens, OnlyTheSpecialTokenWritesIt) {
  const auto grammar = compile_harmony_tool_calls(kTools);
  GrammarMatcher m(grammar, index(), {id_of("<|call|>")});
  take_text(m, "get_time ");
  // Here the grammar wants <|constrain|>: its id alone, not "<" nor any byte token.
  EXPECT_EQ(allowed(m), std::vector<int32_t>{id_of("<|constrain|>")});
  {
    GrammarMatcher spelled = m;
    EXPECT_FALSE(spelled.advance_bytes("<|constrain|>"));
    const std::vector<int32_t> ids = harmony_qwen().encode_literal("<|constrain|>");
    EXPECT_FALSE(spelled.advance_token(ids.front()));
  }
  EXPECT_FALSE(m.is_complete());
  ASSERT_TRUE(m.advance_token(id_of("<|constrain|>")));
  take_text(m, "json");
  EXPECT_EQ(allowed(m), std::vector<int32_t>{id_of("<|message|>")});
  ASSERT_TRUE(m.advance_token(id_of("<|message|>")));
  EXPECT_FALSE(m.advance_token(id_of("<|message|>")));  // once, where the grammar has it
  take_text(m, "{}");
  EXPECT_TRUE(m.is_complete());
  EXPECT_EQ(allowed(m), std::vector<int32_t>{id_of("<|call|>")});
  EXPECT_TRUE(m.advance_token(id_of("<|call|>")));
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarSpecialTokens, BytesOutsideUtf8AreNeverAllowed) {
  // Qwen's byte-level vocabulary has a token for the byte 0xFF: no grammar state allows it.
  int32_t byte_ff = -1;
  for (int32_t id = 0; id < harmony_qwen().vocab_size(); ++id)
    if (harmony_qwen().token_bytes(id) == "\xFF") byte_ff = id;
  ASSERT_GE(byte_ff, 0);
  const auto grammar = compile_harmony_tool_calls(kTools);
  GrammarMatcher m(grammar, index(), {id_of("<|call|>")});
  for (const char* text : {"", "get_weather", "get_weather "}) {
    GrammarMatcher at = m;
    take_text(at, text);
    const std::vector<int32_t> ids = allowed(at);
    EXPECT_EQ(std::find(ids.begin(), ids.end(), byte_ff), ids.end()) << text;
    EXPECT_FALSE(at.advance_token(byte_ff)) << text;
  }
  // Nor inside a free JSON string, where any character goes.
  GrammarMatcher s(compile_json_schema(ojson::parse(R"({"type": "string"})")), index(), {0});
  take_text(s, "\"abc");
  const std::vector<int32_t> ids = allowed(s);
  EXPECT_EQ(std::find(ids.begin(), ids.end(), byte_ff), ids.end());
  EXPECT_GT(ids.size(), 100000u);
}

TEST(GrammarSpecialTokens, SampledCallsAreHarmonyCalls) {
  const auto grammar = compile_harmony_tool_calls(kTools);
  const int32_t call = id_of("<|call|>");
  std::mt19937 rng(7);
  std::set<std::string> names;
  for (int run = 0; run < 40; ++run) {
    GrammarMatcher m(grammar, index(), {call});
    std::vector<int32_t> out;
    for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
      const std::vector<int32_t> ids = allowed(m);
      ASSERT_FALSE(ids.empty()) << run;
      // Half the time the stop id when allowed, so replies stay short.
      int32_t pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      if (std::find(ids.begin(), ids.end(), call) != ids.end() && rng() % 2) pick = call;
      ASSERT_TRUE(m.advance_token(pick));
      if (pick != call) out.push_back(pick);
    }
    ASSERT_TRUE(m.is_terminated()) << run;
    const std::string text = harmony_qwen().decode(out);
    const size_t space = text.find(' ');
    ASSERT_NE(space, std::string::npos) << text;
    const std::string name = text.substr(0, space);
    const std::string header = " <|constrain|>json<|message|>";
    ASSERT_EQ(text.compare(space, header.size(), header), 0) << text;
    const ojson args = ojson::parse(text.substr(space + header.size()));
    const ojson* schema = nullptr;
    for (const ojson& t : kTools)
      if (t["function"]["name"] == name) schema = &t["function"];
    ASSERT_NE(schema, nullptr) << text;
    const ojson params = schema->contains("parameters")
                             ? (*schema)["parameters"]
                             : ojson::parse(R"({"type": "object", "additionalProperties": false})");
    EXPECT_EQ(schema_violation(args, params, {.strict = true}), "") << text;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 2u);  // both tools chosen at some point
}

TEST(GrammarSpecialTokens, ATokenizerWithoutTheSpecialTokenIsRefused) {
  const auto grammar = compile_harmony_tool_calls(kTools);
  const auto plain = TokenIndex::build(test::qwen_tokenizer());
  try {
    GrammarMatcher m(grammar, plain, {0});
    FAIL() << "a grammar writing <|constrain|> over a vocabulary without it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no special token '<|constrain|>'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fak::grammar
