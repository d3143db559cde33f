// Loading refuses what it cannot run exactly, with one message naming the file, tensor or limit.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "test_util.h"

namespace fak {

namespace {

// A copy of the qwen2 fixture in a temp dir, to break in different ways.
std::filesystem::path copy_fixture(const std::string& name = "qwen2-tiny") {
  auto dir = test::temp_dir() / name;
  std::filesystem::create_directories(dir);
  for (auto f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(test::data_path("oracle/" + name) / f, dir / f);
  return dir;
}

void edit_config(const std::filesystem::path& dir,
                 const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(test::read_file(dir / "config.json"));
  edit(j);
  test::write_file(dir / "config.json", j.dump());
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    Model::load(dir, {.load_tokenizer = false});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites model.safetensors through a filter over its tensors.
void edit_weights(
    const std::filesystem::path& dir,
    const std::function<void(std::vector<TensorToWrite>&, std::vector<std::string>&)>& edit) {
  auto src = SafetensorsFile::open(dir / "model.safetensors");
  std::vector<TensorToWrite> ts;
  std::vector<std::string> storage;
  for (auto& t : src.tensors())
    ts.push_back({t.name, t.dtype, t.shape, {reinterpret_cast<const char*>(t.data), t.nbytes}});
  edit(ts, storage);
  write_safetensors(dir / "model.tmp.safetensors", ts);
  std::filesystem::rename(dir / "model.tmp.safetensors", dir / "model.safetensors");
}

}  // namespace

TEST(ModelLoad, UnknownModelType) {
  auto dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["model_type"] = "mamba"; });
  EXPECT_NE(load_error(dir).find("model_type 'mamba' is not supported"), std::string::npos);
}

TEST(ModelLoad, MissingConfigAndWeights) {
  auto dir = copy_fixture();
  std::filesystem::remove(dir / "model.safetensors");
  EXPECT_NE(load_error(dir).find("no model.safetensors"), std::string::npos);
  std::filesystem::remove(dir / "config.json");
  EXPECT_NE(load_error(dir).find("no config.json"), std::string::npos);
  EXPECT_NE(load_error("/nonexistent/model").find("does not exist"), std::string::npos);
}

TEST(ModelLoad, BadConfigValues) {
  auto dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["num_key_value_heads"] = 3; });
  EXPECT_NE(load_error(dir).find("not a multiple"), std::string::npos);
  dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["hidden_size"] = "big"; });
  EXPECT_NE(load_error(dir).find("'hidden_size' must be a positive integer"), std::string::npos);
  dir = copy_fixture();
  test::write_file(dir / "config.json", "{\"model_type\": ");
  EXPECT_NE(load_error(dir).find("not valid JSON"), std::string::npos);
  dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["rope_parameters"]["rope_type"] = "dynamic"; });
  EXPECT_NE(load_error(dir).find("rope type 'dynamic'"), std::string::npos);
  dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["hidden_act"] = 5; });
  EXPECT_NE(load_error(dir).find("hidden_act must be a string"), std::string::npos);
  dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["hidden_act"] = "gelu"; });
  EXPECT_NE(load_error(dir).find("hidden_act 'gelu' is not supported"), std::string::npos);
}

TEST(ModelLoad, ConfigDisagreesWithWeights) {
  auto dir = copy_fixture();
  edit_config(dir, [](auto& j) { j["intermediate_size"] = 128; });
  std::string e = load_error(dir);
  EXPECT_NE(e.find("gate_proj.weight' has shape [176, 64], expected [128, 64]"), std::string::npos)
      << e;
  dir = copy_fixture();
  edit_config(dir, [](auto& j) {
    j["num_hidden_layers"] = 3;
    j.erase("layer_types");
  });
  EXPECT_NE(load_error(dir).find("missing tensor 'model.layers.2."), std::string::npos);
  dir = copy_fixture();
  edit_config(dir, [](auto& j) {
    j["num_hidden_layers"] = 1;
    j.erase("layer_types");
  });
  EXPECT_NE(load_error(dir).find("unexpected tensor 'model.layers.1."), std::string::npos);
}

TEST(ModelLoad, MissingTensorAndWrongDtype) {
  auto dir = copy_fixture();
  edit_weights(dir, [](auto& ts, auto&) {
    std::erase_if(ts, [](auto& t) { return t.name == "model.layers.0.self_attn.k_proj.bias"; });
  });
  EXPECT_NE(load_error(dir).find("missing tensor 'model.layers.0.self_attn.k_proj.bias'"),
            std::string::npos);
  dir = copy_fixture();
  edit_weights(dir, [](auto& ts, auto&) {
    for (auto& t : ts)
      if (t.name == "model.norm.weight") {
        t.dtype = DType::I32;  // same byte size, wrong type
      }
  });
  EXPECT_NE(load_error(dir).find("dtype I32"), std::string::npos);
}

TEST(ModelLoad, TiedEmbeddingsAndUntiedWithoutHead) {
  auto dir = copy_fixture();  // qwen2-tiny is untied: dropping lm_head must be an error
  edit_weights(dir, [](auto& ts, auto&) {
    std::erase_if(ts, [](auto& t) { return t.name == "lm_head.weight"; });
  });
  EXPECT_NE(load_error(dir).find("lm_head.weight"), std::string::npos);
  auto tied = Model::load(test::data_path("oracle/qwen3-tiny"), {.load_tokenizer = false});
  EXPECT_EQ(tied->weights().lm_head.data, tied->weights().embed.data);
}

TEST(ModelLoad, TruncatedWeightsFile) {
  auto dir = copy_fixture();
  auto bytes = test::read_file(dir / "model.safetensors");
  test::write_file(dir / "model.safetensors", bytes.substr(0, bytes.size() - 100));
  EXPECT_NE(load_error(dir).find("truncated"), std::string::npos);
}

TEST(ModelLoad, Qwen35HybridIsRecognised) {
  // The hybrid family parses; its fixture config carries the Gated DeltaNet fields.
  auto c = load_hf_config(test::data_path("oracle/qwen35-hybrid-tiny/config.json"));
  EXPECT_EQ(c.family_name(), "qwen3_5_text");
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.layers[0].mixer, LayerKind::LinearAttention);
  EXPECT_EQ(c.layers[3].mixer, LayerKind::FullAttention);
}

TEST(ModelLoad, RopeThetaTopLevelOrNested) {
  auto c = load_hf_config(test::data_path("configs/qwen2.5-0.5b-instruct.json"));
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_TRUE(c.tie_embeddings);
  auto d = load_hf_config(test::data_path("oracle/llama-tiny/config.json"));
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.head_dim, 16);
}

}  // namespace fak
