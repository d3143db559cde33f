// fak chat: a terminal conversation with the model's chat template, streamed replies, and history
// kept in one Session so each turn prefills only what is new. Reads one user message per line, so
// it works the same from a pipe. Commands: /save PATH, /load PATH, /undo, /reset, /stats, /quit.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "chat/chat_prompt.h"
#include "chat/stop_filter.h"
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
  std::string model, session, system, json_schema, draft = "none";
  DraftOptions draft_options;
  std::vector<std::string> stop;
  int n = 256, threads = 0;
  float temp = 0.0f;
  uint64_t seed = 0;
};

struct Stats {
  int turns = 0;
  int64_t reused = 0, prefilled = 0, generated = 0;
  double decode_s = 0, prefill_s = 0;
};

// --json-schema's grammar (null without one), compiled before the model loads: a bad schema is one
// error line at once.
std::shared_ptr<const grammar::Grammar> compile_schema(const std::string& path) {
  if (path.empty()) return nullptr;
  try {
    return grammar::compile_json_schema_text(read_text_file(path));
  } catch (const Error& e) {
    fail("--json-schema " + path + ": " + e.what());
  }
}

class Chat {
 public:
  Chat(const ChatArgs& a)
      : a_(a),
        schema_(compile_schema(a.json_schema)),
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

  // The conversation rendered and tokenized; the session keeps the longest common prefix and
  // prefills the rest (a turn's reply re-tokenized may differ from what was sampled).
  void sync(bool generation_prompt) {
    // What the user types is text: it never becomes a control token (server/chat_prompt.h).
    const std::vector<int32_t> ids =
        prompt_.encode(prompt_.render(messages_, ojson(), generation_prompt));
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
    sync(true);
    GenerateOptions g;
    g.max_tokens = std::min(a_.n, model_->config().context_limit() - session_.size());
    if (g.max_tokens < 1) fail("the conversation fills the context; /undo or /reset");
    g.sampling.temperature = a_.temp;
    g.sampling.seed = a_.seed + uint64_t(stats_.turns);
    g.stop_ids = prompt_.stop_ids();
    g.grammar = schema_;  // every reply a JSON value the schema accepts
    // Speculative decoding: the same reply, fewer forward calls.
    if (a_.draft == "ngram") g.drafter = ngram_drafter(a_.draft_options);
    if (a_.draft == "mtp") {
      if (!head_) head_ = std::make_shared<MtpDrafter>(session_, a_.draft_options.max_draft);
      g.drafter = mtp_drafter(head_);
    }
    StreamDecoder dec(*model_->tokenizer(), /*skip_special=*/true);
    chat::StopFilter filter(a_.stop);  // a stop string ends the reply and is not shown
    std::string reply;
    GenerateResult r = generate(session_, g, [&](int32_t id) {
      const std::string piece = filter.push(dec.push(id));
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !filter.stopped();
    });
    const std::string rest = filter.stopped() ? "" : filter.push(dec.flush()) + filter.finish();
    reply += rest;
    std::printf("%s\n", rest.c_str());
    std::fflush(stdout);
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
    ++stats_.turns;
    stats_.generated += int64_t(r.ids.size());
    stats_.decode_s += r.seconds;
  }

  bool command(const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/reset") {
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
      note("commands: /save PATH, /load PATH, /undo, /reset, /stats, /quit");
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
  std::shared_ptr<const grammar::Grammar> schema_;  // --json-schema, or null
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
    std::fprintf(stderr, "fak chat — /save PATH, /load PATH, /undo, /reset, /stats, /quit\n");
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
  add_draft_flags(c, a->draft, a->draft_options);
  // Its range is checked by SamplingOptions::validate (the one set of rules), not here.
  c->add_option("--temp", a->temp, "temperature, 0 to 100 (0 = greedy)");
  c->add_option("--seed", a->seed, "sampling seed");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->callback([a] { chat(*a); });
}

}  // namespace fak::cli
