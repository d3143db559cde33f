// Request body parsing vs the number of keys in one object (issue 23): the server's
// parse_json_object (fak::ojson, keys in order with a hash index) against nlohmann::ordered_json
// (keys in order, found by scanning: quadratic) and nlohmann::json (std::map: order lost), on a
// chat request whose ignored `metadata` holds N keys. The target: 8x the keys, at most ~10x the
// time. Run: build/json_parse_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <string>

#include "core/json.h"
#include "server/json_fields.h"

namespace {

std::string body_with_keys(int n) {
  std::string body =
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {)";
  for (int i = 0; i < n; ++i) {
    if (i) body += ',';
    body += '"' + std::to_string(i * 7919 % 1000003) + "\":" + std::to_string(i % 100);
  }
  return body + "}}";
}

void BM_ServerParse(benchmark::State& state) {
  const std::string body = body_with_keys(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(fak::server::parse_json_object(body));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(body.size()));
}
BENCHMARK(BM_ServerParse)->Arg(12500)->Arg(100000)->Arg(800000)->Unit(benchmark::kMillisecond);

template <class Json>
void BM_Nlohmann(benchmark::State& state) {
  const std::string body = body_with_keys(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(Json::parse(body));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(body.size()));
}
BENCHMARK(BM_Nlohmann<nlohmann::ordered_json>)
    ->Arg(3125)
    ->Arg(12500)
    ->Arg(25000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nlohmann<nlohmann::json>)
    ->Arg(12500)
    ->Arg(100000)
    ->Arg(800000)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
