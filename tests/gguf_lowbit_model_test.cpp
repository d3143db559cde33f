// The low-bit GGUF files people download for 16-32 GB machines, end to end on the bundled model
// (its 256 / 768-wide matrices fit the 256-element super-blocks): llama-quantize's Q2_K, Q3_K_M,
// IQ4_XS and IQ4_NL mixes as fak writes them, and an unsloth "UD"-style file that gives each matrix
// its own type (q2_K ... q8_0 side by side), loaded and run against the f32 model; `fak quantize`
// to the new types; and the per-tensor rules of those mixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "io/ggml_type.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "models/quant_policy.h"
#include "quant/quant.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

std::filesystem::path bundled() {
  return test::source_path("models/pycoder-6m");
}

// A reference prompt and the f32 model's greedy continuation of it: 56 positions of text the model
// is sure about, where a coarse weight type shows as lost top-1 agreement.
std::vector<int32_t> prompt() {
  auto ref = TensorStore::open_file(bundled() / "reference.safetensors");
  std::vector<int32_t> ids;
  for (const char* part : {"case0.input_ids", "case0.greedy_ids"})
    for (int64_t v : read_i64(ref.get(part))) ids.push_back(int32_t(v));
  return ids;
}

// Logits at every position of ids, prefilled in one call.
std::vector<float> logits(std::shared_ptr<const Model> m, const std::vector<int32_t>& ids) {
  auto cache = std::make_shared<KvCache>(m->n_attention_layers(), m->config().n_kv_heads,
                                         m->config().head_dim);
  Session s(m, cache);
  std::vector<float> out;
  s.append(ids, &out);
  return out;
}

// The same, one token per call (the decode kernels rather than the prefill tiles).
std::vector<float> stepped(std::shared_ptr<const Model> m, const std::vector<int32_t>& ids) {
  auto cache = std::make_shared<KvCache>(m->n_attention_layers(), m->config().n_kv_heads,
                                         m->config().head_dim);
  Session s(m, cache);
  std::vector<float> all;
  for (int32_t id : ids) {
    std::vector<float> one;
    s.append(std::vector<int32_t>{id}, &one);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

struct Agreement {
  double min_cos = 1;
  int top1 = 0, positions = 0;
};

Agreement agreement(const std::vector<float>& ref, const std::vector<float>& got, int vocab) {
  Agreement a;
  a.positions = int(ref.size() / size_t(vocab));
  for (int t = 0; t < a.positions; ++t) {
    const float* x = &ref[size_t(t) * size_t(vocab)];
    const float* y = &got[size_t(t) * size_t(vocab)];
    double dot = 0, nx = 0, ny = 0;
    for (int i = 0; i < vocab; ++i) {
      dot += double(x[i]) * y[i];
      nx += double(x[i]) * x[i];
      ny += double(y[i]) * y[i];
    }
    a.min_cos = std::min(a.min_cos, dot / std::sqrt(nx * ny));
    a.top1 += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
  }
  return a;
}

// How many tensors of each ggml type name a file holds.
std::map<std::string, int> type_counts(const std::filesystem::path& path) {
  std::map<std::string, int> n;
  const GgufFile f = GgufFile::open(path);
  for (const GgufTensor& t : f.tensors()) n[std::string(ggml_type_info(t.ggml_type)->name)]++;
  return n;
}

// Run against the f32 model: a mix is judged by its worst position's logit cosine and its top-1
// agreement over the prompt (measured values beside each bound). The decode kernels must give the
// prefill tiles' bits, and a mapped file the bits of one read into memory.
void expect_close(const std::filesystem::path& gguf, double min_cos, int min_top1_percent) {
  SCOPED_TRACE(gguf.filename().string());
  const std::vector<int32_t> ids = prompt();
  const std::vector<float> ref = logits(Model::load(bundled()), ids);
  auto read = Model::load(gguf);
  auto mapped = Model::load(gguf, {.mmap = true});
  const std::vector<float> got = logits(read, ids);
  const Agreement a = agreement(ref, got, read->config().vocab);
  std::printf("  %s: min cos %.4f, top-1 %d/%d\n", gguf.filename().c_str(), a.min_cos, a.top1,
              a.positions);
  EXPECT_GT(a.min_cos, min_cos);
  EXPECT_GE(a.top1 * 100, a.positions * min_top1_percent);
  EXPECT_TRUE(test::bit_equal(got, logits(mapped, ids)));
  const std::vector<int32_t> head(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 12));
  const std::vector<float> prefilled = logits(read, head);
  EXPECT_TRUE(test::bit_equal(prefilled, stepped(read, head)));
  EXPECT_TRUE(test::bit_equal(prefilled, stepped(mapped, head)));
}

// llama-quantize's mixes as `fak convert` writes them. The bundled model has 4 query heads per
// key/value head and 6 layers, so (llama.cpp's rules): Q2_K keeps attn_v in Q4_K and ffn_down /
// attn_output in Q3_K; Q3_K_M gives attn_v Q5_K (first two layers) / Q4_K and ffn_down /
// attn_output Q4_K; the IQ4 mixes give attn_v Q5_K; the tied embedding is the output, Q6_K.
TEST(GgufLowbit, LlamaQuantizeMixesRunCloseToF32) {
  const auto dir = test::temp_dir();
  auto hf = Model::load(bundled());
  struct Case {
    FileType type;
    const char* file;
    std::map<std::string, int> types;  // tensors of each type in the file (2-D weights)
    double min_cos;
    int top1_percent;
  };
  // Bounds under the measured values (beside each); Q4_K_M, the mix these sit below, for scale.
  const Case cases[] = {
      {FileType::Q4_K_M, "q4_k_m.gguf", {{"q4_K", 38}, {"q6_K", 5}}, 0.9, 85},  // 0.980, 53/56
      {FileType::Q2_K,                                                          // 0.755, 44/56
       "q2_k.gguf",
       {{"q2_K", 24}, {"q3_K", 12}, {"q4_K", 6}, {"q6_K", 1}},
       0.65,
       70},
      {FileType::Q3_K_M,  // 0.932, 49/56
       "q3_k_m.gguf",
       {{"q3_K", 24}, {"q4_K", 16}, {"q5_K", 2}, {"q6_K", 1}},
       0.88,
       80},
      {FileType::IQ4_XS,
       "iq4_xs.gguf",
       {{"iq4_xs", 36}, {"q5_K", 6}, {"q6_K", 1}},
       0.9,
       85},  // 0.946, 54/56
      {FileType::IQ4_NL,
       "iq4_nl.gguf",
       {{"iq4_nl", 36}, {"q5_K", 6}, {"q6_K", 1}},
       0.9,
       85},  // 0.950, 52/56
  };
  for (const Case& c : cases) {
    export_gguf(*hf, c.type, dir / c.file);
    std::map<std::string, int> got = type_counts(dir / c.file);
    got.erase("f32");  // norms
    EXPECT_EQ(got, c.types) << c.file;
    expect_close(dir / c.file, c.min_cos, c.top1_percent);
  }
}

// An unsloth "UD"-style file: every 2-D weight its own type, cycling through the new ones and the
// K-quants / q8_0 they are mixed with, written from the f32 conversion as llama-quantize's
// --tensor-type overrides would.
TEST(GgufLowbit, PerTensorMixLoadsAndRuns) {
  const auto dir = test::temp_dir();
  export_gguf(*Model::load(bundled()), FileType::F32, dir / "f32.gguf");
  const GgufFile f32 = GgufFile::open(dir / "f32.gguf");
  const WType cycle[] = {WType::Q2_K, WType::Q3_K, WType::IQ4_XS, WType::IQ4_NL,
                         WType::Q4_K, WType::Q5_K, WType::Q6_K,   WType::Q8_0};
  GgufWriter w;
  for (const GgufKv& kv : f32.metadata())
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  std::vector<std::vector<uint8_t>> owned;
  std::map<std::string, int> used;
  size_t next = 0;
  for (const GgufTensor& t : f32.tensors()) {
    if (t.dims.size() != 2) {
      w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
      continue;
    }
    const WType type = cycle[next++ % std::size(cycle)];
    const WeightMatrix m{WType::F32, t.data, t.dims[1], t.dims[0], size_t(t.dims[0]) * 4};
    owned.push_back(convert_matrix(m, type));
    w.add_tensor(t.name, uint32_t(*wtype_quant(type)), t.dims, owned.back());
    used[std::string(wtype_name(type))]++;
  }
  w.write(dir / "mix.gguf");
  for (WType t : cycle) EXPECT_GE(used[std::string(wtype_name(t))], 4) << wtype_name(t);
  expect_close(dir / "mix.gguf", 0.75, 80);  // measured: min cos 0.829, top-1 49/56
}

// `fak quantize` takes the new types by llama.cpp's names and writes files `fak run` runs.
TEST(GgufLowbit, QuantizeCliWritesAndRunsThem) {
  const auto dir = test::temp_dir();
  export_gguf(*Model::load(bundled()), FileType::F32, dir / "f32.gguf");
  const std::pair<const char*, const char*> types[] = {
      {"q2_k", "q2_k"}, {"q3_k_m", "q3_k"}, {"iq4_xs", "iq4_xs"}, {"iq4_nl", "iq4_nl"}};
  for (const auto& [type, main_type] : types) {
    const auto out = dir / (std::string(type) + ".gguf");
    auto r = test::run_fak("quantize " + (dir / "f32.gguf").string() + " " + out.string() + " " +
                           type + " -t 1");
    ASSERT_EQ(r.exit_code, 0) << type << ": " << r.err;
    EXPECT_NE(r.out.find(main_type), std::string::npos) << r.out;
    const GgufFile f = GgufFile::open(out);
    EXPECT_EQ(f.get_u32("general.file_type"), uint32_t(parse_file_type(type)));
    r = test::run_fak("run -m " + out.string() + " -p 'def f(x):' -n 4 -t 1");
    EXPECT_EQ(r.exit_code, 0) << type << ": " << r.err;
  }
}

// llama.cpp's llama_tensor_get_type for the low-bit mixes, on two shapes: a Llama-3-8B-like model
// (4096 wide, 14336 FFN, 32 layers, 4 query heads per kv head) and Qwen2.5-0.5B (896 wide: no
// multiple of 256, so llama.cpp's fallbacks: q4_0 for q2_K / q3_K, iq4_nl for iq4_xs).
TEST(QuantPolicy, LlamaCppLowbitMixes) {
  const int n = 32;
  auto type = [&](FileType ft, const char* role, int layer, int64_t cols, int gqa = 4,
                  bool tied = false, int experts = 0) {
    return choose_wtype(ft, role, layer, n, cols, tied, experts, gqa);
  };
  EXPECT_EQ(type(FileType::Q2_K, "attn_q", 0, 4096), WType::Q2_K);
  EXPECT_EQ(type(FileType::Q2_K, "attn_k", 0, 4096), WType::Q2_K);
  EXPECT_EQ(type(FileType::Q2_K, "attn_v", 0, 4096), WType::Q4_K);
  EXPECT_EQ(type(FileType::Q2_K, "attn_v", 0, 4096, 1), WType::Q3_K);
  EXPECT_EQ(type(FileType::Q2_K, "attn_output", 5, 4096), WType::Q3_K);
  EXPECT_EQ(type(FileType::Q2_K, "attn_output", 5, 4096, 4, false, 8), WType::Q5_K);
  EXPECT_EQ(type(FileType::Q2_K, "ffn_down", 9, 14336), WType::Q3_K);
  EXPECT_EQ(type(FileType::Q2_K, "ffn_up", 9, 4096), WType::Q2_K);
  EXPECT_EQ(type(FileType::Q2_K, "token_embd", 0, 4096), WType::Q2_K);
  EXPECT_EQ(type(FileType::Q2_K, "output", 0, 4096), WType::Q6_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "attn_v", 1, 4096), WType::Q5_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "attn_v", 2, 4096), WType::Q4_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "ffn_down", 1, 14336), WType::Q5_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "ffn_down", 2, 14336), WType::Q4_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "attn_output", 2, 4096), WType::Q4_K);
  EXPECT_EQ(type(FileType::Q3_K_M, "ffn_gate", 2, 4096), WType::Q3_K);
  EXPECT_EQ(type(FileType::IQ4_XS, "attn_v", 7, 4096), WType::Q5_K);
  EXPECT_EQ(type(FileType::IQ4_XS, "attn_v", 7, 4096, 2), WType::IQ4_XS);
  EXPECT_EQ(type(FileType::IQ4_XS, "ffn_down", 3, 14336), WType::Q5_K);
  EXPECT_EQ(type(FileType::IQ4_XS, "ffn_down", 4, 14336), WType::IQ4_XS);
  EXPECT_EQ(type(FileType::IQ4_XS, "attn_output", 4, 4096), WType::IQ4_XS);
  EXPECT_EQ(type(FileType::IQ4_XS, "output", 0, 4096), WType::Q6_K);
  EXPECT_EQ(type(FileType::IQ4_NL, "ffn_up", 4, 4096), WType::IQ4_NL);
  // Qwen2.5-0.5B: 896 columns, 24 layers, 7 query heads per kv head, tied embeddings.
  auto qwen = [](FileType ft, const char* role, int layer, int64_t cols) {
    return choose_wtype(ft, role, layer, 24, cols, true, 0, 7);
  };
  EXPECT_EQ(qwen(FileType::Q2_K, "attn_q", 0, 896), WType::Q4_0);
  EXPECT_EQ(qwen(FileType::Q2_K, "attn_v", 0, 896), WType::Q5_0);  // q4_K's fallback
  EXPECT_EQ(qwen(FileType::Q2_K, "ffn_down", 0, 4864), WType::Q3_K);
  EXPECT_EQ(qwen(FileType::Q2_K, "token_embd", 0, 896), WType::Q8_0);
  EXPECT_EQ(qwen(FileType::IQ4_XS, "attn_q", 0, 896), WType::IQ4_NL);
  EXPECT_EQ(qwen(FileType::IQ4_XS, "ffn_down", 5, 4864), WType::IQ4_XS);
  EXPECT_EQ(qwen(FileType::IQ4_NL, "attn_q", 0, 896), WType::IQ4_NL);
  EXPECT_EQ(qwen(FileType::IQ4_NL, "token_embd", 0, 896), WType::Q8_0);
  EXPECT_EQ(qwen(FileType::Q3_K_M, "attn_q", 0, 176), WType::F16);  // fits no block
  // llama.cpp's general.file_type values.
  EXPECT_EQ(uint32_t(parse_file_type("Q2_K")), 10u);
  EXPECT_EQ(uint32_t(parse_file_type("q3_k_m")), 12u);
  EXPECT_EQ(uint32_t(parse_file_type("iq4_nl")), 25u);
  EXPECT_EQ(uint32_t(parse_file_type("iq4_xs")), 30u);
}

}  // namespace
}  // namespace fak
