// The Qwen3.5 multi-token-prediction head (models/mtp_block.cpp, Model::mtp_forward) and drafting
// from it (runtime/mtp_draft.h): loaded from Hugging Face and GGUF under the names real checkpoints
// and llama.cpp use, computed as an independent scalar reference computes it, and drafting for
// speculative decoding whose output is plain decoding's, greedy and seeded. There is no HF oracle:
// transformers drops the mtp.* weights (they only serve vLLM / SGLang / llama.cpp drafting).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "http_test_client.h"
#include "io/gguf.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "ops/matmul.h"
#include "runtime/model_cache.h"
#include "runtime/mtp_draft.h"
#include "runtime/speculative.h"
#include "server_process.h"
#include "test_util.h"

namespace fak {

using test::random_ids;

namespace {

// A tiny hybrid (a fixture's shape: qwen35-hybrid-tiny by default) with random weights and an MTP
// head.
std::filesystem::path mtp_model(const std::filesystem::path& tmp,
                                const std::string& fixture = "qwen35-hybrid-tiny") {
  const auto dir = tmp / "mtp";
  auto cfg =
      nlohmann::json::parse(test::read_file(test::data_path("oracle/" + fixture + "/config.json")));
  cfg["vocab_size"] = 8192;  // the bundled tokenizer's
  cfg["mtp_num_hidden_layers"] = 1;
  test::write_file(tmp / "mtp.json", cfg.dump());
  const auto r = test::run_fak("synth --config " + (tmp / "mtp.json").string() + " -o " +
                               dir.string() + " --dtype f32 --std 0.1 --seed 7 --tokenizer " +
                               test::source_path("models/pycoder-6m").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

std::vector<double> row_of(const WeightMatrix& m, int64_t r) {
  std::vector<float> f(size_t(m.cols));
  dequantize_row(m, r, f.data());
  return {f.begin(), f.end()};
}

std::vector<double> matvec(const WeightMatrix& m, const std::vector<double>& x) {
  std::vector<double> y(size_t(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    const std::vector<double> w = row_of(m, r);
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) s += w[i] * x[i];
    y[size_t(r)] = s;
  }
  return y;
}

// RMSNorm with the scale fak holds (1 + w for the Qwen3.5 norms, applied at load).
std::vector<double> rms(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(w[i]);
  return y;
}

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

// The head's logits for one row at position 0, where attention over the single key is that key's
// value: fc([norm(embed(token)) | norm(hidden)]), the gated attention's value path, the SwiGLU MLP,
// the final norm and the tied output head, in doubles.
std::vector<double> reference_logits(const Model& model, int32_t token,
                                     const std::vector<float>& hidden) {
  const ModelConfig& c = model.config();
  const MtpWeights& M = model.weights().mtp;
  const LayerWeights& L = M.layer;
  const double eps = c.rms_eps;
  const std::vector<double> e = rms(row_of(model.weights().embed, token), M.norm_embedding, eps);
  const std::vector<double> h = rms({hidden.begin(), hidden.end()}, M.norm_hidden, eps);
  std::vector<double> cat = e;
  cat.insert(cat.end(), h.begin(), h.end());
  std::vector<double> x = matvec(M.fc, cat);
  const std::vector<double> a = rms(x, L.attn_norm, eps);
  const std::vector<double> q2 = matvec(L.attn.wq, a);  // per head [query | gate]
  const std::vector<double> v = matvec(L.attn.wv, a);
  const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  std::vector<double> o(size_t(c.q_dim()));
  for (int head = 0; head < c.n_heads; ++head)
    for (int d = 0; d < hd; ++d) {
      const double gate = q2[size_t(head * 2 * hd + hd + d)];
      o[size_t(head * hd + d)] = v[size_t((head / group) * hd + d)] / (1.0 + std::exp(-gate));
    }
  const std::vector<double> attn = matvec(L.attn.wo, o);
  for (size_t i = 0; i < x.size(); ++i) x[i] += attn[i];
  const std::vector<double> m = rms(x, L.mlp_norm, eps);
  std::vector<double> g = matvec(L.mlp.gate, m);
  const std::vector<double> u = matvec(L.mlp.up, m);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  const std::vector<double> down = matvec(L.mlp.down, g);
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  return matvec(model.weights().lm_head, rms(x, M.final_norm, eps));
}

std::shared_ptr<KvCache> head_cache(const Model& m) {
  KvCacheOptions o;
  o.keep_kraw = false;
  return std::make_shared<KvCache>(1, m.config().n_kv_heads, m.config().head_dim, o);
}

// The head's logits for rows [0, n) of one sequence in one call (all of them) .
std::vector<float> head_logits(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens,
                               const std::vector<float>& hidden, int start,
                               std::vector<int32_t>& blocks) {
  while (int(blocks.size()) * cache.block_size() < start + int(tokens.size()))
    blocks.push_back(cache.allocate());
  std::vector<float> logits(tokens.size() * size_t(m.config().vocab));
  BatchItem it;
  it.blocks = &blocks;
  it.tokens = tokens.data();
  it.n_tokens = int(tokens.size());
  it.start_pos = start;
  it.logits = logits.data();
  it.all_logits = true;
  m.mtp_forward({&it, 1}, cache, hidden.data(), nullptr);
  return logits;
}

}  // namespace

TEST(Mtp, LoadsUnderTheCheckpointNamesAndComputesAsTheScalarReference) {
  const auto tmp = test::temp_dir();
  auto model = Model::load(mtp_model(tmp), {.load_tokenizer = false});
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.mtp_layers, 1);
  EXPECT_EQ(model->load_note(), "") << "every mtp.* tensor is the head's: none skipped";
  EXPECT_EQ(model->weights().mtp.fc.rows, c.dim);
  EXPECT_EQ(model->weights().mtp.fc.cols, 2 * c.dim);
  const std::vector<int32_t> tokens = random_ids(6, c.vocab, 3);
  std::vector<float> hidden(size_t(c.dim));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(std::sin(0.37 * double(i) + 1.0));
  double worst = 0;
  for (int32_t t : tokens) {
    // Each row at position 0 of a fresh sequence: attention over one key.
    auto cache = head_cache(*model);
    std::vector<int32_t> blocks;
    const std::vector<float> got = head_logits(*model, *cache, {t}, hidden, 0, blocks);
    const std::vector<double> want = reference_logits(*model, t, hidden);
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    ASSERT_GT(scale, 0.1) << "random weights give logits well away from zero";
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - want[i]) / scale);
    for (int32_t b : blocks) cache->release(b);
  }
  EXPECT_LT(worst, 1e-5);
  std::printf("[ mtp ] largest logit error against the scalar reference: %.2e\n", worst);
}

// Rows read in one call or one by one (each attending to the rows before it) give the same bits,
// as the model's own forward does: the head's KV is a cache like any other.
TEST(Mtp, RowsInOneCallEqualRowsOneByOne) {
  const auto tmp = test::temp_dir();
  auto model = Model::load(mtp_model(tmp), {.load_tokenizer = false});
  const ModelConfig& c = model->config();
  const int n = 9;
  const std::vector<int32_t> tokens = random_ids(n, c.vocab, 4);
  std::vector<float> hidden(size_t(n) * size_t(c.dim));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(std::cos(0.11 * double(i)));
  auto whole_cache = head_cache(*model), step_cache = head_cache(*model);
  std::vector<int32_t> whole_blocks, step_blocks;
  const std::vector<float> whole =
      head_logits(*model, *whole_cache, tokens, hidden, 0, whole_blocks);
  const size_t vocab = size_t(c.vocab), dim = size_t(c.dim);
  for (int t = 0; t < n; ++t) {
    const std::vector<float> h(hidden.begin() + std::ptrdiff_t(size_t(t) * dim),
                               hidden.begin() + std::ptrdiff_t(size_t(t + 1) * dim));
    const std::vector<float> one =
        head_logits(*model, *step_cache, {tokens[size_t(t)]}, h, t, step_blocks);
    const std::vector<float> row(whole.begin() + std::ptrdiff_t(size_t(t) * vocab),
                                 whole.begin() + std::ptrdiff_t(size_t(t + 1) * vocab));
    ASSERT_TRUE(test::bit_equal(one, row)) << "row " << t;
  }
  for (int32_t b : whole_blocks) whole_cache->release(b);
  for (int32_t b : step_blocks) step_cache->release(b);
}

// Drafts from the frequent ids: the head's logits over the first rows of the output head are the
// whole head's first logits, bit for bit, also where a quantised head is packed in 16-row panels.
TEST(Mtp, ADraftVocabularyIsThePrefixOfTheWholeHeadsLogits) {
  const auto tmp = test::temp_dir();
  const auto dir = mtp_model(tmp);
  for (const bool quantised : {false, true}) {
    SCOPED_TRACE(quantised ? "q8_0" : "f32");
    LoadOptions lo{.load_tokenizer = false};
    if (quantised) lo.quant = QuantType::Q8_0;
    auto model = Model::load(dir, lo);
    const ModelConfig& c = model->config();
    const std::vector<int32_t> tokens = {17, 4000, 8191};
    std::vector<float> hidden(tokens.size() * size_t(c.dim));
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(std::sin(0.21 * double(i)));
    for (size_t t = 0; t < tokens.size(); ++t) {
      const std::vector<float> h(hidden.begin() + std::ptrdiff_t(t * size_t(c.dim)),
                                 hidden.begin() + std::ptrdiff_t((t + 1) * size_t(c.dim)));
      std::vector<float> whole(size_t(c.vocab)), part(size_t(c.vocab), -1.0f);
      for (const int rows : {0, 1000}) {
        auto cache = head_cache(*model);
        std::vector<int32_t> blocks = {cache->allocate()};
        BatchItem it;
        it.blocks = &blocks;
        it.tokens = &tokens[t];
        it.n_tokens = 1;
        it.logits = rows ? part.data() : whole.data();
        model->mtp_forward({&it, 1}, *cache, h.data(), nullptr, rows);
        cache->release(blocks[0]);
      }
      // 1000 rows are read as whole panels: 1008.
      EXPECT_TRUE(test::bit_equal({part.begin(), part.begin() + 1008},
                                  {whole.begin(), whole.begin() + 1008}));
      EXPECT_EQ(part[1008], -1.0f) << "nothing past the draft vocabulary is written";
    }
  }
}

// fak convert writes the head as llama.cpp's converter does (one more block: nextn tensors and the
// layer's own, nextn_predict_layers = 1, block_count counting it), and the GGUF's head computes
// what the checkpoint's does.
TEST(Mtp, GgufKeepsTheHeadUnderLlamaCppNames) {
  const auto tmp = test::temp_dir();
  const auto dir = mtp_model(tmp);
  const auto gguf = tmp / "mtp.gguf";
  const auto r =
      test::run_fak("convert -m " + dir.string() + " -o " + gguf.string() + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(gguf);
  EXPECT_EQ(f.get_u64("qwen35.block_count"), 5u);
  EXPECT_EQ(f.get_u64("qwen35.nextn_predict_layers"), 1u);
  for (const char* name :
       {"blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight", "blk.4.nextn.hnorm.weight",
        "blk.4.nextn.shared_head_norm.weight", "blk.4.attn_q.weight", "blk.4.attn_norm.weight",
        "blk.4.post_attention_norm.weight", "blk.4.ffn_down.weight"})
    EXPECT_NE(f.tensor(name), nullptr) << name;
  auto from_hf = Model::load(dir, {.load_tokenizer = false});
  auto from_gguf = Model::load(gguf, {.load_tokenizer = false});
  ASSERT_EQ(from_gguf->config().n_layers, 4);
  ASSERT_EQ(from_gguf->config().mtp_layers, 1);
  const std::vector<int32_t> tokens = random_ids(5, from_hf->config().vocab, 9);
  std::vector<float> hidden(tokens.size() * size_t(from_hf->config().dim));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(std::sin(0.05 * double(i)));
  auto ca = head_cache(*from_hf), cb = head_cache(*from_gguf);
  std::vector<int32_t> ba, bb;
  EXPECT_TRUE(test::bit_equal(head_logits(*from_hf, *ca, tokens, hidden, 0, ba),
                              head_logits(*from_gguf, *cb, tokens, hidden, 0, bb)));
  for (int32_t b : ba) ca->release(b);
  for (int32_t b : bb) cb->release(b);
}

// A config naming a head its checkpoint does not hold loads as a model without one.
TEST(Mtp, ACheckpointWithoutTheHeadLoadsWithoutIt) {
  const auto tmp = test::temp_dir();
  auto cfg = nlohmann::json::parse(
      test::read_file(test::data_path("oracle/qwen35-hybrid-tiny/config.json")));
  auto model = Model::load(test::data_path("oracle/qwen35-hybrid-tiny"), {.load_tokenizer = false});
  EXPECT_EQ(model->config().mtp_layers, 0);
  cfg["mtp_num_hidden_layers"] = 1;
  const auto dir = tmp / "stripped";
  std::filesystem::create_directories(dir);
  test::write_file(dir / "config.json", cfg.dump());
  std::filesystem::copy_file(test::data_path("oracle/qwen35-hybrid-tiny/model.safetensors"),
                             dir / "model.safetensors");
  auto stripped = Model::load(dir, {.load_tokenizer = false});
  EXPECT_EQ(stripped->config().mtp_layers, 0);
  Session s(stripped, make_kv_cache(*stripped));
  EXPECT_THROW(MtpDrafter(s, 4), Error);
}

// Speculative decoding with the head's drafts gives plain decoding's tokens, greedy and seeded, and
// leaves the session as plain decoding does. With random weights the head's drafts are mostly
// rejected; an oracle substituted for them after each head call (what `fak specbench --oracle`
// measures) is accepted in full, with the head's calls still made.
class MtpDrafting : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpDrafting, GivesPlainDecodingsTokensGreedyAndSeeded) {
  const auto tmp = test::temp_dir();
  auto model = Model::load(mtp_model(tmp, GetParam()), {.load_tokenizer = false});
  ASSERT_EQ(model->config().mtp_layers, 1);
  const ModelConfig& c = model->config();
  // On the f32 KV and on q8_0 (the head's own KV takes the model cache's type).
  for (const DType kv : {DType::F32, DType::Q8_0}) {
    SCOPED_TRACE(std::string("kv ") + kv_type_name(kv));
    auto cache = make_kv_cache(*model, {.dtype = kv});
    Session base(model, cache);
    base.keep_hidden(true);
    base.append(random_ids(40, c.vocab, 11));
    for (const float temperature : {0.0f, 0.9f}) {
      SCOPED_TRACE("temperature " + std::to_string(temperature));
      GenerateOptions o;
      o.max_tokens = 48;
      o.sampling.temperature = temperature;
      o.sampling.seed = 5;
      Session plain = base.clone();
      const GenerateResult want = generate(plain, o);
      Session spec = base.clone();
      auto head = std::make_shared<MtpDrafter>(spec, 4);
      GenerateOptions so = o;
      so.drafter = mtp_drafter(head);
      const GenerateResult got = generate(spec, so);
      EXPECT_EQ(got.ids, want.ids);
      EXPECT_EQ(spec.tokens(), plain.tokens());
      EXPECT_TRUE(test::bit_equal(spec.logits(), plain.logits()));
      EXPECT_GT(got.spec_drafted, 0);
      EXPECT_GT(head->calls(), 0);
      // What the server's budget sets aside for a sequence's head covers what it mapped.
      EXPECT_GT(head->kv_mapped_bytes(), 0u);
      EXPECT_LE(head->kv_mapped_bytes(),
                MtpDrafter::kv_bytes(*model, spec.size() + 4 + 1, spec.cache().dtype()));
      // The oracle after the head: everything accepted, far fewer model calls.
      std::vector<int32_t> full = base.tokens();
      full.insert(full.end(), want.ids.begin(), want.ids.end());
      Session oracle_run = base.clone();
      auto head2 = std::make_shared<MtpDrafter>(oracle_run, 4);
      GenerateOptions oo = o;
      oo.drafter = [&, head2](std::span<const int32_t> history, int max_tokens) {
        const std::vector<int32_t> d = head2->draft(history, max_tokens);
        const size_t at = history.size();
        const size_t n = std::min(d.size(), full.size() - std::min(at, full.size()));
        return std::vector<int32_t>(full.begin() + std::ptrdiff_t(at),
                                    full.begin() + std::ptrdiff_t(at + n));
      };
      const GenerateResult best = generate(oracle_run, oo);
      EXPECT_EQ(best.ids, want.ids);
      EXPECT_EQ(best.spec_accepted, best.spec_drafted);
      EXPECT_LE(best.forward_calls, 48 / 5 + 2);
    }
  }
  // A head's KV in q8_0 takes about a quarter of its f32 bytes (34 of 128 per 32 values).
  EXPECT_LT(MtpDrafter::kv_bytes(*model, 100000, DType::Q8_0) * 3,
            MtpDrafter::kv_bytes(*model, 100000, DType::F32));
}

// fak serve --draft mtp: every reply is the one plain decoding gives (greedy at several lengths,
// seeded sampling with two choices, a stop string), the head drafts (each sequence its own), and
// a model without a head is refused at start naming the flag.
TEST(MtpServer, RepliesEqualPlainDecoding) {
  const auto tmp = test::temp_dir();
  const std::string model = "-m " + mtp_model(tmp).string();
  test::ServerProcess plain(model + " --parallel 3");
  test::ServerProcess spec(model + " --parallel 3 --draft mtp --draft-max 4");
  ASSERT_NE(plain.port(), 0);
  ASSERT_NE(spec.port(), 0);
  std::vector<nlohmann::json> requests;
  for (int max_tokens : {1, 2, 5, 24})
    requests.push_back({{"model", "mtp"},
                        {"prompt", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"},
                        {"max_tokens", max_tokens},
                        {"ignore_eos", true}});
  nlohmann::json sampled = requests.back();
  sampled["temperature"] = 0.9;
  sampled["seed"] = 11;
  sampled["n"] = 2;
  requests.push_back(sampled);
  nlohmann::json stopped = requests.front();
  stopped["max_tokens"] = 24;
  stopped["stop"] = {"a"};
  requests.push_back(stopped);
  for (const nlohmann::json& req : requests) {
    const test::HttpReply a = test::post_json(plain.port(), "/v1/completions", req.dump());
    const test::HttpReply b = test::post_json(spec.port(), "/v1/completions", req.dump());
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(a.j()["choices"], b.j()["choices"]) << req.dump();
  }
  httplib::Client c("127.0.0.1", spec.port());
  const std::string metrics = c.Get("/metrics")->body;
  const size_t at = metrics.find("\nfak_spec_drafted_tokens_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::atol(metrics.c_str() + at + 31), 10) << metrics;
  // The heads' KV is in the budget, and the startup line says how much: --parallel 3 x a context
  // of the head's one layer, in whole slabs.
  EXPECT_NE(spec.log().find("the MTP draft heads' KV "), std::string::npos) << spec.log();
  EXPECT_EQ(plain.log().find("MTP draft heads"), std::string::npos) << plain.log();
  const auto refused = test::run_fak("serve --port 0 --draft mtp -t 1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("--draft mtp: "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("has no multi-token-prediction head"), std::string::npos)
      << refused.err;
}

// The dense hybrid, and the MoE hybrid whose head's layer is a sparse MoE block (fused experts).
INSTANTIATE_TEST_SUITE_P(Fixtures, MtpDrafting,
                         ::testing::Values("qwen35-hybrid-tiny", "qwen35-moe-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace fak
