// The HTTP application: builds the context, wires cpp-httplib (thread pool, body limit, auth,
// error bodies, per-route metrics), the small routes (/health, /v1/models, /metrics), and runs
// until a signal asks it to stop.
#include <signal.h>
#include <sys/socket.h>

#include <cstdio>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/context.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

std::string tenant_of(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0)
    return auth.substr(prefix.size());
  return "";
}

void reply_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message,
                 const std::string& type, const std::string& param, const std::string& code) {
  reply_json(res, status, error_body(message, type, param, code));
}

httplib::Server::Handler guarded(
    std::function<void(const httplib::Request&, httplib::Response&)> fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const ApiError& e) {
      reply_error(res, e.status, e.what(), e.type, e.param, e.code);
    } catch (const Error& e) {
      reply_error(res, 400, e.what(), "invalid_request_error");
    } catch (const nlohmann::json::exception& e) {
      reply_error(res, 400, std::string("bad JSON value: ") + e.what(), "invalid_request_error");
    } catch (const std::bad_alloc&) {
      reply_error(res, 503, "out of memory", "server_error");
    } catch (const std::exception& e) {
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
  for (const char* known :
       {"/v1/models", "/v1/completions", "/v1/chat/completions", "/health", "/metrics"})
    if (path == known) return path;
  return "other";
}

std::string model_id_of(const Model& model) {
  std::filesystem::path p = model.path().lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void add_basic_routes(httplib::Server& http, ServerContext& ctx) {
  http.Get("/health", guarded([&](const httplib::Request&, httplib::Response& res) {
             const SchedulerGauges g = ctx.scheduler->gauges();
             reply_json(res, 200, {{"status", "ok"}, {"active", g.active}, {"queued", g.queued}});
           }));
  http.Get("/v1/models", guarded([&](const httplib::Request&, httplib::Response& res) {
             ojson m;
             m["id"] = ctx.model_id;
             m["object"] = "model";
             m["created"] = 0;
             m["owned_by"] = "fak";
             m["meta"] = {{"context_length", ctx.scheduler->ctx()},
                          {"vocab", ctx.model->config().vocab},
                          {"path", ctx.model->path().string()}};
             reply_json(res, 200, {{"object", "list"}, {"data", ojson::array({m})}});
           }));
  http.Get("/metrics", guarded([&](const httplib::Request&, httplib::Response& res) {
             res.set_content(
                 ctx.metrics.render(ctx.scheduler->gauges(), ctx.scheduler->cache_stats()),
                 "text/plain; version=0.0.4");
           }));
}

}  // namespace

void serve(std::shared_ptr<const Model> model, const ServerOptions& options) {
  // Block the stop signals before any thread starts so they all inherit the mask; one thread
  // waits for them and stops the server cleanly.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that left must not kill the server on write

  ServerContext ctx;
  ctx.model = model;
  ctx.options = options;
  ctx.model_id = options.model_id.empty() ? model_id_of(*model) : options.model_id;
  if (model->tokenizer()) ctx.chat = std::make_unique<ChatPrompt>(*model);
  SchedulerOptions so;
  so.parallel = options.parallel;
  so.max_queue = options.max_queue;
  so.cache_bytes = options.cache_mib << 20;
  so.ctx = options.ctx;
  so.prefill_chunk = options.prefill_chunk;
  ctx.scheduler = std::make_unique<Scheduler>(model, so, &ctx.metrics);
  ctx.sessions = std::make_unique<SessionStore>(model, ctx.scheduler->kv_cache(), ctx.chat.get(),
                                                options.session_dir, ctx.scheduler->ctx());
  if (!options.session_dir.empty()) std::filesystem::create_directories(options.session_dir);

  httplib::Server http;
  // Streams hold a thread each for their whole life: size the pool for every slot and queue entry
  // plus headroom for health/metrics, rather than httplib's default of 8.
  const size_t threads = std::min<size_t>(size_t(options.parallel + options.max_queue) + 8, 512);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(2);
  http.set_read_timeout(30);
  http.set_write_timeout(30);
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (options.api_keys.empty() || req.path == "/health" || req.path == "/metrics")
      return httplib::Server::HandlerResponse::Unhandled;
    if (options.api_keys.count(tenant_of(req))) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, 401, "missing or unknown API key: send Authorization: Bearer <key>",
                "authentication_error", "", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib produces itself (no route, body too large, unreadable request) get an
  // OpenAI-style body too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      reply_error(res, 404, "no route for " + req.method + " " + req.path, "invalid_request_error",
                  "", "not_found");
    else if (res.status == 413)
      reply_error(res, 413, "the request body is larger than the server accepts",
                  "invalid_request_error", "", "body_too_large");
    else
      reply_error(res, res.status,
                  "the request could not be handled (HTTP " + std::to_string(res.status) + ")",
                  res.status >= 500 ? "server_error" : "invalid_request_error");
  });
  http.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_request(route_label(req.path), res.status);
  });
  add_basic_routes(http, ctx);
  add_openai_routes(http, ctx);
  add_fak_routes(http, ctx);

  // note: cpp-httplib 0.11 listens with a backlog of 5 (compiled into Debian's shared library), so
  // a burst of clients connecting at once can overflow the accept queue. Keep the listening
  // socket's descriptor (the options hook sees it before bind) and listen again with a deep queue.
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  const int port = options.port == 0 ? http.bind_to_any_port(options.host) : options.port;
  if (options.port != 0 && !http.bind_to_port(options.host, options.port))
    fail("cannot listen on " + options.host + ":" + std::to_string(options.port) +
         " (in use, or not an address of this machine)");
  if (port < 0) fail("cannot listen on " + options.host);
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  std::fprintf(stderr, "fak serve: %s (ctx %d, parallel %d) listening on http://%s:%d\n",
               ctx.model_id.c_str(), ctx.scheduler->ctx(), options.parallel, options.host.c_str(),
               port);
  std::fflush(stderr);

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    http.stop();
  });
  http.listen_after_bind();
  // listen returned: by a signal (stopper is done) or by itself; make sure stopper ends.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  ctx.scheduler->shutdown();
  std::fprintf(stderr, "fak serve: stopped\n");
}

}  // namespace fak::server
