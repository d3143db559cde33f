#include "server/shared_sessions.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"
#include "server/context.h"

namespace fak::server {

namespace {

ApiError not_found(const std::string& id) {
  return ApiError(404, "no session '" + id + "'", "id", "session_not_found");
}

ApiError unreachable(const std::string& what) {
  return ApiError(503, "the session store is unreachable: " + what + "; retry later", "",
                  "store_unavailable");
}

// The session's meta as the store keeps it: {tokens, segments: [[begin, end, kind]], canonical,
// kind: "blocks" | "blob"}. Checked field by field: a damaged record is refused, never half read.
struct Meta {
  std::vector<int32_t> tokens;
  std::vector<Segment> segments;
  bool canonical = true;
  bool blob = false;
};

Meta parse_meta(const std::string& text, int vocab, const std::string& id) {
  const auto bad = [&](const char* what) {
    fail("the store's record of session '" + id + "' is damaged (" + what + ")");
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) bad("not a JSON object");
  Meta m;
  if (!j.contains("tokens") || !j["tokens"].is_array()) bad("no tokens");
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      bad("a token id outside the vocabulary");
    m.tokens.push_back(t.get<int32_t>());
  }
  if (!j.contains("segments") || !j["segments"].is_array()) bad("no segments");
  for (const auto& s : j["segments"]) {
    if (!s.is_array() || s.size() != 3 || !s[0].is_number_integer() || !s[1].is_number_integer() ||
        !s[2].is_string())
      bad("a malformed segment");
    const int64_t b = s[0].get<int64_t>(), e = s[1].get<int64_t>();
    if (!(0 <= b && b < e && e <= int64_t(m.tokens.size()))) bad("a segment outside the tokens");
    m.segments.push_back({int(b), int(e), s[2].get<std::string>()});
  }
  if (!j.contains("kind") || !j["kind"].is_string() ||
      (j["kind"] != "blocks" && j["kind"] != "blob"))
    bad("an unknown kind");
  m.blob = j["kind"] == "blob";
  if (!j.contains("canonical") || !j["canonical"].is_boolean()) bad("no canonical flag");
  m.canonical = j["canonical"].get<bool>();
  return m;
}

}  // namespace

SharedSessions::Call::Call(SharedSessions& s, std::string tenant, std::string id)
    : s_(s), tenant_(std::move(tenant)), id_(std::move(id)) {
  s_.lock({tenant_, id_});
}

SharedSessions::Call::~Call() {
  s_.unlock({tenant_, id_});
}

void SharedSessions::Call::commit(bool fence) {
  s_.publish(*this, fence);
}

SharedSessions::SharedSessions(ServerContext& ctx, store::BlockStore& blocks, Log log,
                               std::chrono::milliseconds wait)
    : ctx_(ctx),
      blocks_(blocks),
      records_(blocks, blocks.ns()),
      log_(log ? std::move(log) : [](const std::string&) {}),
      wait_(wait) {
  ctx_.sessions->share(
      [this](const std::string& tenant, const std::string& id) { return spare(tenant, id); });
  sweeper_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (stopping_) break;
      const bool dirty =
          std::any_of(held_.begin(), held_.end(), [](const auto& kv) { return kv.second.dirty; });
      if (!dirty) continue;
      lock.unlock();
      try {
        sweep();
      } catch (const std::exception& e) {
        log_(std::string("warning: publishing sessions kept while the store was down: ") +
             e.what());
      }
      lock.lock();
    }
  });
}

SharedSessions::~SharedSessions() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  sweeper_.join();
}

void SharedSessions::lock(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!calls_.insert(key).second)
    throw ApiError(409,
                   "session '" + key.second +
                       "' is busy (another call on it is running); retry when that call is done",
                   "id", "session_busy");
}

void SharedSessions::unlock(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(key);
}

std::optional<SharedSessions::Held> SharedSessions::held(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = held_.find(key);
  if (it == held_.end()) return std::nullopt;
  return it->second;
}

void SharedSessions::set_held(const Key& key, std::optional<Held> h) {
  std::lock_guard<std::mutex> lock(mu_);
  if (h)
    held_[key] = *h;
  else
    held_.erase(key);
}

bool SharedSessions::spare(const std::string& tenant, const std::string& id) {
  // Scheduler thread (inside SessionStore): never waits on it while holding mu_.
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = held_.find({tenant, id});
  return it != held_.end() && !it->second.dirty && it->second.version >= 0 &&
         !calls_.count({tenant, id});
}

void SharedSessions::forget(const std::string& tenant, const std::string& id) {
  ctx_.scheduler->run_job([&] { ctx_.sessions->drop(tenant, id); });
  set_held({tenant, id}, std::nullopt);
}

std::unique_ptr<SharedSessions::Call> SharedSessions::open(const std::string& tenant,
                                                           const std::string& id,
                                                           const Prefill& prefill) {
  std::unique_ptr<Call> call(new Call(*this, tenant, id));
  ensure_current(tenant, id, prefill);
  ctx_.scheduler->run_job([&] {
    if (!ctx_.sessions->holds(tenant, id)) throw not_found(id);
    call->before_.emplace(ctx_.sessions->copy(tenant, id));
  });
  return call;
}

std::unique_ptr<SharedSessions::Call> SharedSessions::made(const std::string& tenant,
                                                           const std::string& id) {
  std::unique_ptr<Call> call(new Call(*this, tenant, id));
  call->is_new_ = true;
  return call;
}

void SharedSessions::check_new(const std::string& tenant, const std::string& id) {
  std::optional<store::SessionRecord> r;
  try {
    r = records_.version(tenant_hash(tenant), id);
  } catch (const store::StoreRefused&) {
  }
  if (r && r->state == store::SessionRecord::State::Live)
    throw ApiError(409, "session '" + id + "' exists", "id", "session_exists");
}

void SharedSessions::ensure_current(const std::string& tenant, const std::string& id,
                                    const Prefill& prefill) {
  using State = store::SessionRecord::State;
  std::optional<store::SessionRecord> look;
  try {
    look = records_.version(tenant_hash(tenant), id);
  } catch (const store::StoreRefused&) {
  }
  const std::optional<Held> h = held({tenant, id});
  bool local = false;
  ctx_.scheduler->run_job([&] { local = ctx_.sessions->holds(tenant, id); });
  local = local && h.has_value();
  // Without a copy the alternative is a 503: ask even while the pool backs off (the store may be
  // back already).
  if (!look && !local) {
    try {
      look = records_.version(tenant_hash(tenant), id, /*force=*/true);
    } catch (const store::StoreRefused&) {
    }
  }
  if (!look) {
    if (local) return;  // serve what this replica holds
    throw unreachable("this replica holds no copy of session '" + id + "'");
  }
  if (look->state == State::Deleted) {
    if (local) forget(tenant, id);
    throw not_found(id);
  }
  if (look->state == State::Missing) {
    if (!local) throw not_found(id);
    // Made here while the store was down, or lost by the store (a Redis without persistence
    // restarted): this copy is the session; the next commit or the sweep publishes it.
    if (!h->dirty) set_held({tenant, id}, Held{-1, true, -1});
    return;
  }
  if (local && !h->dirty && h->version == look->version) return;
  if (local && h->dirty && h->base == look->version) return;  // ours are on top of it
  if (local && h->dirty)
    log_("warning: session '" + id + "': the changes made here while the store was unreachable " +
         "are dropped: another replica wrote version " + std::to_string(look->version) +
         " meanwhile");
  materialise(tenant, id, prefill);
}

void SharedSessions::materialise(const std::string& tenant, const std::string& id,
                                 const Prefill& prefill) {
  std::optional<store::SessionRecord> rec;
  try {
    rec = records_.read(tenant_hash(tenant), id);
  } catch (const store::StoreRefused& e) {
    throw unreachable(e.what());
  }
  if (!rec) throw unreachable("session '" + id + "' cannot be read from it");
  if (rec->state != store::SessionRecord::State::Live) {
    forget(tenant, id);
    throw not_found(id);
  }
  const Model& model = *ctx_.model;
  Meta m;
  try {
    m = parse_meta(rec->meta, model.config().vocab, id);
    if (!m.blob && (model.config().is_hybrid() || !m.canonical))
      fail("the store's record of session '" + id + "' is damaged (its KV cannot be shared)");
  } catch (const Error& e) {
    log_(std::string("warning: ") + e.what());
    throw ApiError(500, e.what(), "", "store_record_damaged");
  }
  if (m.blob) {
    ctx_.scheduler->run_job([&] {
      try {
        Session s = Session::from_bytes(rec->blob, "the store's record of session '" + id + "'",
                                        ctx_.model, ctx_.scheduler->kv_cache());
        if (s.tokens() != m.tokens)
          fail("the store's record of session '" + id + "' is damaged (its tokens disagree)");
        ctx_.sessions->put(tenant, id, {std::move(s), std::move(m.segments), m.canonical});
      } catch (const Error& e) {
        if (dynamic_cast<const KvBudgetError*>(&e)) throw;
        log_(std::string("warning: ") + e.what());
        throw ApiError(500, e.what(), "", "store_record_damaged");
      }
    });
  } else {
    // The KV comes from the shared blocks (the local prefix cache first, then the store's);
    // what neither has is prefilled, exactly as a cold prefill of the tokens would compute it.
    const std::string partition = cache_partition(tenant, "");
    std::shared_ptr<store::Prefetched> pre;
    if (m.tokens.size() > 1)
      pre = blocks_.fetch(ctx_.scheduler->prefix_cache(), partition, m.tokens);
    SessionEdit edit;
    ctx_.scheduler->run_job([&] {
      PrefixCache& cache = ctx_.scheduler->prefix_cache();
      if (pre) blocks_.install(cache, m.tokens, *pre);
      Session partial = m.tokens.empty()
                            ? Session(ctx_.model, ctx_.scheduler->kv_cache())
                            : cache.acquire(partition, m.tokens, nullptr, /*prefill_rest=*/false);
      edit = ctx_.sessions->begin_install(tenant, id, std::move(partial), m.tokens, m.segments);
    });
    prefill(edit);
  }
  set_held({tenant, id}, Held{rec->version, false, -1});
  blocks_.metrics().add_session_materialised();
}

SharedSessions::Payload SharedSessions::payload(const std::string& tenant, const std::string& id) {
  Payload p;
  SessionStore::Copy c = ctx_.sessions->copy(tenant, id);
  nlohmann::json segs = nlohmann::json::array();
  for (const Segment& s : c.segments) segs.push_back({s.begin, s.end, s.kind});
  // Dense sessions whose KV is a cold prefill's share it by content; the rest travel whole.
  const bool by_blocks = c.canonical && !ctx_.model->config().is_hybrid();
  const nlohmann::json meta = {{"tokens", c.session.tokens()},
                               {"segments", segs},
                               {"canonical", c.canonical},
                               {"kind", by_blocks ? "blocks" : "blob"}};
  p.meta = meta.dump();
  if (by_blocks)
    p.blocks = blocks_.collect(cache_partition(tenant, ""), c.session);
  else
    p.blob = c.session.to_bytes();
  return p;
}

SharedSessions::Outcome SharedSessions::write(const std::string& tenant, const std::string& id,
                                              int64_t expected, int64_t* version) {
  Payload p;
  bool present = false;
  ctx_.scheduler->run_job([&] {
    present = ctx_.sessions->holds(tenant, id);
    if (present) p = payload(tenant, id);
  });
  if (!present) return Outcome::Committed;  // nothing left to publish
  // Blocks first: a record never names KV the store was not given.
  if (!blocks_.upload(p.blocks)) {
    if (!blocks_.pool().up()) return Outcome::Unreachable;
    throw store::StoreRefused("the session store (" + blocks_.pool().url().shown +
                              ") refused the session's KV blocks");
  }
  const std::optional<store::SessionWrite> w =
      records_.write(tenant_hash(tenant), id, expected, p.meta, p.blob);
  if (!w) return Outcome::Unreachable;
  *version = w->version;
  if (!w->committed) return Outcome::Conflict;
  blocks_.metrics().add_session_published();
  return Outcome::Committed;
}

void SharedSessions::rollback(Call& call) {
  ctx_.scheduler->run_job([&] {
    if (call.is_new_ || !call.before_)
      ctx_.sessions->drop(call.tenant_, call.id_);
    else
      ctx_.sessions->put(call.tenant_, call.id_, std::move(*call.before_));
  });
  if (call.is_new_) set_held({call.tenant_, call.id_}, std::nullopt);
  call.before_.reset();
}

void SharedSessions::publish(Call& call, bool fence) {
  const Key key{call.tenant_, call.id_};
  const std::optional<Held> h = held(key);
  const int64_t expected = call.is_new_ || !h ? -1 : h->dirty ? h->base : h->version;
  const auto deadline = std::chrono::steady_clock::now() + (fence ? wait_ : wait_.zero());
  for (;;) {
    int64_t version = -1;
    Outcome o;
    try {
      o = write(call.tenant_, call.id_, expected, &version);
    } catch (const store::StoreRefused& e) {
      rollback(call);
      throw ApiError(507, std::string(e.what()) + "; the change was undone", "", "store_refused");
    }
    if (o == Outcome::Committed) {
      set_held(key, Held{version, false, -1});
      return;
    }
    if (o == Outcome::Conflict) {
      rollback(call);
      blocks_.metrics().add_session_conflict();
      if (call.is_new_)
        throw ApiError(409, "session '" + call.id_ + "' exists (made on another replica)", "id",
                       "session_exists");
      throw ApiError(409,
                     "session '" + call.id_ +
                         "' was changed on another replica while this call ran; this call's "
                         "change was undone: read the session again and retry",
                     "id", "session_conflict");
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (fence) {
    rollback(call);
    throw unreachable(
        "this change must reach it before it returns (so that no replica serves the state "
        "before it) and was undone");
  }
  // Kept here and published when the store is back.
  set_held(key, Held{-1, true, expected});
}

std::vector<std::string> SharedSessions::list(const std::string& tenant) {
  std::optional<std::vector<std::string>> ids;
  try {
    ids = records_.list(tenant_hash(tenant));
  } catch (const store::StoreRefused&) {
  }
  std::vector<std::string> local;
  ctx_.scheduler->run_job([&] { local = ctx_.sessions->list(tenant); });
  if (!ids) return local;
  std::set<std::string> all(ids->begin(), ids->end());
  {
    // Made here while the store was down: not in its list yet.
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : local) {
      const auto it = held_.find({tenant, id});
      if (it != held_.end() && it->second.dirty && it->second.base < 0) all.insert(id);
    }
  }
  return {all.begin(), all.end()};
}

void SharedSessions::remove(const std::string& tenant, const std::string& id) {
  Call call(*this, tenant, id);
  const auto deadline = std::chrono::steady_clock::now() + wait_;
  std::optional<int64_t> r;
  for (;;) {
    try {
      r = records_.remove(tenant_hash(tenant), id);
    } catch (const store::StoreRefused& e) {
      throw ApiError(507, e.what(), "", "store_refused");
    }
    if (r || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!r) throw unreachable("a delete must reach it before it returns");
  bool local = false;
  ctx_.scheduler->run_job([&] { local = ctx_.sessions->holds(tenant, id); });
  if (*r < 0 && !local) throw not_found(id);
  forget(tenant, id);
}

void SharedSessions::sweep() {
  std::vector<Key> dirty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, h] : held_)
      if (h.dirty && !calls_.count(key)) dirty.push_back(key);
  }
  for (const Key& key : dirty) {
    std::unique_ptr<Call> call;
    try {
      call.reset(new Call(*this, key.first, key.second));
    } catch (const ApiError&) {
      continue;  // a call on it runs: it publishes
    }
    const std::optional<Held> h = held(key);
    if (!h || !h->dirty) continue;
    int64_t version = -1;
    Outcome o;
    try {
      o = write(key.first, key.second, h->base, &version);
    } catch (const store::StoreRefused& e) {
      log_(std::string("warning: session '") + key.second + "' not published: " + e.what());
      continue;
    }
    if (o == Outcome::Unreachable) return;  // still down: the next round
    if (o == Outcome::Committed) {
      set_held(key, Held{version, false, -1});
      log_("session '" + key.second + "': changes made while the store was unreachable published");
      continue;
    }
    // Another replica wrote it meanwhile: the store's version wins, this copy goes.
    blocks_.metrics().add_session_conflict();
    log_("warning: session '" + key.second +
         "': the changes made here while the store was unreachable are dropped: another "
         "replica wrote it meanwhile");
    call.reset();
    forget(key.first, key.second);
  }
}

size_t SharedSessions::catch_up(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    sweep();
    size_t left = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [key, h] : held_) left += h.dirty;
    }
    if (left == 0 || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace fak::server
