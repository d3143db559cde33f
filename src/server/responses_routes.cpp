// POST /v1/responses, OpenAI's Responses API: what Codex-style agents speak. The request becomes a
// ChatTurn (responses_request.cpp), generated like any chat turn; the reply is laid out as output
// items (reply_blocks.h) and sent whole or as the named, numbered event stream: response.created,
// response.in_progress, then per item output_item.added, its content part and text (or function
// call argument) deltas and their .done events, output_item.done, and response.completed (or
// response.incomplete at max_output_tokens) with the whole response object.
#include "server/api_error.h"
#include "server/context.h"
#include "server/responses_format.h"
#include "server/responses_request.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

// Generation does not count reasoning tokens apart: the reasoning text is counted again.
int reasoning_tokens(ServerContext& ctx, const Generation::Choice& c) {
  return c.reasoning.empty() ? 0 : int(ctx.model->tokenizer()->encode(c.reasoning).size());
}

std::string status_of(const Generation::Choice& c) {
  return c.finish_reason == "length" ? "incomplete" : "completed";
}

ojson output_of(const std::vector<ReplyBlock>& blocks, const std::vector<std::string>& ids,
                const std::string& status, const ToolNamespaces& namespaced) {
  ojson out = ojson::array();
  for (size_t i = 0; i < blocks.size(); ++i)
    out.push_back(output_item(blocks[i], ids[i],
                              blocks[i].kind == ReplyBlock::Kind::ToolCall ? "completed" : status,
                              false, namespaced));
  return out;
}

// A stream's state between polls; it is also the sink the reply's blocks report to.
struct ResponseStream final : ReplyBlocks::Sink {
  ResponseStream(ServerContext& ctx, ResponseHead head, std::unique_ptr<Generation> gen)
      : ctx(ctx), head(std::move(head)), gen(std::move(gen)) {}
  ServerContext& ctx;
  ResponseHead head;
  std::unique_ptr<Generation> gen;
  ReplyBlocks blocks{this};
  std::vector<std::string> ids;  // per output item
  std::string status = "completed";
  int sequence = 0;
  bool announced = false;
  std::string* out = nullptr;  // where the events of this poll go
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();

  void emit(const char* type, ojson fields) {
    ojson e = {{"type", type}};
    for (auto& [k, v] : fields.items()) e[k] = std::move(v);
    e["sequence_number"] = sequence++;
    *out += sse_event(type, e);
  }
  ojson where(int index) const {
    return {{"item_id", ids[size_t(index)]}, {"output_index", index}};
  }
  ojson in_part(int index) const {
    ojson w = where(index);
    w["content_index"] = 0;
    return w;
  }

  void open(int index, const ReplyBlock& b) override {
    ids.push_back(new_object_id(item_id_prefix(b.kind)));
    emit("response.output_item.added",
         {{"output_index", index},
          {"item", output_item(b, ids.back(), "in_progress", /*start=*/true, head.namespaced)}});
    if (b.kind == ReplyBlock::Kind::ToolCall) return;
    ojson e = in_part(index);
    e["part"] = content_part(b, /*start=*/true);
    emit("response.content_part.added", std::move(e));
  }
  void delta(int index, const ReplyBlock& b, std::string_view text) override {
    if (b.kind == ReplyBlock::Kind::ToolCall) {
      ojson e = where(index);
      e["delta"] = text;
      emit("response.function_call_arguments.delta", std::move(e));
      return;
    }
    ojson e = in_part(index);
    e["delta"] = text;
    if (b.kind == ReplyBlock::Kind::Reasoning) {
      emit("response.reasoning_text.delta", std::move(e));
    } else {
      e["logprobs"] = ojson::array();
      emit("response.output_text.delta", std::move(e));
    }
  }
  void close(int index, const ReplyBlock& b) override {
    const std::string item_status = b.kind == ReplyBlock::Kind::ToolCall ? "completed" : status;
    if (b.kind == ReplyBlock::Kind::ToolCall) {
      ojson e = where(index);
      e["name"] = client_tool_name(b.name, head.namespaced).first;
      e["arguments"] = b.text;
      emit("response.function_call_arguments.done", std::move(e));
    } else {
      ojson e = in_part(index);
      e["text"] = b.text;
      if (b.kind == ReplyBlock::Kind::Reasoning) {
        emit("response.reasoning_text.done", std::move(e));
      } else {
        e["logprobs"] = ojson::array();
        emit("response.output_text.done", std::move(e));
      }
      ojson p = in_part(index);
      p["part"] = content_part(b);
      emit("response.content_part.done", std::move(p));
    }
    emit("response.output_item.done",
         {{"output_index", index},
          {"item", output_item(b, ids[size_t(index)], item_status, false, head.namespaced)}});
  }
};

bool next_events(ResponseStream& s, std::string& out) {
  using namespace std::chrono;
  s.out = &out;
  try {
    if (!s.announced) {
      const ojson r = response_object(s.head, "in_progress", ojson::array(), nullptr);
      s.emit("response.created", {{"response", r}});
      s.emit("response.in_progress", {{"response", r}});
      s.announced = true;
    }
    for (const ChoiceDelta& d : s.gen->poll(milliseconds(200))) s.blocks.push(d);
    if (s.gen->finished()) {
      if (!s.gen->error().empty()) {
        s.emit("error",
               {{"code", "server_error"}, {"message", s.gen->error()}, {"param", nullptr}});
        const ojson error = {{"code", "server_error"}, {"message", s.gen->error()}};
        s.emit("response.failed",
               {{"response", response_object(s.head, "failed",
                                             output_of(s.blocks.blocks(), s.ids, "incomplete",
                                                       s.head.namespaced),
                                             nullptr, "", error)}});
        return false;
      }
      const Generation::Choice& c = s.gen->choices()[0];
      s.status = status_of(c);  // before finish(): the message closes there
      s.blocks.finish(c);
      const bool complete = s.status == "completed";
      s.emit(complete ? "response.completed" : "response.incomplete",
             {{"response",
               response_object(s.head, s.status,
                               output_of(s.blocks.blocks(), s.ids, s.status, s.head.namespaced),
                               responses_usage(s.gen->usage(), reasoning_tokens(s.ctx, c)),
                               complete ? "" : "max_output_tokens")}});
      return false;
    }
    const auto now = steady_clock::now();
    if (out.empty() && now - s.last_write >= duration<double>(s.ctx.options.sse_keepalive_s))
      out += ": keep-alive\n\n";  // an SSE comment: clients ignore it, proxies see a live stream
    if (!out.empty()) s.last_write = now;
    return true;
  } catch (const std::exception& e) {
    // The status line is already sent: whatever goes wrong reaches the client as an error event.
    s.gen->cancel(/*client_gone=*/false);
    s.emit("error", {{"code", "server_error"},
                     {"message", std::string("internal error: ") + e.what()},
                     {"param", nullptr}});
    return false;
  }
}

void handle_responses(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  if (!ctx.model->tokenizer() || !ctx.chat)
    bad_request("the model has no tokenizer: chat needs one");
  ResponsesRequest r = parse_responses_request(req.body, ctx.sampling_defaults,
                                               ctx.chat->think_close_id().has_value(),
                                               ctx.options.refuse_hosted_tools);
  for (const std::string& w : r.warnings) {
    // A response header (clients that show warnings can) and one log line.
    res.set_header("Fak-Warning", w);
    std::fprintf(stderr, "fak serve: warning: /v1/responses: %s\n", w.c_str());
  }
  if (r.model != ctx.model_id && r.model != ctx.model->path().string())
    throw ApiError(
        404, "The model '" + r.model + "' does not exist; this server has '" + ctx.model_id + "'",
        "model", "model_not_found");
  chat::Turn turn = build_turn(ctx, r.turn, req.gone.get());
  check_prompt_fits(turn.prompt, ctx.scheduler->ctx(), "input");
  GenerationSpec spec = turn_generation_spec(ctx, r.turn, std::move(turn), tenant_of(req));
  note_output_budget(res, {spec.max_tokens, spec.max_tokens_source});
  auto gen = std::make_unique<Generation>(ctx, std::move(spec));
  ResponseHead head = new_response_head(r.model, std::move(r.echo));
  head.namespaced = std::move(r.namespaced);

  if (!r.stream) {
    gen->wait(req);
    const Generation::Choice& c = gen->choices()[0];
    const std::vector<ReplyBlock> blocks = ReplyBlocks::of(c);
    std::vector<std::string> ids;
    for (const ReplyBlock& b : blocks) ids.push_back(new_object_id(item_id_prefix(b.kind)));
    const std::string status = status_of(c);
    reply_json(res, 200,
               response_object(head, status, output_of(blocks, ids, status, head.namespaced),
                               responses_usage(gen->usage(), reasoning_tokens(ctx, c)),
                               status == "completed" ? "" : "max_output_tokens"));
    return;
  }
  auto state = std::make_shared<ResponseStream>(ctx, std::move(head), std::move(gen));
  stream_events(res, state, &next_events);
}

}  // namespace

void add_responses_routes(Router& router, ServerContext& ctx) {
  router.add("POST", "/v1/responses", guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_responses(ctx, req, res);
             }));
}

}  // namespace fak::server
