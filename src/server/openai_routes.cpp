// POST /v1/completions and /v1/chat/completions: validate, build the prompt and the generation
// (choices, logprobs, a grammar for response_format or a forced tool call, reasoning split), then
// turn its output into one JSON reply or a stream of server-sent events. The text handling per
// choice lives in Generation (generation.h), shared with the other API front ends.
#include <algorithm>

#include "core/error.h"
#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "server/api_error.h"
#include "server/chat_turn.h"
#include "server/context.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

ojson logprobs_json(ServerContext& ctx, bool chat, const std::vector<TokenLogprob>& lps) {
  const Tokenizer& tok = *ctx.model->tokenizer();
  auto text = [&](int32_t id) { return tok.token_bytes(id); };
  return chat ? chat_logprobs(lps, text) : completion_logprobs(lps, text);
}

ojson chat_message(const Generation::Choice& c) {
  ojson msg;
  msg["role"] = "assistant";
  const bool calls = !c.tool_calls.tool_calls.empty();
  std::string content = c.content;
  if (calls) content += c.tool_calls.content;
  const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
  msg["content"] = calls && blank ? ojson() : ojson(content);
  if (!c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
  if (calls) msg["tool_calls"] = c.tool_calls.tool_calls;
  return msg;
}

// The whole reply. best_of: the n choices with the highest total logprob, in that order.
ojson whole_reply(ServerContext& ctx, const CompletionRequest& r, const ResponseMeta& meta,
                  const Generation& gen) {
  std::vector<int> order(gen.choices().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  if (r.best_of > r.n) {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return gen.choices()[size_t(a)].sum_logprob > gen.choices()[size_t(b)].sum_logprob;
    });
    order.resize(size_t(r.n));
  }
  ojson choices = ojson::array();
  for (size_t i = 0; i < order.size(); ++i) {
    const Generation::Choice& c = gen.choices()[size_t(order[i])];
    const ojson lps = r.top_logprobs >= 0 ? logprobs_json(ctx, r.chat, c.logprobs) : ojson();
    if (r.chat)
      choices.push_back(chat_choice(int(i), chat_message(c), c.finish_reason, lps));
    else
      choices.push_back(completion_choice(int(i), c.content, c.finish_reason, lps));
    if (r.return_token_ids) choices.back()["token_ids"] = c.token_ids;
  }
  return r.chat ? chat_response(meta, choices, gen.usage())
                : completion_response(meta, choices, gen.usage());
}

// A stream's state between polls.
struct StreamState {
  StreamState(ServerContext& ctx, CompletionRequest r, ResponseMeta meta,
              std::unique_ptr<Generation> gen)
      : ctx(ctx), r(std::move(r)), meta(std::move(meta)), gen(std::move(gen)) {}
  ServerContext& ctx;
  CompletionRequest r;
  ResponseMeta meta;
  std::unique_ptr<Generation> gen;
  bool sent_roles = false, closed = false;
  std::vector<bool> choice_closed;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  int progress_shown = -1;
};

// OpenAI's streamed tool calls: a call's first delta has its index, id, type and name (with empty
// arguments), later ones only the index and more arguments text; what one poll gathered for a
// call goes out as one delta.
ojson tool_call_deltas(const std::vector<chat::ToolCallDelta>& calls) {
  ojson out = ojson::array();
  for (const chat::ToolCallDelta& c : calls) {
    if (!c.id.empty()) {
      out.push_back({{"index", c.index},
                     {"id", c.id},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      continue;
    }
    if (!out.empty() && out.back()["index"] == c.index) {
      std::string& args = out.back()["function"]["arguments"].get_ref<std::string&>();
      args += c.arguments;
      continue;
    }
    out.push_back({{"index", c.index}, {"function", {{"arguments", c.arguments}}}});
  }
  return out;
}

// The closing events of one choice: captured text or tool calls, then its finish reason.
std::string close_choice(StreamState& s, int index) {
  const Generation::Choice& c = s.gen->choices()[size_t(index)];
  std::string out;
  std::string reason = c.finish_reason;
  if (s.r.chat) {
    // The calls went out as they grew (tool_call_deltas); the text after them comes last.
    if (!c.tool_calls.tool_calls.empty() && !c.tool_calls.content.empty())
      out += sse(chat_chunk(s.meta, {{"content", c.tool_calls.content}}, "", index));
    out += sse(chat_chunk(s.meta, ojson::object(), reason, index));
  } else {
    out += sse(completion_chunk(s.meta, "", reason, index));
  }
  return out;
}

// One poll of the stream: deltas as chunks, keep-alives while nothing comes (a long prompt being
// read says how far it is), the closing events once every choice is done.
bool next_events(StreamState& s, std::string& out) {
  using namespace std::chrono;
  try {
    if (s.r.chat && !s.sent_roles) {
      for (int i = 0; i < int(s.gen->choices().size()); ++i)
        out += sse(chat_chunk(s.meta, {{"role", "assistant"}, {"content", ""}}, "", i));
      s.sent_roles = true;
    }
    for (const ChoiceDelta& d : s.gen->poll(milliseconds(200))) {
      const ojson lps = s.r.top_logprobs >= 0 && !d.logprobs.empty()
                            ? logprobs_json(s.ctx, s.r.chat, d.logprobs)
                            : ojson();
      if (s.r.chat) {
        if (!d.reasoning.empty())
          out += sse(chat_chunk(s.meta, {{"reasoning_content", d.reasoning}}, "", d.index));
        if (!d.content.empty() || !lps.is_null())
          out += sse(chat_chunk(s.meta, {{"content", d.content}}, "", d.index, lps));
        if (!d.tool_calls.empty())
          out += sse(
              chat_chunk(s.meta, {{"tool_calls", tool_call_deltas(d.tool_calls)}}, "", d.index));
      } else if (!d.content.empty() || !lps.is_null()) {
        out += sse(completion_chunk(s.meta, d.content, "", d.index, lps));
      }
    }
    for (int i = 0; i < int(s.gen->choices().size()); ++i)
      if (s.gen->choices()[size_t(i)].done && !s.choice_closed[size_t(i)] &&
          s.gen->error().empty()) {
        out += close_choice(s, i);
        s.choice_closed[size_t(i)] = true;
      }
    if (s.gen->finished()) {
      if (!s.gen->error().empty())
        out += sse(error_body(s.gen->error(), "server_error", "", "")) + kSseDone;
      else
        out += (s.r.include_usage ? sse(usage_chunk(s.meta, s.gen->usage())) : "") + kSseDone;
      return false;
    }
    const auto now = steady_clock::now();
    const auto keepalive = duration<double>(s.ctx.options.sse_keepalive_s);
    const auto progress_every = std::min<duration<double>>(keepalive, seconds(1));
    if (out.empty() && s.gen->started() && now - s.last_write >= progress_every &&
        s.gen->prompt_read() != s.progress_shown && s.gen->prompt_read() < s.gen->prompt_size()) {
      // SSE comments: clients ignore them, proxies see a live connection.
      out += ": prefill " + std::to_string(s.gen->prompt_read()) + "/" +
             std::to_string(s.gen->prompt_size()) + "\n\n";
      s.progress_shown = s.gen->prompt_read();
    } else if (out.empty() && now - s.last_write >= keepalive) {
      out += ": keep-alive\n\n";
    }
    if (!out.empty()) s.last_write = now;
    return true;
  } catch (const std::exception& e) {
    // The status line is already sent: whatever goes wrong reaches the client as an error event.
    s.gen->cancel(/*client_gone=*/false);
    out += sse(error_body(std::string("internal error: ") + e.what(), "server_error", "", "")) +
           kSseDone;
    return false;
  }
}

// /v1/completions' constraint: a response_format (a chat request's is its turn's, chat_turn.h).
std::shared_ptr<const grammar::Grammar> completion_grammar(const CompletionRequest& r) {
  if (r.response_format.is_null()) return nullptr;
  try {
    return grammar::compile_response_format(r.response_format);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    bad_request(e.what(), "response_format");
  }
}

// A chat request as the turn every chat API builds (chat_turn.h): the same prompt, grammar,
// reasoning split and tool-call format as Anthropic messages and OpenAI responses.
ChatTurn chat_turn_of(const CompletionRequest& r) {
  ChatTurn t;
  t.messages = r.messages;
  t.tools = r.tools;
  t.tool_choice = r.tool_choice;
  t.tool_choice_name = r.tool_choice_name;
  t.max_tool_calls = r.parallel_tool_calls ? 8 : 1;
  t.response_format = r.response_format;
  t.template_kwargs = r.chat_template_kwargs;
  t.content_tokens = r.content_tokens;
  t.max_tokens = r.max_tokens;
  t.sampling = r.sampling;
  t.stop = r.stop;
  return t;
}

void handle_generate(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, bool chat) {
  const CompletionRequest r = parse_completion_request(req.body, chat, ctx.sampling_defaults);
  if (r.model != ctx.model_id && r.model != ctx.model->path().string())
    throw ApiError(
        404, "The model '" + r.model + "' does not exist; this server has '" + ctx.model_id + "'",
        "model", "model_not_found");
  if (!ctx.model->tokenizer()) bad_request("the model has no tokenizer");
  check_logit_bias(r.sampling, ctx.model->config().vocab);
  const int n_ctx = ctx.scheduler->ctx();
  GenerationSpec spec;
  if (chat) {
    const ChatTurn turn = chat_turn_of(r);
    chat::Turn made = build_turn(ctx, turn, req.gone.get());
    check_prompt_fits(made.prompt, n_ctx, "messages");
    spec = turn_generation_spec(ctx, turn, std::move(made), tenant_of(req));
  } else {
    spec.prompt = completion_prompt(ctx, r);
    check_prompt_fits(spec.prompt, n_ctx, "prompt");
    set_output_budget(spec, ctx.options, r.max_tokens, n_ctx);
    spec.rules.sampling = r.sampling;
    spec.rules.stop_ids = model_stop_ids(*ctx.model);
    spec.rules.grammar = completion_grammar(r);
    spec.reply.stop = r.stop;
  }
  // What OpenAI's routes add: the cache salt, several choices and logprobs, ignore_eos.
  spec.partition = cache_partition(tenant_of(req), r.cache_salt);
  spec.tenant = tenant_hash(tenant_of(req));
  note_output_budget(res, {spec.max_tokens, spec.max_tokens_source});
  if (r.ignore_eos) spec.rules.stop_ids.clear();
  spec.n = std::max(r.n, r.best_of);
  // best_of ranks choices by their total logprob: computed then, reported only when asked.
  spec.top_logprobs = r.best_of > r.n ? std::max(r.top_logprobs, 0) : r.top_logprobs;

  auto gen = std::make_unique<Generation>(ctx, std::move(spec));
  const ResponseMeta meta = new_response_meta(r.model, chat);

  if (!r.stream) {
    gen->wait(req);
    reply_json(res, 200, whole_reply(ctx, r, meta, *gen));
    return;
  }
  auto state = std::make_shared<StreamState>(ctx, r, meta, std::move(gen));
  state->choice_closed.assign(state->gen->choices().size(), false);
  stream_events(res, state, &next_events);
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
