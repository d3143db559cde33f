#include "server/session_table.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/private_dir.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

// Ids and file names: plain words, so a name can never climb out of --session-dir.
void check_name(const std::string& s, const char* what) {
  bool ok = !s.empty() && s.size() <= 128 && s[0] != '.';
  for (char c : s)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (!ok)
    bad_request(std::string("`") + what +
                    "` must be 1-128 characters of [A-Za-z0-9._-], not starting with '.'",
                what);
}

// Token ids a session may hold: ones the tokenizer can turn back into text (a padded embedding
// row is refused: describe could not show it, and the model never saw it in training).
std::vector<int32_t> ids_of(const ojson& v, int vocab) {
  if (!v.is_array()) bad_request("`ids` must be an array of token ids", "ids");
  std::vector<int32_t> ids;
  for (const ojson& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
      bad_request("`ids` must hold integers in [0, " + std::to_string(vocab) +
                      "), the ids the tokenizer knows",
                  "ids");
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

}  // namespace

SessionQuota default_session_quota(int64_t kv_capacity_tokens, int ctx) {
  SessionQuota q;
  q.max_tokens = std::max<int64_t>(kv_capacity_tokens / 2, ctx);
  q.max_tokens_per_tenant = std::max<int64_t>(kv_capacity_tokens / 4, ctx);
  return q;
}

SessionTable::SessionTable(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                           const chat::ChatPrompt* chat, std::filesystem::path session_dir, int ctx,
                           SessionQuota quota)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      chat_(chat),
      dir_(std::move(session_dir)),
      ctx_(ctx),
      quota_(quota) {
  if (dir_.empty()) return;
  // note: the sessions' files hold the tenants' conversations; a folder another user can write
  // could also hand this server session files it never wrote.
  ensure_private_dir(dir_, "--session-dir " + dir_.string());
  // Writers killed mid-save leave their temp files behind; nothing else of this server is
  // writing yet, so every one of them is stale.
  std::error_code ec;
  remove_stale_temp_files(dir_);
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec))
    if (entry.is_directory(ec) && !entry.is_symlink(ec) &&
        entry.path().filename().string().rfind("tenant-", 0) == 0)
      remove_stale_temp_files(entry.path());
}

SessionTable::Entry& SessionTable::get(const std::string& tenant, const std::string& id) {
  auto it = sessions_.find({tenant, id});
  if (it == sessions_.end() || it->second.creating)
    throw ApiError(404, "no session '" + id + "'", "id", "session_not_found");
  if (it->second.busy)
    throw ApiError(
        409,
        "session '" + id +
            "' is busy (generating, or an edit is being read); retry when that call is done",
        "id", "session_busy");
  it->second.used = ++clock_;
  return it->second;
}

const SessionTable::Entry& SessionTable::get(const std::string& tenant,
                                             const std::string& id) const {
  return const_cast<SessionTable*>(this)->get(tenant, id);
}

int64_t SessionTable::tokens_of(const std::string& tenant) const {
  int64_t n = 0;
  for (const auto& [key, e] : sessions_)
    if (tenant.empty() || key.first == tenant) n += std::max(e.session.size(), e.pending_size);
  return n;
}

void SessionTable::check_tokens(const std::string& tenant, int64_t more) {
  if (more <= 0) return;
  make_room(tenant, more);
  const int64_t mine = tokens_of(tenant), all = tokens_of("");
  if (mine + more > quota_.max_tokens_per_tenant)
    throw ApiError(429,
                   "your sessions would hold " + std::to_string(mine + more) +
                       " tokens, more than a tenant's quota of " +
                       std::to_string(quota_.max_tokens_per_tenant) +
                       " (a share of the KV budget); delete or quarantine some first",
                   "", "session_quota_exceeded");
  if (all + more > quota_.max_tokens)
    throw ApiError(429,
                   "the server's sessions would hold " + std::to_string(all + more) +
                       " tokens, more than their quota of " + std::to_string(quota_.max_tokens) +
                       " (half the KV budget); retry later",
                   "", "session_quota_exceeded");
}

void SessionTable::check_count(const std::string& tenant) {
  make_room(tenant, 0);
  size_t mine = 0;
  for (const auto& [key, e] : sessions_) mine += key.first == tenant;
  if (sessions_.size() >= quota_.max_sessions)
    throw ApiError(429,
                   "too many sessions (" + std::to_string(quota_.max_sessions) +
                       " on this server); delete some first",
                   "", "too_many_sessions");
  if (mine >= quota_.max_sessions_per_tenant)
    throw ApiError(429,
                   "too many sessions (" + std::to_string(quota_.max_sessions_per_tenant) +
                       " per API key); delete some first",
                   "", "too_many_sessions");
}

std::string SessionTable::new_id(const std::string& tenant, const std::string& wanted) {
  check_count(tenant);
  std::string id = wanted;
  if (id.empty() && spare_) {
    // Shared through a store: a counter of this replica's would repeat another replica's ids.
    static const char* kDigits = "0123456789abcdef";
    std::random_device rd;
    do {
      id = "sess_";
      for (int i = 0; i < 4; ++i) {
        const uint32_t r = rd();
        for (int k = 0; k < 8; ++k) id += kDigits[(r >> (4 * k)) & 15];
      }
    } while (sessions_.count({tenant, id}));
  } else if (id.empty()) {
    do id = "sess_" + std::to_string(++counter_);
    while (sessions_.count({tenant, id}));
  } else {
    check_name(id, "id");
    if (sessions_.count({tenant, id}))
      throw ApiError(409, "session '" + id + "' exists", "id", "session_exists");
  }
  return id;
}

void SessionTable::remove(const std::string& tenant, const std::string& id) {
  get(tenant, id);
  sessions_.erase({tenant, id});
}

std::vector<std::string> SessionTable::list(const std::string& tenant) const {
  std::vector<std::string> out;
  for (const auto& [key, e] : sessions_)
    if (key.first == tenant && !e.creating) out.push_back(key.second);
  return out;
}

ojson SessionTable::describe(const std::string& tenant, const std::string& id) const {
  const Entry& e = get(tenant, id);
  ojson j;
  j["id"] = id;
  j["object"] = "fak.session";
  j["size"] = e.session.size();
  j["tokens"] = e.session.tokens();
  ojson segs = ojson::array();
  for (size_t i = 0; i < e.segments.size(); ++i)
    segs.push_back({{"index", i},
                    {"begin", e.segments[i].begin},
                    {"end", e.segments[i].end},
                    {"kind", e.segments[i].kind}});
  j["segments"] = segs;
  if (const Tokenizer* tok = model_->tokenizer()) {
    StreamDecoder d(*tok);
    std::string text;
    for (int32_t t : e.session.tokens()) text += d.push(t);
    j["text"] = text + d.flush();
  }
  return j;
}

std::vector<SessionTable::Piece> SessionTable::pieces_of(const ojson& body) const {
  const Tokenizer* tok = model_->tokenizer();
  auto need_tok = [&] {
    if (!tok) bad_request("the model has no tokenizer: append `ids` instead");
  };
  std::vector<Piece> pieces;
  if (body.contains("text")) {
    need_tok();
    if (!body["text"].is_string()) bad_request("`text` must be a string", "text");
    // Raw text, like a /v1/completions prompt: the client's own, added tokens and all.
    pieces.push_back({tok->encode(body["text"].get<std::string>()), "text"});
  } else if (body.contains("ids")) {
    pieces.push_back({ids_of(body["ids"], model_->sampleable_vocab()), "ids"});
  } else if (body.contains("messages")) {
    need_tok();
    if (!chat_) bad_request("the model has no chat template");
    const ojson& msgs = body["messages"];
    if (!msgs.is_array() || msgs.empty())
      bad_request("`messages` must be a non-empty array", "messages");
    const ContentTokens content = parse_content_tokens(body);
    // One segment per message, each rendered alone. note: exact for ChatML-style templates; a
    // template that injects text for a lone message (a default system prompt) adds it each time.
    for (const ojson& m : msgs) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string())
        bad_request("`messages` entries must be {\"role\": string, \"content\": string}",
                    "messages");
      ojson one = ojson::array({{{"role", m["role"]}, {"content", m["content"]}}});
      pieces.push_back(
          {chat_->encode(chat_->render(one, ojson(), false, nullptr, content), content),
           "message:" + m["role"].get<std::string>()});
    }
    if (get_bool(body, "add_generation_prompt").value_or(false)) {
      // The generation prompt belongs to the last message's segment.
      ojson last =
          ojson::array({{{"role", msgs.back()["role"]}, {"content", msgs.back()["content"]}}});
      const std::string without = chat_->render(last, ojson(), false, nullptr, content);
      const std::string with = chat_->render(last, ojson(), true, nullptr, content);
      if (with.size() > without.size() && with.compare(0, without.size(), without) == 0) {
        const std::vector<int32_t> ids = chat_->encode(with.substr(without.size()), content);
        pieces.back().ids.insert(pieces.back().ids.end(), ids.begin(), ids.end());
      }
    }
  } else {
    bad_request("give one of `text`, `ids` or `messages`");
  }
  return pieces;
}

SessionEdit SessionTable::lend(Entry& e, const std::string& id, std::vector<int32_t> target,
                               std::vector<Segment> segments, ojson reply) {
  e.busy = true;
  e.segments_after = std::move(segments);
  e.pending_size = int(target.size());
  SessionEdit edit;
  edit.tenant = e.tenant;
  edit.id = id;
  edit.session = &e.session;
  edit.target = std::move(target);
  edit.reply = std::move(reply);
  return edit;
}

SessionEdit SessionTable::begin_append(const std::string& tenant, const std::string& id,
                                       const ojson& body) {
  Entry& e = get(tenant, id);
  const std::vector<Piece> pieces = pieces_of(body);
  std::vector<int32_t> target = e.session.tokens();
  std::vector<Segment> segments = e.segments;
  for (const Piece& p : pieces) {
    if (p.ids.empty()) continue;
    const int begin = int(target.size());
    target.insert(target.end(), p.ids.begin(), p.ids.end());
    segments.push_back({begin, int(target.size()), p.kind});
  }
  // The whole edit, generation prompt included, is checked before any of it is appended.
  const int64_t more = int64_t(target.size()) - e.session.size();
  if (int64_t(target.size()) > ctx_)
    bad_request("the session would hold " + std::to_string(target.size()) +
                " tokens, more than the context of " + std::to_string(ctx_));
  check_tokens(tenant, more);
  ojson reply = {{"id", id},
                 {"appended", more},
                 {"segments_added", segments.size() - e.segments.size()},
                 {"size", target.size()}};
  if (more > 0) e.backup.emplace(e.session.clone());
  return lend(e, id, std::move(target), std::move(segments), std::move(reply));
}

SessionEdit SessionTable::begin_create(const std::string& tenant, const std::string& wanted,
                                       const ojson& body) {
  // The content is read (and refused) before the session exists.
  const bool content = body.contains("text") || body.contains("ids") || body.contains("messages");
  const std::vector<Piece> pieces = content ? pieces_of(body) : std::vector<Piece>();
  const std::string id = new_id(tenant, wanted);
  std::vector<int32_t> target;
  std::vector<Segment> segments;
  for (const Piece& p : pieces) {
    if (p.ids.empty()) continue;
    const int begin = int(target.size());
    target.insert(target.end(), p.ids.begin(), p.ids.end());
    segments.push_back({begin, int(target.size()), p.kind});
  }
  if (int64_t(target.size()) > ctx_)
    bad_request("the session would hold " + std::to_string(target.size()) +
                " tokens, more than the context of " + std::to_string(ctx_));
  check_tokens(tenant, int64_t(target.size()));
  auto [it, inserted] =
      sessions_.emplace(std::make_pair(tenant, id), Entry(tenant, Session(model_, cache_)));
  check(inserted, "session '" + id + "' exists");
  it->second.creating = true;
  ojson reply = {{"id", id}, {"object", "fak.session"}, {"size", target.size()}};
  return lend(it->second, id, std::move(target), std::move(segments), std::move(reply));
}

ojson SessionTable::end_edit(const SessionEdit& edit, bool ok) {
  auto it = sessions_.find({edit.tenant, edit.id});
  check(it != sessions_.end(), "end_edit: the session vanished while lent out");
  Entry& e = it->second;
  e.busy = false;
  e.pending_size = 0;
  ok = ok && e.session.tokens() == edit.target;
  if (!ok) {
    if (e.creating) {
      sessions_.erase(it);  // a create that failed leaves nothing, not even its id
      return nullptr;
    }
    if (e.backup) e.session = std::move(*e.backup);
    e.backup.reset();
    e.segments_after.clear();
    return nullptr;
  }
  e.creating = false;
  e.backup.reset();
  e.segments = std::move(e.segments_after);
  e.segments_after.clear();
  return edit.reply;
}

Session* SessionTable::begin_generate(const std::string& tenant, const std::string& id,
                                      GenerateOptions& o, int* begin) {
  Entry& e = get(tenant, id);
  if (!e.session.has_logits()) bad_request("the session is empty: append something first");
  o.max_tokens = std::min(o.max_tokens, ctx_ - e.session.size());
  if (o.max_tokens < 1)
    bad_request("the session fills the context of " + std::to_string(ctx_) + " tokens");
  // What it may generate stays inside the quota too (a reply cut there ends on "length").
  const int64_t room =
      std::min(quota_.max_tokens_per_tenant - tokens_of(tenant), quota_.max_tokens - tokens_of(""));
  if (room < 1) check_tokens(tenant, 1);  // throws the quota's 429
  o.max_tokens = int(std::min<int64_t>(o.max_tokens, room));
  e.busy = true;
  *begin = e.session.size();
  return &e.session;
}

int SessionTable::end_generate(const std::string& tenant, const std::string& id,
                               const std::string& reason, int32_t last, int begin) {
  auto it = sessions_.find({tenant, id});
  check(it != sessions_.end(), "end_generate: the session vanished while lent out");
  Entry& e = it->second;
  e.busy = false;
  if (reason == "length" && last >= 0) e.session.append({&last, 1});
  if (e.session.size() > begin) e.segments.push_back({begin, e.session.size(), "generated"});
  return e.session.size();
}

std::string SessionTable::clone(const std::string& tenant, const std::string& id,
                                const std::string& wanted) {
  const Entry& src = get(tenant, id);
  check_tokens(tenant, src.session.size());
  std::string nid = new_id(tenant, wanted);
  Session copy = src.session.clone();
  std::vector<Segment> segments = src.segments;
  const bool canonical = src.canonical;
  auto [it, inserted] = sessions_.emplace(std::make_pair(tenant, nid),
                                          Entry(tenant, std::move(copy), std::move(segments)));
  it->second.canonical = canonical;
  return nid;
}

SessionEdit SessionTable::begin_evict(const std::string& tenant, const std::string& id, int begin,
                                      int end, int segment, EvictMode mode) {
  Entry& e = get(tenant, id);
  if (segment >= 0) {
    if (segment >= int(e.segments.size()))
      bad_request("segment " + std::to_string(segment) + " does not exist (the session has " +
                      std::to_string(e.segments.size()) + ")",
                  "message");
    begin = e.segments[size_t(segment)].begin;
    end = e.segments[size_t(segment)].end;
  }
  const int n = e.session.size();
  if (!(0 <= begin && begin < end && end <= n))
    bad_request("span [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") is not a non-empty span inside the " + std::to_string(n) + "-token session");
  if (mode == EvictMode::Shift && end < n && model_->config().is_hybrid())
    bad_request("mode shift is not possible on hybrid models; use exact", "mode");
  // Shifted rows are not what a cold prefill computes: the session's blocks are its own now.
  if (mode == EvictMode::Shift && end < n) e.canonical = false;
  std::vector<Segment> kept;
  const int len = end - begin;
  for (Segment s : e.segments) {
    auto move = [&](int p) { return p <= begin ? p : (p >= end ? p - len : begin); };
    s.begin = move(s.begin);
    s.end = move(s.end);
    if (s.end > s.begin) kept.push_back(s);
  }
  std::vector<int32_t> target(e.session.tokens().begin(), e.session.tokens().begin() + begin);
  target.insert(target.end(), e.session.tokens().begin() + end, e.session.tokens().end());
  // What is re-run: exact recomputes the whole suffix (through the scheduler, in chunks); shift
  // (and a span at the end) re-run only the last token for fresh logits, here.
  const int suffix = n - end;
  const bool replay = mode == EvictMode::Exact && suffix > 0;
  ojson reply = {{"id", id},
                 {"mode", mode == EvictMode::Exact ? "exact" : "shift"},
                 {"evicted", len},
                 {"tokens_recomputed", replay ? suffix : (suffix == 0 && begin == 0 ? 0 : 1)},
                 {"size", target.size()}};
  if (replay) {
    e.backup.emplace(e.session.clone());
    // note: the kept prefix stays as it is; everything after the span attended to it and is
    // read again at its new positions, which by the forward's determinism equals a cold prefill
    // of prefix + suffix (Session::evict).
    e.session.truncate(begin);
  } else {
    e.session.evict(begin, end, mode);
  }
  return lend(e, id, std::move(target), std::move(kept), std::move(reply));
}

// A tenant's own folder: named by a hash of its API key, so keys never show on disk and no name a
// tenant picks can reach another tenant's files. Made on first use; a folder that turned into
// something else (a link planted there) is refused rather than followed.
// A tenant's own folder: named by a hash of its API key, so keys never show on disk and no name a
// tenant picks can reach another tenant's files. Made on first use; a folder that turned into
// something else (a link planted there) is refused rather than followed. --session-dir itself is
// made again if it was removed while the server runs.
// note: errors name --session-dir, never its path: where the server keeps files is not the
// client's business (the operator knows the flag's value).
std::filesystem::path SessionTable::file_for(const std::string& tenant, const std::string& name,
                                             bool create_dir) const {
  if (dir_.empty())
    throw ApiError(403, "saving and loading sessions is off: start the server with --session-dir",
                   "", "session_dir_unset");
  check_name(name, "name");
  const std::string hex = "tenant-" + tenant_hash(tenant);
  const std::filesystem::path dir = dir_ / hex;
  auto storage_error = [](const std::string& what, int err) {
    return StorageError("cannot " + what + " in --session-dir: " + std::strerror(err), err);
  };
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || !create_dir) return dir / (name + ".faksession");
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) throw storage_error("make the session folder", ec.value());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      throw storage_error("make the session folder", errno);
    if (::lstat(dir.c_str(), &st) != 0) throw storage_error("make the session folder", errno);
  }
  if (!S_ISDIR(st.st_mode))
    throw StorageError(
        "a session folder in --session-dir is not a directory (a link?); refusing "
        "to use it",
        ENOTDIR);
  check_private_dir(dir, "--session-dir");
  return dir / (name + ".faksession");
}

void SessionTable::save(const std::string& tenant, const std::string& id,
                        const std::string& name) const {
  const Entry& e = get(tenant, id);
  const auto path = file_for(tenant, name, /*create_dir=*/true);
  // The segments travel inside the session file's header: one atomic write for all of it.
  ojson segs = ojson::array();
  for (const Segment& s : e.segments) segs.push_back({s.begin, s.end, s.kind});
  try {
    e.session.save(path, nlohmann::json::parse(segs.dump()));
  } catch (const StorageError& err) {
    // Same cause (a full disk stays a 507), without the server's paths.
    throw StorageError(
        "cannot save session '" + name + "' in --session-dir: " + std::strerror(err.errno_value),
        err.errno_value);
  }
}

std::string SessionTable::load(const std::string& tenant, const std::string& name,
                               const std::string& wanted) {
  const auto path = file_for(tenant, name, /*create_dir=*/false);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw ApiError(404, "no saved session '" + name + "'", "name", "session_file_not_found");
  nlohmann::json meta;
  Session s = Session::load(path, model_, cache_, &meta);
  check_tokens(tenant, s.size());
  std::vector<Segment> segments;
  if (meta.is_array())
    for (const auto& x : meta) {
      if (!x.is_array() || x.size() != 3 || !x[0].is_number_integer() ||
          !x[1].is_number_integer() || !x[2].is_string())
        continue;
      const int64_t begin = x[0].get<int64_t>(), end = x[1].get<int64_t>();
      if (0 <= begin && begin < end && end <= s.size())
        segments.push_back({int(begin), int(end), x[2].get<std::string>()});
    }
  std::string id = new_id(tenant, wanted);
  auto [it, inserted] = sessions_.emplace(std::make_pair(tenant, id),
                                          Entry(tenant, std::move(s), std::move(segments)));
  it->second.canonical = false;  // whatever wrote the file may have shifted its rows
  return id;
}

bool SessionTable::holds(const std::string& tenant, const std::string& id) const {
  const auto it = sessions_.find({tenant, id});
  return it != sessions_.end() && !it->second.creating;
}

SessionTable::Copy SessionTable::copy(const std::string& tenant, const std::string& id) const {
  const auto it = sessions_.find({tenant, id});
  check(it != sessions_.end(), "SessionTable::copy: no session '" + id + "'");
  return {it->second.session.clone(), it->second.segments, it->second.canonical};
}

const Session& SessionTable::session_of(const std::string& tenant, const std::string& id) const {
  const auto it = sessions_.find({tenant, id});
  check(it != sessions_.end(), "SessionTable::session_of: no session '" + id + "'");
  return it->second.session;
}

void SessionTable::put(const std::string& tenant, const std::string& id, Copy copy) {
  auto it = sessions_.find({tenant, id});
  if (it != sessions_.end()) {
    Entry& e = it->second;
    e.session = std::move(copy.session);
    e.segments = std::move(copy.segments);
    e.canonical = copy.canonical;
    e.creating = false;
    return;
  }
  check_tokens(tenant, copy.session.size());
  check_count(tenant);
  it = sessions_
           .emplace(std::make_pair(tenant, id),
                    Entry(tenant, std::move(copy.session), std::move(copy.segments)))
           .first;
  it->second.canonical = copy.canonical;
  it->second.used = ++clock_;
}

void SessionTable::drop(const std::string& tenant, const std::string& id) {
  sessions_.erase({tenant, id});
}

SessionEdit SessionTable::begin_install(const std::string& tenant, const std::string& id,
                                        Session partial, std::vector<int32_t> target,
                                        std::vector<Segment> segments) {
  sessions_.erase({tenant, id});  // a stale copy
  check_tokens(tenant, int64_t(target.size()));
  check_count(tenant);
  auto [it, inserted] =
      sessions_.emplace(std::make_pair(tenant, id), Entry(tenant, std::move(partial)));
  it->second.creating = true;
  it->second.used = ++clock_;
  ojson reply = {{"id", id}, {"size", target.size()}};
  return lend(it->second, id, std::move(target), std::move(segments), std::move(reply));
}

void SessionTable::share(std::function<bool(const std::string&, const std::string&)> spare) {
  spare_ = std::move(spare);
}

void SessionTable::make_room(const std::string& tenant, int64_t more) {
  if (!spare_) return;
  for (;;) {
    size_t mine = 0;
    for (const auto& [key, e] : sessions_) mine += key.first == tenant;
    const bool fits = sessions_.size() < quota_.max_sessions &&
                      mine < quota_.max_sessions_per_tenant &&
                      tokens_of(tenant) + more <= quota_.max_tokens_per_tenant &&
                      tokens_of("") + more <= quota_.max_tokens;
    if (fits) return;
    auto victim = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const Entry& e = it->second;
      if (e.busy || e.creating || !spare_(it->first.first, it->first.second)) continue;
      if (victim == sessions_.end() || e.used < victim->second.used) victim = it;
    }
    if (victim == sessions_.end()) return;
    sessions_.erase(victim);
  }
}

}  // namespace fak::server
