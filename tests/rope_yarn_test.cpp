// YaRN RoPE scaling as HF transformers computes it (_compute_yarn_parameters): the rope table
// against float64 goldens from tests/tools/yarn_reference.py, a Qwen2 fixture run with YaRN,
// the GGUF round trip of every YaRN parameter, and refusals of bad values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "memory/kv_cache.h"
#include "models/config.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "models/quant_policy.h"
#include "models/rope.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& p) {
  return json::parse(test::read_file(p));
}

// Every golden file: one HF config each, its float64 inv_freq, attention factor and cos/sin.
std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(test::data_path("rope")))
    if (e.path().filename().string().starts_with("yarn_")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Tolerances. fak computes inv_freq as HF does, in float32 (a pow, two divisions and the blend,
// each rounding by 2^-24 relative), so against the float64 truth it agrees to ~1e-6 relative.
// The angle pos * inv_freq is a float32 product too, so its absolute error grows with the angle
// (~1e-6 of it: 3e-7 from inv_freq, 6e-8 from the product); cos and sin inherit that error plus
// their own float32 rounding and the attention factor's. At pos 100000 the fastest dimension
// turns 1e5 radians and is only good to ~0.1, exactly as in HF; the interpolated (slow)
// dimensions YaRN changes turn a few radians and are checked to ~1e-6.
TEST(RopeYarn, TableMatchesFloat64Reference) {
  const auto files = golden_files();
  ASSERT_GE(files.size(), 7u);
  for (const auto& path : files) {
    const json g = read_json(path);
    const std::string name = g["name"];
    SCOPED_TRACE(name);
    const ModelConfig c = parse_hf_config(g["config"], name);
    ASSERT_EQ(c.rope_scaling, RopeScaling::Yarn);
    const Rope rope(c);
    ASSERT_EQ(rope.rotary_dim(), g["rotary_dim"].get<int>());
    const double attention = g["attention_factor"];
    EXPECT_NEAR(c.rope_attention_factor, attention, 1e-12 * attention);
    EXPECT_NEAR(rope.attention_scaling(), attention, 1e-7 * attention);
    const auto& inv = g["inv_freq"];
    const int half = rope.rotary_dim() / 2;
    ASSERT_EQ(int(inv.size()), half);
    for (int i = 0; i < half; ++i) {
      const double want = inv[size_t(i)];
      EXPECT_NEAR(rope.inv_freq(i), want, 1e-6 * want) << "inv_freq " << i;
    }
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (const json& p : g["positions"]) {
      const int pos = p["pos"];
      rope.angles(pos, cs.data(), sn.data());
      for (int i = 0; i < half; ++i) {
        const double angle = p["angle"][size_t(i)];
        const double tol = 1e-6 * (1 + std::fabs(angle)) * attention;
        EXPECT_NEAR(cs[size_t(i)], p["cos"][size_t(i)].get<double>(), tol)
            << "cos pos " << pos << " dim " << i;
        EXPECT_NEAR(sn[size_t(i)], p["sin"][size_t(i)].get<double>(), tol)
            << "sin pos " << pos << " dim " << i;
      }
    }
  }
}

TEST(RopeYarn, TruncateFalseMovesTheRamp) {
  // The same gpt-oss parameters with truncate true give a different (rounded) ramp: the flag is
  // really consulted, not just parsed.
  json cfg = read_json(test::data_path("rope/yarn_gptoss_64.json"))["config"];
  const Rope exact(parse_hf_config(cfg, "gptoss"));
  cfg["rope_parameters"]["truncate"] = true;
  const Rope rounded(parse_hf_config(cfg, "gptoss"));
  int differ = 0;
  for (int i = 0; i < exact.rotary_dim() / 2; ++i)
    differ += exact.inv_freq(i) != rounded.inv_freq(i);
  EXPECT_GT(differ, 0);
}

TEST(RopeYarn, NonYarnTablesUnchanged) {
  // Default RoPE keeps attention scaling 1 and HF's plain float32 inv_freq.
  json cfg = read_json(test::data_path("rope/yarn_qwen_128.json"))["config"];
  cfg.erase("rope_scaling");
  const ModelConfig c = parse_hf_config(cfg, "default");
  const Rope rope(c);
  EXPECT_EQ(c.rope_scaling, RopeScaling::None);
  EXPECT_EQ(rope.attention_scaling(), 1.0f);
  for (int i = 0; i < rope.rotary_dim() / 2; ++i)
    EXPECT_EQ(rope.inv_freq(i), 1.0f / std::pow(1e6f, float(2 * i) / 128.0f));
}

// qwen2-tiny (head_dim 16, max_position_embeddings 512) with YaRN over a trained context of 16
// tokens, so it shows inside the fixture's prompt.
std::filesystem::path yarn_fixture(const std::string& name, const json& scaling) {
  const auto dir = test::temp_dir() / name;
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/qwen2-tiny");
  std::filesystem::copy_file(src / "model.safetensors", dir / "model.safetensors");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("tokenizer/qwen") / f, dir / f);
  json cfg = read_json(src / "config.json");
  if (!scaling.is_null()) cfg["rope_parameters"] = scaling;
  test::write_file(dir / "config.json", cfg.dump(2));
  return dir;
}

std::vector<float> all_logits(std::shared_ptr<const Model> m, const std::vector<int32_t>& ids) {
  auto cache = std::make_shared<KvCache>(m->n_attention_layers(), m->config().n_kv_heads,
                                         m->config().head_dim);
  Session s(m, cache);
  std::vector<float> logits;
  s.append(ids, &logits);
  return logits;
}

json qwen_yarn(double factor) {
  return {{"rope_type", "yarn"},
          {"rope_theta", 1000000.0},
          {"factor", factor},
          {"original_max_position_embeddings", 16}};
}

TEST(RopeYarn, Qwen2FixtureRunsWithYarn) {
  const auto plain = Model::load(yarn_fixture("plain", json()));
  const auto yarn_dir = yarn_fixture("yarn", qwen_yarn(4.0));
  const auto yarn = Model::load(yarn_dir);
  const ModelConfig& c = yarn->config();
  EXPECT_EQ(c.rope_scaling, RopeScaling::Yarn);
  EXPECT_EQ(c.rope_factor, 4.0);
  EXPECT_EQ(c.rope_original_max_pos, 16);
  EXPECT_EQ(c.rope_yarn_beta_fast, 32.0);
  EXPECT_EQ(c.rope_yarn_beta_slow, 1.0);
  EXPECT_TRUE(c.rope_yarn_truncate);
  EXPECT_DOUBLE_EQ(c.rope_attention_factor, 0.1 * std::log(4.0) + 1);

  const std::vector<int32_t> ids = test::random_ids(40, c.vocab, 7);
  const std::vector<float> a = all_logits(plain, ids), b = all_logits(yarn, ids);
  ASSERT_EQ(a.size(), b.size());
  const size_t vocab = size_t(c.vocab);
  // Position 0 attends only to itself: softmax over one key is 1 whatever q.k, so the scaled
  // rotation cannot show there. Every later position sees YaRN's slower frequencies and scale.
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * vocab));
  for (size_t t = 1; t < ids.size(); ++t) {
    double diff = 0;
    for (size_t v = 0; v < vocab; ++v)
      diff = std::max(diff, double(std::fabs(a[t * vocab + v] - b[t * vocab + v])));
    EXPECT_GT(diff, 1e-4) << "position " << t;
  }
  // factor 1 stretches nothing (interpolation = extrapolation, attention factor 1): the same
  // model up to the float32 rounding of the blend.
  const auto same = Model::load(yarn_fixture("yarn1", qwen_yarn(1.0)));
  EXPECT_EQ(same->config().rope_attention_factor, 1.0);
  const std::vector<float> s = all_logits(same, ids);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(s[i], a[i], 1e-5) << i;

  // And through the CLI, past the trained 16 positions.
  std::string list;
  for (size_t i = 0; i < 24; ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  const auto r =
      test::run_fak("run -m " + yarn_dir.string() + " --ids " + list + " -n 4 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["ids"].size(), 4u);
}

// Issue 34: YaRN stretches the context a sequence may reach: a Qwen2.5 config left at
// max_position_embeddings 32k with factor 4 runs to 128k, as its model card says. Past the
// stretched length (and past the trained one without YaRN) a prompt is refused before any work.
TEST(RopeYarn, YarnStretchesTheContextLimit) {
  auto at = [](int max_pos, const json& scaling) {
    const auto dir =
        yarn_fixture("limit" + std::to_string(max_pos) + (scaling.is_null() ? "" : "y"), scaling);
    json cfg = read_json(dir / "config.json");
    cfg["max_position_embeddings"] = max_pos;
    test::write_file(dir / "config.json", cfg.dump(2));
    return dir;
  };
  json scaling = qwen_yarn(4.0);
  scaling["original_max_position_embeddings"] = 32;
  const auto yarn = Model::load(at(32, scaling));
  EXPECT_EQ(yarn->config().max_seq_len, 32);
  EXPECT_EQ(yarn->config().context_limit(), 128);
  const auto plain = Model::load(at(32, json()));
  EXPECT_EQ(plain->config().context_limit(), 32);
  const std::vector<int32_t> ids = test::random_ids(100, yarn->config().vocab, 3);
  EXPECT_EQ(all_logits(yarn, ids).size(), ids.size() * size_t(yarn->config().vocab));
  try {
    all_logits(plain, ids);
    ADD_FAILURE() << "100 tokens ran on a 32-token model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed the context of 32"), std::string::npos)
        << e.what();
  }
  // fak bench refuses a depth and prompt that do not fit before it prefills anything.
  const auto r =
      test::run_fak("bench -m " + at(32, scaling).string() + " -d 100 -p 64 -n 0 -o json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-d 100 -p 64: 164 tokens exceed the model's context of 128"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("nothing was run"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("pp64"), std::string::npos) << r.out;
}

// Converted to GGUF and loaded back: the same YaRN parameters and logits bit for bit, with
// llama.cpp's keys; what a GGUF cannot say for llama.cpp is written in fak's own key and warned.
TEST(RopeYarn, GgufRoundTrip) {
  struct Case {
    const char* name;
    json scaling;
    bool attn_key, truncate_key;
  };
  json gptoss = qwen_yarn(8.0);
  gptoss["truncate"] = false;
  gptoss["beta_fast"] = 16.0;
  gptoss["beta_slow"] = 2.0;
  json explicit_attention = qwen_yarn(4.0);
  explicit_attention["attention_factor"] = 1.25;
  json deepseek = qwen_yarn(40.0);
  deepseek["mscale"] = 1.0;
  deepseek["mscale_all_dim"] = 0.8;
  const Case cases[] = {{"default", qwen_yarn(4.0), false, false},
                        {"truncate", gptoss, false, true},
                        {"attention", explicit_attention, true, false},
                        {"mscale", deepseek, true, false}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const auto dir = yarn_fixture(std::string("gguf_") + k.name, k.scaling);
    const auto hf = Model::load(dir);
    const auto out = dir / "f32.gguf";
    const ExportStats stats = export_gguf(*hf, parse_file_type("f32"), out);
    const GgufFile f = GgufFile::open(out);
    EXPECT_EQ(f.get_string("qwen2.rope.scaling.type"), "yarn");
    EXPECT_EQ(f.get_f32("qwen2.rope.scaling.factor"), float(hf->config().rope_factor));
    EXPECT_EQ(f.get_u32("qwen2.rope.scaling.original_context_length"), 16u);
    EXPECT_EQ(f.find("qwen2.rope.scaling.yarn_beta_fast")->type, GgufType::F32);
    EXPECT_EQ(f.find("qwen2.rope.scaling.yarn_beta_slow")->type, GgufType::F32);
    EXPECT_EQ(f.find("qwen2.rope.scaling.yarn_attn_factor") != nullptr, k.attn_key);
    EXPECT_EQ(f.find("qwen2.rope.scaling.yarn_truncate") != nullptr, k.truncate_key);
    std::string warned;
    for (const std::string& w : stats.warnings) warned += w + "\n";
    EXPECT_EQ(warned.find("truncate is false") != std::string::npos, k.truncate_key) << warned;
    EXPECT_EQ(warned.find("YaRN attention factor") != std::string::npos, k.attn_key) << warned;

    const auto g = Model::load(out);
    const ModelConfig &a = hf->config(), &b = g->config();
    EXPECT_EQ(b.rope_scaling, RopeScaling::Yarn);
    EXPECT_EQ(float(b.rope_factor), float(a.rope_factor));
    EXPECT_EQ(b.rope_original_max_pos, a.rope_original_max_pos);
    EXPECT_EQ(b.rope_yarn_beta_fast, a.rope_yarn_beta_fast);
    EXPECT_EQ(b.rope_yarn_beta_slow, a.rope_yarn_beta_slow);
    EXPECT_EQ(b.rope_yarn_truncate, a.rope_yarn_truncate);
    EXPECT_EQ(float(b.rope_attention_factor), float(a.rope_attention_factor));
    const std::vector<int32_t> ids = test::random_ids(40, a.vocab, 11);
    const std::vector<float> want = all_logits(hf, ids), got = all_logits(g, ids);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), 4 * want.size()));
  }
}

// Each bad value is refused with one message naming the key.
TEST(RopeYarn, BadValuesRefused) {
  const json base = read_json(test::data_path("rope/yarn_qwen_128.json"))["config"];
  struct Bad {
    const char* key;
    json value;
    const char* message;
  };
  const Bad bad[] = {
      {"factor", 0.0, "'factor' must be finite and > 0, got 0"},
      {"factor", -4.0, "'factor' must be finite and > 0, got -4"},
      {"factor", "4", "'factor' must be a number, got \"4\""},
      {"beta_fast", 0.5, "'beta_fast' must be finite and >= beta_slow, got 0.5"},
      {"beta_slow", -1.0, "'beta_slow' must be finite and > 0, got -1"},
      {"beta_fast", json::array({32}), "'beta_fast' must be a number"},
      {"attention_factor", 0.0, "'attention_factor' must be finite and > 0, got 0"},
      {"mscale", "x", "'mscale' must be a number"},
      {"truncate", "no", "'truncate' must be true or false, got \"no\""},
      {"original_max_position_embeddings", 0, "original_max_position_embeddings"},
  };
  for (const Bad& b : bad) {
    json cfg = base;
    cfg["rope_scaling"][b.key] = b.value;
    std::string err;
    try {
      parse_hf_config(cfg, "config.json");
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find(b.message), std::string::npos) << b.key << ": " << err;
    EXPECT_EQ(err.find("config.json: "), 0u) << err;
  }
}

}  // namespace
}  // namespace fak
