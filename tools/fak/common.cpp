#include "common.h"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/memory_info.h"
#include "io/hub_cache.h"
#include "ops/matmul.h"
#include "runtime/kv_budget.h"
#include "runtime/model_cache.h"
#include "tokenizer/utf8.h"

namespace fak::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("FAK_MODEL"); env && *env) return env;
  // Next to the binary (installed layouts), then the source tree it was built from.
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    auto exe_dir = std::filesystem::path(buf).parent_path();
    for (auto candidate : {exe_dir / "models/pycoder-6m", exe_dir / "../models/pycoder-6m"})
      if (std::filesystem::exists(candidate / "config.json")) return candidate.lexically_normal();
  }
  return FAK_DEFAULT_MODEL_DIR;
}

std::string resolve_model_path(const std::string& arg) {
  return arg.empty() ? default_model_dir() : hub::resolve_model_arg(arg);
}

namespace {
LoadOptions g_load_options;
std::string g_quant;
std::string g_activations = "auto";
std::string g_device = "cpu";
}  // namespace

void set_context_past_training(int tokens) {
  g_load_options.context_past_training = tokens;
}

std::shared_ptr<const Model> load_model(const std::string& path) {
  LoadOptions o = g_load_options;
  o.device = parse_device(g_device);
  if (!g_quant.empty()) {
    o.quant = quant_type_from_name(g_quant);
    if (!o.quant || *o.quant == QuantType::Q8_K)
      fail("--quant '" + g_quant +
           "': choose q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "
           "iq4_xs or mxfp4 (MoE experts)");
  }
  if (g_activations != "f32" && g_activations != "bf16" && g_activations != "auto")
    fail("--activations '" + g_activations + "': choose auto, f32 or bf16");
  set_bf16_activations(g_activations == "bf16" ||
                       (g_activations == "auto" && bf16_activations_faster()));
  std::shared_ptr<const Model> model = Model::load(resolve_model_path(path), o);
  if (!model->load_note().empty()) std::fprintf(stderr, "fak: %s\n", model->load_note().c_str());
  return model;
}

void add_load_flags(CLI::App* c, const char* activations) {
  // One variable for every command: each sets its own default when it is the one parsed.
  const std::string fallback = activations;
  c->preparse_callback([fallback](size_t) { g_activations = fallback; });
  c->add_flag("--mmap,!--no-mmap", g_load_options.mmap,
              "GGUF: map the file (instant start) or read it into memory with huge pages (default, "
              "faster decode)");
  c->add_option("--quant", g_quant, "HF directory: quantise the weights at load (e.g. q8_0)");
  c->add_option("--activations", g_activations,
                "bf16 weights: bf16 (activations rounded to bf16 for the CPU's bf16 dot product, "
                "where it has one: AVX512-BF16, or AMX-BF16's tile unit, 3.4x the f32 path's "
                "prefill; perplexity +0.006%), f32 (weights widened, the exact path: parity "
                "with f32/f64 references) or auto (bf16 where it is the faster: the tile unit, "
                "or AMD's full-rate vdpbf16ps; f32 on other CPUs)")
      ->default_str(activations);
  c->add_option("--device", g_device,
                "where the forward pass runs: cpu (default), cuda or cuda:N (a -DFAK_CUDA=ON build "
                "on a machine with a GPU)");
}

void check_utf8(const std::string& s, const std::string& what) {
  fak::check_utf8(s, what);
}

std::string read_text_file(const std::string& path, bool utf8) {
  if (!std::filesystem::exists(path)) fail("cannot open " + path + ": no such file");
  if (std::filesystem::is_directory(path)) fail(path + " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (utf8) check_utf8(s, path);
  return s;
}

std::vector<int32_t> parse_ids(const std::string& csv) {
  std::vector<int32_t> ids;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      fail("--ids: '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) fail("--ids: no token ids given");
  return ids;
}

void KvFlags::add_to(CLI::App* app) {
  app->add_option("--kv-type", type,
                  "KV cache storage: f32, f16, bf16, q8_0 or q4_0 (blocks of 32 with a scale: "
                  "53% / 28% of f16's memory; deterministic, so every reuse guarantee holds)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  app->add_flag("--kraw", kraw,
                "also keep pre-RoPE keys (half as much KV again): a shift eviction then leaves "
                "layer 0 exactly as a fresh run computes it");
  app->add_flag("--no-kraw", no_kraw, "keep no pre-RoPE keys (the default)");
  app->add_flag("--swa-full", swa_full,
                "sliding-window layers keep every row, not only their window's (more memory; a "
                "rewind or exact eviction far back then never recomputes from further back)");
}

std::shared_ptr<KvCache> KvFlags::make_cache(const Model& model) const {
  KvCacheOptions o;
  o.dtype = parse_kv_type(type);
  o.keep_kraw = kraw && !no_kraw;
  o.keep_window_rows = swa_full;
  return make_kv_cache(model, o);
}

void check_fits_context(const Model& model, int held, size_t prompt, int n, bool append_last) {
  const int64_t limit = model.config().context_limit();
  const std::string in_session =
      held > 0 ? " (after the " + std::to_string(held) + " already in the session)" : "";
  if (int64_t(held) + int64_t(prompt) > limit)
    fail("prompt too long: " + std::to_string(prompt) + " tokens" + in_session +
         " exceed the model's context of " + std::to_string(limit) + "; nothing was run");
  // The last generated token is only appended when the session keeps it.
  const int64_t needed = int64_t(held) + int64_t(prompt) + n - (append_last ? 0 : 1);
  if (n > 0 && needed > limit) {
    const int64_t most = limit - held - int64_t(prompt) + (append_last ? 0 : 1);
    fail("-n " + std::to_string(n) + ": the prompt's " + std::to_string(prompt) + " tokens" +
         in_session + " and " + std::to_string(n) + " generated need " + std::to_string(needed) +
         " positions, more than the model's context of " + std::to_string(limit) +
         (most > 0 ? " (at most -n " + std::to_string(most) + " fits)" : "") + "; nothing was run");
  }
}

void KvFlags::check_fits_memory(const Model& model, int64_t tokens, const std::string& what) const {
  const MemoryInfo memory = read_memory_info();
  KvBudgetOptions o;
  o.dtype = parse_kv_type(type);
  o.keep_kraw = kraw && !no_kraw;
  o.keep_window_rows = swa_full;
  o.ctx = int(std::min<int64_t>(tokens, kMaxSeqLen));
  o.available = memory.available();
  o.weights_bytes = mapped_weight_bytes(model);
  const KvBudget b = plan_kv_budget(model, o);
  if (b.machine_bound == 0 || b.sequences <= b.machine_bound) return;
  fail(what + ": " + std::to_string(tokens) + " tokens of KV need " +
       std::to_string(b.sequences >> 20) + " MiB, more than the " +
       std::to_string(b.machine_bound >> 20) + " MiB this machine can still give (" +
       memory.describe() + "), at " +
       describe_bytes_per_token(model, o.dtype, o.keep_kraw, o.keep_window_rows) +
       (o.dtype == DType::Q4_0 ? "" : "; --kv-type q8_0 or q4_0 takes less") + "; nothing was run");
}

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

void add_draft_flags(CLI::App* command, std::string& draft, DraftOptions& options) {
  command
      ->add_option("--draft", draft,
                   "speculative decoding (the same output, fewer forward calls): ngram (prompt "
                   "lookup), mtp (the model's multi-token-prediction head: Qwen3.5 / 3.6) or none")
      ->check(CLI::IsMember({"none", "ngram", "mtp"}));
  command->add_option("--draft-max", options.max_draft, "tokens drafted per step, 1 to 64");
  command->add_option("--draft-ngram", options.max_ngram,
                      "longest context suffix looked up for a draft, 1 to 16 (down to 1)");
}

}  // namespace fak::cli
