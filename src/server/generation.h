// One generation as every API front end (OpenAI chat and completions, Anthropic messages, OpenAI
// responses) hands it to the scheduler, and its output as they read it back. Per choice the
// tokens become text (UTF-8-safe) and go through the format's reply reader (chat/reply_reader.h:
// reasoning split from content, stop strings held back and cut, tool calls read in the model's
// syntax), and each token's logprobs are kept. The front ends differ
// only in how they parse a request into a GenerationSpec and how they format what comes out, so
// streaming and whole replies, and the different APIs, cannot drift apart.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "chat/reply_reader.h"
#include "chat/tool_call_stream.h"
#include "chat/tool_calls.h"
#include "runtime/generate.h"
#include "server/http_message.h"
#include "server/openai_format.h"
#include "server/scheduler.h"

namespace fak::server {

struct ServerContext;
struct ServerOptions;
struct HttpResponse;

// A reply's token limit: what the client asked, or the server's --max-tokens when it asked none
// or more; never more than the context leaves (room). source says which decided: "request",
// "server_default", "server_cap" or "context".
struct OutputBudget {
  int tokens = 0;
  const char* source = "request";
};
OutputBudget output_budget(const ServerOptions& options, std::optional<int> asked, int room);
// Says it in the reply: the header `Fak-Max-Tokens: N; source=...` when the server decided it.
void note_output_budget(HttpResponse& res, const OutputBudget& b);

struct GenerationSpec {
  std::string partition;  // prefix-cache tenant and salt
  std::string tenant;     // the API key's tenant_hash (fairness between keys)
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  const char* max_tokens_source = "request";  // OutputBudget::source
  // How tokens are chosen (sampling, stop ids, grammar, the thinking block and its budget),
  // handed down to the scheduler as it is.
  DecodeRules rules;
  int n = 1;
  int top_logprobs = -1;  // -1: none; 0: the chosen token's; k: and k alternatives
  // How the reply is read back (chat/reply_reader.h), by the model's format (Hermes when null).
  const chat::ChatFormat* format = nullptr;
  chat::ReplyOptions reply;
  // A /v1/fak/ session's generate: the tokens extend this session, lent by the session table, and
  // on_finish hands it back (GenRequest::session and on_finish). Its text shows special tokens
  // (keep_special), as the session's own text does.
  Session* session = nullptr;
  std::function<void(const std::string& reason, int32_t last)> on_finish;
  bool keep_special = false;
};

// spec.max_tokens and its source (output_budget): what the request asked, under --max-tokens and
// the room spec.prompt leaves in a context of n_ctx.
void set_output_budget(GenerationSpec& spec, const ServerOptions& options, std::optional<int> asked,
                       int n_ctx);

// What one poll released for one choice.
struct ChoiceDelta {
  int index = 0;
  std::string reasoning, content;
  std::vector<TokenLogprob> logprobs;
  // Tool calls as they grow (tool_call_stream.h): the first delta of a call has its id and name.
  // Every call of the final reply comes through here, in order, before the choice is done.
  std::vector<chat::ToolCallDelta> tool_calls;
};

class Generation {
 public:
  struct Choice {
    std::string reasoning, content;  // everything released so far
    // Set when done: "stop", "length" (max_tokens or the context; a tool call it cut off is
    // dropped, never turned into text) or "tool_calls".
    std::string finish_reason;
    std::string stop_sequence;  // the stop string that ended it, if one did
    std::vector<TokenLogprob> logprobs;
    std::vector<int32_t> token_ids;  // every token it generated, in order
    double sum_logprob = 0;          // over the choice's tokens (best_of ranks by it)
    int tokens = 0;
    bool done = false;
    chat::ExtractedToolCalls tool_calls;  // filled when done, if the spec captures them
  };

  // Queues the generation; throws ApiError as Scheduler::submit does.
  Generation(ServerContext& ctx, GenerationSpec spec);
  ~Generation();  // cancels what is still running
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `timeout` for the scheduler, then returns what each choice released (choices with
  // nothing new are left out). A choice that finished in this poll has done set.
  std::vector<ChoiceDelta> poll(std::chrono::milliseconds timeout);
  // Blocks until every choice is done; a client that leaves cancels it (ApiError 499). Errors
  // from the scheduler become ApiError 500, or 503 while shutting down.
  void wait(const HttpRequest& req);
  void cancel(bool client_gone = true) { stream_->cancel(client_gone); }

  bool finished() const { return finished_; }
  const std::string& error() const { return error_; }
  int error_status() const { return error_status_; }  // 503: retry later (out of KV, stopping)
  const std::vector<Choice>& choices() const { return choices_; }
  const Usage& usage() const { return usage_; }
  // Prompt tokens read so far (Progress events), for keep-alives that say how far it is.
  int prompt_read() const { return prompt_read_; }
  int prompt_size() const { return int(prompt_size_); }
  bool started() const { return started_; }

 private:
  struct Text;  // per choice: the token decoder and the reply reader
  void on_event(const GenEvent& e, std::vector<ChoiceDelta>& out);
  ChoiceDelta& delta_for(int index, std::vector<ChoiceDelta>& out);
  void close_choice(int index, const std::string& reason, std::vector<ChoiceDelta>& out);
  void release(Choice& c, ChoiceDelta& d, chat::ReplyDelta&& r);

  ServerContext& ctx_;
  std::shared_ptr<GenStream> stream_;
  size_t prompt_size_ = 0;
  bool wants_logprobs_ = false;
  std::vector<Choice> choices_;
  std::vector<std::unique_ptr<Text>> text_;
  Usage usage_;
  std::string error_;
  int error_status_ = 500;
  bool finished_ = false, started_ = false;
  int prompt_read_ = 0;
};

// Turns a response into a server-sent-event stream of one generation: next(state, out) is polled
// (it waits briefly on the generation and appends what is ready, false at the end); a client that
// leaves, or a failed write, cancels the generation so the scheduler frees its sequences at the
// next step. State holds the generation as `gen`.
template <typename State>
void stream_events(HttpResponse& res, std::shared_ptr<State> state,
                   bool (*next)(State&, std::string&)) {
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.stream = HttpStream{[state, next](std::string& out) { return next(*state, out); },
                          [state](bool complete) {
                            if (!complete || !state->gen->finished()) state->gen->cancel();
                          }};
}

}  // namespace fak::server
