// The /v1/fak/ extensions: server-side sessions an agent edits directly. HTTP parsing happens here;
// the work runs as a scheduler job (SessionTable), between decode steps of the OpenAI traffic.
//
//   POST   /v1/fak/sessions                 {id?, text? | ids? | messages?}  create (+ append)
//   GET    /v1/fak/sessions                 list
//   GET    /v1/fak/sessions/:id             tokens, text, segments
//   DELETE /v1/fak/sessions/:id
//   POST   /v1/fak/sessions/:id/append      {text | ids | messages, add_generation_prompt?}
//   POST   /v1/fak/sessions/:id/generate    {max_tokens, ignore_eos, logit_bias, sampling
//                                             as in OpenAI's}
//   POST   /v1/fak/sessions/:id/clone       {id?}
//   POST   /v1/fak/sessions/:id/save        {name}  (in the tenant's folder under --session-dir)
//   POST   /v1/fak/sessions/load            {name, id?}
//   POST   /v1/fak/sessions/:id/quarantine  {begin, end} | {message}, mode: "exact" | "shift"
//
// Create, append and an exact quarantine's replay read their tokens through the scheduler like a
// prompt (run_edit below), so a 32k-token session create costs other streams no more than a 32k
// prompt does.
//
// With --store every call goes through SharedSessions (server/shared_sessions.h): the session is
// brought up to the store's version first, and a call that changes it publishes it before the
// reply.
#include <chrono>

#include "runtime/generate.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/shared_sessions.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

ojson body_of(const HttpRequest& req) {
  if (req.body.empty()) return ojson::object();
  return parse_json_object(req.body);
}

// Runs fn on the scheduler thread and replies with what it returns.
void in_job(ServerContext& ctx, HttpResponse& res, int status, std::function<ojson()> fn) {
  ojson out;
  ctx.scheduler->run_job([&] { out = fn(); });
  reply_json(res, status, out);
}

// /generate joins the scheduler's batch like any completion, through the same Generation as every
// other API (server/generation.h): the session is lent to the scheduler (busy for everything else)
// and its tokens are decoded together with the other sequences; the session keeps every token
// generated (`ids`). No stop strings here: the scheduler may decode past one before the reply sees
// it, and the session would then hold more than the reply.
ojson generate_batched(ServerContext& ctx, const HttpRequest& req, const std::string& tenant,
                       const std::string& id, GenerateOptions o) {
  SessionTable& store = *ctx.sessions;
  int begin = 0;
  GenerationSpec spec;
  ctx.scheduler->run_job([&] { spec.session = store.begin_generate(tenant, id, o, &begin); });
  auto size = std::make_shared<int>(begin);
  spec.tenant = tenant_hash(tenant);
  spec.max_tokens = o.max_tokens;
  spec.rules.sampling = o.sampling;
  spec.rules.stop_ids = o.stop_ids;
  spec.keep_special = true;
  spec.on_finish = [&store, tenant, id, begin, size](const std::string& reason, int32_t last) {
    *size = store.end_generate(tenant, id, reason, last, begin);
  };
  std::optional<Generation> gen;
  try {
    gen.emplace(ctx, std::move(spec));
  } catch (...) {
    // Never queued: the session is handed back here (on_finish runs only for what was queued).
    ctx.scheduler->run_job([&] { store.end_generate(tenant, id, "", -1, begin); });
    throw;
  }
  // A client that leaves frees its place in the batch (499); the session keeps what was generated
  // (on a replica the caller undoes it: a turn the store does not have is not kept). Either way
  // the scheduler hands the session back (on_finish) before this returns or throws, so that what
  // the caller does with it next does not race the scheduler's use of it.
  try {
    gen->wait(req);
  } catch (...) {
    gen->cancel(/*client_gone=*/false);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!gen->finished() && std::chrono::steady_clock::now() < deadline)
      gen->poll(std::chrono::milliseconds(50));
    throw;
  }
  const Generation::Choice& c = gen->choices().front();
  ojson j;
  j["id"] = id;
  j["ids"] = c.token_ids;
  if (ctx.model->tokenizer()) j["text"] = c.content;
  j["finish_reason"] = c.finish_reason;
  j["size"] = *size;
  return j;
}

// An edit's tokens are read by the scheduler like a prompt (in --prefill-chunk pieces between the
// other streams' decode steps, in the tenant's share of the queue and of each step), then the
// store commits it; if the reading fails or the client leaves, the store puts everything back.
ojson run_edit(ServerContext& ctx, const HttpRequest& req, const std::string& tenant,
               const SessionEdit& edit) {
  SessionTable& store = *ctx.sessions;
  ojson out;
  if (int(edit.target.size()) == edit.session->size()) {
    ctx.scheduler->run_job([&] { out = store.end_edit(edit, true); });
    return out;
  }
  auto result = std::make_shared<ojson>();
  GenRequest g;
  g.tenant = tenant_hash(tenant);
  g.session = edit.session;
  g.prompt = edit.target;
  g.prefill_only = true;
  g.stream = std::make_shared<GenStream>();
  g.on_finish = [&store, edit, result](const std::string& reason, int32_t) {
    *result = store.end_edit(edit, reason == "prefilled");
  };
  auto stream = g.stream;
  try {
    ctx.scheduler->submit(std::move(g));
  } catch (...) {
    ctx.scheduler->run_job([&] { store.end_edit(edit, false); });
    throw;
  }
  std::string reason, error;
  int error_status = 500;
  for (bool done = false; !done;) {
    // A client that left: the edit is dropped at the next step and nothing changes.
    if (req.client_gone()) stream->cancel();
    for (const GenEvent& e : stream->wait(std::chrono::milliseconds(200))) {
      if (e.kind == GenEvent::Kind::Done) reason = e.text;
      if (e.kind == GenEvent::Kind::Error) {
        error = e.text;
        error_status = e.status;
      }
      done = done || e.kind == GenEvent::Kind::Done || e.kind == GenEvent::Kind::Error;
    }
  }
  if (!error.empty())
    throw ApiError(error_status, error, "",
                   error_status == 503 && error.find("--kv-mem") != std::string::npos
                       ? "kv_budget_exhausted"
                   : error_status == 429 ? "queue_full"
                                         : "");
  if (reason != "prefilled" || result->is_null())
    throw ApiError(499, "the client closed the connection", "", "client_closed");
  return *result;
}

EvictMode mode_of(const ojson& body) {
  const std::string mode = get_string(body, "mode").value_or("exact");
  if (mode == "exact") return EvictMode::Exact;
  if (mode == "shift") return EvictMode::Shift;
  bad_request("`mode` must be \"exact\" or \"shift\"", "mode");
}

// --store: the call on an existing session (null without a store).
std::unique_ptr<SharedSessions::Call> open_shared(ServerContext& ctx, const HttpRequest& req,
                                                  const std::string& tenant,
                                                  const std::string& id) {
  if (!ctx.shared) return nullptr;
  return ctx.shared->open(
      tenant, id, [&](const SessionEdit& edit) { return run_edit(ctx, req, tenant, edit); });
}

// --store: publishes a session this replica has just made.
void publish_new(ServerContext& ctx, const std::string& tenant, const std::string& id) {
  if (ctx.shared) ctx.shared->made(tenant, id)->commit();
}

}  // namespace

void add_fak_routes(Router& router, ServerContext& ctx) {
  SessionTable& store = *ctx.sessions;
  const std::string kId = "/v1/fak/sessions/:id";

  router.add("POST", "/v1/fak/sessions", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const ojson body = body_of(req);
               const std::string wanted = get_string(body, "id").value_or("");
               const std::string tenant = tenant_of(req);
               if (ctx.shared && !wanted.empty()) ctx.shared->check_new(tenant, wanted);
               SessionEdit edit;
               ctx.scheduler->run_job([&] { edit = store.begin_create(tenant, wanted, body); });
               const ojson out = run_edit(ctx, req, tenant, edit);
               publish_new(ctx, tenant, out["id"].get<std::string>());
               reply_json(res, 201, out);
             }));
  router.add("GET", "/v1/fak/sessions", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string tenant = tenant_of(req);
               std::vector<std::string> ids;
               if (ctx.shared)
                 ids = ctx.shared->list(tenant);
               else
                 ctx.scheduler->run_job([&] { ids = store.list(tenant); });
               ojson data = ojson::array();
               for (const std::string& id : ids)
                 data.push_back({{"id", id}, {"object", "fak.session"}});
               reply_json(res, 200, ojson{{"object", "list"}, {"data", data}});
             }));
  router.add(
      "POST", "/v1/fak/sessions/load", guarded([&](const HttpRequest& req, HttpResponse& res) {
        const ojson body = body_of(req);
        const auto name = get_string(body, "name");
        if (!name) bad_request("`name` is required", "name");
        const std::string wanted = get_string(body, "id").value_or("");
        const std::string tenant = tenant_of(req);
        if (ctx.shared && !wanted.empty()) ctx.shared->check_new(tenant, wanted);
        ojson out;
        ctx.scheduler->run_job([&] {
          const std::string id = store.load(tenant, *name, wanted);
          out = ojson{
              {"id", id}, {"object", "fak.session"}, {"size", store.describe(tenant, id)["size"]}};
        });
        publish_new(ctx, tenant, out["id"].get<std::string>());
        reply_json(res, 201, out);
      }));
  router.add("GET", kId, guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string id = req.matches[1], tenant = tenant_of(req);
               const auto call = open_shared(ctx, req, tenant, id);
               in_job(ctx, res, 200, [&] { return store.describe(tenant, id); });
             }));
  router.add(
      "DELETE", kId, guarded([&](const HttpRequest& req, HttpResponse& res) {
        const std::string id = req.matches[1], tenant = tenant_of(req);
        if (ctx.shared)
          ctx.shared->remove(tenant, id);
        else
          ctx.scheduler->run_job([&] { store.remove(tenant, id); });
        reply_json(res, 200, ojson{{"id", id}, {"object", "fak.session"}, {"deleted", true}});
      }));
  router.add("POST", kId + "/append", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string id = req.matches[1], tenant = tenant_of(req);
               const ojson body = body_of(req);
               const auto call = open_shared(ctx, req, tenant, id);
               SessionEdit edit;
               ctx.scheduler->run_job([&] { edit = store.begin_append(tenant, id, body); });
               const ojson out = run_edit(ctx, req, tenant, edit);
               if (call) call->commit();
               reply_json(res, 200, out);
             }));
  router.add("POST", kId + "/generate", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string id = req.matches[1], tenant = tenant_of(req);
               const ojson body = body_of(req);
               GenerateOptions o;
               // fak's own default is 16; --max-tokens caps what a client asks for here too.
               const OutputBudget budget = output_budget(
                   ctx.options, int(get_int(body, "max_tokens", 1, 1 << 20).value_or(16)), 1 << 20);
               o.max_tokens = budget.tokens;
               note_output_budget(res, budget);
               o.sampling = parse_sampling(body);
               parse_logit_bias(body, o.sampling);
               check_logit_bias(o.sampling, ctx.model->config().vocab);
               if (!get_bool(body, "ignore_eos").value_or(false))
                 o.stop_ids = ctx.chat ? ctx.chat->stop_ids() : model_stop_ids(*ctx.model);
               const auto call = open_shared(ctx, req, tenant, id);
               ojson out;
               try {
                 out = generate_batched(ctx, req, tenant, id, o);
               } catch (...) {
                 // Not acknowledged: this replica's copy goes back to the version the store has.
                 if (call) call->undo();
                 throw;
               }
               if (call) call->commit();
               reply_json(res, 200, out);
             }));
  router.add(
      "POST", kId + "/clone", guarded([&](const HttpRequest& req, HttpResponse& res) {
        const std::string id = req.matches[1], tenant = tenant_of(req);
        const std::string wanted = get_string(body_of(req), "id").value_or("");
        if (ctx.shared && !wanted.empty()) ctx.shared->check_new(tenant, wanted);
        const auto call = open_shared(ctx, req, tenant, id);
        std::string nid;
        ctx.scheduler->run_job([&] { nid = store.clone(tenant, id, wanted); });
        publish_new(ctx, tenant, nid);
        reply_json(res, 201, ojson{{"id", nid}, {"object", "fak.session"}, {"cloned_from", id}});
      }));
  router.add("POST", kId + "/save", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string id = req.matches[1], tenant = tenant_of(req);
               const auto name = get_string(body_of(req), "name");
               if (!name) bad_request("`name` is required", "name");
               const auto call = open_shared(ctx, req, tenant, id);
               in_job(ctx, res, 200, [&] {
                 store.save(tenant, id, *name);
                 return ojson{{"id", id}, {"saved", *name}};
               });
             }));
  router.add("POST", kId + "/quarantine", guarded([&](const HttpRequest& req, HttpResponse& res) {
               const std::string id = req.matches[1], tenant = tenant_of(req);
               const ojson body = body_of(req);
               const EvictMode mode = mode_of(body);
               const auto message = get_int(body, "message", 0, INT32_MAX);
               const auto begin = get_int(body, "begin", 0, INT32_MAX);
               const auto end = get_int(body, "end", 0, INT32_MAX);
               if (message.has_value() == (begin.has_value() || end.has_value()) ||
                   begin.has_value() != end.has_value())
                 bad_request("give either `message` (a segment index) or both `begin` and `end`");
               const auto call = open_shared(ctx, req, tenant, id);
               SessionEdit edit;
               ctx.scheduler->run_job([&] {
                 edit = message ? store.begin_evict(tenant, id, 0, 0, int(*message), mode)
                                : store.begin_evict(tenant, id, int(*begin), int(*end), -1, mode);
               });
               const ojson out = run_edit(ctx, req, tenant, edit);
               // Like every change: no replica serves the state before it once it has returned.
               if (call) call->commit();
               reply_json(res, 200, out);
             }));
}

}  // namespace fak::server
