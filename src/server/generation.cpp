#include "server/generation.h"

#include "server/api_error.h"
#include "server/context.h"
#include "server/http_message.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

struct Generation::Text {
  Text(const Tokenizer& tok, const GenerationSpec& spec)
      : decoder(tok, /*skip_special=*/true),
        reasoning(spec.split_reasoning, spec.reasoning_open),
        filter(spec.stop, spec.capture_tool_calls ? std::string(kToolCallOpen) : "") {}
  StreamDecoder decoder;
  ReasoningSplitter reasoning;
  StopFilter filter;
};

Generation::Generation(ServerContext& ctx, GenerationSpec spec)
    : ctx_(ctx),
      stream_(std::make_shared<GenStream>()),
      prompt_size_(spec.prompt.size()),
      capture_tool_calls_(spec.capture_tool_calls),
      wants_logprobs_(spec.top_logprobs >= 0) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (!tok) bad_request("the model has no tokenizer");
  choices_.resize(size_t(spec.n));
  for (int i = 0; i < spec.n; ++i) text_.push_back(std::make_unique<Text>(*tok, spec));
  GenRequest g;
  g.partition = std::move(spec.partition);
  g.prompt = std::move(spec.prompt);
  g.max_tokens = spec.max_tokens;
  g.sampling = spec.sampling;
  g.stop_ids = std::move(spec.stop_ids);
  g.stream = stream_;
  g.n = spec.n;
  g.top_logprobs = spec.top_logprobs;
  g.grammar = std::move(spec.grammar);
  g.grammar_after = spec.grammar_after;
  g.reasoning_budget = spec.reasoning_budget;
  g.reasoning_open = spec.reasoning_open;
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
  Text& t = *text_[size_t(index)];
  ChoiceDelta& d = delta_for(index, out);
  // What the decoder and the splitter still hold, through the stop filter, then what it held.
  ReasoningSplitter::Parts tail = t.reasoning.push(t.decoder.flush());
  const ReasoningSplitter::Parts last = t.reasoning.finish();
  tail.reasoning += last.reasoning;
  tail.content += last.content;
  std::string content = t.filter.stopped() ? "" : t.filter.push(tail.content);
  if (!t.filter.stopped()) content += t.filter.finish();
  if (t.filter.stopped() && c.stop_sequence.empty()) c.stop_sequence = t.filter.matched();
  d.reasoning += tail.reasoning;
  d.content += content;
  c.reasoning += tail.reasoning;
  c.content += content;
  c.finish_reason = reason == "cancelled" ? "stop" : reason;
  if (capture_tool_calls_ && !t.filter.captured().empty()) {
    c.tool_calls = extract_tool_calls(t.filter.captured());
    if (c.tool_calls.tool_calls.empty())
      c.content += t.filter.captured();  // a <tool_call> that did not parse stays text
    else
      c.finish_reason = "tool_calls";
  }
  c.done = true;
  bool all = true;
  for (const Choice& x : choices_) all = all && x.done;
  finished_ = all;
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
      Text& t = *text_[size_t(e.index)];
      ++usage_.completion_tokens;
      ++c.tokens;
      c.sum_logprob += e.logprob;
      ChoiceDelta& d = delta_for(e.index, out);
      if (wants_logprobs_) {
        TokenLogprob lp{e.token, ctx_.model->tokenizer()->token_bytes(e.token), e.logprob, e.top};
        c.logprobs.push_back(lp);
        d.logprobs.push_back(std::move(lp));
      }
      const ReasoningSplitter::Parts parts = t.reasoning.push(t.decoder.push(e.token));
      d.reasoning += parts.reasoning;
      c.reasoning += parts.reasoning;
      const std::string shown = t.filter.push(parts.content);
      d.content += shown;
      c.content += shown;
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
    throw ApiError(error_status_, error_, "", error_status_ == 503 ? "unavailable" : "");
}

}  // namespace fak::server
