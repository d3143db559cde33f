#include "server/generation.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/context.h"
#include "server/http_message.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

OutputBudget output_budget(const ServerOptions& options, std::optional<int> asked, int room) {
  OutputBudget b;
  const int cap = options.max_tokens;
  if (!asked) {
    b = cap > 0 ? OutputBudget{cap, "server_default"} : OutputBudget{room, "context"};
  } else {
    b = cap > 0 && *asked > cap ? OutputBudget{cap, "server_cap"} : OutputBudget{*asked, "request"};
  }
  if (b.tokens > room) b = {room, "context"};
  return b;
}

void set_output_budget(GenerationSpec& spec, const ServerOptions& options, std::optional<int> asked,
                       int n_ctx) {
  const OutputBudget b = output_budget(options, asked, n_ctx - int(spec.prompt.size()));
  spec.max_tokens = b.tokens;
  spec.max_tokens_source = b.source;
}

void note_output_budget(HttpResponse& res, const OutputBudget& b) {
  if (std::string_view(b.source) == "server_default" || std::string_view(b.source) == "server_cap")
    res.set_header("Fak-Max-Tokens", std::to_string(b.tokens) + "; source=" + b.source);
}

namespace {

// The longest stop string less one byte: captured text this close to its end may still be cut
// back by a stop string the next token completes, so it waits.
size_t longest_stop(const std::vector<std::string>& stops) {
  size_t n = 0;
  for (const std::string& s : stops) n = std::max(n, s.size());
  return n > 0 ? n - 1 : 0;
}

}  // namespace

struct Generation::Text {
  Text(const Tokenizer& tok, const GenerationSpec& spec)
      : decoder(tok, /*skip_special=*/!format(spec).structured_reply() && !spec.keep_special),
        reasoning(spec.split_reasoning, spec.reasoning_open),
        filter(spec.stop,
               spec.capture_tool_calls && !format(spec).structured_reply()
                   ? std::string(format(spec).tool_call_open())
                   : "",
               format(spec).calls_at_start()),
        calls(format(spec).tool_call_reader(spec.tools)),
        stop_holdback(longest_stop(spec.stop)) {
    if (format(spec).structured_reply())
      harmony = std::make_unique<chat::HarmonyReader>(spec.reply_header);
  }
  static const chat::ChatFormat& format(const GenerationSpec& spec) {
    return spec.format ? *spec.format : chat::hermes_format();
  }
  StreamDecoder decoder;
  chat::ReasoningSplitter reasoning;
  chat::StopFilter filter;
  std::unique_ptr<chat::ToolCallReader> calls;
  // Harmony replies (chat/harmony.h): reasoning, answer and calls read together instead.
  std::unique_ptr<chat::HarmonyReader> harmony;
  size_t fed = 0;  // bytes of filter.captured() given to `calls`
  size_t stop_holdback = 0;
};

// Feeds what the stop filter captured since the last call (all of it when `all`) to the tool-call
// reader, at whole UTF-8 characters.
void Generation::feed_tool_calls(Text& t, ChoiceDelta& d, bool all) {
  const std::string& cap = t.filter.captured();
  size_t end = cap.size();
  if (!all) {
    end = end > t.stop_holdback ? end - t.stop_holdback : 0;
    while (end > t.fed && end < cap.size() && (static_cast<unsigned char>(cap[end]) & 0xC0) == 0x80)
      --end;
  }
  if (end <= t.fed) return;
  for (chat::ToolCallDelta& c : t.calls->push(std::string_view(cap).substr(t.fed, end - t.fed)))
    d.tool_calls.push_back(std::move(c));
  t.fed = end;
}

Generation::Generation(ServerContext& ctx, GenerationSpec spec)
    : ctx_(ctx),
      stream_(std::make_shared<GenStream>()),
      prompt_size_(spec.prompt.size()),
      capture_tool_calls_(spec.capture_tool_calls),
      wants_logprobs_(spec.top_logprobs >= 0) {
  const Tokenizer* tok = ctx.model->tokenizer();
  // Without a tokenizer a /v1/fak/ session of ids still generates: only ids come back.
  if (!tok && !(spec.session && spec.stop.empty() && spec.top_logprobs < 0))
    bad_request("the model has no tokenizer");
  choices_.resize(size_t(spec.n));
  for (int i = 0; i < spec.n; ++i)
    text_.push_back(tok ? std::make_unique<Text>(*tok, spec) : nullptr);
  GenRequest g;
  g.partition = std::move(spec.partition);
  g.tenant = std::move(spec.tenant);
  g.prompt = std::move(spec.prompt);
  g.max_tokens = spec.max_tokens;
  g.sampling = spec.sampling;
  g.stop_ids = std::move(spec.stop_ids);
  g.stream = stream_;
  g.n = spec.n;
  g.top_logprobs = spec.top_logprobs;
  g.grammar = std::move(spec.grammar);
  g.think = spec.think;
  g.reasoning_budget = spec.reasoning_budget;
  g.reasoning_open = spec.reasoning_open;
  g.session = spec.session;
  g.on_finish = std::move(spec.on_finish);
  ctx.scheduler->submit(std::move(g));
}

Generation::~Generation() {
  if (!finished_) stream_->cancel(/*client_gone=*/false);
}

ChoiceDelta& Generation::delta_for(int index, std::vector<ChoiceDelta>& out) {
  for (ChoiceDelta& d : out)
    if (d.index == index) return d;
  out.push_back({});
  out.back().index = index;
  return out.back();
}

void Generation::close_choice(int index, const std::string& reason, std::vector<ChoiceDelta>& out) {
  Choice& c = choices_[size_t(index)];
  if (c.done) return;
  ChoiceDelta& d = delta_for(index, out);
  if (!text_[size_t(index)]) {
    c.finish_reason = reason == "cancelled" ? "stop" : reason;
    c.done = true;
    finished_ =
        std::all_of(choices_.begin(), choices_.end(), [](const Choice& x) { return x.done; });
    return;
  }
  Text& t = *text_[size_t(index)];
  // What the decoder and the splitter still hold, through the stop filter, then what it held.
  chat::ReasoningSplitter::Parts tail;
  if (t.harmony) {
    chat::ReplyParts a = t.harmony->push(t.decoder.flush());
    chat::ReplyParts b = t.harmony->finish(reason == "length");
    tail.reasoning = a.reasoning + b.reasoning;
    tail.content = a.content + b.content;
    for (auto* calls : {&a.calls, &b.calls})
      for (chat::ToolCallDelta& x : *calls) d.tool_calls.push_back(std::move(x));
  } else {
    tail = t.reasoning.push(t.decoder.flush());
    const chat::ReasoningSplitter::Parts last = t.reasoning.finish();
    tail.reasoning += last.reasoning;
    tail.content += last.content;
  }
  std::string content = t.filter.stopped() ? "" : t.filter.push(tail.content);
  if (!t.filter.stopped()) content += t.filter.finish();
  if (t.filter.stopped() && c.stop_sequence.empty()) c.stop_sequence = t.filter.matched();
  d.reasoning += tail.reasoning;
  d.content += content;
  c.reasoning += tail.reasoning;
  c.content += content;
  c.finish_reason = reason == "cancelled" ? "stop" : reason;
  if (t.harmony && !t.harmony->calls().empty()) {
    c.tool_calls.tool_calls = t.harmony->calls();
    c.tool_calls.content = c.content;
    if (!t.harmony->dropped()) c.finish_reason = "tool_calls";
  } else if (capture_tool_calls_ && !t.filter.captured().empty()) {
    feed_tool_calls(t, d, /*all=*/true);
    chat::ToolCallsFinal f = t.calls->finish(reason == "length");
    for (chat::ToolCallDelta& x : f.deltas) d.tool_calls.push_back(std::move(x));
    if (f.tool_calls.empty()) {
      // No call: what was captured stays text (a <tool_call> that did not parse), except a block
      // the generation cut off.
      d.content += f.content;
      c.content += f.content;
    } else {
      c.tool_calls.tool_calls = std::move(f.tool_calls);
      c.tool_calls.content = std::move(f.content);
      // note: calls whose JSON is whole are the answer even when max_tokens took only their
      // closing tag; a call cut off inside (dropped) makes the reply "length": its clients must
      // not take a turn that lost a call for a finished one.
      if (!f.dropped) c.finish_reason = "tool_calls";
    }
  }
  c.done = true;
  finished_ = std::all_of(choices_.begin(), choices_.end(), [](const Choice& x) { return x.done; });
}

void Generation::on_event(const GenEvent& e, std::vector<ChoiceDelta>& out) {
  if (finished_) return;
  switch (e.kind) {
    case GenEvent::Kind::Started:
      started_ = true;
      usage_.prompt_tokens = e.prompt_tokens;
      usage_.cached_tokens = e.cached_tokens;
      prompt_read_ = e.cached_tokens;
      return;
    case GenEvent::Kind::Progress:
      prompt_read_ = e.cached_tokens;
      return;
    case GenEvent::Kind::Token: {
      if (e.index < 0 || e.index >= int(choices_.size())) return;
      Choice& c = choices_[size_t(e.index)];
      if (c.done) return;
      ++usage_.completion_tokens;
      ++c.tokens;
      c.token_ids.push_back(e.token);
      c.sum_logprob += e.logprob;
      ChoiceDelta& d = delta_for(e.index, out);
      if (!text_[size_t(e.index)]) return;
      Text& t = *text_[size_t(e.index)];
      if (wants_logprobs_) {
        TokenLogprob lp{e.token, ctx_.model->tokenizer()->token_bytes(e.token), e.logprob, e.top};
        c.logprobs.push_back(lp);
        d.logprobs.push_back(std::move(lp));
      }
      chat::ReasoningSplitter::Parts parts;
      if (t.harmony) {
        chat::ReplyParts h = t.harmony->push(t.decoder.push(e.token));
        parts = {std::move(h.reasoning), std::move(h.content)};
        for (chat::ToolCallDelta& x : h.calls) d.tool_calls.push_back(std::move(x));
      } else {
        parts = t.reasoning.push(t.decoder.push(e.token));
      }
      d.reasoning += parts.reasoning;
      c.reasoning += parts.reasoning;
      const std::string shown = t.filter.push(parts.content);
      d.content += shown;
      c.content += shown;
      if (capture_tool_calls_ && !t.filter.stopped()) feed_tool_calls(t, d, /*all=*/false);
      if (t.filter.stopped()) {
        c.stop_sequence = t.filter.matched();
        // The client has all it asked for from this choice: free its slot now.
        stream_->cancel_choice(e.index);
        close_choice(e.index, "stop", out);
      }
      return;
    }
    case GenEvent::Kind::Done:
      if (e.index >= 0 && e.index < int(choices_.size())) close_choice(e.index, e.text, out);
      return;
    case GenEvent::Kind::Error:
      error_ = e.text;
      error_status_ = e.status;
      finished_ = true;
      return;
  }
}

std::vector<ChoiceDelta> Generation::poll(std::chrono::milliseconds timeout) {
  std::vector<ChoiceDelta> out;
  if (finished_) return out;
  for (const GenEvent& e : stream_->wait(timeout)) on_event(e, out);
  return out;
}

void Generation::wait(const HttpRequest& req) {
  while (!finished_) {
    if (req.client_gone()) {
      // Nobody will read the reply: free the sequences now rather than at max_tokens.
      stream_->cancel();
      throw ApiError(499, "the client closed the connection", "", "client_closed");
    }
    poll(std::chrono::milliseconds(200));
  }
  if (!error_.empty())
    throw ApiError(error_status_, error_, "",
                   error_status_ == 503   ? "unavailable"
                   : error_status_ == 429 ? "queue_full"
                                          : "");
}

}  // namespace fak::server
