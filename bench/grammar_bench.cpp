// Constrained decoding: the per-step token mask on the real Qwen vocabulary (151k tokens), single
// thread. "Warm" is a state whose top frame was seen before (the usual case from the second step
// inside a value on); "cold" recomputes the cached part, as the first visit to a state does.
// BM_Generation replays a whole tokenized JSON answer (mask + advance per token) with a freshly
// compiled grammar each time. The target is < 1 ms per step.
#include <benchmark/benchmark.h>

#include <string>

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

struct State {
  const char* label;
  const char* prefix;
};
const State kStates[] = {
    {"inside a string", "{\"name\": \"Ada Lov"},
    {"after a key", "{\"name\""},
    {"after a colon", "{\"name\":"},
    {"at a number", "{\"name\": \"Ada\", \"age\": 36"},
    {"after a value", "{\"name\": \"Ada\", \"age\": 36, \"email\": \"a@b.c\""},
    {"in an array", "{\"name\": \"A\", \"age\": 3, \"email\": \"e\", \"tags\": [\"x\", "},
    {"in a bounded string",
     "{\"name\": \"A\", \"age\": 3, \"email\": \"e\", \"tags\": [], "
     "\"address\": {\"street\": \"s\", \"zip\": \"12"},
};

void BM_Mask(benchmark::State& state) {
  const State& s = kStates[state.range(0)];
  const bool warm = state.range(1);
  auto grammar = compile_json_schema_text(kSchema);
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
BENCHMARK(BM_Mask)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1, 0}})->Unit(benchmark::kMicrosecond);

// Through the public API, as a scheduler would call it: mask + advance for every token of a real
// answer; the grammar is compiled anew per iteration (grammar-specific parts cold, string and
// number parts shared through the index).
void BM_Generation(benchmark::State& state) {
  const std::string answer =
      "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@analytical.engine\", "
      "\"tags\": [\"mathematician\", \"writer\", \"first programmer\"], \"address\": {\"street\": "
      "\"12 St James's Square, London\", \"zip\": \"SW1Y 4JH\"}}";
  const std::vector<int32_t> ids = qwen().encode(answer);
  std::vector<uint32_t> mask;
  for (auto _ : state) {
    GrammarMatcher matcher(compile_json_schema_text(kSchema), index(), {eos()});
    for (int32_t id : ids) {
      matcher.allowed_tokens(mask);
      if (!matcher.advance_token(id)) state.SkipWithError("token refused");
    }
    matcher.allowed_tokens(mask);
    benchmark::DoNotOptimize(mask.data());
  }
  state.counters["tokens"] = double(ids.size() + 1);
  state.counters["us_per_step"] =
      benchmark::Counter(double(ids.size() + 1), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}
BENCHMARK(BM_Generation)->Unit(benchmark::kMillisecond);

void BM_BuildIndex(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(TokenIndex::build(qwen()).get());
}
BENCHMARK(BM_BuildIndex)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
