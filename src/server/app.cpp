// The server application: builds the context (model, scheduler, sessions, metrics), the router
// with its hooks (auth, error bodies, per-route metrics, the request log) and the small routes
// (/health, /v1/models, /metrics); serve() puts it behind the HTTP transport and runs until a
// signal asks it to stop.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "runtime/generation_config.h"
#include "server/anthropic_format.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

std::string tenant_of(const HttpRequest& req) {
  const std::string auth = req.header("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0)
    return auth.substr(prefix.size());
  return req.header("x-api-key");  // Anthropic clients send the key this way
}

void reply_json(HttpResponse& res, int status, const ojson& body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = dump(body);
}

void reply_error(HttpResponse& res, int status, const std::string& message, const std::string& type,
                 const std::string& param, const std::string& code) {
  reply_json(res, status, error_body(message, type, param, code));
}

HttpHandler guarded(HttpHandler fn) {
  return [fn = std::move(fn)](const HttpRequest& req, HttpResponse& res) {
    try {
      fn(req, res);
    } catch (const ApiError& e) {
      res.stream.reset();
      reply_error(res, e.status, e.what(), e.type, e.param, e.code);
      if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
    } catch (const KvBudgetError& e) {
      // The server's memory, not the request, is at fault, and it frees up as others finish.
      res.stream.reset();
      reply_error(res, 503, std::string(e.what()) + "; retry later", "server_error", "",
                  "kv_budget_exhausted");
      res.set_header("Retry-After", "1");
    } catch (const StorageError& e) {
      // The server's disk, not the request, is at fault.
      res.stream.reset();
      if (e.out_of_space())
        reply_error(res, 507, e.what(), "server_error", "", "insufficient_storage");
      else
        reply_error(res, 500, e.what(), "server_error", "", "storage_error");
    } catch (const Error& e) {
      res.stream.reset();
      reply_error(res, 400, e.what(), "invalid_request_error");
    } catch (const nlohmann::json::exception& e) {
      res.stream.reset();
      reply_error(res, 400, std::string("bad JSON value: ") + e.what(), "invalid_request_error");
    } catch (const std::bad_alloc&) {
      res.stream.reset();
      reply_error(res, 503, "out of memory", "server_error");
    } catch (const std::exception& e) {
      res.stream.reset();
      reply_error(res, 500, std::string("internal error: ") + e.what(), "server_error");
    }
  };
}

namespace {

// Metrics label: the route pattern, so session ids do not make a label per session.
std::string route_label(const std::string& path) {
  if (path.rfind("/v1/fak/sessions", 0) == 0) {
    const size_t n = std::count(path.begin(), path.end(), '/');
    if (n <= 3) return "/v1/fak/sessions";
    if (path == "/v1/fak/sessions/load") return path;
    if (n == 4) return "/v1/fak/sessions/:id";
    return "/v1/fak/sessions/:id/" + path.substr(path.rfind('/') + 1);
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/:id";
  for (const char* known : {"/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/messages",
                            "/v1/messages/count_tokens", "/v1/responses", "/health", "/metrics",
                            "/", "/tokenize", "/detokenize", "/apply-template", "/props"})
    if (path == known) return path;
  return "other";
}

std::string model_id_of(const Model& model) {
  std::filesystem::path p = model.path().lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

ojson model_object(ServerContext& ctx) {
  ojson m;
  m["id"] = ctx.model_id;
  m["object"] = "model";
  m["created"] = 0;
  m["owned_by"] = "fak";
  m["context_length"] = ctx.scheduler->ctx();
  // note: never the model's path: where the server keeps its files is none of a client's business.
  m["meta"] = {{"context_length", ctx.scheduler->ctx()}, {"vocab", ctx.model->config().vocab}};
  return m;
}

// The KV budget's gauges (runtime/kv_budget.h). The cache's counters are atomics, so reading them
// here, off the scheduler thread, is safe.
std::string kv_metrics(ServerContext& ctx) {
  const KvCache& kv = *ctx.scheduler->kv_cache();
  const PrefixCacheStats c = ctx.scheduler->cache_stats();
  std::string out;
  auto gauge = [&](const char* name, const char* type, const char* help, size_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(value) + "\n";
  };
  gauge("fak_kv_budget_bytes", "gauge", "the hard KV memory budget (--kv-mem)", kv.max_bytes());
  gauge("fak_kv_capacity_tokens", "gauge", "tokens the budget holds", kv.capacity_tokens());
  gauge("fak_kv_mapped_bytes", "gauge", "KV memory mapped so far (whole slabs)", kv.mapped_bytes());
  gauge("fak_kv_used_bytes", "gauge", "KV blocks held by sequences, sessions and the prefix cache",
        kv.bytes_in_use());
  gauge("fak_kv_bytes_per_token", "gauge", "K + V (+ Kraw) of one token in every layer",
        ctx.scheduler->kv_budget().bytes_per_token);
  gauge("fak_prefix_cache_evicted_blocks_total", "counter", "blocks the prefix cache let go",
        size_t(c.blocks_evicted));
  gauge("fak_prefix_cache_reclaimed_blocks_total", "counter",
        "of those, given back because the KV budget was spent", size_t(c.blocks_reclaimed));
  return out;
}

void add_basic_routes(Router& router, ServerContext& ctx) {
  // The base URL itself: agent CLIs probe it (Claude Code sends HEAD / before every run), and a
  // person opening it in a browser learns what answers there. Public, like /health: it names no
  // model and no key.
  router.add("GET", "/", guarded([&](const HttpRequest&, HttpResponse& res) {
               reply_json(
                   res, 200,
                   {{"object", "fak.server"},
                    {"status", ctx.draining.load() ? "draining" : "ok"},
                    {"endpoints",
                     {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                      "/v1/models", "/v1/fak/sessions", "/health", "/metrics"}}});
             }),
             /*runs_inline=*/true);
  // Inline: answered on the I/O thread, so a load balancer's probe is never stuck behind work.
  router.add("GET", "/health", guarded([&](const HttpRequest&, HttpResponse& res) {
               const SchedulerGauges g = ctx.scheduler->gauges();
               // Draining: 503, so a load balancer's check takes the replica out of rotation.
               const bool draining = ctx.draining.load();
               ojson body = {{"status", draining ? "draining" : "ok"},
                             {"active", g.active},
                             {"queued", g.queued}};
               // A store that is down does not make the replica unhealthy: it serves from memory.
               if (ctx.store_pool) body["store"] = ctx.store_pool->up() ? "up" : "down";
               reply_json(res, draining ? 503 : 200, body);
             }),
             /*runs_inline=*/true);
  router.add(
      "GET", "/v1/models", guarded([&](const HttpRequest&, HttpResponse& res) {
        reply_json(res, 200, {{"object", "list"}, {"data", ojson::array({model_object(ctx)})}});
      }),
      true);
  router.add("GET", "/v1/models/:id", guarded([&](const HttpRequest& req, HttpResponse& res) {
               if (req.matches[1] != ctx.model_id)
                 throw ApiError(404, "The model '" + req.matches[1] + "' does not exist", "model",
                                "model_not_found");
               reply_json(res, 200, model_object(ctx));
             }),
             true);
  router.add("GET", "/metrics", guarded([&](const HttpRequest&, HttpResponse& res) {
               res.content_type = "text/plain; version=0.0.4";
               res.body = ctx.metrics.render(ctx.scheduler->gauges(), ctx.scheduler->cache_stats());
               res.body += kv_metrics(ctx);
               if (ctx.store_metrics) res.body += ctx.store_metrics->render(ctx.store_pool->up());
             }),
             true);
}

// Which partitions saved under --cache-dir still belong to a tenant: with --api-key-env, those of
// the keys configured now (a key taken away takes its cached prefixes with it); without, any
// (every bearer token is a tenant of an open server).
std::function<bool(const std::string&)> saved_partition_filter(const std::set<std::string>& keys) {
  const auto well_formed = [](const std::string& p) { return p.size() == 65 && p[32] == '-'; };
  if (keys.empty()) return well_formed;
  std::set<std::string> hashes;
  for (const auto& k : keys) hashes.insert(tenant_hash(k));
  return [hashes, well_formed](const std::string& p) {
    return well_formed(p) && hashes.count(p.substr(0, 32)) > 0;
  };
}

// --store: the Redis pool, the shared prefix cache and shared sessions; one line says whether the
// store answers, and one more when its eviction policy could drop sessions.
void attach_store(ServerContext& ctx, const std::function<void(const std::string&)>& log) {
  const ServerOptions& o = ctx.options;
  store::RedisUrl url = store::parse_redis_url(o.store);
  if (!url.password.empty() && !o.store_password_in_url)
    fail(
        "--store: the URL holds a password, which every local user can read in ps and "
        "/proc/PID/cmdline: give it with --store-password-env VAR or --store-password-file "
        "FILE (or allow it with --store-password-in-url)");
  if (!o.store_password_env.empty()) {
    const char* v = std::getenv(o.store_password_env.c_str());
    if (!v || !*v)
      fail("--store-password-env: the environment variable " + o.store_password_env +
           " is not set or empty");
    url.password = v;
  }
  if (!o.store_password_file.empty()) {
    std::ifstream f(o.store_password_file, std::ios::binary);
    if (!f) fail("--store-password-file: cannot read " + o.store_password_file);
    std::string pw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!pw.empty() && (pw.back() == '\n' || pw.back() == '\r')) pw.pop_back();
    if (pw.empty()) fail("--store-password-file: " + o.store_password_file + " is empty");
    url.password = pw;
  }
  ctx.store_metrics = std::make_unique<store::StoreMetrics>();
  store::RedisPoolOptions po;
  po.timeout = std::chrono::milliseconds(std::max(1, o.store_timeout_ms));
  store::StoreMetrics* m = ctx.store_metrics.get();
  ctx.store_pool = std::make_unique<store::RedisPool>(
      url, po, log,
      [m](double s, size_t out, size_t in, bool failed) { m->observe_call(s, out, in, failed); });
  ctx.blocks = std::make_shared<store::BlockStore>(*ctx.store_pool, ctx.model,
                                                   ctx.scheduler->kv_cache(), *m, log);
  ctx.scheduler->attach_store(ctx.blocks);
  SharedSessions::Options so;
  so.wait = std::chrono::milliseconds(o.store_wait_ms);
  so.recovery_grace_ms = o.store_recovery_grace_ms;
  so.sync_replicas =
      o.store_sync_replicas >= 0 ? o.store_sync_replicas : (url.sentinels.empty() ? 0 : 1);
  ctx.shared = std::make_unique<SharedSessions>(ctx, *ctx.blocks, log, so);
  std::vector<store::RedisReply> r;
  const bool up = ctx.store_pool->run([&](store::RedisConnection& c) {
    r = c.pipeline({{"PING"}, {"CONFIG", "GET", "maxmemory-policy"}});
  });
  if (!up) return;  // the pool logged why; the server starts and serves from memory
  log("store " + url.shown + " reachable; keys under " + ctx.blocks->ns());
  // A store that has just started (or restarted, or failed over) is in a recovery window, when
  // other replicas put back what it lost: this replica listens once it is over.
  ctx.shared->wait_recovered(std::chrono::steady_clock::now() +
                             std::chrono::milliseconds(o.store_recovery_grace_ms + 1000));
  // CONFIG may be renamed away: then nothing is said.
  if (r.size() == 2 && r[1].type == store::RedisReply::Type::Array && r[1].elements.size() == 2) {
    const std::string policy = r[1].elements[1].str;
    if (policy.rfind("allkeys-", 0) == 0)
      log("warning: the store's maxmemory-policy is " + policy +
          ": Redis may evict sessions, not only cached blocks; use volatile-lru "
          "(deploy/redis.conf)");
  }
}

}  // namespace

struct ServerApp::Impl {
  ServerContext ctx;
  Router router;
  HttpServerOptions http;
};

ServerApp::ServerApp(std::shared_ptr<const Model> model, const ServerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  // note: the last line of defence against an open server: whatever built these options, keys
  // that were asked for and are missing stop it here.
  if (options.require_api_key && options.api_keys.empty())
    fail("fak serve: API keys were required but none were given; refusing to start");
  ServerContext& ctx = impl_->ctx;
  ctx.model = model;
  ctx.options = options;
  ctx.model_id = options.model_id.empty() ? model_id_of(*model) : options.model_id;
  if (model->tokenizer()) {
    ctx.chat = std::make_unique<chat::ChatPrompt>(*model);
    if (!ctx.chat->has_model_template())
      std::fprintf(stderr, "fak serve: warning: %s\n",
                   chat::no_template_warning(model->path().string()).c_str());
  }
  ctx.sampling_defaults = load_generation_defaults(model->path());
  SchedulerOptions so;
  so.parallel = options.parallel;
  so.max_queue = options.max_queue;
  so.kv_bytes = options.kv_mib << 20;
  so.cache_bytes = options.cache_mib << 20;
  so.kv_type = options.kv_type;
  so.keep_kraw = options.kv_kraw;
  so.keep_window_rows = options.kv_swa_full;
  so.map_kv_at_start = options.map_kv_at_start;
  so.warm_up = options.warm_up;
  so.ctx = options.ctx;
  so.prefill_chunk = options.prefill_chunk;
  so.draft = options.draft;
  so.cache_dir = options.cache_dir;
  so.cache_dir_bytes = options.cache_dir_mib << 20;
  so.cache_dir_keep = saved_partition_filter(options.api_keys);
  so.log = [](const std::string& line) {
    std::fprintf(stderr, "fak serve: %s\n", line.c_str());
    std::fflush(stderr);
  };
  ctx.scheduler = std::make_unique<Scheduler>(model, so, &ctx.metrics);
  const KvBudget& budget = ctx.scheduler->kv_budget();
  const int64_t kv_tokens =
      budget.bytes_per_token ? int64_t(budget.cache_bytes() / budget.bytes_per_token) : INT64_MAX;
  ctx.sessions = std::make_unique<SessionTable>(
      model, ctx.scheduler->kv_cache(), ctx.chat.get(), options.session_dir, ctx.scheduler->ctx(),
      default_session_quota(kv_tokens, ctx.scheduler->ctx()));
  if (!options.store.empty()) attach_store(ctx, so.log);

  Router& router = impl_->router;
  // Each API's clients read errors in their own shape, the transport's refusals included.
  const auto anthropic_path = [](const std::string& path) {
    return path.rfind("/v1/messages", 0) == 0;
  };
  router.error = [anthropic_path](const std::string& path, HttpResponse& res, int status,
                                  const std::string& message, const std::string& code) {
    if (anthropic_path(path))
      reply_anthropic_error(res, status, message);
    else
      reply_error(res, status, message, status >= 500 ? "server_error" : "invalid_request_error",
                  "", code);
    if (status == 503 || status == 429) res.set_header("Retry-After", "1");
  };
  router.before = [&ctx, anthropic_path](const HttpRequest& req, HttpResponse& res) {
    const auto& keys = ctx.options.api_keys;
    if (req.path == "/health" || req.path == "/metrics" || req.path == "/") return false;
    if (keys.empty() && !ctx.options.require_api_key) return false;
    if (keys.count(tenant_of(req))) return false;
    const std::string message =
        "missing or unknown API key: send Authorization: Bearer <key> (or x-api-key: <key>)";
    if (anthropic_path(req.path))
      reply_anthropic_error(res, 401, message);
    else
      reply_error(res, 401, message, "authentication_error", "", "invalid_api_key");
    return true;
  };
  const bool log = options.log_requests;
  router.after = [&ctx, log](const HttpRequest& req, int status) {
    ctx.metrics.count_request(route_label(req.path), status);
    if (log)
      std::fprintf(stderr, "fak serve: %s %s %s -> %d\n", req.remote.c_str(), req.method.c_str(),
                   req.path.c_str(), status);
  };
  add_basic_routes(router, ctx);
  add_openai_routes(router, ctx);
  add_fak_routes(router, ctx);
  add_anthropic_routes(router, ctx);
  add_responses_routes(router, ctx);
  add_utility_routes(router, ctx);

  HttpServerOptions& h = impl_->http;
  h.host = options.host;
  h.port = options.port;
  h.max_body_bytes = options.max_body_bytes;
  h.max_connections = options.max_connections;
  h.header_timeout_s = options.header_timeout_s;
  h.body_timeout_s = options.body_timeout_s;
  h.write_timeout_s = options.write_timeout_s;
  // A worker per generation that may be running or queued (each waits on its tokens), plus room
  // for the session routes; the rest of the traffic never holds one for long.
  h.workers = std::min(options.parallel + options.max_queue + 8, 512);
  h.max_pending = 256;
}

ServerApp::~ServerApp() {
  impl_->ctx.scheduler->shutdown();
}

std::string ServerApp::handle_raw(std::string_view request_bytes) {
  return serve_raw_request(impl_->router, impl_->http, request_bytes);
}

namespace {

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MiB", double(bytes) / double(1 << 20));
  return buf;
}

std::string contexts(double n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", n);
  return buf;
}

// The startup lines on KV memory: bytes per token, the budget and where it came from, the tokens
// it holds.
std::string kv_summary(const Model& model, const ServerOptions& options, const Scheduler& s) {
  const KvBudget& b = s.kv_budget();
  const KvCache& kv = *s.kv_cache();
  std::string out =
      "fak serve: KV " +
      describe_bytes_per_token(model, options.kv_type, options.kv_kraw, options.kv_swa_full) + "\n";
  std::string why;
  if (b.explicit_total) {
    why = "--kv-mem";
    if (b.draft_heads) why += ", of which the MTP draft heads' KV " + mib(b.draft_heads);
    if (b.over_machine)
      why += "; note: above the " + mib(b.machine_bound) + " this machine can spare";
  } else {
    why = "ctx " + std::to_string(b.ctx) + " x parallel " + std::to_string(b.parallel) + " = " +
          mib(b.sequences) + " + prefix cache room " + mib(b.cache_room);
    if (b.draft_heads)
      why += " + the MTP draft heads' KV " + mib(b.draft_heads) + " (parallel x ctx, one layer)";
    if (b.bounded_by_machine) why += ", cut to what this machine can spare";
  }
  out += "fak serve: KV budget " + mib(b.bytes) + " (" + why + "; " + s.memory_info().describe() +
         ") holds " + std::to_string(kv.capacity_tokens()) + " tokens (" +
         contexts(double(kv.capacity_tokens()) / double(std::max(1, s.ctx()))) + " contexts of " +
         std::to_string(s.ctx()) + ")\n";
  if (s.ctx() < b.ctx)
    out += "fak serve: note: context cut from " + std::to_string(b.ctx) + " to " +
           std::to_string(s.ctx()) + " tokens: the KV budget holds no more\n";
  return out;
}

}  // namespace

namespace {

// The stop signals' handler only writes to this pipe; the stopper thread reads it.
int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  const int saved = errno;
  const char c = 1;
  (void)!::write(g_stop_pipe[1], &c, 1);
  errno = saved;
}

}  // namespace

namespace {

// SIGTERM (or SIGHUP) with a drain: /health says draining (the load balancer stops sending),
// requests in flight get until the deadline to finish, then the blocks waiting for the uploader go
// to the store. (Sessions need nothing here: a session change is in the store before its reply.)
void drain(ServerContext& ctx, const HttpServer& http) {
  const ServerOptions& o = ctx.options;
  const double seconds =
      o.drain_timeout_s >= 0 ? o.drain_timeout_s : (o.store.empty() ? 0.0 : 30.0);
  if (seconds <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(seconds));
  ctx.draining = true;
  std::fprintf(stderr, "fak serve: draining (at most %.0f s): requests in flight finish\n",
               seconds);
  std::fflush(stderr);
  for (;;) {
    const SchedulerGauges g = ctx.scheduler->gauges();
    if (http.busy() == 0 && g.active == 0 && g.queued == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "fak serve: drain deadline reached with %d requests in flight\n",
                   http.busy());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (ctx.blocks) {
    // The store gets a few seconds even when the requests took the whole deadline.
    const auto publish_by =
        std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    ctx.blocks->flush(publish_by);
  }
  std::fprintf(stderr, "fak serve: drained in %.2f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stderr);
}

}  // namespace

void serve(std::shared_ptr<const Model> model, const ServerOptions& options) {
  // SIGINT / SIGTERM stop the server cleanly (and so save the prefix cache under --cache-dir).
  // note: a handler, not only sigwait on a blocked mask: threads started before this point
  // (OpenMP's, while the model loaded) do not have the mask, and the kernel hands a process's
  // signal to any thread that does not block it, where the default action would end the process
  // without the clean stop. The threads started from here on block the signals, so the handler
  // runs on one of those early threads or on the stopper, never inside the server's own calls.
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) fail("fak serve: cannot create a pipe");
  ::fcntl(g_stop_pipe[1], F_SETFL, O_NONBLOCK);  // a handler never blocks
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // SIGHUP too (a closed terminal, an init system's reload): its default would end the process
  // with no drain, no --cache-dir write; fak has nothing to reload, so it stops as on SIGTERM.
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that left must not kill the server on write
  signal(SIGXFSZ, SIG_IGN);  // a file size limit fails the write (a 507), not the process

  ServerApp app(std::move(model), options);
  ServerApp::Impl& m = *app.impl_;
  HttpServer http(m.router, m.http);
  const int port = http.listen();
  const std::string kv = kv_summary(*m.ctx.model, options, *m.ctx.scheduler);
  std::fprintf(stderr, "%s", kv.c_str());
  std::fprintf(stderr, "fak serve: %s (ctx %d, parallel %d) listening on http://%s:%d\n",
               m.ctx.model_id.c_str(), m.ctx.scheduler->ctx(), options.parallel,
               options.host.c_str(), port);
  std::fflush(stderr);

  std::thread stopper([&] {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    char c = 0;
    while (::read(g_stop_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    // A second signal ends the process at once, without saving: the way out of a slow stop.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    drain(m.ctx, http);
    http.stop();
  });
  http.run();
  // run returned: by a signal (stopper is done) or by itself; make sure stopper ends.
  const char wake = 0;
  (void)!::write(g_stop_pipe[1], &wake, 1);
  stopper.join();
  m.ctx.scheduler->shutdown();
  std::fprintf(stderr, "fak serve: stopped\n");
}

}  // namespace fak::server
