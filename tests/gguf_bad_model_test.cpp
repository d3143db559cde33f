// Systematic bad input for GGUF model loading (beyond the container format, which gguf_fuzz
// covers): starting from a valid file of each architecture family, every metadata key is dropped
// in turn, every tensor is dropped, and every tensor gets a wrong shape. Each variant must load or
// fail with one one-line fak::Error — never crash or load a model of the wrong shape — and a
// missing or misshapen tensor is named.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "test_util.h"

namespace fak {
namespace {

// A GGUF of the fixture (tokenizer metadata left out: it is not what is under test here).
struct Source {
  std::filesystem::path dir;
  GgufFile file;
};

Source make_source(const std::string& fixture) {
  const auto dir = test::temp_dir() / fixture;
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/" + fixture);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(src / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("tokenizer/qwen") / f, dir / f);
  export_gguf(*Model::load(dir), FileType::F32, dir / "full.gguf");
  return {dir, GgufFile::open(dir / "full.gguf")};
}

bool is_tokenizer_key(const std::string& key) {
  return key.rfind("tokenizer.", 0) == 0;
}

// Writes the source minus/with changes: skip_key / skip_tensor by name, reshape_tensor gets its
// first dimension grown by one (data zero-padded to match).
std::filesystem::path variant(const Source& s, const std::string& skip_key,
                              const std::string& skip_tensor, const std::string& reshape_tensor) {
  GgufWriter w;
  for (const GgufKv& kv : s.file.metadata())
    if (!is_tokenizer_key(kv.key) && kv.key != skip_key && kv.key != "general.alignment")
      w.set(kv.key, kv.value);
  std::vector<std::vector<uint8_t>> keep;
  for (const GgufTensor& t : s.file.tensors()) {
    if (t.name == skip_tensor) continue;
    if (t.name == reshape_tensor) {
      std::vector<int64_t> dims = t.dims;
      dims[0] += 1;
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      keep.emplace_back(size_t(n) * 4, 0);  // every tensor of the f32 export is F32
      w.add_tensor(t.name, t.ggml_type, dims, {keep.back().data(), keep.back().size()});
      continue;
    }
    w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
  }
  const auto path = s.dir / "variant.gguf";
  w.write(path);
  return path;
}

// "ok" when it loads, else the error's message; anything but fak::Error fails the test.
std::string load(const std::filesystem::path& path) {
  try {
    Model::load(path, {.load_tokenizer = false});
    return "ok";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_FALSE(what.empty());
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
}

class GgufBadModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufBadModel, EveryMissingKeyMissingTensorOrWrongShapeIsOneClearError) {
  const Source s = make_source(GetParam());
  ASSERT_EQ(load(variant(s, "", "", "")), "ok");
  // A dropped key is either optional (a default applies) or refused; a refusal may name the key
  // or what it makes inconsistent (e.g. without head_count_kv, attn_k's shape no longer fits).
  int refused_keys = 0;
  for (const GgufKv& kv : s.file.metadata()) {
    if (is_tokenizer_key(kv.key) || kv.key == "general.alignment") continue;
    if (load(variant(s, kv.key, "", "")) != "ok") ++refused_keys;
  }
  EXPECT_GT(refused_keys, 3);
  for (const GgufTensor& t : s.file.tensors()) {
    // GGUF has no tie flag: a file without output.weight uses token_embd (as llama.cpp does).
    if (t.name != "output.weight") {
      const std::string dropped = load(variant(s, "", t.name, ""));
      EXPECT_NE(dropped, "ok") << "loaded without " << t.name;
      EXPECT_NE(dropped.find(t.name), std::string::npos)
          << "dropping " << t.name << ": " << dropped;
    }
    const std::string reshaped = load(variant(s, "", "", t.name));
    EXPECT_NE(reshaped, "ok") << "loaded " << t.name << " with a wrong shape";
    EXPECT_NE(reshaped.find(t.name), std::string::npos)
        << "reshaping " << t.name << ": " << reshaped;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufBadModel,
                         ::testing::Values("llama-tiny", "qwen2-tiny", "qwen3-tiny",
                                           "qwen35-hybrid-tiny", "qwen3-moe-tiny",
                                           "qwen35-moe-tiny"),
                         [](const auto& info) { return test::fixture_name(info.param); });

}  // namespace
}  // namespace fak
