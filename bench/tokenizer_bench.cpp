// Tokenizer throughput: encoding the 400k-character Qwen corpus (Python source) with the real Qwen
// tokenizer, single thread. Reports bytes/s; the target is >= 10 MB/s on one core.
#include <benchmark/benchmark.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string data(const std::string& relative) {
  std::ifstream in(std::string(FAK_SOURCE_DIR) + "/tests/data/tokenizer/" + relative,
                   std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const fak::Tokenizer& qwen() {
  static const fak::Tokenizer t =
      fak::Tokenizer::from_dir(std::string(FAK_SOURCE_DIR) + "/tests/data/tokenizer/qwen");
  return t;
}

const std::string& corpus() {
  static const std::string text = nlohmann::json::parse(data("qwen-corpus.json"))["text"];
  return text;
}

void BM_EncodeCorpus(benchmark::State& state) {
  const auto& tok = qwen();
  const std::string& text = corpus();
  size_t ids = 0;
  for (auto _ : state) {
    auto out = tok.encode(text);
    ids = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["ids"] = double(ids);
}
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond);

// The pre-tokenizer alone, hand-written vs PCRE2, to show what the hand splitter buys.
void BM_SplitCorpus(benchmark::State& state) {
  fak::PreTokenizer pre = state.range(0) ? fak::PreTokenizer::regex_only(fak::kQwen2Pattern)
                                         : fak::PreTokenizer(fak::kQwen2Pattern);
  const std::string& text = corpus();
  std::vector<std::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    pre.split(text, pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.SetLabel(state.range(0) ? "pcre2" : "hand");
}
BENCHMARK(BM_SplitCorpus)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_DecodeCorpus(benchmark::State& state) {
  const auto& tok = qwen();
  auto ids = tok.encode(corpus());
  for (auto _ : state) {
    auto text = tok.decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(corpus().size()));
}
BENCHMARK(BM_DecodeCorpus)->Unit(benchmark::kMillisecond);

void BM_LoadQwenTokenizerJson(benchmark::State& state) {
  std::string json = data("qwen/tokenizer.json");
  for (auto _ : state) {
    auto tok = fak::Tokenizer::from_json(json);
    benchmark::DoNotOptimize(&tok);
  }
}
BENCHMARK(BM_LoadQwenTokenizerJson)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
