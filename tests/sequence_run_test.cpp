// SequenceRun (runtime/sequence_run.h), the one decode loop: speculative decoding under the rules
// that used to switch it off — a JSON schema's grammar, a thinking model's reasoning budget —
// gives plain decoding's tokens, finish reason, session and logits bits, in fewer forward calls;
// and the run's limits (max_tokens, a stop id, a completed grammar) end it where plain decoding
// ends.
#include "runtime/sequence_run.h"

#include <gtest/gtest.h>

#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"
#include "runtime/generate.h"
#include "runtime/model_cache.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak {
namespace {

struct Fixture {
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  explicit Fixture(const std::filesystem::path& dir)
      : model(Model::load(dir)), cache(make_kv_cache(*model)) {}
  Session prompted(const std::string& text) const {
    Session s(model, cache);
    s.append(model->tokenizer()->encode(text));
    return s;
  }
};

// Plain and speculative generation from the same prompt: everything must match.
GenerateResult expect_same(const Fixture& f, const std::string& prompt, GenerateOptions o,
                           const std::string& what, GenerateResult* plain_out = nullptr) {
  Session plain = f.prompted(prompt), spec = f.prompted(prompt);
  const GenerateResult a = generate(plain, o);
  o.drafter = ngram_drafter({.max_draft = 8, .max_ngram = 4});
  const GenerateResult b = generate(spec, o);
  EXPECT_EQ(a.ids, b.ids) << what;
  EXPECT_EQ(a.finish_reason, b.finish_reason) << what;
  EXPECT_EQ(plain.tokens(), spec.tokens()) << what;
  EXPECT_TRUE(test::bit_equal(plain.logits(), spec.logits())) << what;
  if (plain_out) *plain_out = a;
  return b;
}

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "body": {"type": "string"}}, "required": ["name", "body"]})";

// A prompt that shows the object the model is about to write twice: prompt lookup drafts it.
std::string schema_prompt() {
  const std::string code = "def add(a, b):\\n    return a + b\\n";
  const std::string obj = "{\"name\": \"add\", \"body\": \"" + code + "\"}\n";
  return "# tools.json\n" + obj + obj + obj;
}

TEST(SequenceRun, SpeculationUnderASchemaIsPlainDecodingInFewerCalls) {
  const Fixture f(test::source_path("models/pycoder-6m"));
  const ojson schema = ojson::parse(kSchema);
  for (float temp : {0.0f, 0.8f}) {
    GenerateOptions o;
    o.max_tokens = 80;
    o.sampling.temperature = temp;
    o.sampling.seed = 5;
    o.stop_ids = model_stop_ids(*f.model);
    o.grammar = grammar::compile_json_schema(schema);
    GenerateResult plain;
    const GenerateResult spec =
        expect_same(f, schema_prompt(), o, "temperature " + std::to_string(temp), &plain);
    // The reply is the schema's: a whole object that validates.
    const std::string text = f.model->tokenizer()->decode(spec.ids);
    const ojson value = ojson::parse(text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << text;
    EXPECT_EQ(grammar::schema_violation(value, schema, {.strict = true}), "") << text;
    EXPECT_EQ(spec.finish_reason, "stop") << text;
    if (temp == 0.0f) {
      EXPECT_GT(spec.spec_accepted, 5) << text;
      EXPECT_LT(spec.forward_calls, plain.forward_calls) << text;
    }
  }
}

TEST(SequenceRun, SpeculationUnderAReasoningBudgetIsPlainDecoding) {
  const Fixture f(test::thinking_model());
  const Tokenizer& tok = *f.model->tokenizer();
  const int32_t open = *tok.token_id("<think>"), close = *tok.token_id("</think>");
  const std::string code = "def add(a, b):\n    return a + b\n\n\n";
  for (int budget : {0, 3, 12}) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.reasoning_open = true;  // the prompt ends inside <think>
    o.reasoning_budget = ReasoningBudget{budget, open, close};
    const GenerateResult r = expect_same(f, code + code + "<think>\n" + code.substr(0, 12), o,
                                         "budget " + std::to_string(budget));
    // The block closes after exactly `budget` tokens of reasoning, by the decoder.
    ASSERT_GT(int(r.ids.size()), budget) << budget;
    EXPECT_EQ(r.ids[size_t(budget)], close) << budget;
  }
}

TEST(SequenceRun, PlanEndsTheRunWherePlainDecodingEnds) {
  const Fixture f(test::source_path("models/pycoder-6m"));
  Session s = f.prompted("def add(a, b):\n");
  // max_tokens: the last token is output, not appended, and the run says "length".
  RunOptions o;
  o.max_tokens = 2;
  SequenceRun run(o, nullptr);
  SequenceRun::Step a = run.plan(s, 0);
  ASSERT_TRUE(a.token);
  EXPECT_TRUE(a.finish.empty());
  EXPECT_EQ(a.append, std::vector<int32_t>{*a.token});
  s.append(a.append);
  SequenceRun::Step b = run.plan(s, 0);
  ASSERT_TRUE(b.token);
  EXPECT_EQ(b.finish, "length");
  EXPECT_TRUE(b.append.empty());
  EXPECT_EQ(b.tail, b.token);
  EXPECT_EQ(run.generated(), 2);

  // A stop id: nothing output, the stop id is the tail.
  Session t = f.prompted("def add(a, b):\n");
  RunOptions stop;
  SequenceRun probe(stop, nullptr);
  const int32_t first = *probe.plan(t, 0).token;
  stop.rules.stop_ids = {first};
  SequenceRun stopped(stop, nullptr);
  const SequenceRun::Step c = stopped.plan(t, 0);
  EXPECT_FALSE(c.token);
  EXPECT_EQ(c.finish, "stop");
  EXPECT_EQ(c.tail, first);
  EXPECT_EQ(stopped.generated(), 0);

  // The context: a session with no room left ends at its first token.
  RunOptions full;
  full.context = t.size();
  SequenceRun no_room(full, nullptr);
  EXPECT_EQ(no_room.plan(t, 0).finish, "length");
}

}  // namespace
}  // namespace fak
