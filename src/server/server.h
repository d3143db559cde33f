// `fak serve`: an OpenAI-compatible HTTP server over one model. This is the whole public surface;
// the routes, request parsing, scheduler and metrics live in the other files of src/server/.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "models/model.h"
#include "runtime/speculative.h"

namespace fak::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0 = any free port (printed on startup)
  std::set<std::string> api_keys;  // empty = no authentication, unless require_api_key
  // Set when keys were asked for (--api-key-env): the server then refuses to start without any,
  // so a key list that parsed to nothing can never mean an open server.
  bool require_api_key = false;
  int parallel = 4;
  int max_queue = 64;
  // --max-tokens: the tokens a reply generates when the client names no limit, and the most it
  // may ask for (0: no server limit, only the context's). Agent CLIs send none (Codex) or 32k
  // (Claude Code): one request on a model that rarely stops would hold a slot until the context
  // is full.
  int max_tokens = 0;
  // /v1/responses: hosted tools (web_search, file_search, ...) fak cannot run are refused (400)
  // instead of left out of the prompt with a warning.
  bool refuse_hosted_tools = false;
  // KV memory (runtime/kv_budget.h): kv_mib is the hard budget for every KV block (sequences,
  // prefix cache, sessions); 0 = sized from ctx x parallel + cache_mib (0 = one context, >= 256)
  // and the machine's free memory. Printed at startup.
  size_t kv_mib = 0;
  size_t cache_mib = 0;
  DType kv_type = DType::F16;  // tools/fak/common.h says why
  bool kv_swa_full = false;    // sliding-window layers keep every row (--swa-full)
  bool kv_kraw = false;        // keep pre-RoPE keys (shift-mode quarantine exact in layer 0)
  // What `fak serve` does before it listens (off here, so that tests start at once): map and back
  // the whole KV budget (--kv-lazy turns it off), and run one prompt chunk and one decode step of
  // --parallel sequences on the scheduler's thread, which sizes its buffers (--no-warmup).
  bool map_kv_at_start = false;
  bool warm_up = false;
  int prefill_chunk = 256;            // prompt tokens prefilled per scheduler step
  std::optional<DraftOptions> draft;  // speculative decoding (prompt lookup); nullopt = off
  int ctx = 0;                        // 0 = the model's context
  std::string session_dir;            // where /v1/fak/ save/load may write; empty = off
  // The prefix cache on disk (server/cache_dir.h): reloaded from here at start, written at a clean
  // stop; empty = off. cache_dir_mib caps the files (0: what the cache holds, which --kv-mem
  // bounds).
  std::string cache_dir;
  size_t cache_dir_mib = 0;
  // --store redis://host:port[/db] or redis-sentinel://host:port[,...]/primary[/db]
  // (server/shared_sessions.h, store/): sessions and the prefix cache shared with other replicas;
  // empty = off. store_timeout_ms bounds each read or write on its socket; store_wait_ms is how
  // long a session write waits for an unreachable store before it is undone (503).
  std::string store;
  int store_timeout_ms = 250;
  int store_wait_ms = 10000;
  // The store's password: read from this environment variable or file (never the command line,
  // which every local user reads in ps); a password in the URL only with store_password_in_url.
  std::string store_password_env, store_password_file;
  bool store_password_in_url = false;
  int store_recovery_grace_ms = 3000;  // store/session_records.h: the recovery window
  int store_sync_replicas = -1;        // WAIT for this many Redis replicas (-1: 1 with sentinels)
  // On SIGTERM or SIGHUP: /health says draining, requests in flight get this long to finish, then
  // queued blocks are published and the server stops (-1: 30 s with --store, 0 without).
  double drain_timeout_s = -1;
  size_t max_body_bytes = size_t(8) << 20;
  std::string model_id;  // name in /v1/models; empty = the model directory's name
  // The transport's limits (server/http_server.h says what each guards against).
  int max_connections = 1024;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double write_timeout_s = 30;
  bool log_requests = false;  // one line per request on stderr
  // A stream with nothing to send for this long gets an SSE comment, so proxies and clients see
  // a live connection; while a long prompt is read, the comment says how far (at most once per
  // keep-alive interval, and never more than once a second).
  double sse_keepalive_s = 10;
};

// The application without a transport: the model's context, the scheduler and every route. serve()
// puts it behind the HTTP server; the request-path fuzzer and tests drive it in-process.
class ServerApp {
 public:
  ServerApp(std::shared_ptr<const Model> model, const ServerOptions& options);
  ~ServerApp();  // ends every generation and stops the scheduler

  // One raw HTTP request in, the response bytes out, on this thread (a stream is drained), with
  // the transport's own parser and limits.
  std::string handle_raw(std::string_view request_bytes);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend void serve(std::shared_ptr<const Model>, const ServerOptions&);
};

// The API keys in an environment variable's value: comma-separated, whitespace around each key
// trimmed, empty entries skipped. Throws fak::Error naming `variable` when none is left (an unset
// "$K1,$K2" template leaves only commas): no keys must never mean no authentication.
std::set<std::string> parse_api_keys(std::string_view value, const std::string& variable);

// Blocks until SIGINT/SIGTERM (or a listen failure, which throws fak::Error). Prints
// "listening on http://HOST:PORT" to stderr once bound.
void serve(std::shared_ptr<const Model> model, const ServerOptions& options);

}  // namespace fak::server
