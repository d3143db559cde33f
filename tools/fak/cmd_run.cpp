// fak run: prompt in, continuation streamed out (or one JSON object with --json).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "chat/stop_filter.h"
#include "common.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "runtime/mtp_draft.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct RunArgs {
  std::string model, prompt, file, ids, session, draft = "none", json_schema;
  std::vector<std::string> stop;
  int n = 64;
  int threads = 0;
  SamplingOptions sampling;
  DraftOptions draft_options;
  bool json = false, ignore_eos = false;
  KvFlags kv;
};

void run(const RunArgs& a) {
  // Before the model loads: a bad flag is one error line at once, not after seconds of loading.
  a.sampling.validate();
  if (a.draft != "none") a.draft_options.validate();
  set_threads(a.threads);
  const int sources = !a.prompt.empty() + !a.file.empty() + !a.ids.empty();
  if (sources != 1 && a.session.empty()) fail("give exactly one of -p TEXT, -f FILE, --ids 1,2,3");
  std::shared_ptr<const grammar::Grammar> schema;
  if (!a.json_schema.empty()) {
    try {
      schema = grammar::compile_json_schema_text(read_text_file(a.json_schema));
    } catch (const Error& e) {
      fail("--json-schema " + a.json_schema + ": " + e.what());
    }
  }
  auto model = load_model(a.model);
  const Tokenizer* tok = model->tokenizer();
  if ((schema || !a.stop.empty()) && !tok)
    fail(model->path().string() + " has no tokenizer.json: --json-schema and --stop need one");
  std::vector<int32_t> prompt;
  if (!a.ids.empty()) {
    prompt = parse_ids(a.ids);
  } else if (!a.prompt.empty() || !a.file.empty()) {
    if (!tok) fail(model->path().string() + " has no tokenizer.json: pass --ids instead of text");
    std::string text = a.file.empty() ? a.prompt : read_text_file(a.file);
    if (a.file.empty()) check_utf8(text, "the prompt");
    prompt = tok->encode(text);
  }
  auto cache = a.kv.make_cache(*model);
  Session session(model, cache);
  if (!a.session.empty() && std::filesystem::exists(a.session))
    session = Session::load(a.session, model, cache);
  check_fits_context(*model, session.size(), prompt.size(), a.n, !a.session.empty());
  a.kv.check_fits_memory(*model, int64_t(session.size()) + int64_t(prompt.size()) + a.n,
                         "the prompt and -n");
  std::shared_ptr<MtpDrafter> head;
  if (a.draft == "mtp") {
    // The head drafts from the prompt's hidden states too (a loaded session's were not kept).
    session.keep_hidden(true);
    head = std::make_shared<MtpDrafter>(session, a.draft_options.max_draft);
  }

  const auto t0 = std::chrono::steady_clock::now();
  session.append(prompt);
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!session.has_logits()) fail("nothing to continue: the prompt is empty");

  GenerateOptions g;
  g.max_tokens = a.n;
  g.sampling = a.sampling;
  if (!a.ignore_eos) g.stop_ids = model_stop_ids(*model);
  g.append_last = !a.session.empty();
  if (a.draft == "ngram") g.drafter = ngram_drafter(a.draft_options);
  if (head) g.drafter = mtp_drafter(head);
  g.max_draft = a.draft_options.max_draft;
  g.grammar = schema;

  std::unique_ptr<StreamDecoder> stream;
  if (tok) stream = std::make_unique<StreamDecoder>(*tok);
  // Stop strings: text is shown once no stop string can still start in it (chat/stop_filter.h).
  chat::StopFilter filter(a.stop);
  std::string text;  // what was shown (or, with --json, what would be)
  auto on_token = [&](int32_t id) {
    const std::string piece = filter.push(stream ? stream->push(id) : std::to_string(id) + " ");
    text += piece;
    if (!a.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return !filter.stopped();
  };
  GenerateResult r = generate(session, g, on_token);
  if (filter.stopped()) {
    r.finish_reason = "stop";
  } else {
    const std::string rest = filter.push(stream ? stream->flush() : "") + filter.finish();
    text += rest;
    if (!a.json) std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  if (!a.session.empty()) session.save(a.session);

  const double prefill_tok_s = prompt.empty() ? 0 : double(prompt.size()) / prefill_s;
  const double decode_tok_s = r.ids.size() > 1 ? double(r.ids.size()) / r.seconds : 0;
  const bool spec = bool(g.drafter);
  // Generated tokens per decode forward call (plain decoding: 1, or a little more when the last
  // token is not appended).
  const double tokens_per_step = r.forward_calls > 0 ? double(r.ids.size()) / r.forward_calls : 0;
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["ids"] = r.ids;
    j["text"] = tok ? text : "";
    if (filter.stopped()) j["stop"] = filter.matched();
    j["finish_reason"] = r.finish_reason;
    j["prompt_tokens"] = prompt.size();
    j["generated_tokens"] = r.ids.size();
    j["prefill_tok_s"] = prefill_tok_s;
    j["decode_tok_s"] = decode_tok_s;
    j["prefill_seconds"] = prefill_s;
    j["decode_seconds"] = r.seconds;
    j["model"] = model->path().string();
    j["draft"] = spec ? a.draft : "none";
    j["forward_calls"] = r.forward_calls;
    j["tokens_per_step"] = tokens_per_step;
    if (spec) {
      j["spec_steps"] = r.spec_steps;
      j["spec_drafted"] = r.spec_drafted;
      j["spec_accepted"] = r.spec_accepted;
    }
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    // The text is on stdout and may sit in its buffer (a pipe): out first, then the line below.
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "[prefill %zu tok, %.1f tok/s | decode %zu tok, %.1f tok/s", prompt.size(),
                 prefill_tok_s, r.ids.size(), decode_tok_s);
    if (spec)
      std::fprintf(stderr, " | draft: %d of %d accepted, %.2f tok/step", r.spec_accepted,
                   r.spec_drafted, tokens_per_step);
    std::fprintf(stderr, "]\n");
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "generate a continuation of a prompt");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("-p,--prompt", a->prompt, "prompt text");
  c->add_option("-f,--file", a->file, "read the prompt from a file (UTF-8)");
  c->add_option("--ids", a->ids, "prompt as comma-separated token ids");
  c->add_option("-n,--n-predict", a->n, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  // Ranges are checked by SamplingOptions::validate (the one set of rules), not here.
  SamplingOptions& s = a->sampling;
  c->add_option("--temp", s.temperature, "temperature, 0 to 100 (0 = greedy)");
  c->add_option("--top-k", s.top_k, "top-k (0 = off)");
  c->add_option("--top-p", s.top_p, "top-p, in (0, 1] (1 = off)");
  c->add_option("--min-p", s.min_p, "min-p, in [0, 1) (0 = off)");
  c->add_option("--repeat-penalty", s.repetition_penalty,
                "repetition penalty over the last 64 tokens, in (0, 10] (1 = off)");
  c->add_option("--presence-penalty", s.presence_penalty,
                "subtracted once from each token already generated, -2 to 2 (0 = off)");
  c->add_option("--frequency-penalty", s.frequency_penalty,
                "subtracted per earlier occurrence of a generated token, -2 to 2 (0 = off)");
  c->add_option("--seed", s.seed, "sampling seed");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_option("--session", a->session, "resume from / save to this session file");
  c->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-text");
  c->add_option("--json-schema", a->json_schema,
                "decode under this JSON schema (a file): the output is a JSON value it accepts");
  c->add_option("--stop", a->stop, "stop at this text (repeatable); it is not shown");
  add_draft_flags(c, a->draft, a->draft_options);
  c->add_flag("--json", a->json, "print one JSON object instead of streaming");
  add_load_flags(c);
  a->kv.add_to(c);
  c->callback([a] { run(*a); });
}

}  // namespace fak::cli
