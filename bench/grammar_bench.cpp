// Constrained decoding: the per-step token mask on the real Qwen vocabulary (151k tokens), single
// thread. "Warm" is a state whose top frame was seen before (the usual case from the second step
// inside a value on); "cold" recomputes the cached part, as the first visit to a state does.
// BM_Generation replays a whole tokenized JSON answer (mask + advance per token) with a freshly
// compiled grammar each time; BM_ZodGeneration the same for a schema with patterns and bounds, as
// zod writes them. The target is < 1 ms per step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/stack_set.h"
#include "grammar/token_index.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace fak::grammar;

const fak::Tokenizer& qwen() {
  static const fak::Tokenizer t =
      fak::Tokenizer::from_dir(std::string(FAK_SOURCE_DIR) + "/tests/data/tokenizer/qwen");
  return t;
}

const std::shared_ptr<const TokenIndex>& index() {
  static const auto built = TokenIndex::build(qwen());
  return built;
}

int32_t eos() {
  return *qwen().token_id("<|im_end|>");
}

const char* kSchema = R"({"type":"object","properties":{
    "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":5},
    "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","maxLength":10}},
      "required":["street","zip"]}},"required":["name","age","email","tags","address"]})";

// What zod writes for z.object({ id: z.uuid(), email: z.email(), age: z.number().int().min(0)
// .max(150), score: z.number().min(0).max(1) }): two patterns (zod 4's regexes), bounded numbers.
const char* kZodSchema = R"({"type":"object","properties":{
    "id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$"},
    "email":{"type":"string","format":"email","pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
    "age":{"type":"integer","minimum":0,"maximum":150},
    "score":{"type":"number","minimum":0,"maximum":1}},
    "required":["id","email","age","score"],"additionalProperties":false})";

const char* kZodAnswer =
    "{\"id\": \"123e4567-e89b-42d3-a456-426614174000\", \"email\": \"ada.lovelace@example.com\", "
    "\"age\": 36, \"score\": 0.875}";

struct State {
  const char* label;
  const char* schema;
  const char* prefix;
};
const State kStates[] = {
    {"inside a string", kSchema, "{\"name\": \"Ada Lov"},
    {"after a key", kSchema, "{\"name\""},
    {"after a colon", kSchema, "{\"name\":"},
    {"at a number", kSchema, "{\"name\": \"Ada\", \"age\": 36"},
    {"after a value", kSchema, "{\"name\": \"Ada\", \"age\": 36, \"email\": \"a@b.c\""},
    {"in an array", kSchema, "{\"name\": \"A\", \"age\": 3, \"email\": \"e\", \"tags\": [\"x\", "},
    {"in a bounded string", kSchema,
     "{\"name\": \"A\", \"age\": 3, \"email\": \"e\", \"tags\": [], "
     "\"address\": {\"street\": \"s\", \"zip\": \"12"},
    {"in an integer in [0, 150]", kZodSchema,
     "{\"id\": \"123e4567-e89b-42d3-a456-426614174000\", \"email\": \"a@b.co\", \"age\": 3"},
    {"in a number in [0, 1]", kZodSchema,
     "{\"id\": \"123e4567-e89b-42d3-a456-426614174000\", \"email\": \"a@b.co\", \"age\": 3, "
     "\"score\": 0.8"},
    {"in a uuid pattern", kZodSchema, "{\"id\": \"123e4567-e8"},
    {"in an email pattern", kZodSchema,
     "{\"id\": \"123e4567-e89b-42d3-a456-426614174000\", \"email\": \"ada.lov"},
};

void BM_Mask(benchmark::State& state) {
  const State& s = kStates[state.range(0)];
  const bool warm = state.range(1);
  auto grammar = compile_json_schema_text(s.schema);
  Machine machine(*grammar);
  StackSet stacks, next;
  machine.start(stacks);
  for (unsigned char c : std::string(s.prefix)) {
    machine.advance(stacks, c, next);
    std::swap(stacks, next);
  }
  if (stacks.dead()) state.SkipWithError("prefix rejected");
  MaskBuilder builder(*grammar, index()->impl());
  std::vector<uint32_t> mask(mask_words(index()->vocab_size()));
  size_t allowed = 0;
  for (auto _ : state) {
    std::fill(mask.begin(), mask.end(), 0u);
    builder.fill(stacks, mask, warm);
    benchmark::DoNotOptimize(mask.data());
  }
  for (uint32_t w : mask) allowed += size_t(__builtin_popcount(w));
  state.counters["allowed"] = double(allowed);
  state.SetLabel(std::string(s.label) + (warm ? ", warm" : ", cold"));
}
BENCHMARK(BM_Mask)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);

// Through the public API, as a scheduler would call it: mask + advance for every token of a real
// answer; the grammar is compiled anew per iteration, so every grammar-specific part is a first
// visit (string and number parts are shared through the index). Reports the mean step, the
// slowest step of the first pass (first visits of the process, if nothing ran before) and the
// 99th percentile over all passes (single slow steps elsewhere are the shared machine's noise).
void run_generation(benchmark::State& state,
                    const std::function<std::shared_ptr<const Grammar>()>& compile,
                    const std::string& answer, bool fresh_index) {
  const std::vector<int32_t> ids = qwen().encode(answer);
  std::vector<uint32_t> mask;
  std::vector<double> step_us;
  double first_pass_slowest_us = 0;
  for (auto _ : state) {
    const bool first_pass = step_us.empty() || fresh_index;
    std::shared_ptr<const TokenIndex> own_index = index();
    if (fresh_index) {  // nothing cached but what the index makes when built
      state.PauseTiming();
      own_index = TokenIndex::build(qwen());
      state.ResumeTiming();
    }
    GrammarMatcher matcher(compile(), own_index, {eos()});
    for (size_t i = 0; i <= ids.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      matcher.allowed_tokens(mask);
      const auto t1 = std::chrono::steady_clock::now();
      step_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (first_pass) first_pass_slowest_us = std::max(first_pass_slowest_us, step_us.back());
      if (i < ids.size() && !matcher.advance_token(ids[i])) state.SkipWithError("token refused");
    }
    if (!matcher.advance_token(eos())) state.SkipWithError("not complete");
    benchmark::DoNotOptimize(mask.data());
  }
  std::sort(step_us.begin(), step_us.end());
  state.counters["steps"] = double(ids.size() + 1);
  state.counters["us_per_step"] =
      benchmark::Counter(double(ids.size() + 1), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
  state.counters["first_pass_max_us"] = first_pass_slowest_us;
  state.counters["p99_us"] = step_us[step_us.size() * 99 / 100];
}

void BM_Generation(benchmark::State& state) {
  run_generation(
      state, [] { return compile_json_schema_text(kSchema); },
      "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@analytical.engine\", "
      "\"tags\": [\"mathematician\", \"writer\", \"first programmer\"], \"address\": {\"street\": "
      "\"12 St James's Square, London\", \"zip\": \"SW1Y 4JH\"}}",
      state.range(0));
}
// Arg 1: a fresh TokenIndex per iteration, so every step is a first visit for the process.
BENCHMARK(BM_Generation)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Generation)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);

// The zod schema's answer. With the same index, the automata (made once per process for a
// schema's patterns and bounds, and kept) bring their cached parts to every new grammar.
void BM_ZodGeneration(benchmark::State& state) {
  run_generation(
      state, [] { return compile_json_schema_text(kZodSchema); }, kZodAnswer, state.range(0));
}
BENCHMARK(BM_ZodGeneration)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ZodGeneration)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);

// Compiling the zod schema: with its automata already made (as for a repeated schema), and from
// nothing (the regexes and digit automata built anew: a schema seen for the first time).
void BM_CompileZodSchema(benchmark::State& state) {
  static int fresh = 0;  // across repetitions too: every variant is new to the process
  std::string schema = kZodSchema;
  for (auto _ : state) {
    if (state.range(0)) {  // a variant unseen so far: its automata are made anew
      state.PauseTiming();
      schema = kZodSchema;
      ++fresh;  // the patterns gain a class repeated zero times, the integer another maximum
      char never[48];
      std::snprintf(never, sizeof never, "(?:[\\\\u{%x}]{0})", 0x10000 + fresh);
      for (const char* end : {"{12}", "{2,}"}) schema.insert(schema.find(end) + 4, never);
      schema.replace(schema.find("150"), 3, std::to_string(150 + fresh));
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(compile_json_schema_text(schema).get());
  }
}
BENCHMARK(BM_CompileZodSchema)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_ToolCallGeneration(benchmark::State& state) {
  const auto tools = fak::ojson::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city"]}}},
    {"type":"function","function":{"name":"search_web","parameters":{"type":"object",
      "properties":{"query":{"type":"string"},"max_results":{"type":"integer"}},"required":["query"]}}},
    {"type":"function","function":{"name":"send_email","parameters":{"type":"object",
      "properties":{"to":{"type":"string"},"subject":{"type":"string"},"body":{"type":"string"}},
      "required":["to","subject","body"]}}}])");
  run_generation(
      state, [&] { return compile_tool_calls(tools); },
      "<tool_call>\n{\"name\": \"search_web\", \"arguments\": {\"query\": \"constrained decoding "
      "pushdown automaton token masks\", \"max_results\": 5}}\n</tool_call>",
      state.range(0));
}
BENCHMARK(BM_ToolCallGeneration)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ToolCallGeneration)->Arg(1)->Iterations(5)->Unit(benchmark::kMillisecond);

void BM_BuildIndex(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(TokenIndex::build(qwen()).get());
}
BENCHMARK(BM_BuildIndex)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
