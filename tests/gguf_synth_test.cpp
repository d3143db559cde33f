// fak synth --gguf-type: a random-weight GGUF written tensor by tensor in the file type's
// per-tensor types. The types and shapes must be what fak convert writes for the same config
// (whose rules are llama-quantize's: quant_policy_test.cpp), the bytes must depend on the seed
// alone, and the file must load and run.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "io/gguf.h"
#include "memory/kv_cache.h"
#include "models/gguf_export.h"
#include "models/gguf_synth.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

struct Shape {
  uint32_t type;
  std::vector<int64_t> dims;
  bool operator==(const Shape&) const = default;
};

std::map<std::string, Shape> shapes(const std::filesystem::path& gguf) {
  const GgufFile f = GgufFile::open(gguf);
  std::map<std::string, Shape> out;
  for (const GgufTensor& t : f.tensors()) out[t.name] = {t.ggml_type, t.dims};
  return out;
}

class GgufSynth : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufSynth, TypesAndShapesAreWhatConvertWrites) {
  const std::string name = GetParam();
  const auto dir = test::temp_dir();
  // The fixture with a vocabulary, as convert needs one.
  const auto src = test::data_path(std::string("oracle/") + name);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(src / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("tokenizer/qwen") / f, dir / f);
  const auto hf = Model::load(dir);
  for (FileType ft : {FileType::Q4_K_M, FileType::Q8_0}) {
    export_gguf(*hf, ft, dir / "converted.gguf");
    synth_gguf(hf->config(), hf->tokenizer()->spec(), ft, 7, 0.02f, dir / "synth.gguf");
    EXPECT_EQ(shapes(dir / "synth.gguf"), shapes(dir / "converted.gguf")) << name;
    // It loads, and its logits are finite.
    const auto g = Model::load(dir / "synth.gguf", {.load_tokenizer = false});
    auto cache = std::make_shared<KvCache>(g->n_attention_layers(), g->config().n_kv_heads,
                                           g->config().head_dim);
    Session s(g, cache);
    s.append(test::random_ids(12, g->config().vocab, 3));
    for (float v : s.logits()) ASSERT_TRUE(std::isfinite(v));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufSynth,
                         ::testing::Values("qwen3-moe-tiny", "qwen35-hybrid-tiny", "llama-tiny"),
                         [](const auto& i) { return test::fixture_name(i.param); });

TEST(GgufSynthBytes, DependOnTheSeedAloneNotOnThreads) {
  const auto dir = test::temp_dir();
  const ModelConfig c = load_hf_config(test::data_path("oracle/qwen3-moe-tiny/config.json"));
  const Tokenizer tok = Tokenizer::from_dir(test::data_path("tokenizer/qwen"));
  const int threads = omp_get_max_threads();
  // One file name (general.name is its stem) in three folders.
  for (const char* d : {"a", "b", "c"}) std::filesystem::create_directories(dir / d);
  omp_set_num_threads(1);
  synth_gguf(c, tok.spec(), FileType::Q4_K_M, 11, 0.02f, dir / "a" / "m.gguf");
  omp_set_num_threads(std::max(2, threads));
  synth_gguf(c, tok.spec(), FileType::Q4_K_M, 11, 0.02f, dir / "b" / "m.gguf");
  synth_gguf(c, tok.spec(), FileType::Q4_K_M, 12, 0.02f, dir / "c" / "m.gguf");
  omp_set_num_threads(threads);
  const std::string a = test::read_file(dir / "a" / "m.gguf");
  EXPECT_TRUE(a == test::read_file(dir / "b" / "m.gguf"));
  EXPECT_FALSE(a == test::read_file(dir / "c" / "m.gguf"));
}

TEST(GgufSynthBytes, AnUnwritableDestinationFailsAndLeavesNothing) {
  const auto dir = test::temp_dir();
  const ModelConfig c = load_hf_config(test::data_path("oracle/llama-tiny/config.json"));
  const Tokenizer tok = Tokenizer::from_dir(test::data_path("tokenizer/qwen"));
  EXPECT_THROW(synth_gguf(c, tok.spec(), FileType::Q8_0, 1, 0.02f, dir / "no" / "such" / "x.gguf"),
               Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "no"));
}

}  // namespace
}  // namespace fak
