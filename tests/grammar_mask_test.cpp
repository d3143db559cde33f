// Token masks on the real Qwen vocabulary (151k tokens), against independent references:
// - exactness: the trie-walk mask equals a brute-force mask (every token's bytes tried on a copy
//   of the state) for states inside strings, escapes, UTF-8 characters, keys, numbers, tool calls,
//   bounded numbers and strings with a pattern;
// - random generation: tokens sampled uniformly (seeded) among the allowed ones until a stop id,
//   and the text must parse as JSON (nlohmann) and pass the separate validator
//   (schema_validate.h) in strict mode, keys in schema order; sampled forbidden tokens must
//   really be rejected by the byte machine;
// - tool calls: the text is <tool_call> blocks naming a listed tool with valid arguments.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "tokenizer_fixtures.h"

namespace fak::grammar {
namespace {

using ojson = fak::ojson;

const Tokenizer& qwen() {
  return test::qwen_tokenizer();
}

const std::shared_ptr<const TokenIndex>& qwen_index() {
  static const auto index = TokenIndex::build(qwen());
  return index;
}

int32_t eos() {
  static const int32_t id = *qwen().token_id("<|im_end|>");
  return id;
}

const std::vector<size_t>& token_lengths() {
  static const std::vector<size_t> lengths = [] {
    std::vector<size_t> out;
    for (int32_t id = 0; id < qwen().vocab_size(); ++id)
      out.push_back(qwen().token_bytes(id).size());
    return out;
  }();
  return lengths;
}

bool bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[uint32_t(id) >> 5] >> (uint32_t(id) & 31)) & 1u;
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id)
    if (bit(mask, id)) ids.push_back(id);
  return ids;
}

// Every token tried on its own copy of the state, by the byte machine alone (no trie).
std::vector<uint32_t> brute_force_mask(const GrammarMatcher& matcher) {
  const Tokenizer& tok = qwen();
  std::vector<uint32_t> mask(mask_words(tok.vocab_size()), 0);
  GrammarMatcher probe(matcher);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bool ok;
    if (tok.is_special(id)) {
      ok = id == eos() && matcher.is_complete();
    } else {
      const std::string bytes = tok.token_bytes(id);
      ok = !bytes.empty() && probe.advance_bytes(bytes);
      if (ok) probe = matcher;
    }
    if (ok) mask[uint32_t(id) >> 5] |= 1u << (uint32_t(id) & 31);
  }
  return mask;
}

void expect_exact_mask(const std::shared_ptr<const Grammar>& grammar, const std::string& prefix) {
  GrammarMatcher matcher(grammar, qwen_index(), {eos()});
  ASSERT_TRUE(matcher.advance_bytes(prefix)) << prefix;
  std::vector<uint32_t> mask;
  matcher.allowed_tokens(mask);
  const std::vector<uint32_t> expected = brute_force_mask(matcher);
  ASSERT_EQ(mask.size(), expected.size());
  size_t differences = 0, allowed = 0;
  for (int32_t id = 0; id < qwen().vocab_size(); ++id) {
    allowed += bit(expected, id);
    if (bit(mask, id) != bit(expected, id) && ++differences <= 5)
      ADD_FAILURE() << "after " << prefix << ": token " << id << " '" << qwen().token_bytes(id)
                    << "' trie says " << bit(mask, id) << ", brute force " << bit(expected, id);
  }
  EXPECT_EQ(differences, 0u) << prefix;
  EXPECT_GT(allowed, 0u) << prefix;
  // The cached path (a second call, same state) gives the same bits.
  std::vector<uint32_t> again;
  matcher.allowed_tokens(again);
  EXPECT_EQ(again, mask) << prefix;
}

const char* kPersonSchema = R"({"type":"object","properties":{
    "name":{"type":"string"},"age":{"type":"integer"},"score":{"type":"number"},
    "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3},
    "nick":{"type":"string","minLength":2,"maxLength":4},
    "kind":{"enum":["a","ab","b",12,null]}},"required":["name","age","kind"]})";

// Bounds and patterns, as zod writes them (uuid and email are zod 4's regexes).
const char* kBoundedSchema = R"({"type":"object","properties":{
    "n":{"type":"integer","minimum":1,"maximum":100},
    "x":{"type":"number","minimum":0,"exclusiveMaximum":1},
    "t":{"type":"number","minimum":-2.5,"maximum":12.75},
    "id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$"},
    "email":{"type":"string","format":"email","maxLength":40,"pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
    "code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},
    "note":{"type":"string","pattern":"o\"k","minLength":3,"maxLength":8}},
    "required":["n","x","id","email"]})";

TEST(GrammarMask, TrieWalkEqualsBruteForce) {
  auto person = compile_json_schema_text(kPersonSchema);
  for (const char* prefix : {"",
                             "{",
                             "{\"",
                             "{\"name\"",
                             "{\"name\":",
                             "{\"name\": ",
                             "{\"name\":\"",
                             "{\"name\":\"abc",
                             "{\"name\":\"a\\",
                             "{\"name\":\"a\\u00",
                             "{\"name\":\"a\\ud83d",
                             "{\"name\":\"\xE4",
                             "{\"name\":\"\xF0\x9F",
                             "{\"name\":\"x\",\"age\":12",
                             "{\"name\":\"x\",\"age\":-",
                             "{\"name\":\"x\",\"age\":0",
                             "{\"name\":\"x\",\"age\":1,\"score\":1.5e",
                             "{\"name\":\"x\",\"age\":1,\"tags\":[",
                             "{\"name\":\"x\",\"age\":1,\"tags\":[\"abcd",
                             "{\"name\":\"x\",\"age\":1,\"nick\":\"a",
                             "{\"name\":\"x\",\"age\":1,\"nick\":\"abc",
                             "{\"name\":\"x\",\"age\":1,\"kind\":\"a",
                             "{\"name\":\"x\",\"age\":1,\"kind\":1",
                             "{\"name\":\"x\",\"age\":1,\"kind\":null",
                             "{\"name\":\"x\",\"age\":1,\"kind\":null}",
                             "{\n  \"name\": \"x\",\n   "})
    expect_exact_mask(person, prefix);

  auto any_object = any_json_object_grammar();
  for (const char* prefix : {"", "{\"k\":", "{\"k\":[1,{\"z\":\"q", "{\"k\":tr", "{\"k\":[-0.5"})
    expect_exact_mask(any_object, prefix);

  auto calls = compile_tool_calls(ojson::parse(R"([
      {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}}},
      {"type":"function","function":{"name":"get_time","parameters":{"type":"object",
        "properties":{"zone":{"type":"string","maxLength":8}}}}}])"));
  for (const char* prefix :
       {"", "<tool_", "<tool_call>\n{\"name\": \"get_",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}"})
    expect_exact_mask(calls, prefix);

  // A number at the root: complete (stop id allowed) and continuable at once.
  expect_exact_mask(compile_json_schema_text(R"({"type":"number"})"), "12");
}

TEST(GrammarMask, BoundedNumbersAndPatternsEqualBruteForce) {
  auto bounded = compile_json_schema_text(kBoundedSchema);
  const std::string uuid = "{\"n\":7,\"x\":0.5,\"id\":\"";
  const std::string email = uuid + "123e4567-e89b-12d3-a456-426614174000\",\"email\":\"";
  const std::string rest = email + "ada@example.com\",";
  for (const std::string& prefix : {std::string("{\"n\":"),
                                    std::string("{\"n\":1"),
                                    std::string("{\"n\":10"),
                                    std::string("{\"n\":100"),
                                    std::string("{\"n\":5,\"x\":"),
                                    std::string("{\"n\":5,\"x\":0."),
                                    std::string("{\"n\":5,\"x\":0.99"),
                                    std::string("{\"n\":5,\"x\":0.5,\"t\":-"),
                                    std::string("{\"n\":5,\"x\":0.5,\"t\":12.7"),
                                    std::string("{\"n\":5,\"x\":0.5,\"t\":-2.5"),
                                    uuid,
                                    uuid + "123e4567-e8",
                                    uuid + "123e4567-e89b-12d3-a456-42661417400",
                                    email,
                                    email + "ada",
                                    email + "ada@ex",
                                    email + "ada@example.c",
                                    rest + "\"code\":\"A",
                                    rest + "\"code\":\"AB-12",
                                    rest + "\"note\":\"",
                                    rest + "\"note\":\"o\\\"",
                                    rest + "\"note\":\"xo\\\"k"})
    expect_exact_mask(bounded, prefix);
  // Another grammar with the same pattern and bounds at other nodes: it shares the automata, and
  // the parts the first one cached (keyed by automaton, not by node) must fit it as well.
  auto other = compile_json_schema_text(R"({"type":"object","properties":{"pad":{"type":"null"},
      "id":{"type":"string","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$"},
      "k":{"type":"array","items":{"type":"integer","minimum":1,"maximum":100}}}})");
  for (const std::string& prefix :
       {std::string("{\"pad\":null,\"id\":\"123e4567-e8"), std::string("{\"k\":[1"),
        std::string("{\"k\":[10"), std::string("{\"k\":[100")})
    expect_exact_mask(other, prefix);
  // At the root: a bounded integer that may end or go on.
  expect_exact_mask(compile_json_schema_text(R"({"type":"integer","minimum":-50,"maximum":5000})"),
                    "-4");
}

// Fields of schemas with "properties" must come in schema order (the grammar's policy).
void expect_schema_order(const ojson& value, const ojson& schema) {
  if (!value.is_object() || !schema.is_object() || !schema.contains("properties")) return;
  const ojson& properties = schema["properties"];
  std::vector<std::string> order;
  for (const auto& [key, sub] : properties.items()) order.push_back(key);
  size_t last = 0;
  for (const auto& [key, member] : value.items()) {
    auto it = std::find(order.begin(), order.end(), key);
    ASSERT_NE(it, order.end()) << key;
    ASSERT_GE(size_t(it - order.begin()), last) << value.dump();
    last = size_t(it - order.begin());
    expect_schema_order(member, properties[key]);
  }
}

// Generates by uniform sampling among allowed tokens (half of the steps among the allowed tokens
// of 1-2 bytes only, which close strings and containers often enough to finish). Returns the text,
// or fails the test if generation could not finish within max_steps.
std::string random_generation(const std::shared_ptr<const Grammar>& grammar, uint32_t seed,
                              int max_steps = 3000) {
  const Tokenizer& tok = qwen();
  GrammarMatcher matcher(grammar, qwen_index(), {eos()});
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask;
  std::string text;
  for (int step = 0; step < max_steps; ++step) {
    matcher.allowed_tokens(mask);
    const std::vector<int32_t> allowed = allowed_ids(mask, tok.vocab_size());
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after: " << text;
      return text;
    }
    // Forbidden tokens are dead ends for the byte machine too (a sample of them).
    for (int probe = 0; probe < 8; ++probe) {
      const auto id = int32_t(rng() % uint32_t(tok.vocab_size()));
      if (bit(mask, id)) continue;
      GrammarMatcher copy(matcher);
      EXPECT_FALSE(copy.advance_token(id))
          << "token " << id << " forbidden but taken after " << text;
    }
    std::vector<int32_t> short_ones;
    if (rng() % 2) {
      for (int32_t id : allowed)
        if (id == eos() || token_lengths()[size_t(id)] <= 2) short_ones.push_back(id);
    }
    const auto& pool = short_ones.empty() ? allowed : short_ones;
    const int32_t id = pool[rng() % pool.size()];
    if (!matcher.advance_token(id)) {
      ADD_FAILURE() << "allowed token " << id << " refused after " << text;
      return text;
    }
    if (id == eos()) {
      EXPECT_TRUE(matcher.is_terminated());
      return text;
    }
    text += tok.token_bytes(id);
  }
  ADD_FAILURE() << "generation did not finish in " << max_steps << " steps: " << text;
  return text;
}

const char* kSchemas[] = {
    kPersonSchema,
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},
        "ok":{"type":"boolean"},"note":{"type":["string","null"],"maxLength":12}},
        "required":["id","ok"],"additionalProperties":false},"minItems":1,"maxItems":3})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},
        "type":"object","properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"]})",
    R"({"anyOf":[{"type":"object","properties":{"k":{"type":"string","maxLength":5},"a":{"type":"integer"}},
        "required":["k","a"]},{"type":"object","properties":{"k":{"type":"string","maxLength":5},
        "b":{"enum":["x","y"]}},"required":["k","b"]}]})",
    R"({"type":"object","properties":{"text":{"type":"string","minLength":3,"maxLength":10},
        "n":{"type":"number"},"e":{"const":"fixed"}},"required":["text","n","e"]})",
    R"({"type":"array","items":{"type":"array","items":{"type":["integer","boolean","null"]},
        "maxItems":3},"minItems":2,"maxItems":3})",
    R"({"type":"object","properties":{"opt1":{"type":"string","maxLength":3},"opt2":{"enum":[1,12,123,"1"]},
        "opt3":{"type":"object","additionalProperties":{"type":"integer"}}}})",
    R"({"oneOf":[{"type":"number"},{"type":"string","maxLength":4},{"type":"array","maxItems":2,
        "items":{"type":"string","minLength":1,"maxLength":2}}]})",
    kBoundedSchema,
    // zod: z.object({ page: z.number().int().positive(), size: z.number().int().min(1).max(50),
    //   ratio: z.number().nonnegative().lte(1), tag: z.string().regex(/^[a-z]+(-[a-z]+)*$/) })
    R"({"type":"object","properties":{
        "page":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991},
        "size":{"type":"integer","minimum":1,"maximum":50},
        "ratio":{"type":"number","minimum":0,"maximum":1},
        "tag":{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":12}},
        "required":["page","size","ratio","tag"],"additionalProperties":false})",
};

TEST(GrammarMask, RandomGenerationsAreValidJson) {
  int generations = 0;
  for (const char* schema_text : kSchemas) {
    const ojson schema = ojson::parse(schema_text);
    auto grammar = compile_json_schema(schema);
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const std::string text = random_generation(grammar, seed * 7919);
      ojson value;
      try {
        value = ojson::parse(text);
      } catch (const nlohmann::json::exception& e) {
        ADD_FAILURE() << "not JSON (" << e.what() << "): " << text;
        continue;
      }
      EXPECT_EQ(schema_violation(value, schema, {.strict = true}), "") << text;
      expect_schema_order(value, schema);
      ++generations;
    }
  }
  EXPECT_EQ(generations, int(10 * std::size(kSchemas)));
}

TEST(GrammarMask, RandomJsonObjects) {
  auto grammar = any_json_object_grammar();
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const std::string text = random_generation(grammar, seed);
    ojson value;
    ASSERT_NO_THROW(value = ojson::parse(text)) << text;
    EXPECT_TRUE(value.is_object()) << text;
  }
}

TEST(GrammarMask, RandomToolCalls) {
  const ojson tools = ojson::parse(R"([
      {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string","maxLength":20},"unit":{"enum":["c","f"]}},
        "required":["city"],"additionalProperties":false}}},
      {"type":"function","function":{"name":"get_time","parameters":{"type":"object",
        "properties":{"zone":{"type":"string","maxLength":8}}}}},
      {"type":"function","function":{"name":"add","parameters":{"type":"object",
        "properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}])");
  ToolCallOptions options;
  options.max_calls = 2;
  auto grammar = compile_tool_calls(tools, options);
  const std::string open = "<tool_call>\n", close = "\n</tool_call>";
  std::set<std::string> names_seen;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const std::string text = random_generation(grammar, seed * 31);
    size_t pos = 0, blocks = 0;
    while (pos < text.size()) {
      if (blocks > 0) {
        ASSERT_EQ(text[pos], '\n') << text;
        ++pos;
      }
      ASSERT_EQ(text.compare(pos, open.size(), open), 0) << text;
      const size_t end = text.find(close, pos);
      ASSERT_NE(end, std::string::npos) << text;
      const std::string body = text.substr(pos + open.size(), end - pos - open.size());
      ojson call;
      ASSERT_NO_THROW(call = ojson::parse(body)) << body;
      ASSERT_TRUE(call.is_object() && call.size() == 2 && call.contains("name") &&
                  call.contains("arguments"))
          << body;
      const ojson* parameters = nullptr;
      for (const auto& tool : tools)
        if (tool["function"]["name"] == call["name"]) parameters = &tool["function"]["parameters"];
      ASSERT_NE(parameters, nullptr) << body;
      EXPECT_EQ(schema_violation(call["arguments"], *parameters, {.strict = true}), "") << body;
      names_seen.insert(call["name"].get<std::string>());
      pos = end + close.size();
      ++blocks;
    }
    EXPECT_GE(blocks, 1u);
    EXPECT_LE(blocks, 2u);
  }
  EXPECT_GE(names_seen.size(), 2u);  // the sampler really chooses among the tools
}

TEST(GrammarMask, StopIdOnlyWhenCompleteAndSpecialTokensNever) {
  auto grammar =
      compile_json_schema_text(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  GrammarMatcher matcher(grammar, qwen_index(), {eos()});
  std::vector<uint32_t> mask;
  matcher.allowed_tokens(mask);
  EXPECT_FALSE(bit(mask, eos()));
  for (int32_t id = 0; id < qwen().vocab_size(); ++id)
    if (qwen().is_special(id)) {
      EXPECT_FALSE(bit(mask, id)) << id;
    }
  EXPECT_FALSE(matcher.advance_token(eos()));
  ASSERT_TRUE(matcher.advance_bytes("{\"a\":1}"));
  EXPECT_TRUE(matcher.is_complete());
  EXPECT_FALSE(matcher.can_continue());
  matcher.allowed_tokens(mask);
  EXPECT_EQ(allowed_ids(mask, qwen().vocab_size()), std::vector<int32_t>{eos()});
  EXPECT_TRUE(matcher.advance_token(eos()));
  EXPECT_TRUE(matcher.is_terminated());
  matcher.allowed_tokens(mask);
  EXPECT_TRUE(allowed_ids(mask, qwen().vocab_size()).empty());
  matcher.reset();
  EXPECT_FALSE(matcher.is_complete());
  EXPECT_TRUE(matcher.can_continue());
}

// A stop id that is also an ordinary token ("\n" for a model told to stop at a newline) means
// stop: allowed only when complete, even where the grammar would take its bytes.
TEST(GrammarMask, StopIdThatIsAlsoText) {
  const int32_t newline = qwen().encode("\n")[0];
  auto grammar =
      compile_json_schema_text(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  GrammarMatcher matcher(grammar, qwen_index(), {newline});
  ASSERT_TRUE(matcher.advance_bytes("{"));
  std::vector<uint32_t> mask;
  matcher.allowed_tokens(mask);
  EXPECT_FALSE(bit(mask, newline));
  EXPECT_FALSE(matcher.advance_token(newline));
  ASSERT_TRUE(matcher.advance_bytes("}"));
  matcher.allowed_tokens(mask);
  EXPECT_TRUE(bit(mask, newline));
  EXPECT_TRUE(matcher.advance_token(newline));
  EXPECT_TRUE(matcher.is_terminated());
}

TEST(GrammarMask, ApplyMaskSetsDisallowedToMinusInfinity) {
  std::vector<uint32_t> mask = {0b1010u};
  std::vector<float> logits = {1, 2, 3, 4, 5};
  std::vector<float> padded(40, 1.0f);  // 8 logits past the mask's 32 bits (a padded vocab)
  apply_token_mask(logits, mask);
  apply_token_mask(padded, mask);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(logits, (std::vector<float>{-inf, 2, -inf, 4, -inf}));
  for (size_t i = 0; i < padded.size(); ++i)
    EXPECT_EQ(padded[i], (i == 1 || i == 3) ? 1.0f : -inf) << i;
}

// Matchers of different sequences share the TokenIndex's cache from several threads.
TEST(GrammarMask, ThreadsShareTheIndex) {
  auto grammar = compile_json_schema_text(kPersonSchema);
  const std::vector<std::string> prefixes = {"{\"name\":\"q", "{\"name\":\"x\",\"age\":3",
                                             "{\"name\":\"x\",\"age\":1,\"tags\":[\"ab"};
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& p : prefixes) {
    GrammarMatcher m(grammar, qwen_index(), {eos()});
    ASSERT_TRUE(m.advance_bytes(p));
    expected.push_back(brute_force_mask(m));
  }
  auto fresh_grammar = compile_json_schema_text(kPersonSchema);  // new uid: nothing cached for it
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < prefixes.size(); ++i) {
          GrammarMatcher m(fresh_grammar, qwen_index(), {eos()});
          m.advance_bytes(prefixes[(i + size_t(t)) % prefixes.size()]);
          std::vector<uint32_t> mask;
          m.allowed_tokens(mask);
          good += mask == expected[(i + size_t(t)) % prefixes.size()];
        }
      }
      ok[size_t(t)] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[size_t(t)], 9) << "thread " << t;
}

}  // namespace
}  // namespace fak::grammar
