// Parity with HF transformers on every claimed architecture, through the library and the CLI.
#include "runtime/parity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "test_util.h"

namespace fak {

namespace {

struct Fixture {
  std::string name;
  std::string dir;  // holds reference.safetensors (and the model, unless `model` names a file)
  Device device = {};
  std::string model = {};
  std::string reference = "reference.safetensors";  // in dir
  std::string model_path() const { return model.empty() ? dir : model; }
};

void PrintTo(const Fixture& f, std::ostream* os) {
  *os << f.name;
}

// In a CUDA build, every fixture again on the GPU: the same reference, the same tolerance.
std::vector<Fixture> with_cuda(std::vector<Fixture> cpu) {
  const size_t n = cpu.size();
  if (cuda_compiled())
    for (size_t i = 0; i < n; ++i)
      cpu.push_back({cpu[i].name + "-cuda", cpu[i].dir, Device{DeviceKind::Cuda, 0}, cpu[i].model});
  return cpu;
}

std::vector<Fixture> oracle_fixtures() {
  // pycoder's reference has no hidden states
  return with_cuda({{"llama-tiny", test::data_path("oracle/llama-tiny")},
                    {"qwen2-tiny", test::data_path("oracle/qwen2-tiny")},
                    {"qwen3-tiny", test::data_path("oracle/qwen3-tiny")}});
}

// Each named fixture from its HF directory and from the GGUF holding the same weights. A GGUF
// that cannot say everything its HF config says (gpt-oss's YaRN truncate = false: llama.cpp has no
// key for it) is judged against reference-gguf.safetensors, what llama.cpp computes from it;
// elsewhere a fixture's reference-gguf holds llama.cpp's own approximations (Gemma 3's fp16 GELU
// table), which fak does not copy, and the GGUF is held to transformers' reference.
std::vector<Fixture> hf_and_gguf(std::initializer_list<const char*> names,
                                 std::initializer_list<const char*> gguf_says_less = {}) {
  std::vector<Fixture> all;
  for (const char* name : names) {
    const std::string dir = test::data_path(std::string("oracle/") + name).string();
    all.push_back({name, dir});
    Fixture gguf{std::string(name) + "-gguf", dir, {}, dir + "/model.gguf"};
    for (const char* less : gguf_says_less)
      if (std::string(less) == name) gguf.reference = "reference-gguf.safetensors";
    all.push_back(gguf);
  }
  return all;
}

// The MoE fixtures' references come from llama.cpp (their reference.json says how; an
// independent float64 forward from the HF weights agrees to 7e-6), with no hidden states.
std::vector<Fixture> moe_fixtures() {
  return with_cuda(hf_and_gguf({"qwen3-moe-tiny", "qwen35-moe-tiny"}));
}

// Gemma 3 (sliding windows of 8 over a 40-token prompt, GeGLU, sandwich norms, two RoPE tables):
// the float64 forward of transformers' code (reference.json), from either file (the GGUF follows
// transformers too: llama.cpp's own logits, 1.6e-3 away through its fp16 GELU table, are
// reference-gguf.safetensors). GLM-4.5 MoE (a sigmoid router with a correction bias and groups,
// routed scaling, an ungated shared expert, a dense first layer, partial RoPE): its float64
// forward agrees with llama.cpp's to 1e-6. gpt-oss (sinks, alternating windows of 8 over a
// 48-token prompt, YaRN with truncate false, a biased router with a softmax over the chosen two,
// experts with biases and the clamped SwiGLU, 12% of whose activations hit a clamp): the HF
// directory against transformers' meaning, the GGUF against llama.cpp's logits (its YaRN range
// rounded). CPU only: the CUDA backend refuses the three families.
std::vector<Fixture> new_family_fixtures() {
  return hf_and_gguf({"gemma3-tiny", "glm4moe-tiny", "gpt-oss-tiny"}, {"gpt-oss-tiny"});
}

std::vector<Fixture> fixtures() {
  auto all = oracle_fixtures();
  for (auto& f : with_cuda({{"pycoder-6m", test::source_path("models/pycoder-6m")}}))
    all.push_back(f);
  for (auto& f : moe_fixtures()) all.push_back(f);
  for (auto& f : new_family_fixtures()) all.push_back(f);
  return all;
}

// The model on the fixture's device, or a skip that says why the device is not here.
#define LOAD_ON_DEVICE(model, f)                                                   \
  if (const std::string why = device_unavailable_reason((f).device); !why.empty()) \
    GTEST_SKIP() << why;                                                           \
  auto model = Model::load((f).model_path(), {.load_tokenizer = false, .device = (f).device})

}  // namespace

class Parity : public ::testing::TestWithParam<Fixture> {};

TEST_P(Parity, LogitsArgmaxAndGreedyMatchReference) {
  const Fixture& f = GetParam();
  LOAD_ON_DEVICE(model, f);
  auto ref = TensorStore::open_file(std::filesystem::path(f.dir) / f.reference);
  // 1e-3 is what `fak parity` passes at; the CPU is held to 1e-4 below (the GPU, not yet run on
  // one, to the CLI's 1e-3).
  ParityReport r = run_parity(model, ref, 1e-3);
  ASSERT_FALSE(r.cases.empty());
  for (const ParityCase& c : r.cases) {
    std::printf(
        "%s %s: T=%d max|dlogit|=%.3g cos=%.8f argmax %d/%d (near-ties %zu) greedy-tf %d/%d "
        "free-run %d/%d\n",
        f.name.c_str(), c.name.c_str(), c.n_tokens, c.max_abs_diff, c.min_cosine, c.argmax_agree,
        c.argmax_total, c.near_ties.size(), c.teacher_forced_agree, c.greedy_total,
        c.free_run_match, c.greedy_total);
    EXPECT_LE(c.max_abs_diff, f.device.kind == DeviceKind::Cpu ? 1e-4 : 1e-3) << c.name;
    EXPECT_TRUE(c.argmax_mismatches.empty()) << c.name;
    EXPECT_TRUE(c.greedy_mismatches.empty()) << c.name;
    EXPECT_GT(c.greedy_total, 0) << c.name;
    EXPECT_TRUE(c.free_run_ok) << c.name;
    EXPECT_TRUE(c.pass) << c.name;
  }
}

// The oracle fixtures carry per-layer hidden states: check each layer, so a divergence is
// localised to the layer that introduced it.
class HiddenStates : public ::testing::TestWithParam<Fixture> {};

TEST_P(HiddenStates, MatchReferencePerLayer) {
  const Fixture& f = GetParam();
  auto ref = TensorStore::open_file(std::filesystem::path(f.dir) / "reference.safetensors");
  LOAD_ON_DEVICE(model, f);
  auto ids64 = read_i64(ref.get("case0.input_ids"));
  std::vector<int32_t> ids(ids64.begin(), ids64.end());
  KvCache cache(model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
                {.storage = model->make_kv_storage()});
  std::vector<int32_t> blocks;
  while (blocks.size() * size_t(cache.block_size()) < ids.size())
    blocks.push_back(cache.allocate());
  const int dim = model->config().dim;
  int checked = 0;
  const int n_layers = model->config().n_layers;
  HiddenHook hook = [&](int index, const float* h, int T) {
    // HF's last entry (index n_layers) is after the final norm, which is fak's index n_layers + 1.
    if (index == n_layers) return;
    if (index == n_layers + 1) index = n_layers;
    const TensorInfo* t = ref.find("case0.hidden_states." + std::to_string(index));
    ASSERT_NE(t, nullptr) << "no reference for hidden state " << index;
    auto want = read_f32(*t);
    ASSERT_EQ(want.size(), size_t(T) * size_t(dim));
    double md = 0;
    for (size_t i = 0; i < want.size(); ++i) md = std::max(md, double(std::fabs(h[i] - want[i])));
    EXPECT_LT(md, 1e-4) << f.name << " hidden state " << index;
    ++checked;
  };
  BatchItem it;
  it.blocks = &blocks;
  it.tokens = ids.data();
  it.n_tokens = int(ids.size());
  model->forward({&it, 1}, cache, &hook);
  EXPECT_EQ(checked, n_layers + 1);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, Parity, ::testing::ValuesIn(fixtures()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(OracleFixtures, HiddenStates, ::testing::ValuesIn(oracle_fixtures()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(ParityCli, PassesOnFixtureAndFailsOnWrongReference) {
  auto dir = test::data_path("oracle/qwen3-tiny");
  auto ok = test::run_fak("parity -m " + dir.string() + " --reference " +
                          (dir / "reference.safetensors").string() + " --json");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"pass\": true"), std::string::npos) << ok.out;
  // The qwen2 fixture's reference against the qwen3 model: same vocab, different numbers -> fails.
  auto bad = test::run_fak("parity -m " + dir.string() + " --reference " +
                           test::data_path("oracle/qwen2-tiny/reference.safetensors").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("FAIL"), std::string::npos) << bad.out;
}

}  // namespace fak
