// Checkpoints as they are published, not as fak writes them: Gemma 3's multimodal release (a sparse
// text_config under a gemma3 root, the language model under language_model.model.* beside a
// vision tower; the same saved by transformers 4.52+ as model.language_model.*), GLM-4.5's NextN
// block stored as one more decoder layer, and generation_config.json's stop ids. Each relaid
// fixture must load to the same config and still match transformers' reference logits.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/config.h"
#include "models/model.h"
#include "runtime/parity.h"
#include "test_util.h"

namespace fak {
namespace {

using nlohmann::json;

struct ExtraTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The oracle fixture `fixture` rewritten into a temp dir: each tensor renamed by `rename` (an
// empty name drops it), `extra` f32 tensors of zeros added, config.json replaced by `config`.
std::filesystem::path relaid(const std::string& fixture,
                             const std::function<std::string(const std::string&)>& rename,
                             const std::vector<ExtraTensor>& extra, const json& config) {
  static int n = 0;
  const auto dir = test::temp_dir() / (fixture + "-layout-" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  const TensorStore store = TensorStore::open_dir(test::data_path("oracle/" + fixture));
  std::vector<TensorToWrite> out;
  for (const TensorInfo* t : store.all()) {
    const std::string name = rename(t->name);
    if (name.empty()) continue;
    out.push_back({name, t->dtype, t->shape,
                   std::string_view(reinterpret_cast<const char*>(t->data), t->nbytes)});
  }
  std::vector<std::string> zeros;
  zeros.reserve(extra.size());
  for (const ExtraTensor& e : extra) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    zeros.emplace_back(size_t(numel) * sizeof(float), '\0');
    out.push_back({e.name, DType::F32, e.shape, zeros.back()});
  }
  write_safetensors(dir / "model.safetensors", out);
  test::write_file(dir / "config.json", config.dump(2));
  return dir;
}

json fixture_config(const std::string& fixture) {
  return json::parse(test::read_file(test::data_path("oracle/" + fixture + "/config.json")));
}

// The relaid model against the fixture's transformers reference, at the CPU parity test's bound.
void expect_parity(const std::filesystem::path& dir, const std::string& fixture) {
  auto model = Model::load(dir, {.load_tokenizer = false});
  const TensorStore ref =
      TensorStore::open_file(test::data_path("oracle/" + fixture + "/reference.safetensors"));
  const ParityReport r = run_parity(model, ref, 1e-3);
  ASSERT_FALSE(r.cases.empty());
  for (const ParityCase& c : r.cases) {
    EXPECT_LE(c.max_abs_diff, 1e-4) << c.name;
    EXPECT_TRUE(c.pass) << c.name;
    EXPECT_GT(c.greedy_total, 0) << c.name;
  }
}

// gemma3-tiny's config as Google publishes Gemma 3: a gemma3 root holding the token ids, a
// text_config naming only what differs from transformers' Gemma3TextConfig (here the tiny
// sizes; tied embeddings, rope_theta 1e6, the local base 10k, the 5:1 pattern and the norm eps
// are all left to the class, as in the release), and a vision_config.
json published_gemma3_config() {
  const json tiny = fixture_config("gemma3-tiny");
  json text = json::object();
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                          "query_pre_attn_scalar", "sliding_window", "max_position_embeddings"})
    text[key] = tiny[key];
  text["model_type"] = "gemma3_text";
  return {{"architectures", {"Gemma3ForConditionalGeneration"}},
          {"model_type", "gemma3"},
          {"eos_token_id", {0, 7}},
          {"boi_token_index", 255999},
          {"mm_tokens_per_image", 256},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "siglip_vision_model"}, {"hidden_size", 16}, {"patch_size", 14}}}};
}

const std::vector<ExtraTensor> kVisionTower = {
    {"vision_tower.vision_model.embeddings.patch_embedding.weight", {16, 3, 14, 14}},
    {"multi_modal_projector.mm_input_projection_weight", {16, 64}},
};

TEST(CheckpointLayout, Gemma3ReleaseLayoutLoadsItsLanguageModel) {
  // transformers 4.50 (the release): Gemma3ForConditionalGeneration.language_model is a whole
  // Gemma3ForCausalLM, so its tensors sit under language_model.model.
  const auto dir = relaid(
      "gemma3-tiny", [](const std::string& n) { return "language_model." + n; }, kVisionTower,
      published_gemma3_config());
  const ModelConfig c = load_hf_config(dir / "config.json");
  const ModelConfig tiny = load_hf_config(test::data_path("oracle/gemma3-tiny/config.json"));
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_theta, tiny.rope_theta);
  EXPECT_EQ(c.rope_local_theta, tiny.rope_local_theta);
  EXPECT_EQ(c.layers, tiny.layers);
  EXPECT_EQ(c.rms_eps, tiny.rms_eps);
  EXPECT_EQ(c.attn_scale, tiny.attn_scale);
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{0, 7}));  // the root's, as the release's [1, 106]
  expect_parity(dir, "gemma3-tiny");
  auto model = Model::load(dir, {.load_tokenizer = false});
  EXPECT_NE(model->load_note().find("2 tensors beside the language model"), std::string::npos)
      << model->load_note();
}

TEST(CheckpointLayout, Gemma3SavedByNewerTransformersLoads) {
  // transformers 4.52+: model.language_model.* and the head (when untied) at lm_head.weight.
  const auto dir = relaid(
      "gemma3-tiny",
      [](const std::string& n) {
        return n.rfind("model.", 0) == 0 ? "model.language_model." + n.substr(6) : n;
      },
      kVisionTower, published_gemma3_config());
  expect_parity(dir, "gemma3-tiny");
}

TEST(CheckpointLayout, Gemma3UntiedHeadIsReadBesideTheLanguageModel) {
  // An untied head in the release layout is language_model.lm_head.weight; without it, the
  // refusal names that tensor.
  json config = published_gemma3_config();
  config["text_config"]["tie_word_embeddings"] = false;
  const auto with_head = relaid(
      "gemma3-tiny", [](const std::string& n) { return "language_model." + n; }, kVisionTower,
      config);
  {
    // The head is the embedding's copy: the same logits.
    const TensorStore store = TensorStore::open_dir(test::data_path("oracle/gemma3-tiny"));
    const TensorInfo& embed = store.get("model.embed_tokens.weight");
    auto rows = TensorStore::open_dir(with_head);
    std::vector<TensorToWrite> out;
    for (const TensorInfo* t : rows.all())
      out.push_back({t->name, t->dtype, t->shape,
                     std::string_view(reinterpret_cast<const char*>(t->data), t->nbytes)});
    out.push_back({"language_model.lm_head.weight", embed.dtype, embed.shape,
                   std::string_view(reinterpret_cast<const char*>(embed.data), embed.nbytes)});
    write_safetensors(with_head / "model.next", out);
  }
  std::filesystem::rename(with_head / "model.next", with_head / "model.safetensors");
  expect_parity(with_head, "gemma3-tiny");

  const auto without_head = relaid(
      "gemma3-tiny", [](const std::string& n) { return "language_model." + n; }, kVisionTower,
      config);
  try {
    Model::load(without_head, {.load_tokenizer = false});
    FAIL() << "loaded an untied model without its head";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'language_model.lm_head.weight'"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointLayout, PublishedGemma3ConfigsTakeTheClassDefaults) {
  // google/gemma-3-4b-it and -27b-it as published: the 4B names neither its heads nor its
  // vocabulary, and both leave the stop ids at the root.
  const ModelConfig c4 = load_hf_config(test::data_path("configs/gemma-3-4b-it.json"));
  EXPECT_EQ(c4.family_name(), "gemma3_text");
  EXPECT_EQ(c4.dim, 2560);
  EXPECT_EQ(c4.n_layers, 34);
  EXPECT_EQ(c4.n_heads, 8);
  EXPECT_EQ(c4.n_kv_heads, 4);
  EXPECT_EQ(c4.head_dim, 256);
  EXPECT_EQ(c4.vocab, 262208);
  EXPECT_EQ(c4.max_seq_len, 131072);
  EXPECT_TRUE(c4.tie_embeddings);
  EXPECT_FLOAT_EQ(c4.attn_scale, 1.0f / 16.0f);  // query_pre_attn_scalar 256
  EXPECT_EQ(c4.rope_theta, 1e6);
  EXPECT_EQ(c4.rope_local_theta, 1e4);
  EXPECT_EQ(c4.rope_factor, 8.0);
  EXPECT_EQ(c4.eos_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(c4.bos_id, 2);
  ASSERT_EQ(c4.layers.size(), 34u);
  for (int l = 0; l < 34; ++l) EXPECT_EQ(c4.layers[size_t(l)].window, (l + 1) % 6 ? 1024 : 0) << l;

  // The 27B against the text config fak's shapes list holds (written out in full).
  const ModelConfig c27 = load_hf_config(test::data_path("configs/gemma-3-27b-it.json"));
  const ModelConfig full = load_hf_config(test::data_path("configs/gemma-3-27b-text.json"));
  EXPECT_EQ(c27.n_heads, full.n_heads);
  EXPECT_EQ(c27.n_kv_heads, full.n_kv_heads);
  EXPECT_EQ(c27.head_dim, full.head_dim);
  EXPECT_EQ(c27.vocab, full.vocab);
  EXPECT_EQ(c27.attn_scale, full.attn_scale);
  EXPECT_EQ(c27.layers, full.layers);
  EXPECT_EQ(c27.eos_ids, full.eos_ids);
  EXPECT_EQ(c27.tie_embeddings, full.tie_embeddings);
  EXPECT_EQ(c27.rope_factor, full.rope_factor);
}

// glm4moe-tiny with one NextN block stored the way zai-org/GLM-4.5(-Air) store theirs: a decoder
// layer numbered num_hidden_layers, with the block's own projections and head beside it.
std::filesystem::path glm_with_nextn(const std::string& stray = "") {
  json config = fixture_config("glm4moe-tiny");
  config["num_nextn_predict_layers"] = 1;
  const int n = config["num_hidden_layers"].get<int>();
  const std::string last = "model.layers." + std::to_string(n - 1) + ".";
  const std::string nextn = "model.layers." + std::to_string(n) + ".";
  std::vector<ExtraTensor> extra = {
      {nextn + "eh_proj.weight", {64, 128}},
      {nextn + "enorm.weight", {64}},
      {nextn + "hnorm.weight", {64}},
      {nextn + "shared_head.norm.weight", {64}},
      {nextn + "shared_head.head.weight", {512, 64}},
      {nextn + "embed_tokens.weight", {512, 64}},
      {nextn + "self_attn.q_proj.weight", {128, 64}},
      {nextn + "mlp.gate.weight", {8, 64}},
  };
  if (!stray.empty()) extra.push_back({stray, {4}});
  return relaid(
      "glm4moe-tiny", [](const std::string& name) { return name; }, extra, config);
}

TEST(CheckpointLayout, Glm45NextNLayerIsLeftUnread) {
  const auto dir = glm_with_nextn();
  const ModelConfig c = load_hf_config(dir / "config.json");
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.unread_nextn_layers, 1);
  expect_parity(dir, "glm4moe-tiny");
  auto model = Model::load(dir, {.load_tokenizer = false});
  EXPECT_NE(model->load_note().find("8 tensors"), std::string::npos) << model->load_note();
}

TEST(CheckpointLayout, LayersPastTheNextNBlocksAreStillRefused) {
  // Only the declared NextN block is tolerated: a tensor of a layer beyond it means the config
  // and the weights disagree.
  const auto dir = glm_with_nextn("model.layers.4.input_layernorm.weight");
  try {
    Model::load(dir, {.load_tokenizer = false});
    FAIL() << "loaded a checkpoint with a layer its config does not declare";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("unexpected tensor 'model.layers.4.input_layernorm.weight'"),
        std::string::npos)
        << e.what();
  }
}

TEST(CheckpointLayout, GenerationConfigStopIdsJoinTheConfigs) {
  // Qwen2.5-Instruct: config.json says <|endoftext|>, generation_config.json adds <|im_end|>;
  // generate() stops on the latter list, and so does fak (on both).
  const auto dir = test::temp_dir() / "generation-eos";
  std::filesystem::create_directories(dir);
  json config = fixture_config("qwen2-tiny");
  config["eos_token_id"] = 0;
  test::write_file(dir / "config.json", config.dump());
  test::write_file(dir / "generation_config.json",
                   R"({"eos_token_id": [7, 0], "do_sample": false})");
  EXPECT_EQ(load_hf_config(dir / "config.json").eos_ids, (std::vector<int32_t>{0, 7}));

  test::write_file(dir / "generation_config.json", R"({"eos_token_id": [99999]})");
  try {
    load_hf_config(dir / "config.json");
    FAIL() << "accepted a stop id outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: 'eos_token_id' 99999 is outside"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fak
