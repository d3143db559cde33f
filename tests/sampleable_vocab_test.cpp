// Real checkpoints pad the embedding and lm_head beyond the tokenizer (Qwen2.5: 151936 rows for
// 151665 ids). Sampling reads only the ids the tokenizer can decode (Model::sampleable_vocab), so
// even a near-uniform draw never picks a padded row that nothing can turn into text.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak {
namespace {

constexpr int kTokenizerIds = 300;  // llama-tiny's embedding has 512 rows

std::filesystem::path padded_model() {
  return test::padded_vocab_model(kTokenizerIds);
}

Session prompted(const std::shared_ptr<const Model>& model) {
  const ModelConfig& c = model->config();
  Session s(model,
            std::make_shared<KvCache>(model->n_attention_layers(), c.n_kv_heads, c.head_dim));
  s.append(std::vector<int32_t>{1, 5, 7});
  return s;
}

}  // namespace

TEST(SampleableVocab, IsTheTokenizersIdCountCappedByTheEmbedding) {
  const auto padded = Model::load(padded_model());
  ASSERT_NE(padded->tokenizer(), nullptr);
  EXPECT_EQ(padded->config().vocab, 512);
  EXPECT_EQ(padded->tokenizer()->vocab_size(), kTokenizerIds);
  EXPECT_EQ(padded->sampleable_vocab(), kTokenizerIds);
  // No tokenizer: every row may be sampled (ids are the output).
  EXPECT_EQ(Model::load(padded_model(), {.load_tokenizer = false})->sampleable_vocab(), 512);
  EXPECT_EQ(Model::load(test::data_path("oracle/llama-tiny"))->sampleable_vocab(), 512);
  // A tokenizer larger than the embedding (the bundled model's 8192 ids over 512 rows): capped.
  const auto dir = test::temp_dir() / "big-tokenizer";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(test::data_path("oracle/llama-tiny") / f, dir / f);
  std::filesystem::copy_file(test::source_path("models/pycoder-6m/tokenizer.json"),
                             dir / "tokenizer.json");
  EXPECT_EQ(Model::load(dir)->sampleable_vocab(), 512);
}

TEST(SampleableVocab, HighTemperatureNeverPicksAPaddedRow) {
  const auto model = Model::load(padded_model());
  // The padded rows carry real probability: a sampler over every row lands there often.
  {
    Session s = prompted(model);
    ASSERT_EQ(s.logits().size(), 512u);
    EXPECT_EQ(s.sampleable_logits().size(), size_t(kTokenizerIds));
    Sampler all_rows({.temperature = 100.0f, .seed = 1});
    int padded = 0;
    for (int i = 0; i < 200; ++i) padded += all_rows.sample(s.logits()) >= kTokenizerIds;
    ASSERT_GT(padded, 20);
  }
  // generate() never does, and everything it returns decodes.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Session s = prompted(model);
    GenerateOptions g;
    g.max_tokens = 32;
    g.sampling = {.temperature = 100.0f, .seed = seed};
    const GenerateResult r = generate(s, g);
    ASSERT_EQ(r.ids.size(), 32u);
    EXPECT_LT(*std::max_element(r.ids.begin(), r.ids.end()), kTokenizerIds) << "seed " << seed;
    EXPECT_NO_THROW(model->tokenizer()->decode(r.ids));
  }
}

// The crash as a user met it: streaming the text of a padded id threw mid-run.
TEST(SampleableVocab, FakRunAtHighTemperatureDecodesEveryToken) {
  const auto dir = padded_model();
  for (int seed : {1, 2, 3}) {
    auto r = test::run_fak("run -m " + dir.string() + " --ids 1,5,7 -n 48 --temp 100 --seed " +
                           std::to_string(seed) + " --ignore-eos --json -t 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), 48u);
    EXPECT_LT(*std::max_element(ids.begin(), ids.end()), kTokenizerIds) << "seed " << seed;
  }
}

}  // namespace fak
