// The scheduler's prompt budget per step (server/prefill_budget.h): the work of a prompt token at
// depth, counted by hand here from the public configs' shapes, and the budget that keeps a step's
// prompt work that of --prefill-chunk tokens at depth 0 while other sequences decode.
#include "server/prefill_budget.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace fak::server {
namespace {

ModelConfig config(const std::string& name) {
  return load_hf_config(test::data_path("configs/" + name + ".json"));
}

TEST(PrefillBudget, WorkOfAPromptTokenFromTheShapes) {
  // Qwen2.5-0.5B: 24 layers of q/k/v/o (896 x (896 + 2 x 128) + 896 x 896) and a 4864-wide MLP
  // (3 x 896 x 4864); attention: q.K and p.V over the depth, 896 query dims.
  const ModelConfig q05 = config("qwen2.5-0.5b-instruct");
  const double q05_layer = 896.0 * (896 + 256) + 896.0 * 896 + 3.0 * 896 * 4864;
  EXPECT_DOUBLE_EQ(prompt_token_work(q05, 0), 24 * q05_layer);
  EXPECT_DOUBLE_EQ(prompt_token_work(q05, 65536), 24 * (q05_layer + 2.0 * 896 * 65536));
  // Qwen3-30B-A3B: 48 layers, 32 x 128 query dims, 4 x 128 KV dims, 8 experts of 768 a token.
  const ModelConfig moe = config("qwen3-30b-a3b");
  const double moe_layer = 2048.0 * (4096 + 1024) + 4096.0 * 2048 + 3.0 * 2048 * 8 * 768;
  EXPECT_DOUBLE_EQ(prompt_token_work(moe, 0), 48 * moe_layer);
  // Qwen3.5-35B-A3B: only its 10 full-attention layers (one in four) read the depth, with their
  // 16 x 256 query dims.
  const ModelConfig hybrid = config("qwen3.5-35b-a3b");
  EXPECT_DOUBLE_EQ(prompt_token_work(hybrid, 1000) - prompt_token_work(hybrid, 0),
                   10 * 2.0 * 4096 * 1000);
  // Gemma 3 27B: the 52 local layers of its 62 read at most their window of 1024.
  const ModelConfig gemma = config("gemma-3-27b-text");
  EXPECT_DOUBLE_EQ(prompt_token_work(gemma, 65536) - prompt_token_work(gemma, 0),
                   2.0 * 4096 * (10 * 65536.0 + 52 * 1024.0));
}

TEST(PrefillBudget, ShrinksWithDepthOnlyWhileOthersDecode) {
  const ModelConfig q05 = config("qwen2.5-0.5b-instruct");
  // At 65536 a token is 8.88x the work of one at depth 0: 256 / 8.88 = 28.8.
  EXPECT_EQ(prefill_budget(q05, 256, 65536, true), 28);
  EXPECT_EQ(prefill_budget(q05, 256, 65536, false), 256);  // nothing else waits on the step
  EXPECT_EQ(prefill_budget(q05, 256, 0, true), 256);
  // Never fewer than kFewestPromptTokens, nor more than the chunk itself.
  EXPECT_EQ(prefill_budget(q05, 256, 16000000, true), kFewestPromptTokens);
  EXPECT_EQ(prefill_budget(q05, 8, 65536, true), 8);
  // Deeper reads fewer.
  int last = 256;
  for (int64_t depth : {1024, 4096, 16384, 32768, 131072}) {
    const int budget = prefill_budget(q05, 256, depth, true);
    EXPECT_LT(budget, last) << depth;
    last = budget;
  }
  // Windowed layers cost no more past their window: Gemma 3 keeps more of its chunk at 64k.
  ModelConfig gemma = config("gemma-3-27b-text");
  const int windowed = prefill_budget(gemma, 256, 65536, true);
  for (LayerSlot& s : gemma.layers) s.window = 0;
  EXPECT_GT(windowed, prefill_budget(gemma, 256, 65536, true));
}

}  // namespace
}  // namespace fak::server
