// Perplexity over a token stream: windows of ctx + 1 tokens starting every ctx tokens (each window
// shares its first token with the previous one's last), ctx scored per window, no BOS, the last
// window shorter. That scores every token but the first, as the HF reference does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace fak {

struct PerplexityResult {
  double ppl = 0;
  double nll_per_token = 0;
  int64_t tokens = 0;  // tokens in the stream
  int64_t scored = 0;  // predictions scored
  int windows = 0;
  double seconds = 0;
};

PerplexityResult perplexity(std::shared_ptr<const Model> model, const std::vector<int32_t>& tokens,
                            int ctx, const std::function<void(int done, int total)>& progress = {},
                            KvCacheOptions kv = {});

}  // namespace fak
