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

struct Generation::Text {
  Text(const Tokenizer& tok, const GenerationSpec& spec)
      : reader((spec.format ? *spec.format : chat::hermes_format()).reply_reader(spec.reply)),
        decoder(tok, /*skip_special=*/!reader->reads_special_tokens() && !spec.keep_special) {}
  std::unique_ptr<chat::ReplyReader> reader;
  StreamDecoder decoder;
};

// A piece of the reply read, into the choice and this poll's delta.
void Generation::release(Choice& c, ChoiceDelta& d, chat::ReplyDelta&& r) {
  d.reasoning += r.reasoning;
  c.reasoning += r.reasoning;
  d.content += r.content;
  c.content += r.content;
  for (chat::ToolCallDelta& x : r.tool_calls) d.tool_calls.push_back(std::move(x));
}

Generation::Generation(ServerContext& ctx, GenerationSpec spec)
    : ctx_(ctx),
      stream_(std::make_shared<GenStream>()),
      prompt_size_(spec.prompt.size()),
      wants_logprobs_(spec.top_logprobs >= 0) {
  const Tokenizer* tok = ctx.model->tokenizer();
  // Without a tokenizer a /v1/fak/ session of ids still generates: only ids come back.
  if (!tok && !(spec.session && spec.reply.stop.empty() && spec.top_logprobs < 0))
    bad_request("the model has no tokenizer");
  choices_.resize(size_t(spec.n));
  for (int i = 0; i < spec.n; ++i)
    text_.push_back(tok ? std::make_unique<Text>(*tok, spec) : nullptr);
  GenRequest g;
  g.partition = std::move(spec.partition);
  g.tenant = std::move(spec.tenant);
  g.prompt = std::move(spec.prompt);
  g.max_tokens = spec.max_tokens;
  g.rules = std::move(spec.rules);
  g.stream = stream_;
  g.n = spec.n;
  g.top_logprobs = spec.top_logprobs;
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
  // What the decoder still holds, and what the reader held back, with the reply's calls.
  release(c, d, t.reader->finish(t.decoder.flush(), reason == "length"));
  if (t.reader->stopped() && c.stop_sequence.empty()) c.stop_sequence = t.reader->stop_sequence();
  c.finish_reason = reason == "cancelled" ? "stop" : reason;
  if (!t.reader->calls().tool_calls.empty()) {
    c.tool_calls = t.reader->calls();
    if (t.reader->ends_in_calls()) c.finish_reason = "tool_calls";
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
      release(c, d, t.reader->push(t.decoder.push(e.token)));
      if (t.reader->stopped()) {
        c.stop_sequence = t.reader->stop_sequence();
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
