// fak bench: llama-bench's flags and table (pp = prompt processing, tg = text generation), plus the
// effective GB/s of weights read per generated token. JSON lists each test with `test` and `tok_s`.
// -d runs the tests after that many context tokens (llama-bench's "pp512 @ d4096"): agents work at
// depth, where attention over the context costs as much as the weights. -b B decodes B sequences in
// lockstep ("tg32 x8": B clones of the depth's context, one batched forward a step, tok_s counting
// every sequence's tokens), as llama-batched-bench's S_TG: batched decode shares each weight read,
// so aggregate tok/s grows with B until the step is compute-bound.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common.h"
#include "core/error.h"
#include "core/memory_bandwidth.h"
#include "core/memory_info.h"
#include "models/forward_profile.h"
#include "models/tensor_table.h"
#include "ops/matmul.h"
#include "runtime/session.h"

namespace fak::cli {

namespace {

// The process's peak resident memory so far (MiB): /proc's VmHWM, which reset_peak_rss() can
// lower (getrusage's ru_maxrss cannot be reset).
double peak_rss_mib() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) return double(kib) / 1024.0;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// Resets VmHWM to the current RSS (Linux's clear_refs "5"); false where that is not possible.
bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

namespace {

struct BenchArgs {
  std::string model, prompts = "16,64,256", gens = "32", depths = "0", batches = "1", output = "md";
  int threads = 0, reps = 3;
  bool membw = true, profile = false, same_tokens = false;
  KvFlags kv;
};

std::vector<int> parse_list(const std::string& s, const char* what) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      int v = std::stoi(item);
      if (v < 0) throw std::out_of_range("negative");
      out.push_back(v);
    } catch (...) {
      fail(std::string(what) + ": '" + item + "' is not a non-negative number");
    }
  }
  return out;
}

struct Stat {
  double mean = 0, stddev = 0, min = 0, median = 0;
};

Stat stats(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(s.stddev / double(v.size() - 1)) : 0;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.median = v[v.size() / 2];
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const BenchArgs& a) {
  set_threads(a.threads);
  const int threads = omp_get_max_threads();
  auto t_load = std::chrono::steady_clock::now();
  auto model = load_model(a.model);
  const double load_s = seconds_since(t_load);
  const ModelConfig& c = model->config();
  auto prompts = parse_list(a.prompts, "-p");
  auto gens = parse_list(a.gens, "-n");
  auto depths = parse_list(a.depths, "-d");
  auto batches = parse_list(a.batches, "-b");
  for (int b : batches)
    if (b < 1) fail("-b: a batch is at least 1 sequence");
  if (a.reps < 1) fail("-r must be at least 1");
  // Every test must fit the context before anything runs (a depth is prefilled first, which takes
  // minutes at 32k): say which does not, and what would.
  const int limit = c.context_limit();
  for (int d : depths) {
    if (d < 0 || d >= limit)
      fail("-d " + std::to_string(d) + ": the model's context is " + std::to_string(limit) +
           " tokens");
    for (int p : prompts)
      if (d + p > limit)
        fail("-d " + std::to_string(d) + " -p " + std::to_string(p) + ": " + std::to_string(d + p) +
             " tokens exceed the model's context of " + std::to_string(limit) +
             " (at this depth the longest prompt is " + std::to_string(limit - d) +
             "); nothing was run");
    for (int n : gens)
      if (d + n > limit)
        fail("-d " + std::to_string(d) + " -n " + std::to_string(n) + ": " + std::to_string(d + n) +
             " tokens exceed the model's context of " + std::to_string(limit) +
             " (at this depth at most -n " + std::to_string(limit - d) + "); nothing was run");
  }
  // And the KV of the longest test must fit the machine's memory: a depth prefilled for minutes
  // that then runs out of memory (or is killed for it) helps no one.
  // (A prompt runs on one sequence; tg runs b clones sharing the depth's blocks.)
  int64_t longest = 0;
  for (int d : depths)
    for (int t : prompts) longest = std::max<int64_t>(longest, int64_t(d) + t);
  for (int d : depths)
    for (int b : batches)
      for (int t : gens) longest = std::max<int64_t>(longest, int64_t(d) + int64_t(b) * t);
  a.kv.check_fits_memory(*model, longest, "the longest test (depth + tokens, x batch for tg)");
  std::mt19937 rng(42);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v(size_t(n), 0);
    for (auto& t : v) t = int32_t(rng() % uint32_t(c.vocab));
    return v;
  };
  auto cache = a.kv.make_cache(*model);
  // Warm-up: touch every weight once so the first timed run does not pay for page faults. As long
  // as the longest prompt (up to 512 tokens), as llama-bench's warm-up run is: 8 tokens route to
  // few of a MoE's experts, and the first pp512 repetition used to pay for the rest (a third of
  // the later repetitions' speed on Qwen3.5-35B-A3B).
  {
    Session s(model, cache);
    int n = 8;
    for (int p : prompts) n = std::max(n, std::min(p, 512));
    s.append(random_tokens(n));
  }
  // Bytes a decode step streams (tensor_table.h active_bytes_per_token): every matrix except an
  // untied embedding (one row is looked up) — Qwen3.5's 248K x 5120 embedding would otherwise
  // inflate GB/s by a third — and of a MoE layer's experts only the share a token routes to, plus,
  // on hybrids, the DeltaNet state, read and written once per token.
  const ModelWeights& w = model->weights();
  const bool untied = !c.tie_embeddings;
  const double state_gb = double(RecurrentState(c.recurrent_shape()).bytes()) / 1e9;
  const double weight_gb = active_bytes_per_token(c, w) / 1e9;
  const double params = matrix_params(c, w);
  // A decode step at depth d also reads the d tokens of KV of every attention layer (K and V; the
  // pre-RoPE keys are kept, not read).
  const double kv_gb_per_ctx_token =
      double(kv_bytes_per_token(model->n_attention_layers(), c.n_kv_heads, c.head_dim,
                                cache->dtype(), /*keep_kraw=*/false)) /
      1e9;
  // The machine's read bandwidth, on the benchmark's threads: once now (the header), and right
  // before every tg repetition, which is held against the probe beside it (bytes read per token x
  // tokens/s over it): on a shared host the rate moves by 2x within minutes, so a probe taken
  // once, minutes from the test it judges, said more about the minute than about the kernel.
  // The probes' buffers are not the model's memory: the peak RSS reported is the largest outside
  // them (the kernel's high-water mark is reset once each is freed).
  double peak_outside_probes_mib = 0;
  bool probes_forgotten = true;
  // No probe where its pool would crowd out the model (the roof is then left out, as with
  // --no-membw).
  size_t pool_bytes = 0;
  if (a.membw) {
    const MemoryInfo mem = read_memory_info();
    pool_bytes = probe_pool_bytes(mem.available());
    if (pool_bytes == 0)
      std::fprintf(stderr,
                   "fak bench: no bandwidth probe (no roof): its %zu MiB would leave under 1 GiB "
                   "free (%s)\n",
                   probe_pool_bytes(0) >> 20, mem.describe().c_str());
  }
  const bool membw = pool_bytes > 0;
  // Each probe reads passes of 128 MiB in turn from its pool, none twice: reread, a buffer
  // of a few hundred MiB partly streams from the last-level cache (core/memory_bandwidth.h).
  auto probe = [&](int passes) {
    peak_outside_probes_mib = std::max(peak_outside_probes_mib, peak_rss_mib());
    const double gb_s = measure_read_bandwidth(pool_bytes, size_t(128) << 20, passes);
    probes_forgotten = reset_peak_rss() && probes_forgotten;
    return gb_s;
  };
  const double membw_gb_s = membw ? probe(3) : 0.0;
  // Before each tg repetition: 3 passes (tens of milliseconds, most of it writing the pool).
  auto probe_before_rep = [&] { return membw ? probe(3) : 0.0; };
  nlohmann::json results = nlohmann::json::array();
  // rep_membw: the probe before each repetition (tg tests; empty for pp).
  auto record = [&](const std::string& test, int n_prompt, int n_gen, int n_depth, int n_batch,
                    const std::vector<double>& tok_s, const std::vector<double>& rep_membw = {},
                    const ForwardProfile* profile = nullptr) {
    Stat st = stats(tok_s);
    nlohmann::json r{{"test", test},         {"n_prompt", n_prompt}, {"n_gen", n_gen},
                     {"n_depth", n_depth},   {"n_batch", n_batch},   {"tok_s", st.mean},
                     {"stddev", st.stddev},  {"min", st.min},        {"median", st.median},
                     {"reps", tok_s.size()}, {"samples", tok_s}};
    double roof = 0;
    if (n_gen > 0) {
      // Every step reads every weight once, for all the batch's sequences together (a MoE step of
      // several sequences reads the union of their experts: the figure is per token's share).
      r["gb_s"] = st.mean / n_batch * weight_gb;
      if (state_gb > 0) r["state_gb_s"] = st.mean * 2 * state_gb;
      // Bytes a step reads: the weights once, each sequence's KV (depth + half the generated
      // tokens, on average) and its recurrent state (read and written).
      const double step_gb =
          weight_gb +
          double(n_batch) * (kv_gb_per_ctx_token * (n_depth + n_gen / 2.0) + 2 * state_gb);
      r["bytes_per_token"] = step_gb / n_batch * 1e9;
      if (rep_membw.size() == tok_s.size() && !rep_membw.empty()) {
        // Each repetition against the probe just before it; the median of those shares.
        std::vector<double> roofs;
        for (size_t i = 0; i < tok_s.size(); ++i)
          roofs.push_back(tok_s[i] / n_batch * step_gb / rep_membw[i]);
        roof = stats(roofs).median;
        r["roofline_fraction"] = roof;
        r["membw_gb_s"] = stats(rep_membw).median;
        r["membw_samples"] = rep_membw;
      }
    }
    // Per part of the model: seconds per generated token, its share of the forward's time, the
    // weight bytes it read per second, and that against the probe (the part's own roof share).
    const double membw_median = rep_membw.empty() ? 0.0 : stats(rep_membw).median;
    nlohmann::json parts = nlohmann::json::array();
    if (profile) {
      double total = 0;
      for (const ForwardPartStat& p : *profile) total += p.seconds;
      const double tokens =
          double(n_gen > 0 ? n_gen : n_prompt) * double(n_batch) * double(tok_s.size());
      for (size_t i = 0; i < profile->size(); ++i) {
        const ForwardPartStat& p = (*profile)[i];
        if (p.calls == 0) continue;
        const double gb_s = p.seconds > 0 ? p.bytes / p.seconds / 1e9 : 0.0;
        nlohmann::json e{{"part", forward_part_name(ForwardPart(i))},
                         {"ms_per_token", 1e3 * p.seconds / tokens},
                         {"share", total > 0 ? p.seconds / total : 0.0},
                         {"weight_bytes_per_token", p.bytes / tokens},
                         {"gb_s", gb_s}};
        if (membw_median > 0 && p.bytes > 0) e["roofline_fraction"] = gb_s / membw_median;
        parts.push_back(e);
      }
      r["profile"] = parts;
    }
    results.push_back(r);
    if (a.output == "md") {
      std::printf("| %-18s | %10.2f ± %7.2f |", test.c_str(), st.mean, st.stddev);
      if (n_gen > 0 && !rep_membw.empty())
        std::printf(" %6.1f | %5.1f%% | %6.1f |\n", st.mean / n_batch * weight_gb, 100 * roof,
                    stats(rep_membw).median);
      else if (n_gen > 0)
        std::printf(" %6.1f |        |\n", st.mean / n_batch * weight_gb);
      else
        std::printf("        |        |\n");
      for (const nlohmann::json& e : parts)
        std::printf(
            "|   %-16s | %7.3f ms/tok %5.1f%% | %6.1f | %s |\n",
            e["part"].get<std::string>().c_str(), e["ms_per_token"].get<double>(),
            100 * e["share"].get<double>(), e["gb_s"].get<double>(),
            e.contains("roofline_fraction")
                ? (std::to_string(int(100 * e["roofline_fraction"].get<double>())) + "%").c_str()
                : "");
      std::fflush(stdout);
    }
  };
  if (a.output == "md") {
    std::printf("model: %s (%s, %.1f M params, %.2f GiB weights, %s)\n",
                model->path().string().c_str(), c.model_type.c_str(), params / 1e6,
                double(model->weights().bytes) / double(1 << 30),
                std::string(wtype_name(model->weights().embed.type)).c_str());
    if (c.is_moe())
      std::printf("MoE: %d of %d experts per token in %d layers\n", c.n_experts_used, c.n_experts,
                  c.count_ffns(FfnKind::Moe));
    if (state_gb > 0)
      std::printf("DeltaNet state: %.1f MiB per sequence (read + written every token)\n",
                  state_gb * 1e9 / double(1 << 20));
    std::printf("GB/s: %.2f GB of weights per generated token%s%s\n", weight_gb,
                untied ? " (the untied embedding is not read)" : "",
                c.is_moe() ? " (active parameters: the experts a token routes to)" : "");
    std::printf(
        "device: %s, threads: %d, kernels: %s, bf16 weights x %s activations, weights: "
        "%s, load: %.2f s\n\n",
        model->device().name().c_str(), threads, std::string(matmul_isa()).c_str(),
        bf16_activations() ? "bf16" : "f32", model->weights_memory(), load_s);
    if (membw_gb_s > 0)
      std::printf(
          "memory read bandwidth (measured now, %d threads, median of 3 reads of 128 MiB, none "
          "read twice): %.1f GB/s; read: the same before each tg repetition (median); roof: the "
          "share of it each "
          "repetition read (weights + KV at depth + recurrent state; median)\n",
          threads, membw_gb_s);
    if (membw_gb_s > 0)
      std::printf(
          "| test               |              t/s       |  GB/s  |  roof  |  read  "
          "|\n|--------------------|------------------------|--------|--------|--------|\n");
    else
      std::printf(
          "| test               |              t/s       |  GB/s  |  roof  "
          "|\n|--------------------|------------------------|--------|--------|\n");
  }
  for (int d : depths) {
    // The context the tests start from, prefilled once (untimed); each repetition clones it (no
    // copy) and appends to the clone, so it sees d tokens of KV as a long conversation does.
    // In chunks of 512 (llama-bench's default micro-batch): one call of d tokens would size the
    // forward's activation buffers for d (half a GiB at d8192 on the 0.5B shape), which the peak
    // RSS would then count as the model's. The KV is the same bits either way (ops/matmul.h).
    Session base(model, cache);
    if (d > 0) {
      const std::vector<int32_t> context = random_tokens(d);
      for (int at = 0; at < d; at += 512)
        base.append(
            std::span<const int32_t>(context).subspan(size_t(at), size_t(std::min(512, d - at))));
    }
    auto fresh = [&] { return d > 0 ? base.clone() : Session(model, cache); };
    const std::string at = d > 0 ? " @ d" + std::to_string(d) : "";
    for (int p : prompts) {
      if (p == 0) continue;
      std::vector<double> v;
      ForwardProfile profile{};
      for (int r = 0; r < a.reps; ++r) {
        auto toks = random_tokens(p);
        Session s = fresh();
        if (a.profile) set_forward_profile(&profile);
        auto t0 = std::chrono::steady_clock::now();
        s.append(toks);
        v.push_back(double(p) / seconds_since(t0));
        set_forward_profile(nullptr);
      }
      record("pp" + std::to_string(p) + at, p, 0, d, 1, v, {}, a.profile ? &profile : nullptr);
    }
    for (int n : gens) {
      if (n == 0) continue;
      for (int b : batches) {
        std::vector<double> v, rep_membw;
        ForwardProfile profile{};
        for (int r = 0; r < a.reps; ++r) {
          if (membw) rep_membw.push_back(probe_before_rep());
          std::vector<Session> seqs;
          for (int i = 0; i < b; ++i) seqs.push_back(fresh());
          std::vector<Session*> ptrs;
          for (Session& x : seqs) ptrs.push_back(&x);
          // Each sequence its own token, or (--same-tokens) one for all, so the clones stay alike.
          const auto step_tokens = [&] {
            return a.same_tokens ? std::vector<int32_t>(size_t(b), random_tokens(1)[0])
                                 : random_tokens(b);
          };
          std::vector<int32_t> toks = step_tokens();
          // As llama-bench: one token per forward (per sequence), after the depth's context.
          if (a.profile) set_forward_profile(&profile);
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < n; ++i) {
            if (b == 1)
              seqs[0].append({toks.data(), 1});
            else
              decode_batch(ptrs, toks);
            toks = step_tokens();
          }
          v.push_back(double(n) * double(b) / seconds_since(t0));
          set_forward_profile(nullptr);
        }
        record("tg" + std::to_string(n) + (b > 1 ? " x" + std::to_string(b) : "") +
                   (b > 1 && a.same_tokens ? " same" : "") + at,
               0, n, d, b,
               v, rep_membw, a.profile ? &profile : nullptr);
      }
    }
  }
  // Peak resident memory of the whole run (weights, KV cache, scratch), as the OS counts it.
  const double peak_rss = !membw || probes_forgotten
                              ? std::max(peak_outside_probes_mib, peak_rss_mib())
                              : peak_rss_mib();  // the probes' buffers included (no reset here)
  if (a.output == "md") std::printf("\npeak RSS: %.0f MiB\n", peak_rss);
  if (a.output == "json") {
    nlohmann::json j{{"model", model->path().string()},
                     {"peak_rss_mib", peak_rss},
                     {"model_type", c.model_type},
                     {"weight_bytes", model->weights().bytes},
                     {"decode_bytes_per_token", weight_gb * 1e9},
                     {"params", params},
                     {"n_experts", c.n_experts},
                     {"n_experts_used", c.n_experts_used},
                     {"recurrent_state_bytes", state_gb * 1e9},
                     {"weight_type", std::string(wtype_name(model->weights().embed.type))},
                     {"weights_memory", model->weights_memory()},
                     {"threads", threads},
                     {"kernels", std::string(matmul_isa())},
                     {"bf16_activations", bf16_activations()},
                     {"device", model->device().name()},
                     {"load_seconds", load_s},
                     {"membw_gb_s", membw_gb_s},
                     {"kv_bytes_per_context_token", kv_gb_per_ctx_token * 1e9},
                     {"results", results}};
    std::printf("%s\n", j.dump(1).c_str());
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c =
      app.add_subcommand("bench", "prompt-processing and generation speed (llama-bench style)");
  c->add_option("-m,--model", a->model, "model (default: the bundled pycoder-6m)");
  c->add_option("-p,--n-prompt", a->prompts, "prompt lengths, comma-separated");
  c->add_option("-n,--n-gen", a->gens, "generation lengths, comma-separated");
  c->add_option("-d,--n-depth", a->depths,
                "context tokens already in the KV before each test, comma-separated (default 0)");
  c->add_flag("!--no-membw", a->membw,
              "skip measuring the memory read bandwidth (the roof column and roofline_fraction)");
  c->add_flag("--profile", a->profile,
              "each test split by part of the model (attention, experts, head, ...): time per "
              "token, and for tg the weight bandwidth against the probe");
  c->add_option("-b,--batch", a->batches,
                "sequences decoded in lockstep by the tg tests, comma-separated (default 1)");
  c->add_flag("--same-tokens", a->same_tokens,
              "the sequences of a -b test all take the same token each step, so a MoE step reads "
              "one token's experts (as ik_llama.cpp's llama-batched-bench, which feeds token 0 to "
              "every sequence); without it each takes its own random token");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_option("-r,--repetitions", a->reps, "repetitions of each test");
  c->add_option("-o,--output", a->output, "md or json")->check(CLI::IsMember({"md", "json"}));
  add_load_flags(c);
  a->kv.add_to(c);
  c->callback([a] { bench(*a); });
}

}  // namespace fak::cli
