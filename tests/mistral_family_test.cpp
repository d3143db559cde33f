// Mistral, the family that is one file (models/families/mistral_family.cpp) and a registry line:
// transformers' MistralForCausalLM is LlamaForCausalLM's forward (no biases) with an optional
// sliding window on every layer, so the Llama fixture's weights in a Mistral config.json, with
// no window, are held to the same transformers reference; a window changes what a position sees
// exactly from the window's end on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

using nlohmann::json;

// llama-tiny's weights under a config.json as Mistral's checkpoints write theirs (no bias keys);
// `window`: the sliding_window value (null: none; absent: transformers' default).
std::filesystem::path mistral_copy(const json& window, bool drop_window = false) {
  const auto dir = test::temp_dir() / "mistral-tiny";
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/llama-tiny");
  for (const char* f : {"model.safetensors", "reference.safetensors"})
    std::filesystem::copy_file(src / f, dir / f);
  // A vocabulary for the GGUF (the fixture has none; the model's 512 ids are a prefix of Qwen's).
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("tokenizer/qwen") / f, dir / f);
  json j = json::parse(test::read_file(src / "config.json"));
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  for (const char* k : {"attention_bias", "mlp_bias", "pretraining_tp"}) j.erase(k);
  if (drop_window)
    j.erase("sliding_window");
  else
    j["sliding_window"] = window;
  test::write_file(dir / "config.json", j.dump(2));
  return dir;
}

using test::last_logits;

TEST(MistralFamily, WithoutAWindowItMatchesTransformersReference) {
  const auto dir = mistral_copy(nullptr);
  const auto m = Model::load(dir, {.load_tokenizer = false});
  EXPECT_EQ(m->config().family_name(), "mistral");
  EXPECT_FALSE(m->config().has_windows());
  const ParityReport r = run_parity(m, TensorStore::open_file(dir / "reference.safetensors"), 1e-4);
  ASSERT_FALSE(r.cases.empty());
  for (const ParityCase& c : r.cases) {
    EXPECT_LE(c.max_abs_diff, 1e-4) << c.name;
    EXPECT_TRUE(c.greedy_mismatches.empty()) << c.name;
    EXPECT_GT(c.greedy_total, 0) << c.name;
    EXPECT_TRUE(c.pass) << c.name;
  }
  // The same computation as the llama family's, bit for bit.
  const auto llama = Model::load(test::data_path("oracle/llama-tiny"), {.load_tokenizer = false});
  const auto ids = test::random_ids(24, m->config().vocab, 5);
  EXPECT_TRUE(test::bit_equal(last_logits(m, ids), last_logits(llama, ids)));
}

TEST(MistralFamily, ALeftOutWindowIsTransformersDefault) {
  const ModelConfig c = load_hf_config(mistral_copy(nullptr, /*drop_window=*/true) / "config.json");
  for (const LayerSlot& s : c.layers) EXPECT_EQ(s.window, 4096);
}

TEST(MistralFamily, AWindowChangesWhatAPositionSeesFromItsEndOn) {
  const auto plain = Model::load(mistral_copy(nullptr), {.load_tokenizer = false});
  const auto windowed = Model::load(mistral_copy(8), {.load_tokenizer = false});
  for (int l = 0; l < windowed->config().n_layers; ++l)
    EXPECT_EQ(windowed->layer_spec(l).attention.window, 8);
  const auto ids = test::random_ids(20, plain->config().vocab, 9);
  for (int n = 1; n <= 20; ++n) {
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + n);
    const bool same = test::bit_equal(last_logits(plain, prefix), last_logits(windowed, prefix));
    // The last position sees every earlier one while there are at most 8.
    EXPECT_EQ(same, n <= 8) << n;
  }
}

TEST(MistralFamily, ConvertsAsLlamaCppDoesAndRefusesAWindowItCannotWrite) {
  const auto dir = mistral_copy(nullptr);
  const auto m = Model::load(dir);
  export_gguf(*m, FileType::F32, dir / "f32.gguf");
  const auto g = Model::load(dir / "f32.gguf", {.load_tokenizer = false});
  EXPECT_EQ(g->config().family_name(), "llama");  // general.architecture "llama"
  const auto ids = test::random_ids(24, m->config().vocab, 6);
  EXPECT_TRUE(test::bit_equal(last_logits(m, ids), last_logits(g, ids)));

  const auto wdir = mistral_copy(4096);
  const auto w = Model::load(wdir);
  try {
    export_gguf(*w, FileType::F32, wdir / "f32.gguf");
    FAIL() << "a windowed Mistral was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window of 4096"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(wdir / "f32.gguf"));
}

}  // namespace
}  // namespace fak
