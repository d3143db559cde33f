// What every route handler shares: the model and its prompt builder, the scheduler, the session
// store, metrics and options; plus the glue every route uses (tenant from the bearer token, JSON
// replies, turning exceptions into OpenAI error bodies).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "chat/chat_prompt.h"
#include "models/model.h"
#include "server/http_router.h"
#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/session_table.h"
#include "server/shared_sessions.h"
#include "store/block_store.h"
#include "store/redis_client.h"
#include "store/store_metrics.h"

namespace fak::server {

struct ServerContext {
  std::shared_ptr<const Model> model;
  ServerOptions options;
  std::string model_id;
  std::unique_ptr<chat::ChatPrompt> chat;  // null when the model has no tokenizer
  SamplingOptions sampling_defaults;       // generation_config.json: what requests start from
  Metrics metrics;
  // --store (null without): the Redis pool and the shared prefix cache's blocks, declared before
  // the scheduler (which uses them) so that they outlive it; shared sessions after the session
  // store, so that their background thread stops first.
  std::unique_ptr<store::StoreMetrics> store_metrics;
  std::unique_ptr<store::RedisPool> store_pool;
  std::shared_ptr<store::BlockStore> blocks;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<SessionTable> sessions;  // touched only inside scheduler jobs
  std::unique_ptr<SharedSessions> shared;
  // SIGTERM with a drain (--drain-timeout): /health answers 503 "draining" so the load balancer
  // sends nothing new, while what is in flight finishes.
  std::atomic<bool> draining{false};
};

// The API key (empty without one): the bearer token, or Anthropic's x-api-key header. The tenant
// for prefix-cache partitions and sessions.
std::string tenant_of(const HttpRequest& req);
// A tenant as the server's files and caches name it (server/tenant.cpp): 32 hex digits of SHA-256
// of its API key, never the key itself.
std::string tenant_hash(std::string_view key);
// A request's prefix-cache partition: "<tenant_hash>-<32 hex digits of SHA-256 of key and salt>".
// The tenant's half lets a restarted server tell which API keys a saved partition belongs to
// (--cache-dir); the salt's (OpenAI's cache_salt) splits a tenant's cache further.
std::string cache_partition(std::string_view tenant, std::string_view salt);
void reply_json(HttpResponse& res, int status, const ojson& body);
void reply_error(HttpResponse& res, int status, const std::string& message, const std::string& type,
                 const std::string& param = "", const std::string& code = "");
// A handler whose exceptions become error replies: ApiError as given, fak::Error as 400, a full
// disk as 507, anything else as 500. The server never dies of one request.
HttpHandler guarded(HttpHandler fn);

void add_openai_routes(Router& router, ServerContext& ctx);
void add_fak_routes(Router& router, ServerContext& ctx);
void add_anthropic_routes(Router& router, ServerContext& ctx);  // /v1/messages
void add_responses_routes(Router& router, ServerContext& ctx);  // /v1/responses
// llama-server's /tokenize, /detokenize, /apply-template and /props (utility_routes.cpp).
void add_utility_routes(Router& router, ServerContext& ctx);

}  // namespace fak::server
