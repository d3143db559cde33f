// fak chat: a terminal conversation with the model's chat template, streamed replies, and history
// kept in one Session so each turn prefills only what is new. Reads one user message per line, so
// it works the same from a pipe. Each turn is made and read back as the server's are (chat/turn.h,
// chat/reply_reader.h): a thinking model's reasoning goes to stderr apart from the answer, and
// with --tools a call the model writes (in its own syntax) is shown as a call, answered with
// /tool. Commands: /tool TEXT, /save PATH, /load PATH, /undo, /reset, /stats, /quit.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "chat/chat_prompt.h"
#include "chat/turn.h"
#include "common.h"
#include "core/error.h"
#include "core/json.h"
#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "runtime/model_cache.h"
#include "runtime/mtp_draft.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fak::cli {

namespace {

using ojson = fak::ojson;

struct ChatArgs {
  std::string model, session, system, json_schema, tools, tool_choice = "auto", draft = "none";
  DraftOptions draft_options;
  std::vector<std::string> stop;
  int n = 256, threads = 0;
  int reasoning_budget = -1;  // -1: none
  float temp = 0.0f;
  uint64_t seed = 0;
};

struct Stats {
  int turns = 0;
  int64_t reused = 0, prefilled = 0, generated = 0;
  double decode_s = 0, prefill_s = 0;
};

// --json-schema as a response format (null without one), checked before the model loads: a bad
// schema is one error line at once.
ojson response_format(const std::string& path) {
  if (path.empty()) return nullptr;
  try {
    const ojson schema = ojson::parse(read_text_file(path));
    grammar::compile_json_schema(schema);
    return {{"type", "json_schema"}, {"json_schema", {{"name", "reply"}, {"schema", schema}}}};
  } catch (const std::exception& e) {
    fail("--json-schema " + path + ": " + e.what());
  }
}

// --tools: an OpenAI tools array (or {"tools": [...]}), null without one.
ojson read_tools(const std::string& path) {
  if (path.empty()) return nullptr;
  ojson j = ojson::parse(read_text_file(path), nullptr, false);
  if (j.is_object() && j.contains("tools")) j = j["tools"];
  if (!j.is_array() || j.empty())
    fail("--tools " + path +
         ": expected a JSON array of OpenAI tools ({\"type\": \"function\", "
         "\"function\": {\"name\", \"parameters\"}})");
  return j;
}

class Chat {
 public:
  Chat(const ChatArgs& a)
      : a_(a),
        format_(response_format(a.json_schema)),
        tools_(read_tools(a.tools)),
        model_(load_model(a.model)),
        prompt_(*model_),
        cache_(make_kv_cache(*model_)),
        session_(model_, cache_) {
    if (!prompt_.has_model_template())
      std::fprintf(stderr, "fak: warning: %s\n",
                   chat::no_template_warning(model_->path().string()).c_str());
    reset();
  }

  void reset() {
    head_.reset();
    session_ = Session(model_, cache_);
    // The MTP head drafts from the model's hidden states, kept for every row.
    if (a_.draft == "mtp") session_.keep_hidden(true);
    messages_ = ojson::array();
    turn_starts_.clear();
    if (!a_.system.empty()) messages_.push_back({{"role", "system"}, {"content", a_.system}});
  }

  // The turn's prompt into the session: it keeps the longest common prefix and prefills the rest
  // (a turn's reply re-tokenized may differ from what was sampled).
  void sync(const std::vector<int32_t>& ids) {
    const std::vector<int32_t>& have = session_.tokens();
    size_t common = 0;
    while (common < have.size() && common < ids.size() && have[common] == ids[common]) ++common;
    if (common == ids.size() && common > 0) --common;  // keep one token to recompute for logits
    const auto t0 = std::chrono::steady_clock::now();
    if (common < have.size()) {
      session_.truncate(int(common));
      head_.reset();  // its rows past `common` are gone: a new one catches up from the session
    }
    session_.append(std::span(ids).subspan(common));
    stats_.prefill_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.reused += int64_t(common);
    stats_.prefilled += int64_t(ids.size() - common);
  }

  void turn(const std::string& text) {
    check_utf8(text, "the message");
    turn_starts_.push_back({session_.size(), messages_.size()});
    messages_.push_back({{"role", "user"}, {"content", text}});
    respond();
  }

  // /tool TEXT: the result of the first call of the last reply not answered yet; once every call
  // has its result, the model goes on.
  void tool_result(const std::string& text) {
    check_utf8(text, "the tool result");
    const ojson pending = pending_calls();
    if (pending.empty()) {
      note("no tool call to answer");
      return;
    }
    const ojson& call = pending[0];
    if (pending.size() == 1) turn_starts_.push_back({session_.size(), messages_.size()});
    messages_.push_back({{"role", "tool"},
                         {"tool_call_id", call["id"]},
                         {"name", call["function"]["name"]},
                         {"content", text}});
    if (pending.size() == 1) respond();
  }

  // The calls of the last assistant message that no tool message has answered yet (they are
  // answered in order).
  ojson pending_calls() const {
    ojson out = ojson::array();
    size_t i = messages_.size();
    while (i > 0 && messages_[i - 1]["role"] == "tool") --i;
    if (i == 0) return out;
    const ojson& last = messages_[i - 1];
    if (last["role"] != "assistant" || !last.contains("tool_calls")) return out;
    const size_t answered = messages_.size() - i;
    for (size_t k = answered; k < last["tool_calls"].size(); ++k)
      out.push_back(last["tool_calls"][k]);
    return out;
  }

  // One assistant turn: made as the server makes it, generated, and read back by the format's
  // reader: reasoning to stderr, the answer to stdout, calls shown whole at the end.
  void respond() {
    chat::TurnRequest t;
    t.messages = messages_;
    t.tools = tools_;
    t.response_format = format_;
    t.tool_choice = a_.tool_choice;
    if (a_.tool_choice != "auto" && a_.tool_choice != "none" && a_.tool_choice != "required") {
      t.tool_choice = "function";
      t.tool_choice_name = a_.tool_choice;
    }
    if (a_.reasoning_budget >= 0) t.reasoning_budget = a_.reasoning_budget;
    t.stop = a_.stop;
    chat::Turn turn;
    try {
      turn = chat::make_turn(prompt_, t);
    } catch (const chat::TurnError& e) {
      fail("--" +
           std::string(e.param == "tools"         ? "tools"
                       : e.param == "tool_choice" ? "tool-choice"
                                                  : "json-schema") +
           ": " + e.what());
    }
    sync(turn.prompt);
    GenerateOptions g;
    g.max_tokens = std::min(a_.n, model_->config().context_limit() - session_.size());
    if (g.max_tokens < 1) fail("the conversation fills the context; /undo or /reset");
    g.sampling.temperature = a_.temp;
    g.sampling.seed = a_.seed + uint64_t(stats_.turns);
    g.stop_ids = turn.rules.stop_ids;
    g.grammar = turn.rules.grammar;
    g.think = turn.rules.think;
    g.reasoning_open = turn.rules.reasoning_open;
    g.reasoning_budget = turn.rules.reasoning_budget;
    // Speculative decoding: the same reply, fewer forward calls.
    if (a_.draft == "ngram") g.drafter = ngram_drafter(a_.draft_options);
    if (a_.draft == "mtp") {
      if (!head_) head_ = std::make_shared<MtpDrafter>(session_, a_.draft_options.max_draft);
      g.drafter = mtp_drafter(head_);
    }
    std::unique_ptr<chat::ReplyReader> reader = turn.format->reply_reader(turn.reply);
    StreamDecoder dec(*model_->tokenizer(), /*skip_special=*/!reader->reads_special_tokens());
    std::string reasoning, content;
    GenerateResult r = generate(session_, g, [&](int32_t id) {
      show(reader->push(dec.push(id)), reasoning, content);
      return !reader->stopped();
    });
    show(reader->finish(reader->stopped() ? "" : dec.flush(), r.finish_reason == "length"),
         reasoning, content);
    if (!reasoning.empty()) std::fprintf(stderr, "\n");
    ojson reply = {{"role", "assistant"}, {"content", content}};
    if (!reasoning.empty()) reply["reasoning_content"] = reasoning;
    const chat::ExtractedToolCalls& calls = reader->calls();
    // The reply ends its line; then each call on a line of its own.
    if (calls.tool_calls.empty() || (!content.empty() && content.back() != '\n')) std::printf("\n");
    if (!calls.tool_calls.empty()) {
      reply["content"] = calls.content;
      reply["tool_calls"] = calls.tool_calls;
      for (const ojson& c : calls.tool_calls)
        std::printf("[tool call] %s %s\n", c["function"]["name"].get<std::string>().c_str(),
                    c["function"]["arguments"].get<std::string>().c_str());
    }
    std::fflush(stdout);
    if (!calls.tool_calls.empty())
      note(std::to_string(calls.tool_calls.size()) +
           " tool call(s): answer each with /tool RESULT");
    messages_.push_back(std::move(reply));
    ++stats_.turns;
    stats_.generated += int64_t(r.ids.size());
    stats_.decode_s += r.seconds;
  }

  // A piece of the reply: reasoning to stderr (marked where it starts), the answer to stdout.
  void show(const chat::ReplyDelta& d, std::string& reasoning, std::string& content) {
    if (!d.reasoning.empty()) {
      if (reasoning.empty()) std::fputs("[thinking] ", stderr);
      std::fwrite(d.reasoning.data(), 1, d.reasoning.size(), stderr);
      std::fflush(stderr);
      reasoning += d.reasoning;
    }
    if (!d.content.empty()) {
      std::fwrite(d.content.data(), 1, d.content.size(), stdout);
      std::fflush(stdout);
      content += d.content;
    }
  }

  bool command(const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/tool") {
      tool_result(arg);
    } else if (cmd == "/reset") {
      reset();
      note("conversation cleared");
    } else if (cmd == "/undo") {
      if (turn_starts_.empty()) {
        note("nothing to undo");
      } else {
        // Exactly the context before the turn: truncate keeps [0, n) as it was computed.
        auto [tokens, messages] = turn_starts_.back();
        turn_starts_.pop_back();
        session_.truncate(tokens);
        head_.reset();
        messages_.erase(messages_.begin() + long(messages), messages_.end());
        note("last turn removed (" + std::to_string(session_.size()) + " tokens left)");
      }
    } else if (cmd == "/save") {
      if (arg.empty()) fail("/save needs a path");
      save(arg);
      note("saved to " + arg);
    } else if (cmd == "/load") {
      if (arg.empty()) fail("/load needs a path");
      load(arg);
      note("loaded " + arg + " (" + std::to_string(messages_.size()) + " messages)");
    } else if (cmd == "/stats") {
      char buf[256];
      std::snprintf(
          buf, sizeof buf,
          "turns %d | context %d tokens | prefill %lld tok (%lld reused from the session) "
          "| decode %lld tok, %.1f tok/s",
          stats_.turns, session_.size(), (long long)stats_.prefilled, (long long)stats_.reused,
          (long long)stats_.generated,
          stats_.decode_s > 0 ? double(stats_.generated) / stats_.decode_s : 0.0);
      note(buf);
    } else {
      note("commands: /tool RESULT, /save PATH, /load PATH, /undo, /reset, /stats, /quit");
    }
    return true;
  }

  void save(const std::string& path) {
    session_.save(path);
    ojson meta = {{"messages", messages_}, {"turn_starts", ojson::array()}};
    for (auto [t, m] : turn_starts_) meta["turn_starts"].push_back({t, m});
    std::ofstream(path + ".chat.json") << meta.dump();
  }

  void load(const std::string& path) {
    Session s = Session::load(path, model_, cache_);
    std::ifstream in(path + ".chat.json");
    if (!in) fail("cannot read " + path + ".chat.json (the history saved next to the session)");
    ojson meta = ojson::parse(in, nullptr, false);
    if (meta.is_discarded() || !meta.contains("messages") || !meta["messages"].is_array())
      fail(path + ".chat.json is not a fak chat history");
    session_ = std::move(s);
    head_.reset();
    if (a_.draft == "mtp") session_.keep_hidden(true);
    messages_ = meta["messages"];
    turn_starts_.clear();
    for (const ojson& x : meta.value("turn_starts", ojson::array()))
      turn_starts_.push_back({x[0].get<int>(), x[1].get<size_t>()});
  }

  void note(const std::string& s) { std::fprintf(stderr, "[%s]\n", s.c_str()); }

 private:
  const ChatArgs& a_;
  ojson format_;  // --json-schema as a response format, or null
  ojson tools_;   // --tools, or null
  std::shared_ptr<const Model> model_;
  chat::ChatPrompt prompt_;
  std::shared_ptr<KvCache> cache_;
  Session session_;
  std::shared_ptr<MtpDrafter> head_;  // --draft mtp: drafts for session_ (reset when it shrinks)
  ojson messages_;
  std::vector<std::pair<int, size_t>> turn_starts_;  // (session tokens, messages) before each turn
  Stats stats_;
};

void chat(const ChatArgs& a) {
  SamplingOptions check;
  check.temperature = a.temp;
  check.validate();  // before the model loads
  if (a.draft != "none") a.draft_options.validate();
  set_threads(a.threads);
  Chat c(a);
  if (!a.session.empty() && std::filesystem::exists(a.session)) c.load(a.session);
  const bool tty = isatty(0);
  if (tty)
    std::fprintf(stderr,
                 "fak chat — /tool RESULT, /save PATH, /load PATH, /undo, /reset, /stats, /quit\n");
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    try {
      if (line[0] == '/') {
        if (!c.command(line)) break;
      } else {
        c.turn(line);
      }
    } catch (const Error& e) {
      // One bad line (an unreadable file, an over-long turn) does not end the conversation.
      std::fprintf(stderr, "fak: error: %s\n", e.what());
      if (!tty) throw;
    }
  }
  if (!a.session.empty()) c.save(a.session);
}

}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* c =
      app.add_subcommand("chat", "interactive chat with the model's template (or from a pipe)");
  c->add_option("-m,--model", a->model, "model directory (default: the bundled pycoder-6m)");
  c->add_option("--session", a->session, "resume from / save to this session file");
  c->add_option("--system", a->system, "system message");
  c->add_option("-n,--n-predict", a->n, "most tokens per reply")->check(CLI::Range(1, 1 << 20));
  c->add_option("--json-schema", a->json_schema,
                "decode every reply under this JSON schema (a file): a JSON value it accepts");
  c->add_option("--stop", a->stop, "end a reply at this text (repeatable); it is not shown");
  c->add_option("--tools", a->tools,
                "a JSON file of OpenAI tools: calls the model writes are shown as calls, answered "
                "with /tool RESULT");
  c->add_option("--tool-choice", a->tool_choice,
                "auto (default), none, required, or a tool's name (the reply is that call)");
  c->add_option("--reasoning-budget", a->reasoning_budget,
                "thinking models: the most reasoning tokens a reply may spend before its answer")
      ->check(CLI::Range(0, 1 << 20));
  add_draft_flags(c, a->draft, a->draft_options);
  // Its range is checked by SamplingOptions::validate (the one set of rules), not here.
  c->add_option("--temp", a->temp, "temperature, 0 to 100 (0 = greedy)");
  c->add_option("--seed", a->seed, "sampling seed");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->callback([a] { chat(*a); });
}

}  // namespace fak::cli
