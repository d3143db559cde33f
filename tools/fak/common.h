// Shared plumbing of the fak subcommands: model resolution, prompt input, thread setup.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/speculative.h"

namespace fak::cli {

// -m/--model with the bundled default when empty.
std::string default_model_dir();
// -m's value as a local path: the default when empty, the path itself when it exists, else a
// Hugging Face hub id (org/name[:file]) looked up in the hub cache (`fak pull` fills it).
std::string resolve_model_path(const std::string& arg);
// Loads with the options the --mmap/--no-mmap/--quant flags set (add_load_flags).
std::shared_ptr<const Model> load_model(const std::string& path);
// Models loaded after this take a context of `tokens` even past what they were trained for
// (LoadOptions::context_past_training).
void set_context_past_training(int tokens);
// activations: the default of --activations (auto for run, chat, serve, bench: bf16 where the CPU's
// bf16 product is the faster, bf16_activations_faster; f32 for the commands that measure against a
// reference).
void add_load_flags(CLI::App* command, const char* activations = "auto");

// Reads a whole file; refuses invalid UTF-8 (naming the byte offset) when utf8 is true.
std::string read_text_file(const std::string& path, bool utf8 = true);
void check_utf8(const std::string& text, const std::string& what);
std::vector<int32_t> parse_ids(const std::string& csv);

void set_threads(int threads);  // 0 = all cores

// Refuses, before any work, a generation that cannot fit the model's context: `held` tokens
// already in the session, then the prompt's, then n generated (the last one appended too when
// append_last). The error says what does fit.
void check_fits_context(const Model& model, int held, size_t prompt, int n, bool append_last);
// --draft none|ngram|mtp, --draft-max and --draft-ngram (speculative decoding), for run and chat.
void add_draft_flags(CLI::App* command, std::string& draft, DraftOptions& options);

// --kv-type f32|f16|bf16 and --no-kraw, shared by every subcommand that builds a KV cache.
struct KvFlags {
  // The default is llama.cpp's: f16 K and V, no pre-RoPE keys (4 bytes per element pair; f32 +
  // Kraw took 12). f16 over bf16 by measurement (bench/HISTORY.md, session 14): against the f32
  // references it is ten times closer (max |logit diff| 1e-3 vs 1e-2; 0.0015 vs 0.2 on the MoE
  // fixture), and pycoder-6m's perplexity moves by 2e-5 (bf16: 6e-4).
  std::string type = "f16";
  bool kraw = false, no_kraw = false;
  bool swa_full = false;  // keep every row of sliding-window layers
  void add_to(CLI::App* app);
  std::shared_ptr<KvCache> make_cache(const Model& model) const;
  // Refuses, before any work, `tokens` positions of KV of this type (sliding-window layers counted
  // at their window) that the machine cannot hold beside what it already holds; `what` names the
  // request ("-d 130000").
  void check_fits_memory(const Model& model, int64_t tokens, const std::string& what) const;
};

// Each subcommand registers itself on the app.
void register_run(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_parity(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_evict_check(CLI::App& app);
void register_agentbench(CLI::App& app);
void register_convert(CLI::App& app);
void register_quantize(CLI::App& app);
void register_synth(CLI::App& app);
void register_serve(CLI::App& app);
void register_chat(CLI::App& app);
void register_specbench(CLI::App& app);
void register_pull(CLI::App& app);

}  // namespace fak::cli
