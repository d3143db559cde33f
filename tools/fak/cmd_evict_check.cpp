// fak evict-check: proves exact KV quarantine on any model. Builds A+B+C, evicts B, and compares
// the next-token logits with a fresh A+C: exact mode must differ by exactly 0; the shift mode's
// difference is printed beside it (it only re-positions survivors, so deeper layers keep traces).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct EvictArgs {
  std::string model, prefix_file, span_file, suffix_file, prefix_ids, span_ids, suffix_ids;
  bool json = false;
  int threads = 0;
  KvFlags kv;
};

std::vector<int32_t> part(const Model& m, const std::string& file, const std::string& ids, const char* name) {
  if (!file.empty() && !ids.empty()) fail(std::string("give --") + name + "-file or --" + name + "-ids, not both");
  if (!ids.empty()) return parse_ids(ids);
  if (file.empty()) fail(std::string("missing --") + name + "-file or --" + name + "-ids");
  if (!m.tokenizer()) fail(m.path().string() + " has no tokenizer: use --" + name + "-ids");
  return m.tokenizer()->encode(read_text_file(file));
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

int evict_check(const EvictArgs& a) {
  set_threads(a.threads);
  auto model = load_model(a.model);
  auto A = part(*model, a.prefix_file, a.prefix_ids, "prefix");
  auto B = part(*model, a.span_file, a.span_ids, "span");
  auto C = part(*model, a.suffix_file, a.suffix_ids, "suffix");
  if (A.empty() && C.empty()) fail("prefix and suffix are both empty: nothing would remain after the eviction");
  if (B.empty()) fail("the span is empty");
  auto cache = a.kv.make_cache(*model);
  std::vector<int32_t> abc = A, ac = A;
  abc.insert(abc.end(), B.begin(), B.end());
  abc.insert(abc.end(), C.begin(), C.end());
  ac.insert(ac.end(), C.begin(), C.end());

  Session fresh(model, cache);
  fresh.append(ac);
  Session exact(model, cache);
  exact.append(abc);
  Session shift = exact.clone();
  const auto t0 = std::chrono::steady_clock::now();
  exact.evict(int(A.size()), int(A.size() + B.size()), EvictMode::Exact);
  const double exact_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double exact_diff = max_abs_diff(exact.logits(), fresh.logits());
  const bool tokens_equal = exact.tokens() == fresh.tokens();
  double shift_diff = -1, shift_s = 0;
  bool shift_argmax = false;
  std::string shift_note;
  if (model->config().is_hybrid()) {
    shift_note = "not available on hybrid models";
  } else {
    const auto t1 = std::chrono::steady_clock::now();
    shift.evict(int(A.size()), int(A.size() + B.size()), EvictMode::Shift);
    shift_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    shift_diff = max_abs_diff(shift.logits(), fresh.logits());
    shift_argmax = argmax(shift.logits()) == argmax(fresh.logits());
  }
  const bool pass = exact_diff == 0.0 && tokens_equal;
  if (a.json) {
    nlohmann::json j{{"model", model->path().string()}, {"prefix_tokens", A.size()}, {"span_tokens", B.size()},
                     {"suffix_tokens", C.size()}, {"max_abs_diff", exact_diff}, {"tokens_equal", tokens_equal},
                     {"exact_seconds", exact_s}, {"recomputed_tokens", C.size()}, {"pass", pass}};
    if (shift_note.empty()) {
      j["shift_max_abs_diff"] = shift_diff;
      j["shift_argmax_equal"] = shift_argmax;
      j["shift_seconds"] = shift_s;
    } else {
      j["shift"] = shift_note;
    }
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("A=%zu B=%zu C=%zu tokens\n", A.size(), B.size(), C.size());
    std::printf("exact: max_abs_diff %.9g vs fresh A+C (recomputed %zu tokens in %.3f s) -> %s\n", exact_diff,
                C.size(), exact_s, pass ? "bit-identical" : "DIFFERENT");
    if (shift_note.empty())
      std::printf("shift: max_abs_diff %.9g, argmax %s (%.4f s; exact in layer 0 only)\n", shift_diff,
                  shift_argmax ? "equal" : "differs", shift_s);
    else
      std::printf("shift: %s\n", shift_note.c_str());
  }
  return pass ? 0 : 2;
}

}  // namespace

void register_evict_check(CLI::App& app) {
  auto a = std::make_shared<EvictArgs>();
  CLI::App* c = app.add_subcommand("evict-check", "prove exact span eviction: A+B+C minus B == A+C");
  c->add_option("-m,--model", a->model, "model (default: the bundled pycoder-6m)");
  c->add_option("--prefix-file", a->prefix_file, "text of A");
  c->add_option("--span-file", a->span_file, "text of B (the span to evict)");
  c->add_option("--suffix-file", a->suffix_file, "text of C");
  c->add_option("--prefix-ids", a->prefix_ids, "A as comma-separated ids");
  c->add_option("--span-ids", a->span_ids, "B as comma-separated ids");
  c->add_option("--suffix-ids", a->suffix_ids, "C as comma-separated ids");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "print JSON");
  a->kv.add_to(c);
  c->callback([a] {
    int rc = evict_check(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace fak::cli
