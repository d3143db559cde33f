#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "test_util.h"

namespace fak {

TEST(ParityQuick, OracleLogits) {
  for (const char* name : {"llama-tiny", "qwen2-tiny", "qwen3-tiny"}) {
    auto dir = test::data_path(std::string("oracle/") + name);
    auto model = Model::load(dir);
    auto ref = TensorStore::open_file(dir / "reference.safetensors");
    auto ids64 = read_i64(ref.get("case0.input_ids"));
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    auto want = read_f32(ref.get("case0.logits"));
    const auto& c = model->config();
    KvCache cache(model->n_attention_layers(), c.kv_dim());
    std::vector<int32_t> blocks;
    for (size_t i = 0; i < (ids.size() + 31) / 32; ++i) blocks.push_back(cache.allocate());
    std::vector<float> logits(ids.size() * size_t(c.vocab));
    BatchItem it;
    it.blocks = &blocks;
    it.tokens = ids.data();
    it.n_tokens = int(ids.size());
    it.logits = logits.data();
    it.all_logits = true;
    model->forward({&it, 1}, cache);
    double max_diff = 0;
    for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(logits[i] - want[i])));
    std::printf("%s: T=%zu max|dlogit|=%.3g\n", name, ids.size(), max_diff);
    EXPECT_LT(max_diff, 1e-3) << name;
  }
}

}  // namespace fak
