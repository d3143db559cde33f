// fak serve: the OpenAI-compatible HTTP server (src/server/) over one model.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "common.h"
#include "core/error.h"
#include "runtime/speculative.h"
#include "server/server.h"

namespace fak::cli {

namespace {

struct ServeArgs {
  std::string model, api_key_env, draft = "none";
  DraftOptions draft_options;
  int threads = 0;
  size_t max_body_mib = 8;
  bool kv_lazy = false, no_warmup = false, ctx_past_training = false;
  KvFlags kv;
  server::ServerOptions o;
};

// The model is read on a thread of its own, which ends: OpenMP keeps a pool of workers for every
// thread that ran a parallel region, and the main thread's would outlive the load beside the
// scheduler's. With more workers than cores libgomp stops spin-waiting between regions, so every
// region of every step would wake its workers from sleep (20% slower decode on 2 cores), and under
// OMP_WAIT_POLICY=active the idle pool would spin on a core for the server's whole life.
std::shared_ptr<const Model> load_off_the_main_thread(const ServeArgs& a) {
  std::shared_ptr<const Model> model;
  std::exception_ptr error;
  std::thread([&] {
    try {
      set_threads(a.threads);
      model = load_model(a.model);
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return model;
}

// Buffers of a few MiB come and go with every request and step (a hybrid's 20 MiB recurrent state
// per sequence, logits rows). glibc would hand each back to the kernel when freed, so the next one
// faults in and zeroes fresh pages again (on this VM 3.5 us per 4 KiB page: 70 ms per state); kept
// in the heap they are reused at once. The heap then holds at most what a busy moment needed.
void keep_freed_buffers() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: below it, from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void serve(ServeArgs& a) {
  keep_freed_buffers();
  set_threads(a.threads);
  a.o.kv_type = parse_kv_type(a.kv.type);
  a.o.kv_kraw = a.kv.kraw && !a.kv.no_kraw;
  a.o.kv_swa_full = a.kv.swa_full;
  a.o.map_kv_at_start = !a.kv_lazy;
  a.o.warm_up = !a.no_warmup;
  if (a.ctx_past_training) set_context_past_training(a.o.ctx);
  if (!a.api_key_env.empty()) {
    const char* v = std::getenv(a.api_key_env.c_str());
    if (!v || !*v)
      fail("--api-key-env " + a.api_key_env + ": that environment variable is empty or unset");
    // Several keys, comma-separated: each is a tenant with its own prefix-cache partition.
    a.o.api_keys = server::parse_api_keys(v, a.api_key_env);
    a.o.require_api_key = true;
    std::fprintf(stderr, "fak serve: %zu API key%s loaded from %s\n", a.o.api_keys.size(),
                 a.o.api_keys.size() == 1 ? "" : "s", a.api_key_env.c_str());
  } else {
    std::fprintf(stderr,
                 "fak serve: no --api-key-env: requests are served without authentication\n");
  }
  a.o.max_body_bytes = a.max_body_mib << 20;
  if (a.draft != "none") {
    a.draft_options.mtp = a.draft == "mtp";
    a.draft_options.validate();
    a.o.draft = a.draft_options;
  }
  std::shared_ptr<const Model> model = load_off_the_main_thread(a);
  if (a.draft == "mtp" && model->config().mtp_layers == 0)
    fail("--draft mtp: " + model->path().string() +
         " has no multi-token-prediction head (mtp_num_hidden_layers); use --draft ngram");
  server::serve(std::move(model), a.o);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (chat, completions, tools, sessions)");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("--host", a->o.host, "address to listen on")->capture_default_str();
  c->add_option("--port", a->o.port, "port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  c->add_option("--api-key-env", a->api_key_env,
                "require Authorization: Bearer <key>, keys (comma-separated) read from this "
                "environment variable");
  c->add_option("--parallel", a->o.parallel, "sequences generated at once (continuous batching)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  c->add_option("--max-tokens", a->o.max_tokens,
                "tokens a reply generates when the client names no limit, and the most it may ask "
                "for (the reply then says so in a Fak-Max-Tokens header); 0: only the context "
                "limits it")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  c->add_flag("--refuse-hosted-tools", a->o.refuse_hosted_tools,
              "answer 400 to /v1/responses requests with hosted tools fak cannot run "
              "(web_search, file_search, ...) instead of leaving them out with a warning");
  c->add_option("--max-queue", a->o.max_queue, "requests waiting beyond --parallel before 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  // One hard budget for all KV (runtime/kv_budget.h). --cache-mem keeps its old name but now only
  // sizes the default budget, so it cannot be given with an explicit --kv-mem.
  auto* kv_mem = c->add_option("--kv-mem", a->o.kv_mib,
                               "hard KV memory budget in MiB for all sequences, the prefix cache "
                               "and sessions (default: ctx x parallel + --cache-mem, bounded by "
                               "the machine's free memory)")
                     ->check(CLI::Range(size_t(1), size_t(1) << 30));
  c->add_option("--cache-mem", a->o.cache_mib,
                "room in MiB for cached prefixes on top of ctx x parallel in the default "
                "--kv-mem (default: one context, at least 256)")
      ->check(CLI::Range(size_t(1), size_t(1) << 30))
      ->excludes(kv_mem);
  a->kv.add_to(c);
  c->add_flag("--no-warmup", a->no_warmup,
              "start without running a prompt chunk and a decode step first (the first requests "
              "then size the forward's buffers)");
  c->add_flag("--kv-lazy", a->kv_lazy,
              "map KV memory as sequences need it instead of all of --kv-mem at start (a quicker "
              "start and less memory until it is used; the first touch of each slab then lands "
              "on a request)");
  add_load_flags(c);
  c->add_option("--prefill-chunk", a->o.prefill_chunk,
                "prompt tokens prefilled per step (smaller: steadier decoding for others while a "
                "long prompt is read)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  auto* ctx = c->add_option("--ctx", a->o.ctx, "context length (default: the model's)")
                  ->check(CLI::NonNegativeNumber);
  c->add_flag("--ctx-past-training", a->ctx_past_training,
              "keep a --ctx longer than the model was trained for (or YaRN stretches it to), "
              "with a warning: positions it never saw, where output may degrade (without it, "
              "--ctx is cut to the model's context)")
      ->needs(ctx);
  c->add_option("--session-dir", a->o.session_dir,
                "directory for /v1/fak/ session save/load (off when unset)");
  auto* cache_dir = c->add_option(
      "--cache-dir", a->o.cache_dir,
      "keep the prefix cache here across restarts: reloaded at start, written at a clean "
      "stop (off when unset)");
  c->add_option("--cache-dir-max", a->o.cache_dir_mib,
                "most MiB the --cache-dir files of this model may take; the least valuable blocks "
                "are left out first (default: all the cache holds)")
      ->check(CLI::Range(size_t(1), size_t(1) << 30))
      ->needs(cache_dir);
  auto* store =
      c->add_option("--store", a->o.store,
                    "share sessions and the prefix cache with other replicas through Redis: "
                    "redis://host:port[/db], or redis-sentinel://host:port[,host:port...]/"
                    "primary[/db] to follow Sentinel failovers (off when unset; deploy/README.md)");
  c->add_option("--store-timeout", a->o.store_timeout_ms,
                "milliseconds a read or write to the store may stall before it counts as "
                "unreachable (completions then run on local memory, session calls answer 503)")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000))
      ->needs(store);
  c->add_option("--store-wait", a->o.store_wait_ms,
                "milliseconds a session change waits for an unreachable store before it is undone "
                "and answered 503 (a change is acknowledged only once the store has it)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000))
      ->needs(store);
  auto* pw_env = c->add_option("--store-password-env", a->o.store_password_env,
                               "read the store's password from this environment variable")
                     ->needs(store);
  c->add_option("--store-password-file", a->o.store_password_file,
                "read the store's password from this file (its first line)")
      ->needs(store)
      ->excludes(pw_env);
  c->add_flag("--store-password-in-url", a->o.store_password_in_url,
              "accept a password inside the --store URL (visible to every local user in ps)")
      ->needs(store);
  c->add_option("--store-recovery-grace", a->o.store_recovery_grace_ms,
                "milliseconds after a store restart, failover or lost session during which "
                "replicas put back what they hold before anything is served from it (give every "
                "replica the same value)")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000))
      ->needs(store);
  c->add_option("--store-sync-replicas", a->o.store_sync_replicas,
                "Redis replicas a session write waits for (WAIT) before it is acknowledged "
                "(default: 1 with redis-sentinel://, 0 otherwise)")
      ->check(CLI::Range(0, 16))
      ->needs(store);
  c->add_option("--drain-timeout", a->o.drain_timeout_s,
                "on SIGTERM or SIGHUP, seconds requests in flight get to finish while /health says "
                "draining (default: 30 with --store, 0 without)")
      ->check(CLI::Range(0.0, 3600.0));
  c->add_option("--max-body", a->max_body_mib, "largest request body in MiB")
      ->capture_default_str();
  c->add_option("--model-name", a->o.model_id,
                "model id clients use (default: the directory name)");
  c->add_option("--max-connections", a->o.max_connections,
                "open connections at most; at the cap the one idle longest is dropped")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  c->add_option("--header-timeout", a->o.header_timeout_s,
                "seconds a client has to send a request head (and keep-alive idle time)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  c->add_option("--body-timeout", a->o.body_timeout_s, "seconds a client has to send a body")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  c->add_option("--write-timeout", a->o.write_timeout_s,
                "seconds a client may take to accept each piece of a response")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  c->add_flag("--log-requests", a->o.log_requests, "print one line per request on stderr");
  c->add_option("--draft", a->draft,
                "speculative decoding for sequences that sample freely (the same output in fewer "
                "forward calls): ngram (prompt lookup), mtp (the model's multi-token-prediction "
                "head: Qwen3.5 / 3.6) or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ngram", "mtp"}));
  c->add_option("--draft-max", a->draft_options.max_draft,
                "tokens drafted per step by a lone sequence (shared out across the batch), 1 to 64")
      ->capture_default_str();
  c->add_option("--draft-ngram", a->draft_options.max_ngram,
                "longest context suffix looked up for a draft, 1 to 16")
      ->capture_default_str();
  c->add_option("--sse-keepalive", a->o.sse_keepalive_s,
                "seconds of silence before a stream gets a keep-alive comment")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  c->add_option("-t,--threads", a->threads, "threads for the forward pass (default: all cores)");
  c->callback([a] { serve(*a); });
}

}  // namespace fak::cli
