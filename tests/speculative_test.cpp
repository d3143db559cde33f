// Speculative decoding (runtime/speculative.h): prompt-lookup drafts, and verification that leaves
// output and session exactly as plain decoding does — same tokens, same logits bits, same KV and
// (hybrid models) the same DeltaNet state — on every model fixture, with drafts accepted, rejected,
// cut by max_tokens, a stop token or the context.
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/generate.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak {

using test::bit_equal;
using test::random_ids;

namespace {

std::vector<int32_t> ngram(const std::vector<int32_t>& h, int max_draft, int max_ngram = 3,
                           int min_ngram = 1, int limit = 1 << 30) {
  return ngram_draft(h, {.max_draft = max_draft, .max_ngram = max_ngram, .min_ngram = min_ngram},
                     limit);
}

using V = std::vector<int32_t>;

}  // namespace

TEST(NgramDraft, ProposesWhatFollowedTheMostRecentMatch) {
  // The suffix [1 2 3] occurs at 0 (followed by 9) and at 4 (followed by 7 5): the later one wins.
  const V h{1, 2, 3, 9, 1, 2, 3, 7, 5, 4, 1, 2, 3};
  EXPECT_EQ(ngram(h, 3), (V{7, 5, 4}));
}

TEST(NgramDraft, FallsBackToShorterSuffixes) {
  // [8 2 3] never occurred before; [2 3] did, followed by 6.
  const V h{2, 3, 6, 0, 8, 2, 3};
  EXPECT_EQ(ngram(h, 2), (V{6, 0}));
  // Only the last token matches earlier: the 1-gram lookup drafts from there...
  const V one{5, 4, 6, 7, 5};
  EXPECT_EQ(ngram(one, 2), (V{4, 6}));
  // ... unless the shortest n-gram allowed is longer.
  EXPECT_TRUE(ngram(one, 2, 3, 2).empty());
  // Nothing earlier at all, or no earlier position.
  EXPECT_TRUE(ngram(V{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(ngram(V{7}, 4).empty());
  EXPECT_TRUE(ngram(V{}, 4).empty());
}

TEST(NgramDraft, StopsAtTheEndOfTheHistory) {
  // [4 5] last occurred two tokens back: only [4 5] itself follows it.
  const V h{9, 4, 5, 4, 5};
  EXPECT_EQ(ngram(h, 8), (V{4, 5}));
  // A run of one token: the most recent earlier occurrence of [7 7 7] is one back.
  EXPECT_EQ(ngram(V{7, 7, 7, 7}, 8), (V{7}));
}

TEST(NgramDraft, RespectsTheMaximumLengthAndTheCallersLimit) {
  V h;
  for (int i = 0; i < 40; ++i) h.push_back(i);
  h.push_back(0);
  h.push_back(1);
  EXPECT_EQ(ngram(h, 8).size(), 8u);
  EXPECT_EQ(ngram(h, 8), (V{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(ngram(h, 8, 3, 1, 3), (V{2, 3, 4}));
  EXPECT_TRUE(ngram(h, 8, 3, 1, 0).empty());
}

TEST(NgramDraft, OptionsOutOfRangeAreRefused) {
  EXPECT_THROW(ngram_drafter({.max_draft = 0}), Error);
  EXPECT_THROW(ngram_drafter({.max_draft = 65}), Error);
  EXPECT_THROW(ngram_drafter({.max_ngram = 2, .min_ngram = 3}), Error);
  EXPECT_THROW(ngram_drafter({.min_ngram = 0}), Error);
  EXPECT_NO_THROW(ngram_drafter({}));
}

namespace {

struct ModelCase {
  const char* name;
  std::string dir;
};

std::vector<ModelCase> models() {
  return {{"pycoder_6m", test::source_path("models/pycoder-6m")},
          {"llama_tiny", test::data_path("oracle/llama-tiny")},
          {"qwen2_tiny", test::data_path("oracle/qwen2-tiny")},
          {"qwen3_tiny", test::data_path("oracle/qwen3-tiny")},
          {"qwen3_moe_tiny", test::data_path("oracle/qwen3-moe-tiny")},
          {"qwen35_hybrid_tiny", test::data_path("oracle/qwen35-hybrid-tiny")},
          {"qwen35_moe_tiny", test::data_path("oracle/qwen35-moe-tiny")},
          {"gemma3_tiny", test::data_path("oracle/gemma3-tiny")},
          {"glm4moe_tiny", test::data_path("oracle/glm4moe-tiny")},
          {"gpt_oss_tiny", test::data_path("oracle/gpt-oss-tiny")}};
}

// Hybrid sessions carry a DeltaNet state: equal bit for bit, or both absent.
bool same_state(const Session& a, const Session& b) {
  const RecurrentState *x = a.recurrent_state(), *y = b.recurrent_state();
  return (!x && !y) || (x && y && *x == *y);
}

// Proposes the continuation of `truth` (a plain run's prompt + output) after the history, with
// every `wrong_every`-th proposed token changed so that verification also rejects (0 = never).
Drafter oracle_drafter(std::vector<int32_t> truth, int max_draft, int vocab, int wrong_every = 0) {
  return [=](std::span<const int32_t> history, int max_tokens) {
    std::vector<int32_t> d;
    if (history.size() > truth.size() || !std::equal(history.begin(), history.end(), truth.begin()))
      return d;
    for (size_t i = history.size();
         i < truth.size() && int(d.size()) < std::min(max_draft, max_tokens); ++i) {
      int32_t t = truth[i];
      if (wrong_every > 0 && (d.size() + 1) % size_t(wrong_every) == 0) t = (t + 1) % vocab;
      d.push_back(t);
    }
    return d;
  };
}

}  // namespace

class Speculative : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    model = Model::load(GetParam().dir, {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                      model->config().head_dim,
                                      KvCacheOptions{.block_size = 16, .slab_bytes = 1});
    vocab = model->config().vocab;
  }
  Session prompted(const std::vector<int32_t>& prompt) {
    Session s(model, cache);
    s.append(prompt);
    return s;
  }
  // Plain (not speculative) generation from the prompt: the reference every drafter must match.
  GenerateResult plain_generate(const std::vector<int32_t>& prompt, const GenerateOptions& o) {
    Session s = prompted(prompt);
    return generate(s, o);
  }
  // The prompt followed by what a generation produced: the tokens an oracle drafter proposes.
  static std::vector<int32_t> with_reply(std::vector<int32_t> prompt, const GenerateResult& r) {
    prompt.insert(prompt.end(), r.ids.begin(), r.ids.end());
    return prompt;
  }
  // A prompt an agent would send before rewriting: a block, other text, the block's start again.
  std::vector<int32_t> repetitive_prompt(uint32_t seed) {
    auto block = random_ids(40, vocab, seed);
    auto other = random_ids(12, vocab, seed + 100);
    std::vector<int32_t> p = block;
    p.insert(p.end(), other.begin(), other.end());
    p.insert(p.end(), block.begin(), block.begin() + 6);
    return p;
  }
  // Runs generate plainly and with `drafter` from the same prompt; everything must match.
  GenerateResult expect_same(const std::vector<int32_t>& prompt, GenerateOptions o,
                             const Drafter& drafter, const std::string& what,
                             const std::function<bool(int32_t)>& on_token = {}) {
    Session plain = prompted(prompt), spec = prompted(prompt);
    const GenerateResult a = generate(plain, o, on_token);
    o.drafter = drafter;
    const GenerateResult b = generate(spec, o, on_token);
    EXPECT_EQ(a.ids, b.ids) << what;
    EXPECT_EQ(a.finish_reason, b.finish_reason) << what;
    EXPECT_EQ(plain.tokens(), spec.tokens()) << what;
    EXPECT_TRUE(bit_equal(plain.logits(), spec.logits())) << what;
    EXPECT_TRUE(same_state(plain, spec)) << what << ": DeltaNet state";
    // The KV rows too: what a later append computes from them must be the same bits.
    const auto more = random_ids(5, vocab, 77);
    plain.append(more);
    spec.append(more);
    EXPECT_TRUE(bit_equal(plain.logits(), spec.logits())) << what << " (after a later append)";
    EXPECT_LE(int(b.ids.size()), o.max_tokens) << what;
    return b;
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

// Batch invariance, the premise: row i of one call over k + 1 tokens is bit-identical to the
// logits of the i-th one-token step.
TEST_P(Speculative, VerifyRowsEqualOneTokenSteps) {
  const auto prompt = random_ids(29, vocab, 3), extra = random_ids(9, vocab, 4);
  Session one_call = prompted(prompt), steps = prompted(prompt);
  std::vector<float> rows;
  one_call.append(extra, &rows);
  for (size_t i = 0; i < extra.size(); ++i) {
    steps.append({&extra[i], 1});
    const std::vector<float> row(rows.begin() + long(i * size_t(vocab)),
                                 rows.begin() + long((i + 1) * size_t(vocab)));
    ASSERT_TRUE(bit_equal(row, steps.logits())) << "position " << i;
  }
}

TEST_P(Speculative, GreedyEqualsPlainGreedyWithNgramDrafts) {
  const Drafter ngram_k8 = ngram_drafter({.max_draft = 8, .max_ngram = 3});
  const Drafter ngram_k3 = ngram_drafter({.max_draft = 3, .max_ngram = 2, .min_ngram = 2});
  GenerateOptions o;
  o.max_tokens = 60;
  for (uint32_t seed : {1u, 2u}) {
    const auto rep = repetitive_prompt(seed), none = random_ids(30, vocab, seed + 10);
    expect_same(rep, o, ngram_k8, "repetitive prompt, k=8, seed " + std::to_string(seed));
    expect_same(rep, o, ngram_k3, "repetitive prompt, k=3, seed " + std::to_string(seed));
    expect_same(none, o, ngram_k8, "prompt without repetition, seed " + std::to_string(seed));
  }
}

// Drafts that are mostly right (accepted) with wrong tokens among them (rejected mid-draft).
TEST_P(Speculative, GreedyEqualsPlainGreedyWhenDraftsAreAcceptedAndRejected) {
  const auto prompt = random_ids(23, vocab, 5);
  GenerateOptions o;
  o.max_tokens = 50;
  const GenerateResult plain = plain_generate(prompt, o);
  const std::vector<int32_t> truth = with_reply(prompt, plain);
  for (int wrong_every : {0, 2, 4, 5}) {
    const GenerateResult r = expect_same(prompt, o, oracle_drafter(truth, 6, vocab, wrong_every),
                                         "wrong every " + std::to_string(wrong_every));
    EXPECT_GT(r.spec_accepted, 0);
    EXPECT_LT(r.forward_calls, int(r.ids.size()));
    if (wrong_every == 0) {
      EXPECT_EQ(r.spec_accepted, r.spec_drafted);
    } else {
      EXPECT_LT(r.spec_accepted, r.spec_drafted);
    }
  }
}

TEST_P(Speculative, MaxTokensIsNeverOvershot) {
  const auto prompt = random_ids(17, vocab, 6);
  GenerateOptions o;
  o.max_tokens = 40;
  const GenerateResult plain = plain_generate(prompt, o);
  const std::vector<int32_t> truth = with_reply(prompt, plain);
  for (int max_tokens : {0, 1, 2, 3, 5, 8, 9, 13}) {
    for (bool append_last : {true, false}) {
      o.max_tokens = max_tokens;
      o.append_last = append_last;
      const std::string what =
          "max_tokens " + std::to_string(max_tokens) + (append_last ? "" : ", last not appended");
      const GenerateResult r = expect_same(prompt, o, oracle_drafter(truth, 8, vocab), what);
      EXPECT_EQ(int(r.ids.size()), max_tokens) << what;
    }
  }
}

// A stop token inside a draft that is otherwise right: generation ends exactly where plain decoding
// ends, with the stop token neither returned nor appended.
TEST_P(Speculative, StopTokenInsideAnAcceptedDraft) {
  const auto prompt = random_ids(19, vocab, 8);
  GenerateOptions o;
  o.max_tokens = 30;
  const GenerateResult plain = plain_generate(prompt, o);
  const std::vector<int32_t> truth = with_reply(prompt, plain);
  // A token whose first occurrence in the output is well inside a draft.
  size_t at = 0;
  for (size_t i = 4; i < plain.ids.size() && at == 0; ++i)
    if (std::find(plain.ids.begin(), plain.ids.begin() + long(i), plain.ids[i]) ==
        plain.ids.begin() + long(i))
      at = i;
  ASSERT_GT(at, 0u) << "the greedy output repeats one token from the start";
  o.stop_ids = {plain.ids[at]};
  const GenerateResult r = expect_same(prompt, o, oracle_drafter(truth, 8, vocab), "stop");
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.ids.size(), at);
  EXPECT_GT(r.spec_accepted, 0);
}

// The caller's callback refusing a token in the middle of an accepted draft.
TEST_P(Speculative, CallbackStopInsideAnAcceptedDraft) {
  const auto prompt = random_ids(21, vocab, 9);
  GenerateOptions o;
  o.max_tokens = 30;
  const GenerateResult plain = plain_generate(prompt, o);
  const std::vector<int32_t> truth = with_reply(prompt, plain);
  for (int stop_after : {1, 4, 6}) {
    int seen = 0;
    auto on_token = [&](int32_t) { return ++seen < stop_after; };
    seen = 0;
    Session p = prompted(prompt), q = prompted(prompt);
    const GenerateResult a = generate(p, o, on_token);
    seen = 0;
    GenerateOptions os = o;
    os.drafter = oracle_drafter(truth, 8, vocab);
    const GenerateResult b = generate(q, os, on_token);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(int(b.ids.size()), stop_after);
    EXPECT_EQ(b.finish_reason, "callback");
    EXPECT_EQ(p.tokens(), q.tokens());
    EXPECT_TRUE(bit_equal(p.logits(), q.logits()));
  }
}

// Rejected tokens leave no trace: the session equals one that appended only the accepted ones —
// tokens, logits and (through a later append) KV — and truncate-with-logits equals truncate.
TEST_P(Speculative, RejectedTokensLeaveTheSessionAsIfNeverSeen) {
  const auto prompt = random_ids(31, vocab, 10);
  Session s = prompted(prompt);
  Sampler greedy;
  const int32_t last = greedy.sample(s.sampleable_logits(), s.tokens());
  // The true continuation for three tokens, then junk.
  Session probe = prompted(prompt);
  std::vector<int32_t> draft;
  probe.append({&last, 1});
  for (int i = 0; i < 3; ++i) {
    draft.push_back(argmax(probe.logits()));
    probe.append({&draft.back(), 1});
  }
  const int32_t true_next = argmax(probe.logits());
  draft.push_back((true_next + 1) % vocab);
  draft.push_back(5);
  draft.push_back(6);
  const Verified v = verify_draft({&s, last, draft, &greedy, {}});
  EXPECT_EQ(v.accepted, std::vector<int32_t>(draft.begin(), draft.begin() + 3));
  EXPECT_EQ(v.next.token, true_next);
  EXPECT_EQ(v.drafted, 6);
  EXPECT_EQ(s.tokens(), probe.tokens());
  EXPECT_TRUE(bit_equal(s.logits(), probe.logits()));
  EXPECT_TRUE(same_state(s, probe));
  const auto more = random_ids(12, vocab, 11);
  s.append(more);
  probe.append(more);
  EXPECT_TRUE(bit_equal(s.logits(), probe.logits()));

  // truncate(n, row) == truncate(n), which recomputes the row.
  Session a = prompted(prompt), b = prompted(prompt);
  std::vector<float> rows;
  a.append(more, &rows);
  b.append(more);
  const int n = int(prompt.size()) + 4;
  a.truncate(n, {rows.data() + 3 * size_t(vocab), size_t(vocab)});
  b.truncate(n);
  EXPECT_EQ(a.tokens(), b.tokens());
  EXPECT_TRUE(bit_equal(a.logits(), b.logits()));
  EXPECT_TRUE(same_state(a, b));
  a.append(draft);
  b.append(draft);
  EXPECT_TRUE(bit_equal(a.logits(), b.logits()));
}

// Near the end of the context a draft is cut to fit, so verifying fails only where plain decoding
// would (appending the sampled token itself).
TEST_P(Speculative, DraftsAreCutAtTheContext) {
  const int ctx = model->config().max_seq_len;  // 512 on the fixtures, 4096 on pycoder-6m
  const auto prompt = random_ids(ctx - 3, vocab, 12);
  Session s = prompted(prompt);
  Sampler greedy;
  const int32_t last = greedy.sample(s.sampleable_logits(), s.tokens());
  const std::vector<int32_t> draft(8, 1);
  const Verified v = verify_draft({&s, last, draft, &greedy, {}});
  EXPECT_EQ(v.drafted, 2);
  EXPECT_LE(s.size(), ctx);
  GenerateOptions o;
  o.max_tokens = 10;
  o.drafter = ngram_drafter({});
  Session full = prompted(random_ids(ctx - 1, vocab, 13));
  Session full_plain = prompted(random_ids(ctx - 1, vocab, 13));
  o.drafter = {};
  EXPECT_THROW(generate(full_plain, o), Error);
  o.drafter = ngram_drafter({});
  EXPECT_THROW(generate(full, o), Error);
}

// Seeded sampling at temperature > 0 and greedy with penalties: the sampler sees the same logits
// and history in the same order, so the output is the plain run's, token for token.
TEST_P(Speculative, SeededSamplingAndPenaltiesEqualPlain) {
  const auto prompt = repetitive_prompt(14);
  GenerateOptions o;
  o.max_tokens = 48;
  o.sampling.temperature = 0.8f;
  o.sampling.top_k = 40;
  o.sampling.seed = 3;
  const GenerateResult plain = plain_generate(prompt, o);
  const std::vector<int32_t> truth = with_reply(prompt, plain);
  const GenerateResult r = expect_same(prompt, o, oracle_drafter(truth, 8, vocab, 5), "seeded");
  EXPECT_GT(r.spec_accepted, 0);
  expect_same(prompt, o, ngram_drafter({}), "seeded, ngram drafts");
  GenerateOptions pen;
  pen.max_tokens = 40;
  pen.sampling.presence_penalty = 0.7f;
  pen.sampling.frequency_penalty = 0.3f;
  pen.sampling.repetition_penalty = 1.3f;
  expect_same(prompt, pen, ngram_drafter({}), "greedy with penalties");
}

// append_batch with every position's logits per session is bit-identical to separate appends, and
// verify_drafts of several sequences to verifying each alone.
TEST_P(Speculative, BatchedVerifyEqualsVerifyingAlone) {
  const std::vector<std::vector<int32_t>> prompts{
      random_ids(20, vocab, 15), random_ids(7, vocab, 16), random_ids(33, vocab, 17)};
  const std::vector<std::vector<int32_t>> extra{random_ids(5, vocab, 18), random_ids(1, vocab, 19),
                                                random_ids(9, vocab, 20)};
  std::vector<Session> batched, alone;
  for (auto& p : prompts) {
    batched.push_back(prompted(p));
    alone.push_back(prompted(p));
  }
  std::vector<Session*> ptrs;
  std::vector<std::span<const int32_t>> spans;
  std::vector<std::vector<float>> rows(3);
  std::vector<std::vector<float>*> outs{&rows[0], nullptr, &rows[2]};
  for (size_t i = 0; i < 3; ++i) {
    ptrs.push_back(&batched[i]);
    spans.emplace_back(extra[i]);
  }
  append_batch(ptrs, spans, outs);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<float> want;
    alone[i].append(extra[i], &want);
    EXPECT_TRUE(bit_equal(batched[i].logits(), alone[i].logits())) << i;
    if (outs[i]) {
      EXPECT_TRUE(bit_equal(rows[i], want)) << i;
    }
  }

  // Three sequences verifying drafts of different lengths and fates in one call.
  std::vector<Session> bs, as;
  std::vector<Sampler> bsamp(3), asamp(3);
  std::vector<int32_t> lasts;
  std::vector<std::vector<int32_t>> drafts;
  for (size_t i = 0; i < 3; ++i) {
    bs.push_back(prompted(prompts[i]));
    as.push_back(prompted(prompts[i]));
    lasts.push_back(argmax(bs[i].logits()));
    Session probe = prompted(prompts[i]);
    probe.append({&lasts[i], 1});
    std::vector<int32_t> d;
    for (size_t j = 0; j < 2 + 2 * i; ++j) {
      d.push_back(argmax(probe.logits()));
      probe.append({&d.back(), 1});
    }
    if (i == 1) d[2] = (d[2] + 1) % vocab;  // rejected after two
    drafts.push_back(d);
  }
  std::vector<VerifyRequest> reqs;
  for (size_t i = 0; i < 3; ++i) reqs.push_back({&bs[i], lasts[i], drafts[i], &bsamp[i], {}});
  const std::vector<Verified> got = verify_drafts(reqs);
  for (size_t i = 0; i < 3; ++i) {
    const Verified want = verify_draft({&as[i], lasts[i], drafts[i], &asamp[i], {}});
    EXPECT_EQ(got[i].accepted, want.accepted) << i;
    EXPECT_EQ(got[i].next.token, want.next.token) << i;
    EXPECT_EQ(bs[i].tokens(), as[i].tokens()) << i;
    EXPECT_TRUE(bit_equal(bs[i].logits(), as[i].logits())) << i;
    EXPECT_TRUE(same_state(bs[i], as[i])) << i;
  }
  EXPECT_EQ(got[1].accepted.size(), 2u);
  EXPECT_EQ(got[2].accepted.size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Models, Speculative, ::testing::ValuesIn(models()),
                         [](const auto& info) { return std::string(info.param.name); });

// The bundled model on real code: an agent's rewrite of a file it just read. Drafts are accepted
// and the output is plain greedy's.
TEST(SpeculativeCode, RewriteOfCodeInTheContextIsAcceptedAndExact) {
  auto model = Model::load(test::source_path("models/pycoder-6m"));
  auto cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                         model->config().head_dim);
  const std::string text = test::read_file(test::source_path("models/pycoder-6m/eval.txt"));
  const size_t at = text.find("\ndef ");
  ASSERT_NE(at, std::string::npos);
  const std::string code = text.substr(at + 1, 900);
  const auto prompt =
      model->tokenizer()->encode(code + "\n# The same code again:\n" + code.substr(0, 80));
  GenerateOptions o;
  o.max_tokens = 120;
  o.stop_ids = model_stop_ids(*model);
  Session plain(model, cache), spec(model, cache);
  plain.append(prompt);
  spec.append(prompt);
  const GenerateResult a = generate(plain, o);
  o.drafter = ngram_drafter({});
  const GenerateResult b = generate(spec, o);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.finish_reason, b.finish_reason);
  EXPECT_EQ(plain.tokens(), spec.tokens());
  EXPECT_TRUE(bit_equal(plain.logits(), spec.logits()));
  EXPECT_GT(b.spec_accepted, b.spec_drafted / 4);
  EXPECT_LT(b.forward_calls * 2, int(b.ids.size()));
}

// Hybrid models: a verify call keeps its DeltaNet inputs so a rejected tail is dropped without a
// forward call; truncate with logits is refused outside that call, leaving the session untouched.
TEST(SpeculativeHybrid, TruncateWithLogitsOnlyInsideTheLastVerify) {
  auto model = Model::load(test::data_path("oracle/qwen35-hybrid-tiny"), {.load_tokenizer = false});
  auto cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                         model->config().head_dim);
  const int vocab = model->config().vocab;
  const auto prompt = random_ids(30, vocab, 21), more = random_ids(6, vocab, 22);
  Session a(model, cache), ref(model, cache);
  a.append(prompt);
  ref.append(prompt);
  std::vector<float> rows;
  a.append(more, &rows);
  // Every cut inside the call, one after another from the end.
  for (int keep = int(more.size()) - 1; keep >= 4; --keep) {
    Session c = a.clone();
    EXPECT_THROW(c.truncate(int(prompt.size()) + keep, {rows.data(), size_t(vocab)}), Error)
        << "a clone has no record of the call";
  }
  a.truncate(int(prompt.size()) + 4, {rows.data() + 3 * size_t(vocab), size_t(vocab)});
  ref.append({more.data(), 4});
  EXPECT_EQ(a.tokens(), ref.tokens());
  EXPECT_TRUE(same_state(a, ref));
  EXPECT_TRUE(bit_equal(a.logits(), ref.logits()));
  // The record is spent: a second cut is refused and changes nothing.
  EXPECT_THROW(a.truncate(a.size() - 1, {rows.data(), size_t(vocab)}), Error);
  EXPECT_EQ(a.tokens(), ref.tokens());
  EXPECT_TRUE(same_state(a, ref));
  // A plain append keeps no record either.
  a.append(more);
  EXPECT_THROW(a.truncate(a.size() - 1, {rows.data(), size_t(vocab)}), Error);
}

}  // namespace fak
