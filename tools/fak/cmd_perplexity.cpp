// fak perplexity: perplexity of a model over a text file.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

struct PerplexityArgs {
  std::string model, file;
  int ctx = 512, threads = 0;
  bool json = false;
  std::string kv_type = "f32";
};

void run_perplexity(const PerplexityArgs& a) {
  set_threads(a.threads);
  auto model = load_model(a.model);
  if (!model->tokenizer()) fail(model->path().string() + " has no tokenizer.json");
  std::vector<int32_t> ids = model->tokenizer()->encode(read_text_file(a.file));
  PerplexityResult r = perplexity(model, ids, a.ctx,
                                  [&](int done, int total) {
                                    if (!a.json)
                                      std::fprintf(stderr, "\r[%d/%d windows]", done, total);
                                  },
                                  {.dtype = parse_kv_type(a.kv_type)});
  if (a.json) {
    nlohmann::json j{{"ppl", r.ppl},         {"nll_per_token", r.nll_per_token},
                     {"tokens", r.tokens},   {"scored", r.scored},
                     {"ctx", a.ctx},         {"windows", r.windows},
                     {"seconds", r.seconds}, {"tok_s", double(r.scored) / r.seconds},
                     {"kv_type", a.kv_type}};
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::fprintf(stderr, "\n");
    std::printf("ppl %.4f  nll_per_token %.6f  tokens %lld  scored %lld  (ctx %d, %.1f tok/s)\n",
                r.ppl, r.nll_per_token, (long long)r.tokens, (long long)r.scored, a.ctx,
                double(r.scored) / r.seconds);
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* c = app.add_subcommand("perplexity", "perplexity of a text file");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("-f,--file", a->file, "text file (UTF-8)")->required();
  c->add_option("--ctx", a->ctx, "scored tokens per window")->check(CLI::PositiveNumber);
  c->add_option("--kv-type", a->kv_type,
                "KV cache element type: f32 (the reference's precision), f16, bf16, q8_0 or q4_0 "
                "(what a smaller KV costs)")
      ->capture_default_str();
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "print JSON");
  add_load_flags(c, "f32");
  c->callback([a] { run_perplexity(*a); });
}

}  // namespace fak::cli
