// POST /v1/completions and /v1/chat/completions: validate, build the prompt, queue it on the
// scheduler, then turn its token events into one JSON reply or a stream of server-sent events.
// Text handling per reply (UTF-8-safe decoding, stop strings held back, tool-call capture) lives
// in Reply so the streaming and non-streaming paths cannot drift apart.
#include <algorithm>

#include "runtime/generate.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/openai_request.h"
#include "server/stop_filter.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

// One generation's text, as it is delivered.
class Reply {
 public:
  Reply(const Tokenizer& tok, const CompletionRequest& r, ResponseMeta meta,
        std::shared_ptr<GenStream> stream)
      : decoder_(tok, /*skip_special=*/true),
        filter_(r.stop, parses_tools(r) ? std::string(kToolCallOpen) : ""),
        parse_tools_(parses_tools(r)),
        meta(std::move(meta)),
        stream(std::move(stream)) {}

  static bool parses_tools(const CompletionRequest& r) {
    return r.chat && r.tools.is_array() && !r.tools.empty() && r.tool_choice != "none";
  }

  // Handles one event; returns content text that may be shown now.
  std::string on_event(const GenEvent& e) {
    if (finished) return "";
    switch (e.kind) {
      case GenEvent::Kind::Started:
        usage.prompt_tokens = e.prompt_tokens;
        usage.cached_tokens = e.cached_tokens;
        return "";
      case GenEvent::Kind::Token: {
        ++usage.completion_tokens;
        std::string out = filter_.push(decoder_.push(e.token));
        if (filter_.stopped()) {
          // The client has all it asked for: free the slot now, not at max_tokens.
          stream->cancel(/*client_gone=*/false);
          finish_reason = "stop";
          finished = true;
        }
        content += out;
        return out;
      }
      case GenEvent::Kind::Done: {
        std::string out = filter_.push(decoder_.flush());
        if (!filter_.stopped()) out += filter_.finish();
        finish_reason = e.text == "cancelled" ? "stop" : e.text;
        finished = true;
        content += out;
        return out;
      }
      case GenEvent::Kind::Error:
        error = e.text;
        finished = true;
        return "";
    }
    return "";
  }

  // After finishing: tool calls found in the captured text (and the rest of it as content).
  ExtractedToolCalls tool_calls() const {
    if (!parse_tools_ || filter_.captured().empty()) return {};
    return extract_tool_calls(filter_.captured());
  }

  StreamDecoder decoder_;
  StopFilter filter_;
  bool parse_tools_;
  ResponseMeta meta;
  std::shared_ptr<GenStream> stream;
  Usage usage;
  std::string content;  // everything released so far
  std::string finish_reason;
  std::string error;
  bool finished = false;
  bool sent_role = false;
};

void wait_all(Reply& rep, const HttpRequest& req) {
  while (!rep.finished) {
    if (req.client_gone()) {
      // Nobody will read the reply: free the sequence now rather than at max_tokens.
      rep.stream->cancel();
      throw ApiError(499, "the client closed the connection", "", "client_closed");
    }
    for (const GenEvent& e : rep.stream->wait(std::chrono::milliseconds(200))) rep.on_event(e);
  }
}

ojson non_stream_body(Reply& rep) {
  if (!rep.meta.chat)
    return completion_response(rep.meta, rep.content, rep.finish_reason, rep.usage);
  ExtractedToolCalls calls = rep.tool_calls();
  std::string content = rep.content;
  if (!calls.tool_calls.empty()) {
    content += calls.content;
    const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
    return chat_response(rep.meta, blank ? std::nullopt : std::optional<std::string>(content),
                         calls.tool_calls, "tool_calls", rep.usage);
  }
  content += rep.filter_.captured();  // a <tool_call> that did not parse stays text
  return chat_response(rep.meta, content, ojson::array(), rep.finish_reason, rep.usage);
}

std::string content_chunk(const Reply& rep, const std::string& text) {
  if (!rep.meta.chat) return sse(completion_chunk(rep.meta, text, ""));
  return sse(chat_chunk(rep.meta, {{"content", text}}, ""));
}

// The closing events: leftover captured text or tool calls, the finish reason, usage, [DONE].
std::string closing_chunks(const Reply& rep, bool include_usage) {
  std::string out;
  std::string reason = rep.finish_reason;
  if (rep.meta.chat) {
    if (rep.parse_tools_ && !rep.filter_.captured().empty()) {
      ExtractedToolCalls calls = rep.tool_calls();
      if (calls.tool_calls.empty()) {
        out += content_chunk(rep, rep.filter_.captured());
      } else {
        if (!calls.content.empty()) out += content_chunk(rep, calls.content);
        ojson deltas = ojson::array();
        for (size_t i = 0; i < calls.tool_calls.size(); ++i) {
          ojson d = calls.tool_calls[i];
          ojson indexed = {{"index", i}};
          for (auto& [k, v] : d.items()) indexed[k] = v;
          deltas.push_back(indexed);
        }
        out += sse(chat_chunk(rep.meta, {{"tool_calls", deltas}}, ""));
        reason = "tool_calls";
      }
    }
    out += sse(chat_chunk(rep.meta, ojson::object(), reason));
  } else {
    out += sse(completion_chunk(rep.meta, "", reason));
  }
  if (include_usage) out += sse(usage_chunk(rep.meta, rep.usage));
  return out + kSseDone;
}

std::vector<int32_t> build_prompt(ServerContext& ctx, const CompletionRequest& r) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (r.prompt_ids) {
    for (int32_t id : *r.prompt_ids)
      if (id >= ctx.model->config().vocab)
        bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(ctx.model->config().vocab),
                    "prompt");
    return *r.prompt_ids;
  }
  if (!tok) bad_request("the model has no tokenizer: send the prompt as token ids", "prompt");
  if (!r.chat) return tok->encode(r.prompt);
  const bool with_tools = r.tool_choice != "none";
  return tok->encode(ctx.chat->render(r.messages, with_tools ? r.tools : ojson(), true));
}

void handle_generate(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, bool chat) {
  const CompletionRequest r = parse_completion_request(req.body, chat);
  if (r.model != ctx.model_id && r.model != ctx.model->path().string())
    throw ApiError(
        404, "the model '" + r.model + "' does not exist; this server has '" + ctx.model_id + "'",
        "model", "model_not_found");
  if (!ctx.model->tokenizer()) bad_request("the model has no tokenizer");
  std::vector<int32_t> prompt = build_prompt(ctx, r);
  const int n_ctx = ctx.scheduler->ctx();
  const char* prompt_param = chat ? "messages" : "prompt";
  if (prompt.empty()) bad_request("the prompt is empty", prompt_param);
  if (int(prompt.size()) >= n_ctx)
    throw ApiError(400,
                   "the prompt is " + std::to_string(prompt.size()) +
                       " tokens; this model's context is " + std::to_string(n_ctx) +
                       " tokens, and at least one must be left to generate",
                   prompt_param, "context_length_exceeded");

  GenRequest g;
  g.partition = tenant_of(req) + '\x1f' + r.cache_salt;
  g.max_tokens = std::min(r.max_tokens.value_or(n_ctx), n_ctx - int(prompt.size()));
  g.prompt = std::move(prompt);
  g.sampling = r.sampling;
  if (!r.ignore_eos) g.stop_ids = chat ? ctx.chat->stop_ids() : model_stop_ids(*ctx.model);
  g.stream = std::make_shared<GenStream>();
  auto rep = std::make_shared<Reply>(*ctx.model->tokenizer(), r, new_response_meta(r.model, chat),
                                     g.stream);
  ctx.scheduler->submit(std::move(g));

  if (!r.stream) {
    wait_all(*rep, req);
    if (!rep->error.empty())
      throw ApiError(rep->error.find("shutting down") != std::string::npos ? 503 : 500, rep->error);
    reply_json(res, 200, non_stream_body(*rep));
    return;
  }
  const bool include_usage = r.include_usage;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.stream = HttpStream{
      [rep, include_usage](std::string& out) {
        // Whatever goes wrong from here on must reach the client as an SSE error event: the
        // status line is already sent.
        try {
          if (rep->meta.chat && !rep->sent_role) {
            out += sse(chat_chunk(rep->meta, {{"role", "assistant"}, {"content", ""}}, ""));
            rep->sent_role = true;
          }
          for (const GenEvent& e : rep->stream->wait(std::chrono::milliseconds(200))) {
            std::string piece = rep->on_event(e);
            if (!piece.empty()) out += content_chunk(*rep, piece);
          }
          if (!rep->finished) return true;
          if (!rep->error.empty())
            out += sse(error_body(rep->error, "server_error", "", "")) + kSseDone;
          else
            out += closing_chunks(*rep, include_usage);
        } catch (const std::exception& e) {
          rep->stream->cancel(/*client_gone=*/false);
          rep->finished = true;
          out +=
              sse(error_body(std::string("internal error: ") + e.what(), "server_error", "", "")) +
              kSseDone;
        }
        return false;
      },
      // A client that left (or a failed write) cancels, so the scheduler frees the sequence at
      // its next step.
      [rep](bool complete) {
        if (!complete || !rep->finished) rep->stream->cancel();
      }};
}

}  // namespace

void add_openai_routes(Router& router, ServerContext& ctx) {
  router.add("POST", "/v1/completions", guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_generate(ctx, req, res, false);
             }));
  router.add("POST", "/v1/chat/completions",
             guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_generate(ctx, req, res, true);
             }));
}

}  // namespace fak::server
