// POST /v1/messages and /v1/messages/count_tokens, Anthropic's Messages API: what Claude-Code-style
// agents speak. The request becomes a ChatTurn (anthropic_request.cpp), generated like any chat
// turn (chat_turn.h, generation.h); the reply is laid out as content blocks (reply_blocks.h) and
// sent whole or as Anthropic's event stream: message_start, then per block content_block_start /
// content_block_delta / content_block_stop, then message_delta and message_stop, with ping events
// while the model is busy elsewhere.
#include "core/error.h"
#include "server/anthropic_format.h"
#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server/context.h"

namespace fak::server {

namespace {

void check_model(ServerContext& ctx, const std::string& model) {
  if (model != ctx.model_id && model != ctx.model->path().string())
    throw ApiError(404, "model: " + model + " (this server has '" + ctx.model_id + "')", "model",
                   "model_not_found");
}

MessagesRequest parse(ServerContext& ctx, const HttpRequest& req, bool count_tokens) {
  if (!ctx.model->tokenizer() || !ctx.chat)
    bad_request("the model has no tokenizer: chat needs one");
  MessagesRequest r = parse_messages_request(req.body, ctx.sampling_defaults,
                                             ctx.chat->think_close_id().has_value(), count_tokens);
  check_model(ctx, r.model);
  return r;
}

// A stream's state between polls; it is also the sink the reply's blocks report to.
struct MessageStream final : ReplyBlocks::Sink {
  MessageStream(ServerContext& ctx, std::string id, std::string model,
                std::unique_ptr<Generation> gen)
      : ctx(ctx), id(std::move(id)), model(std::move(model)), gen(std::move(gen)) {}
  ServerContext& ctx;
  std::string id, model;
  std::unique_ptr<Generation> gen;
  ReplyBlocks blocks{this};
  std::string* out = nullptr;  // where the events of this poll go
  bool started = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();

  void open(int index, const ReplyBlock& b) override {
    *out += sse_event("content_block_start", {{"type", "content_block_start"},
                                              {"index", index},
                                              {"content_block", anthropic_block(b, true)}});
  }
  void delta(int index, const ReplyBlock& b, std::string_view text) override {
    ojson d;
    if (b.kind == ReplyBlock::Kind::Reasoning) {
      d = {{"type", "thinking_delta"}, {"thinking", text}};
    } else if (b.kind == ReplyBlock::Kind::Text) {
      d = {{"type", "text_delta"}, {"text", text}};
    } else {
      // The input's JSON text as the model writes it; the pieces add up to the block's input.
      d = {{"type", "input_json_delta"}, {"partial_json", text}};
    }
    *out += sse_event("content_block_delta",
                      {{"type", "content_block_delta"}, {"index", index}, {"delta", d}});
  }
  void close(int index, const ReplyBlock&) override {
    *out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
  }
};

std::string error_event(const std::string& message, int status) {
  return sse_event("error", anthropic_error_body(anthropic_error_type(status), message));
}

bool next_events(MessageStream& s, std::string& out) {
  using namespace std::chrono;
  s.out = &out;
  try {
    const std::vector<ChoiceDelta> deltas = s.gen->poll(milliseconds(200));
    const bool failed = s.gen->finished() && !s.gen->error().empty();
    // message_start waits for the scheduler to take the request: its usage says how much of the
    // prompt the cache held.
    if (!s.started && !failed && (s.gen->started() || !deltas.empty() || s.gen->finished())) {
      Usage prompt_only = s.gen->usage();
      prompt_only.completion_tokens = 0;  // the output is counted in message_delta
      out += sse_event(
          "message_start",
          {{"type", "message_start"},
           {"message", anthropic_message(s.id, s.model, ojson::array(), "", "", prompt_only)}});
      s.started = true;
    }
    for (const ChoiceDelta& d : deltas) s.blocks.push(d);
    if (s.gen->finished()) {
      if (failed) {
        out += error_event(s.gen->error(), s.gen->error_status());
        return false;
      }
      const Generation::Choice& c = s.gen->choices()[0];
      s.blocks.finish(c);
      const std::string reason = anthropic_stop_reason(c);
      ojson delta = {
          {"stop_reason", reason},
          {"stop_sequence", reason == "stop_sequence" ? ojson(c.stop_sequence) : ojson()}};
      out += sse_event("message_delta", {{"type", "message_delta"},
                                         {"delta", delta},
                                         {"usage", anthropic_usage(s.gen->usage())}});
      out += sse_event("message_stop", {{"type", "message_stop"}});
      return false;
    }
    const auto now = steady_clock::now();
    // Pings come after message_start, where Anthropic's event order has them; before it, an SSE
    // comment keeps the connection alive for proxies without showing clients an event.
    if (out.empty() && now - s.last_write >= duration<double>(s.ctx.options.sse_keepalive_s))
      out += s.started ? sse_event("ping", {{"type", "ping"}}) : ": keep-alive\n\n";
    if (!out.empty()) s.last_write = now;
    return true;
  } catch (const std::exception& e) {
    // The status line is already sent: whatever goes wrong reaches the client as an error event.
    s.gen->cancel(/*client_gone=*/false);
    out += error_event(std::string("internal error: ") + e.what(), 500);
    return false;
  }
}

void handle_messages(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const MessagesRequest r = parse(ctx, req, false);
  chat::Turn turn = build_turn(ctx, r.turn, req.gone.get());
  const int n_ctx = ctx.scheduler->ctx();
  if (turn.prompt.empty()) bad_request("the prompt is empty", "messages");
  // Anthropic's wording, which Claude Code recognises: it compacts the conversation and retries.
  if (int(turn.prompt.size()) >= n_ctx)
    throw ApiError(400,
                   "prompt is too long: " + std::to_string(turn.prompt.size()) + " tokens > " +
                       std::to_string(n_ctx - 1) + " maximum",
                   "messages", "context_length_exceeded");
  GenerationSpec spec = turn_generation_spec(ctx, r.turn, std::move(turn), tenant_of(req));
  note_output_budget(res, {spec.max_tokens, spec.max_tokens_source});
  auto gen = std::make_unique<Generation>(ctx, std::move(spec));
  const std::string id = new_object_id("msg_");

  if (!r.stream) {
    gen->wait(req);
    const Generation::Choice& c = gen->choices()[0];
    ojson content = ojson::array();
    for (const ReplyBlock& b : ReplyBlocks::of(c)) content.push_back(anthropic_block(b));
    const std::string reason = anthropic_stop_reason(c);
    reply_json(res, 200,
               anthropic_message(id, r.model, content, reason,
                                 reason == "stop_sequence" ? c.stop_sequence : "", gen->usage()));
    return;
  }
  auto state = std::make_shared<MessageStream>(ctx, id, r.model, std::move(gen));
  stream_events(res, state, &next_events);
}

void handle_count_tokens(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const MessagesRequest r = parse(ctx, req, true);
  // The prompt as /v1/messages would read it, tools and system prompt included.
  reply_json(res, 200, {{"input_tokens", build_turn(ctx, r.turn, req.gone.get()).prompt.size()}});
}

}  // namespace

void add_anthropic_routes(Router& router, ServerContext& ctx) {
  router.add("POST", "/v1/messages",
             anthropic_guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_messages(ctx, req, res);
             }));
  router.add("POST", "/v1/messages/count_tokens",
             anthropic_guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_count_tokens(ctx, req, res);
             }));
}

}  // namespace fak::server
