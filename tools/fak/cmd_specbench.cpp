// fak specbench: speculative decoding on an agent-edit workload. The prompt is a chunk of code, an
// instruction-like marker and the start of the same code again, so the continuation largely
// repeats it (an agent rewriting a file it just read). Arms, interleaved rep by rep so that all see
// the same state of a shared host:
//   plain        greedy decoding, one forward call per token;
//   ngram k      prompt-lookup drafts of up to k tokens (runtime/speculative.h), verified in one
//                forward call of k + 1 positions;
//   oracle k     (--oracle) drafts of the tokens plain greedy produces anyway, taken from a first
//                plain run: every draft is accepted, so this is the mechanism's upper bound at k.
//                It is how to measure a random-weight model of a real shape (`fak synth`), whose
//                output does not repeat the prompt by itself.
//   mtp k        (models with an MTP head: the Qwen3.5 / 3.6 hybrids) drafts of up to k tokens
//                from the head (runtime/mtp_draft.h);
//   mtp+oracle k (with --oracle) the head runs as in `mtp k`, but its drafts are replaced by
//                plain greedy's tokens: the upper bound with the head's own cost paid, for a
//                random-weight head that accepts nothing.
// Every arm must produce the plain arm's tokens (checked; `identical` in the JSON). speedup: the
// median over reps of an arm's tok/s over the plain arm's in the same rep (paired, so a shared
// host's slow spells cancel); "best" is the fastest rep, the least disturbed one.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common.h"
#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/mtp_draft.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct SpecArgs {
  std::string model, file, draft_max = "8";
  int n = 128, code_chars = 1500, max_ngram = 3, reps = 3, threads = 0;
  bool oracle = false, json = false;
  KvFlags kv;
};

struct Arm {
  std::string name;
  int k = 0;
  bool oracle = false, mtp = false;
  std::vector<double> tok_s = {}, ratio = {};  // per rep; ratio: over the plain arm's tok/s
  GenerateResult last = {};
  bool identical = true;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The agent-edit prompt: code, a marker, then the code's first line again.
std::string edit_prompt(const std::string& text, int code_chars) {
  const size_t def = text.find("\ndef ");
  const size_t from = def == std::string::npos ? 0 : def + 1;
  std::string code = text.substr(from, size_t(code_chars));
  if (const size_t nl = code.rfind('\n'); nl != std::string::npos && nl > 0)
    code.resize(nl + 1);  // whole lines
  const size_t first_nl = code.find('\n');
  const std::string first_line =
      code.substr(0, first_nl == std::string::npos ? code.size() : first_nl + 1);
  return code + "\n# Apply the requested edit and write the whole code again:\n" + first_line;
}

std::vector<int> parse_ks(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int v = 0;
    try {
      v = std::stoi(item);
    } catch (...) {
      fail("--draft-max: '" + item + "' is not a number");
    }
    DraftOptions{.max_draft = v}.validate();
    out.push_back(v);
  }
  if (out.empty()) fail("--draft-max: give at least one draft length");
  return out;
}

void specbench(const SpecArgs& a) {
  set_threads(a.threads);
  const std::vector<int> ks = parse_ks(a.draft_max);
  DraftOptions{.max_ngram = a.max_ngram}.validate();
  if (a.reps < 1) fail("-r must be at least 1");
  if (a.n < 2) fail("-n must be at least 2");
  auto model = load_model(a.model);
  const Tokenizer* tok = model->tokenizer();
  if (!tok) fail(model->path().string() + " has no tokenizer.json: the workload is text");
  const std::string file =
      a.file.empty() ? (std::filesystem::path(default_model_dir()) / "eval.txt").string() : a.file;
  const std::vector<int32_t> prompt = tok->encode(edit_prompt(read_text_file(file), a.code_chars));
  check_fits_context(*model, 0, prompt.size(), a.n, false);
  auto cache = a.kv.make_cache(*model);
  Session base(model, cache);
  const bool mtp = model->config().mtp_layers > 0;
  base.keep_hidden(mtp);  // the MTP head drafts from the prompt's states too
  base.append(prompt);

  GenerateOptions g;
  g.max_tokens = a.n;
  g.append_last = false;  // as fak bench's tg: the last token's logits are never read
  // No stop ids: every arm decodes exactly n tokens.
  // The arm's drafter is made for its own copy of the prompt's session.
  auto run = [&](const std::function<Drafter(Session&)>& drafter_for) {
    Session s = base.clone();
    GenerateOptions o = g;
    if (drafter_for) o.drafter = drafter_for(s);
    return generate(s, o);
  };
  // Untimed: touches every weight, and gives the tokens the oracle drafts.
  const GenerateResult truth = run({});
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), truth.ids.begin(), truth.ids.end());

  std::vector<Arm> arms{{.name = "plain"}};
  for (int k : ks) arms.push_back({.name = "ngram k=" + std::to_string(k), .k = k});
  if (a.oracle)
    for (int k : ks)
      arms.push_back({.name = "oracle k=" + std::to_string(k), .k = k, .oracle = true});
  if (mtp)
    for (int k : ks) arms.push_back({.name = "mtp k=" + std::to_string(k), .k = k, .mtp = true});
  if (mtp && a.oracle)
    for (int k : ks)
      arms.push_back(
          {.name = "mtp+oracle k=" + std::to_string(k), .k = k, .oracle = true, .mtp = true});
  for (int rep = 0; rep < a.reps; ++rep) {
    double plain_tok_s = 0;
    for (Arm& arm : arms) {
      const Drafter oracle = [&full, k = arm.k](std::span<const int32_t> history, int max_tokens) {
        std::vector<int32_t> out;
        if (history.size() >= full.size()) return out;
        const size_t n = std::min({size_t(k), size_t(max_tokens), full.size() - history.size()});
        out.assign(full.begin() + long(history.size()), full.begin() + long(history.size() + n));
        return out;
      };
      std::function<Drafter(Session&)> drafter_for;
      if (arm.mtp) {
        drafter_for = [&, k = arm.k, with_oracle = arm.oracle](Session& s) -> Drafter {
          auto head = std::make_shared<MtpDrafter>(s, k);
          if (!with_oracle) return mtp_drafter(head);
          return [head, oracle](std::span<const int32_t> history, int max_tokens) {
            std::vector<int32_t> d = head->draft(history, max_tokens);
            std::vector<int32_t> o = oracle(history, int(d.size()));
            return o;
          };
        };
      } else if (arm.oracle) {
        drafter_for = [&](Session&) { return oracle; };
      } else if (arm.k > 0) {
        drafter_for = [&, k = arm.k](Session&) {
          return ngram_drafter({.max_draft = k, .max_ngram = a.max_ngram});
        };
      }
      arm.last = run(drafter_for);
      const double tok_s = double(arm.last.ids.size()) / arm.last.seconds;
      if (arm.k == 0) plain_tok_s = tok_s;
      arm.tok_s.push_back(tok_s);
      arm.ratio.push_back(tok_s / plain_tok_s);
      arm.identical = arm.identical && arm.last.ids == truth.ids;
    }
  }

  nlohmann::json out = nlohmann::json::array();
  if (!a.json) {
    std::printf(
        "model: %s, threads: %d, prompt: %zu tokens (agent edit of %s), decode %d tokens\n\n",
        model->path().string().c_str(), omp_get_max_threads(), prompt.size(), file.c_str(), a.n);
    std::printf(
        "| arm              | tok/s median |  best  | speedup | tok/step | accepted / drafted | "
        "same |\n"
        "|------------------|--------------|--------|---------|----------|--------------------|"
        "------|\n");
  }
  bool all_identical = true;
  for (const Arm& arm : arms) {
    const GenerateResult& r = arm.last;
    const double per_step = r.forward_calls ? double(r.ids.size()) / r.forward_calls : 0;
    const double speedup = median(arm.ratio);
    all_identical = all_identical && arm.identical;
    out.push_back({{"arm", arm.name},
                   {"draft", arm.k == 0              ? "none"
                             : arm.mtp && arm.oracle ? "mtp+oracle"
                             : arm.mtp               ? "mtp"
                             : arm.oracle            ? "oracle"
                                                     : "ngram"},
                   {"draft_max", arm.k},
                   {"tok_s", median(arm.tok_s)},
                   {"tok_s_min", *std::min_element(arm.tok_s.begin(), arm.tok_s.end())},
                   {"tok_s_max", *std::max_element(arm.tok_s.begin(), arm.tok_s.end())},
                   {"samples", arm.tok_s},
                   {"speedup", speedup},
                   {"ratios", arm.ratio},
                   {"forward_calls", r.forward_calls},
                   {"tokens_per_step", per_step},
                   {"spec_steps", r.spec_steps},
                   {"spec_drafted", r.spec_drafted},
                   {"spec_accepted", r.spec_accepted},
                   {"identical", arm.identical}});
    if (!a.json)
      std::printf("| %-16s | %12.1f | %6.1f | %6.2fx | %8.2f | %8d / %-7d | %-4s |\n",
                  arm.name.c_str(), median(arm.tok_s),
                  *std::max_element(arm.tok_s.begin(), arm.tok_s.end()), speedup, per_step,
                  r.spec_accepted, r.spec_drafted, arm.identical ? "yes" : "NO");
  }
  if (a.json) {
    nlohmann::json j{{"model", model->path().string()},
                     {"threads", omp_get_max_threads()},
                     {"workload", "agent edit: code, a marker, the code's first line again"},
                     {"file", file},
                     {"code_chars", a.code_chars},
                     {"prompt_tokens", prompt.size()},
                     {"n_gen", a.n},
                     {"draft_ngram", a.max_ngram},
                     {"reps", a.reps},
                     {"identical", all_identical},
                     {"arms", out}};
    std::printf("%s\n", j.dump(1).c_str());
  }
  if (!all_identical) fail("an arm's tokens differ from plain greedy decoding");
}

}  // namespace

void register_specbench(CLI::App& app) {
  auto a = std::make_shared<SpecArgs>();
  CLI::App* c = app.add_subcommand(
      "specbench",
      "speculative decoding (n-gram and MTP drafts) vs plain greedy on an agent-edit prompt");
  c->add_option("-m,--model", a->model, "model (default: the bundled pycoder-6m)");
  c->add_option("-f,--file", a->file, "code to edit (default: the bundled model's eval.txt)");
  c->add_option("--code-chars", a->code_chars, "characters of code in the prompt")
      ->check(CLI::Range(16, 1 << 20));
  c->add_option("-n,--n-gen", a->n, "tokens to decode per arm");
  c->add_option("--draft-max", a->draft_max, "draft lengths k, comma-separated (default 8)");
  c->add_option("--draft-ngram", a->max_ngram, "longest suffix looked up, 1 to 16");
  c->add_flag("--oracle", a->oracle,
              "add arms drafting plain greedy's own tokens (the upper bound at each k)");
  c->add_option("-r,--repetitions", a->reps, "repetitions of each arm (interleaved)");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "print one JSON object");
  add_load_flags(c);
  a->kv.add_to(c);
  c->callback([a] { specbench(*a); });
}

}  // namespace fak::cli
