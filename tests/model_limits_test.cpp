// Sizes and values a model file declares are checked before anything they size is allocated: a
// tiny config.json or GGUF claiming 2^30 layers (or a huge width, context, vocabulary) fails at
// once with one fak::Error naming the file, the field and the value, and without the process
// growing; so do a non-finite or out-of-range rms_norm_eps / rope_theta / partial rotary factor
// and bos/eos ids outside the vocabulary.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "test_util.h"

namespace fak {
namespace {

// Peak resident memory of this process so far. ctest runs each test in a process of its own, so
// growth across one load is what that load allocated (and touched).
long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A refusal must come before a big allocation: the generous bound is far below what the sizes
// under test would allocate (a 2^30-entry per-layer vector alone is 4 GiB).
constexpr long kMaxGrowthKib = 200 * 1024;

// Loads `path` and returns the fak::Error's message ("" when it loads), failing the test when the
// peak RSS grew by more than kMaxGrowthKib.
std::string load_error(const std::filesystem::path& path) {
  const long before = peak_rss_kib();
  std::string message;
  try {
    Model::load(path, {.load_tokenizer = false});
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_LT(peak_rss_kib() - before, kMaxGrowthKib) << path << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

// A copy of an oracle fixture in a temp dir with its config.json edited.
std::filesystem::path with_config(const std::string& fixture,
                                  const std::function<void(nlohmann::json&)>& edit) {
  static int n = 0;
  const auto dir = test::temp_dir() / (fixture + "-" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(test::data_path("oracle/" + fixture) / f, dir / f);
  auto j = nlohmann::json::parse(test::read_file(dir / "config.json"));
  edit(j);
  j.erase("layer_types");  // one entry per layer: it would disagree with an edited layer count
  test::write_file(dir / "config.json", j.dump());
  return dir;
}

void expect_config_error(const std::string& fixture,
                         const std::function<void(nlohmann::json&)>& edit,
                         const std::string& message) {
  const auto dir = with_config(fixture, edit);
  const std::string error = load_error(dir);
  EXPECT_NE(error.find((dir / "config.json").string() + ": " + message), std::string::npos)
      << "wanted '" << message << "' in: " << error;
}

constexpr int64_t kHuge = int64_t(1) << 30;

TEST(ModelLimits, ConfigSizesAreBoundedBeforeAllocation) {
  const std::string max_width = "(at most 1048576), got 1073741824";
  expect_config_error(
      "qwen2-tiny", [](auto& j) { j["num_hidden_layers"] = kHuge; },
      "'num_hidden_layers' must be a positive integer (at most 4096), got "
      "1073741824");
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "vocab_size", "head_dim"})
    expect_config_error(
        "qwen2-tiny", [&](auto& j) { j[key] = kHuge; },
        std::string("'") + key + "' must be a positive integer " + max_width);
  expect_config_error(
      "qwen2-tiny", [](auto& j) { j["max_position_embeddings"] = kHuge; },
      "'max_position_embeddings' must be a positive integer (at most 16777216), "
      "got 1073741824");
  // Each within its own limit, but q_dim = heads x head_dim would not fit.
  expect_config_error(
      "qwen2-tiny",
      [](auto& j) {
        j["num_attention_heads"] = 4096;
        j["num_key_value_heads"] = 4096;
        j["head_dim"] = 4096;
      },
      "attention heads x head_dim = 16777216 exceeds the limit of 1048576");
  expect_config_error(
      "qwen2-tiny", [](auto& j) { j["num_attention_heads"] = 128; },
      "num_attention_heads (128) exceeds hidden_size (64) and there is no "
      "'head_dim'");
  // The recurrent state each hybrid session allocates from the config alone: 16 x 4096 x 4096.
  expect_config_error(
      "qwen35-hybrid-tiny",
      [](auto& j) {
        j["linear_num_key_heads"] = 16;
        j["linear_num_value_heads"] = 16;
        j["linear_key_head_dim"] = 4096;
        j["linear_value_head_dim"] = 4096;
      },
      "recurrent state per sequence (value heads x key dim x value dim) = 268435456 exceeds the "
      "limit of 67108864");
}

// Within the limit but more layers than the weights hold: refused on the last declared layer
// before any per-layer weights are built (not after building layers 0 and 1).
TEST(ModelLimits, ConfigLayerCountMustMatchTheWeights) {
  const auto dir = with_config("qwen2-tiny", [](auto& j) { j["num_hidden_layers"] = 4096; });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("missing tensor 'model.layers.4095.input_layernorm.weight' (config.json "
                       "says num_hidden_layers = 4096)"),
            std::string::npos)
      << error;
}

TEST(ModelLimits, ConfigNumbersMustBeFiniteAndInRange) {
  for (double eps : {0.0, -1e-6, 1.0})
    expect_config_error(
        "qwen2-tiny", [&](auto& j) { j["rms_norm_eps"] = eps; },
        "'rms_norm_eps' must be > 0 and < 1, got " + number_text(eps));
  for (double theta : {0.0, -10000.0})
    expect_config_error(
        "qwen2-tiny", [&](auto& j) { j["rope_parameters"]["rope_theta"] = theta; },
        "'rope_theta' must be finite and > 0, got " + number_text(theta));
  // Older configs keep it at the top level.
  expect_config_error(
      "llama-tiny",
      [](auto& j) {
        j.erase("rope_parameters");
        j["rope_theta"] = -1.0;
      },
      "'rope_theta' must be finite and > 0, got -1");
  for (double partial : {0.0, -0.5, 1.5})
    expect_config_error(
        "qwen2-tiny", [&](auto& j) { j["partial_rotary_factor"] = partial; },
        "'partial_rotary_factor' must be > 0 and <= 1, got " + number_text(partial));
  expect_config_error(
      "llama-tiny",
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0.0}};
      },
      "'factor' must be finite and > 0, got 0");
  expect_config_error(
      "llama-tiny",
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 4.0},
                             {"high_freq_factor", 4.0}};
      },
      "'high_freq_factor' must be finite and > low_freq_factor, got 4");
}

TEST(ModelLimits, ConfigTokenIdsMustBeInsideTheVocabulary) {
  // llama-tiny: vocab_size 512, bos 1, eos 2.
  expect_config_error(
      "llama-tiny", [](auto& j) { j["bos_token_id"] = 512; },
      "'bos_token_id' 512 is outside the vocabulary (vocab_size 512)");
  expect_config_error(
      "llama-tiny",
      [](auto& j) {
        j["eos_token_id"] = {2, 100000};
      },
      "'eos_token_id' 100000 is outside the vocabulary (vocab_size 512)");
  expect_config_error(
      "llama-tiny", [](auto& j) { j["eos_token_id"] = -1; },
      "'eos_token_id' -1 is outside the vocabulary (vocab_size 512)");
  expect_config_error(
      "llama-tiny", [](auto& j) { j["eos_token_id"] = "2"; },
      "'eos_token_id' must be a token id or a list of them, got \"2\"");
  // What a config may hold: one id, a list, or null.
  const auto ok = with_config("llama-tiny", [](auto& j) {
    j["bos_token_id"] = nullptr;
    j["eos_token_id"] = {2, 511};
  });
  EXPECT_EQ(load_error(ok), "");
  EXPECT_EQ(load_hf_config(ok / "config.json").eos_ids, (std::vector<int32_t>{2, 511}));
}

// A GGUF of llama-tiny rewritten without its tokenizer (so bos/eos ids are checked against the
// embedding's 512 rows) and with some metadata replaced.
class GgufLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(test::temp_dir() / "gguf-limits");
    std::filesystem::create_directories(*dir_);
    for (const char* f : {"config.json", "model.safetensors"})
      std::filesystem::copy_file(test::data_path("oracle/llama-tiny") / f, *dir_ / f);
    // Export writes a tokenizer; the bundled model's is at hand.
    std::filesystem::copy_file(test::source_path("models/pycoder-6m/tokenizer.json"),
                               *dir_ / "tokenizer.json");
    export_gguf(*Model::load(*dir_), FileType::F32, *dir_ / "full.gguf");
  }
  static void TearDownTestSuite() { delete dir_; }

  // The source with `changes` applied to its metadata; emptied_tensor, when named, is written with
  // `dims` and no data.
  std::filesystem::path variant(const std::map<std::string, GgufValue>& changes,
                                const std::string& emptied_tensor = "",
                                const std::vector<int64_t>& dims = {}) {
    const GgufFile source = GgufFile::open(*dir_ / "full.gguf");
    GgufWriter w;
    for (const GgufKv& kv : source.metadata())
      if (!changes.count(kv.key) && kv.key.rfind("tokenizer.", 0) != 0) w.set(kv.key, kv.value);
    for (const auto& [key, value] : changes) w.set(key, value);
    for (const GgufTensor& t : source.tensors()) {
      if (t.name == emptied_tensor) {
        w.add_tensor(t.name, t.ggml_type, dims, {});
        continue;
      }
      w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
    }
    const auto path = *dir_ / ("variant-" + std::to_string(n_++) + ".gguf");
    w.write(path);
    return path;
  }

  void expect_error(const std::map<std::string, GgufValue>& changes, const std::string& message) {
    const auto path = variant(changes);
    const std::string error = load_error(path);
    EXPECT_NE(error.find(path.string() + ": " + message), std::string::npos)
        << "wanted '" << message << "' in: " << error;
  }

  static std::filesystem::path* dir_;
  int n_ = 0;
};

std::filesystem::path* GgufLimits::dir_ = nullptr;

TEST_F(GgufLimits, TheSourceLoads) {
  EXPECT_EQ(load_error(variant({})), "");
}

TEST_F(GgufLimits, SizesAreBoundedBeforeAllocation) {
  const GgufValue huge = GgufValue::make_u32(uint32_t(kHuge));
  expect_error({{"llama.block_count", huge}},
               "llama.block_count must be a positive integer (at most 4096), got 1073741824");
  for (const char* key : {"llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.attention.key_length", "llama.rope.dimension_count"})
    expect_error(
        {{key, huge}},
        std::string(key) + " must be a positive integer (at most 1048576), got 1073741824");
  expect_error({{"llama.context_length", GgufValue::make_u64(uint64_t(1) << 40)}},
               "llama.context_length must be a positive integer (at most 16777216), got "
               "1099511627776");
  expect_error({{"llama.attention.head_count", GgufValue::make_u32(4096)},
                {"llama.attention.head_count_kv", GgufValue::make_u32(4096)},
                {"llama.attention.key_length", GgufValue::make_u32(4096)}},
               "attention heads x head_dim = 16777216 exceeds the limit of 1048576");
}

// Within the limit, but the file holds 2 layers: refused on the last declared one, before any
// per-layer vector is built.
TEST_F(GgufLimits, BlockCountMustMatchTheTensors) {
  expect_error({{"llama.block_count", GgufValue::make_u32(4096)}},
               "missing tensor 'blk.4095.attn_norm.weight' (llama.block_count says 4096 layers)");
}

// An embedding of 2^21 rows and no columns holds no bytes, so the file is small and well-formed:
// its row count is refused as a vocabulary.
TEST_F(GgufLimits, VocabularyIsBounded) {
  const auto path = variant({}, "token_embd.weight", {0, int64_t(1) << 21});
  const std::string error = load_error(path);
  EXPECT_NE(error.find(path.string() +
                       ": tensor 'token_embd.weight' has 2097152 rows; the vocabulary must be 1 "
                       "to 1048576 tokens"),
            std::string::npos)
      << error;
}

TEST_F(GgufLimits, NumbersMustBeFiniteAndInRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string eps = "llama.attention.layer_norm_rms_epsilon";
  expect_error({{eps, GgufValue::make_f32(0.0f)}}, eps + " must be > 0 and < 1, got 0");
  expect_error({{eps, GgufValue::make_f32(nan)}}, eps + " must be > 0 and < 1, got nan");
  expect_error({{eps, GgufValue::make_f32(2.0f)}}, eps + " must be > 0 and < 1, got 2");
  const std::string theta = "llama.rope.freq_base";
  expect_error({{theta, GgufValue::make_f32(-1.0f)}}, theta + " must be finite and > 0, got -1");
  expect_error({{theta, GgufValue::make_f32(inf)}}, theta + " must be finite and > 0, got inf");
  // An f64 beyond float's range becomes infinity when narrowed: refused as such.
  expect_error({{theta, GgufValue::make_f64(1e300)}}, theta + " must be finite and > 0, got inf");
  expect_error({{"llama.rope.scaling.type", GgufValue::make_string("linear")},
                {"llama.rope.scaling.factor", GgufValue::make_f32(0.0f)}},
               "llama.rope.scaling.factor must be finite and > 0, got 0");
}

TEST_F(GgufLimits, TokenIdsMustBeInsideTheVocabulary) {
  expect_error({{"tokenizer.ggml.eos_token_id", GgufValue::make_u32(4096)}},
               "tokenizer.ggml.eos_token_id 4096 is outside the vocabulary (512 tokens)");
  expect_error({{"tokenizer.ggml.bos_token_id", GgufValue::make_i32(-1)}},
               "tokenizer.ggml.bos_token_id -1 is outside the vocabulary (512 tokens)");
  expect_error({{"tokenizer.ggml.eot_token_id", GgufValue::make_u32(512)}},
               "tokenizer.ggml.eot_token_id 512 is outside the vocabulary (512 tokens)");
  EXPECT_EQ(load_error(variant({{"tokenizer.ggml.eos_token_id", GgufValue::make_u32(511)}})), "");
}

}  // namespace
}  // namespace fak
