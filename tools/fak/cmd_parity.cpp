// fak parity: compare the model against an HF reference file (logits, argmax, greedy).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "ops/matmul.h"
#include "runtime/parity.h"

namespace fak::cli {

namespace {

struct ParityArgs {
  std::string model, reference;
  double tolerance = 1e-3;
  bool json = false;
  int threads = 0;
  std::string device = "cpu";
  std::string kv_type = "f32";
  std::string activations = "f32";
};

int parity(const ParityArgs& a) {
  set_threads(a.threads);
  if (a.activations != "f32" && a.activations != "bf16")
    fail("--activations '" + a.activations + "': choose f32 or bf16");
  set_bf16_activations(a.activations == "bf16");
  auto model = Model::load(a.model.empty() ? default_model_dir() : a.model,
                           {.load_tokenizer = false, .device = parse_device(a.device)});
  TensorStore ref = TensorStore::open_file(a.reference);
  ParityReport r = run_parity(model, ref, a.tolerance, {.dtype = parse_kv_type(a.kv_type)});
  if (a.json) {
    nlohmann::json j;
    j["model"] = model->path().string();
    j["device"] = model->device().name();
    j["tolerance"] = r.tolerance;
    j["pass"] = r.pass;
    for (auto& c : r.cases)
      j["cases"].push_back({{"case", c.name},
                            {"tokens", c.n_tokens},
                            {"max_abs_diff", c.max_abs_diff},
                            {"min_cosine", c.min_cosine},
                            {"argmax_agree", c.argmax_agree},
                            {"argmax_total", c.argmax_total},
                            {"near_ties", c.near_ties},
                            {"argmax_mismatches", c.argmax_mismatches},
                            {"greedy_total", c.greedy_total},
                            {"teacher_forced_agree", c.teacher_forced_agree},
                            {"greedy_near_ties", c.greedy_near_ties},
                            {"greedy_mismatches", c.greedy_mismatches},
                            {"free_run_match", c.free_run_match},
                            {"pass", c.pass}});
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%-8s %6s %12s %10s %9s %10s %10s  %s\n", "case", "tokens", "max|dlogit|", "cosine",
                "argmax", "greedy-tf", "free-run", "result");
    for (auto& c : r.cases) {
      std::printf("%-8s %6d %12.3g %10.7f %4d/%-4d %4d/%-5d %4d/%-5d  %s\n", c.name.c_str(),
                  c.n_tokens, c.max_abs_diff, c.min_cosine, c.argmax_agree, c.argmax_total,
                  c.teacher_forced_agree, c.greedy_total, c.free_run_match, c.greedy_total,
                  c.pass ? "ok" : "FAIL");
      auto list = [](const char* what, const std::vector<int>& v) {
        if (v.empty()) return;
        std::printf("         %s:", what);
        for (int x : v) std::printf(" %d", x);
        std::printf("\n");
      };
      list("near-ties (prompt positions)", c.near_ties);
      list("argmax mismatches", c.argmax_mismatches);
      list("near-ties (greedy steps)", c.greedy_near_ties);
      list("greedy mismatches", c.greedy_mismatches);
    }
    std::printf("%s (tolerance %.g)\n", r.pass ? "PASS" : "FAIL", r.tolerance);
  }
  return r.pass ? 0 : 2;
}

}  // namespace

void register_parity(CLI::App& app) {
  auto a = std::make_shared<ParityArgs>();
  CLI::App* c =
      app.add_subcommand("parity", "compare logits and greedy tokens with an HF reference");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("--reference", a->reference,
                "reference safetensors (caseK.input_ids, caseK.logits, ...)")
      ->required();
  c->add_option("--tolerance", a->tolerance, "max |logit difference| allowed");
  c->add_option("--kv-type", a->kv_type,
                "KV cache element type: f32 (the references' precision), f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  c->add_option("--activations", a->activations,
                "bf16 weights: f32 (widened weights, the references' precision) or bf16 "
                "(activations rounded to bf16: what fak run and serve take where it is the faster, "
                "see --activations there)")
      ->capture_default_str();
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "print JSON");
  c->add_option("--device", a->device, "where the forward pass runs: cpu, cuda or cuda:N");
  c->callback([a] {
    int rc = parity(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace fak::cli
