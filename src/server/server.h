// `fak serve`: an OpenAI-compatible HTTP server over one model. This is the whole public surface;
// the routes, request parsing, scheduler and metrics live in the other files of src/server/.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "models/model.h"

namespace fak::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0 = any free port (printed on startup)
  std::set<std::string> api_keys;  // empty = no authentication
  int parallel = 4;
  int max_queue = 64;
  size_t cache_mib = 256;
  int prefill_chunk = 256;  // prompt tokens prefilled per scheduler step
  int ctx = 0;              // 0 = the model's context
  std::string session_dir;  // where /v1/fak/ save/load may write; empty = off
  size_t max_body_bytes = size_t(8) << 20;
  std::string model_id;  // name in /v1/models; empty = the model directory's name
};

// Blocks until SIGINT/SIGTERM (or a listen failure, which throws fak::Error). Prints
// "listening on http://HOST:PORT" to stderr once bound.
void serve(std::shared_ptr<const Model> model, const ServerOptions& options);

}  // namespace fak::server
