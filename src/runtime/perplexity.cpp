#include "runtime/perplexity.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "runtime/model_cache.h"
#include "runtime/session.h"

namespace fak {

PerplexityResult perplexity(std::shared_ptr<const Model> model, const std::vector<int32_t>& tokens,
                            int ctx, const std::function<void(int, int)>& progress,
                            KvCacheOptions kv) {
  check(ctx >= 1, "perplexity: --ctx must be at least 1");
  check(ctx + 1 <= model->config().context_limit(),
        "perplexity: --ctx " + std::to_string(ctx) + " + 1 exceeds the model's context of " +
            std::to_string(model->config().context_limit()));
  check(tokens.size() >= 2, "perplexity: need at least 2 tokens");
  const auto t0 = std::chrono::steady_clock::now();
  const int vocab = model->config().vocab;
  auto cache = make_kv_cache(*model, kv);
  PerplexityResult r;
  r.tokens = int64_t(tokens.size());
  const int64_t n = int64_t(tokens.size());
  const int total = int((n - 2) / ctx + 1);
  double nll = 0;
  std::vector<float> logits;
  for (int64_t start = 0; start + 1 < n; start += ctx) {
    const int64_t len = std::min<int64_t>(ctx + 1, n - start);
    Session s(model, cache);
    s.append({tokens.data() + start, size_t(len - 1)}, &logits);
    for (int64_t i = 0; i + 1 < len; ++i) {
      const float* row = &logits[size_t(i) * size_t(vocab)];
      double mx = row[0];
      for (int v = 1; v < vocab; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - mx);
      nll += mx + std::log(sum) - double(row[tokens[size_t(start + i + 1)]]);
      ++r.scored;
    }
    ++r.windows;
    if (progress) progress(r.windows, total);
  }
  r.nll_per_token = nll / double(r.scored);
  r.ppl = std::exp(r.nll_per_token);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace fak
