// The protocol of server/shared_sessions.h (what the header promises, call by call) and the sweep
// that repairs losses. Over 600 lines on purpose: every call's store round trips and the sweep's
// repairs must be read together to check that nothing acknowledged is ever served older.
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
  // note: the copy kept for a rollback holds KV blocks, and the KV cache (its refcounts and free
  // list) is the scheduler thread's alone: it is dropped there, never on this (an HTTP) thread.
  // Dropped here, a release raced the scheduler's allocations: a block freed while in use, handed
  // to a second session and overwritten (wrong KV, then a crash), found by tests/fault.
  if (before_) {
    try {
      s_.ctx_.scheduler->run_job([this] { before_.reset(); });
    } catch (...) {
      // Shutting down (no more jobs run): the copy is left to the process's end, not dropped
      // while the scheduler's thread may still be finishing a step.
      (void)new SessionTable::Copy(std::move(*before_));
    }
  }
  s_.unlock({tenant_, id_});
}

void SharedSessions::Call::commit() {
  s_.publish(*this);
}

void SharedSessions::Call::undo() {
  s_.rollback(*this);
}

namespace {

ApiError recovering(const std::string& id, int64_t ms) {
  return ApiError(503,
                  "the session store is recovering from a loss (a restart or a failover): replicas "
                  "are putting back the sessions they hold; session '" +
                      id + "' is served again in about " + std::to_string(ms) + " ms",
                  "", "store_recovering");
}

ApiError lost(const std::string& id) {
  return ApiError(409,
                  "session '" + id +
                      "' was lost: the session store lost versions of it that were acknowledged "
                      "and no replica could put them back; delete it and make it again",
                  "id", "session_lost");
}

}  // namespace

SharedSessions::SharedSessions(ServerContext& ctx, store::BlockStore& blocks, Log log,
                               Options options)
    : ctx_(ctx),
      blocks_(blocks),
      records_(blocks, blocks.ns(), options.recovery_grace_ms),
      log_(log ? std::move(log) : [](const std::string&) {}),
      options_(options) {
  ctx_.sessions->share(
      [this](const std::string& tenant, const std::string& id) { return spare(tenant, id); });
  sweeper_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    for (uint64_t tick = 0; !stopping_; ++tick) {
      cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (stopping_) continue;
      const bool knows_none = known_.empty();
      lock.unlock();
      try {
        // A new generation (Redis restarted, or failed over): everything this replica knows is
        // checked at once; otherwise a slice of it every second.
        // note: forced past the pool's backoff (up to 5 s after a failure, longer than a recovery
        // window): a replica that skipped its rounds while the store came back would miss the
        // window in which it must put back its newer versions, and a replica holding an older
        // copy would serve that after it.
        // note: asked even by a replica that knows no session: what it saw of the generation is
        // what tells an evicted generation key from a new generation in its own calls.
        const auto gen = records_.generation(/*force=*/true);
        if (gen && !knows_none) {
          const bool changed = gen->first != generation_;
          if (changed && !generation_.empty())
            log_(
                "store generation changed (a Redis restart or failover): checking the sessions "
                "this replica knows");
          generation_ = gen->first;
          if (changed || tick % 2 == 0) sweep(changed);
          // Tenants whose id sets were evicted and sessions in a restore window (allkeys
          // policies): at once.
          if (const auto wanted = records_.wanted(); wanted && !wanted->empty())
            sweep(false, std::set<std::string>(wanted->begin(), wanted->end()));
        }
      } catch (const std::exception& e) {
        log_(std::string("warning: checking sessions against the store: ") + e.what());
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
  std::unique_lock<std::mutex> lock(mu_);
  // The background check holds a session for a moment: a client's call waits for it rather
  // than answering busy.
  cv_.wait_for(lock, std::chrono::seconds(5), [&] { return !sweeping_.count(key); });
  if (sweeping_.count(key) || !calls_.insert(key).second)
    throw ApiError(409,
                   "session '" + key.second +
                       "' is busy (another call on it is running); retry when that call is done",
                   "id", "session_busy");
}

void SharedSessions::unlock(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(key);
}

bool SharedSessions::lock_for_sweep(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (calls_.count(key)) return false;  // a call on it runs (sweep() puts back only its version)
  return sweeping_.insert(key).second;
}

void SharedSessions::unlock_sweep(const Key& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sweeping_.erase(key);
  }
  cv_.notify_all();
}

std::optional<SharedSessions::Known> SharedSessions::known(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = known_.find(key);
  if (it == known_.end()) return std::nullopt;
  return it->second;
}

void SharedSessions::learn(const Key& key, const store::SessionVersion& v, bool deleted) {
  std::lock_guard<std::mutex> lock(mu_);
  known_[key] = Known{v, deleted, std::chrono::steady_clock::now()};
}

bool SharedSessions::holds(const Key& key) {
  bool h = false;
  ctx_.scheduler->run_job([&] { h = ctx_.sessions->holds(key.first, key.second); });
  return h;
}

void SharedSessions::drop_copy(const Key& key) {
  ctx_.scheduler->run_job([&] { ctx_.sessions->drop(key.first, key.second); });
}

bool SharedSessions::spare(const std::string& tenant, const std::string& id) {
  // Scheduler thread (inside SessionTable): never waits on it while holding mu_. A copy is
  // always a version the store had: dropping it keeps what this replica knows (its version).
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = known_.find({tenant, id});
  return it != known_.end() && !it->second.deleted && !calls_.count({tenant, id});
}

std::unique_ptr<SharedSessions::Call> SharedSessions::open(const std::string& tenant,
                                                           const std::string& id,
                                                           const Prefill& prefill) {
  std::unique_ptr<Call> call(new Call(*this, tenant, id));
  bring_current(tenant, id, prefill);
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
  using State = store::SessionRecord::State;
  std::optional<store::SessionRecord> r;
  try {
    r = records_.check(tenant_hash(tenant), id);
  } catch (const store::StoreRefused& e) {
    throw ApiError(507, e.what(), "", "store_refused");
  }
  if (!r) throw unreachable("a new session must be written to it");
  if (r->recovering_ms > 0) {
    blocks_.metrics().add_recovering();
    throw recovering(id, r->recovering_ms);
  }
  if (r->state == State::Live)
    throw ApiError(409, "session '" + id + "' exists", "id", "session_exists");
  if (r->state == State::Lost || r->state == State::Pending) throw lost(id);
}

void SharedSessions::bring_current(const std::string& tenant, const std::string& id,
                                   const Prefill& prefill, int depth) {
  using State = store::SessionRecord::State;
  const Key key{tenant, id};
  std::optional<store::SessionRecord> rec;
  try {
    rec = records_.check(tenant_hash(tenant), id, /*with_content=*/false, /*force=*/true,
                         /*wait_for_list=*/true);
  } catch (const store::StoreRefused& e) {
    throw ApiError(507, e.what(), "", "store_refused");
  }
  // note: no copy is served without the store: another replica may have written a newer version.
  if (!rec) throw unreachable("session '" + id + "' cannot be checked against it");
  if (rec->recovering_ms > 0) {
    blocks_.metrics().add_recovering();
    throw recovering(id, rec->recovering_ms);
  }
  const std::optional<Known> k = known(key);
  const auto put_back = [&] {
    // The store lost (part of) what this replica knows: put it back (a recovery window opens),
    // or, when it is too late for that, the record is now marked lost.
    const store::SessionWrite w = restore(key, *k);
    if (w.outcome == store::SessionWrite::Outcome::Lost) {
      blocks_.metrics().add_session_lost();
      throw lost(id);
    }
    if (w.recovering_ms > 0) {
      blocks_.metrics().add_recovering();
      throw recovering(id, w.recovering_ms);
    }
    // The store had a newer version already: read it (once; a store that keeps moving under
    // this call is answered as unavailable, and the client retries).
    if (depth > 1) throw unreachable("session '" + id + "' keeps changing in it");
    bring_current(tenant, id, prefill, depth + 1);
  };
  switch (rec->state) {
    case State::Lost:
    case State::Pending:  // a version only remembered, never filled in: lost as well
      drop_copy(key);
      blocks_.metrics().add_session_lost();
      throw lost(id);
    case State::Missing:
      if (k) return put_back();
      // Lost, not deleted (the tenant's list still names it), and this replica never held it.
      if (rec->listed) put_back_unknown(key);
      throw not_found(id);
    case State::Deleted:
      if (k && k->version.seq > rec->version.seq) return put_back();
      drop_copy(key);
      learn(key, rec->version, true);
      throw not_found(id);
    case State::Live:
      if (k && (k->version.seq > rec->version.seq ||
                (k->version.seq == rec->version.seq && k->version.wid != rec->version.wid)))
        return put_back();
      if (k && !k->deleted && k->version == rec->version && holds(key)) return;
      return materialise(tenant, id, prefill, depth);
  }
}

void SharedSessions::put_back_unknown(const Key& key) {
  const store::SessionWrite w = restore(key, Known{});
  if (w.outcome == store::SessionWrite::Outcome::Lost) {
    blocks_.metrics().add_session_lost();
    throw lost(key.second);
  }
  blocks_.metrics().add_recovering();
  throw recovering(key.second, std::max<int64_t>(w.recovering_ms, 1));
}

void SharedSessions::materialise(const std::string& tenant, const std::string& id,
                                 const Prefill& prefill, int depth) {
  std::optional<store::SessionRecord> rec;
  try {
    rec = records_.check(tenant_hash(tenant), id, /*with_content=*/true);
  } catch (const store::StoreRefused& e) {
    throw unreachable(e.what());
  }
  if (!rec) throw unreachable("session '" + id + "' cannot be read from it");
  if (rec->state != store::SessionRecord::State::Live || rec->recovering_ms > 0) {
    // It changed between the two calls: judge the new state (once more at most).
    if (depth > 1) throw unreachable("session '" + id + "' keeps changing in it");
    return bring_current(tenant, id, prefill, depth + 1);
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
  learn({tenant, id}, rec->version, false);
  blocks_.metrics().add_session_materialised();
}

SharedSessions::Payload SharedSessions::payload(const std::string& tenant, const std::string& id,
                                                bool blocks) {
  Payload p;
  SessionTable::Copy c = ctx_.sessions->copy(tenant, id);
  nlohmann::json segs = nlohmann::json::array();
  for (const Segment& s : c.segments) segs.push_back({s.begin, s.end, s.kind});
  // Dense sessions whose KV is a cold prefill's share it by content; the rest travel whole.
  const bool by_blocks = c.canonical && !ctx_.model->config().is_hybrid();
  const nlohmann::json meta = {{"tokens", c.session.tokens()},
                               {"segments", segs},
                               {"canonical", c.canonical},
                               {"kind", by_blocks ? "blocks" : "blob"}};
  p.meta = meta.dump();
  if (!by_blocks)
    p.blob = c.session.to_bytes();
  else if (blocks)
    p.blocks = blocks_.collect(cache_partition(tenant, ""), c.session);
  return p;
}

store::SessionWrite SharedSessions::restore(const Key& key, const Known& k, bool version_only) {
  using Kind = store::SessionRecords::RestoreKind;
  Payload p;
  Kind kind = k.deleted ? Kind::Tombstone : Kind::Ghost;
  // A copy is the version this replica knows (every path that changes one commits or drops
  // it). A dense one goes back without its blocks: a reader prefills what the store lacks.
  if (!k.deleted && !version_only)
    ctx_.scheduler->run_job([&] {
      if (!ctx_.sessions->holds(key.first, key.second)) return;
      p = payload(key.first, key.second, /*blocks=*/false);
      kind = Kind::Copy;
    });
  std::optional<store::SessionWrite> w;
  try {
    w = records_.restore(tenant_hash(key.first), key.second, k.version, kind, p.meta, p.blob);
  } catch (const store::StoreRefused& e) {
    throw ApiError(507, e.what(), "", "store_refused");
  }
  if (!w) throw unreachable("session '" + key.second + "' cannot be put back into it");
  if (w->outcome == store::SessionWrite::Outcome::Lost) {
    log_("warning: session '" + key.second + "': the store lost acknowledged versions of it (up " +
         "to " + std::to_string(k.version.seq) + ") after its recovery window: marked lost");
    // A call running on the session owns its copy; its commit meets the lost record and undoes.
    if (!version_only) drop_copy(key);
  } else if (k.version.seq > 0 && w->seq == k.version.seq && w->recovering_ms > 0) {
    blocks_.metrics().add_session_restored();
    log_("session '" + key.second + "': put back into the store (version " +
         std::to_string(k.version.seq) +
         (kind == Kind::Copy        ? ", whole"
          : kind == Kind::Tombstone ? ", deleted"
                                    : ", version only") +
         ")");
  }
  return *w;
}

void SharedSessions::rollback(Call& call) {
  ctx_.scheduler->run_job([&] {
    if (call.is_new_ || !call.before_)
      ctx_.sessions->drop(call.tenant_, call.id_);
    else
      ctx_.sessions->put(call.tenant_, call.id_, std::move(*call.before_));
  });
  call.before_.reset();
}

void SharedSessions::publish(Call& call) {
  using Outcome = store::SessionWrite::Outcome;
  const Key key{call.tenant_, call.id_};
  const std::optional<Known> k = known(key);
  const store::SessionVersion expected =
      call.is_new_ || !k || k->deleted ? store::SessionVersion{} : k->version;
  Payload p;
  bool present = false;
  ctx_.scheduler->run_job([&] {
    present = ctx_.sessions->holds(call.tenant_, call.id_);
    if (present) p = payload(call.tenant_, call.id_, /*blocks=*/true);
  });
  if (!present) return;  // nothing left to publish
  const std::string wid = store::SessionRecords::new_wid();
  const auto deadline = std::chrono::steady_clock::now() + options_.wait;
  const auto undo = [&](ApiError e) {
    rollback(call);
    throw e;
  };
  // Blocks first: a record never names KV the store was not given.
  while (!blocks_.upload(p.blocks)) {
    if (blocks_.pool().up())
      undo(ApiError(507,
                    "the session store (" + blocks_.pool().url().shown +
                        ") refused the session's KV blocks; the change was undone",
                    "", "store_refused"));
    if (std::chrono::steady_clock::now() >= deadline)
      undo(unreachable("this change must reach it before it is acknowledged, and was undone"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (;;) {
    std::optional<store::SessionWrite> w;
    try {
      w = records_.write(tenant_hash(call.tenant_), call.id_, expected, wid, p.meta, p.blob,
                         options_.sync_replicas);
    } catch (const store::StoreRefused& e) {
      undo(ApiError(507, std::string(e.what()) + "; the change was undone", "", "store_refused"));
    }
    if (!w) {
      // Sent but not answered, perhaps: the retry carries the same wid, so a write that went
      // through is recognised and answered as committed.
      if (std::chrono::steady_clock::now() >= deadline)
        undo(ApiError(503,
                      "the session store (" + blocks_.pool().url().shown +
                          ") did not confirm this change in time: it may or may not have been "
                          "applied; read the session before retrying",
                      "", "store_unavailable"));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    switch (w->outcome) {
      case Outcome::Committed:
        learn(key, {w->seq, wid}, false);
        blocks_.metrics().add_session_published();
        return;
      case Outcome::Recovering:
        blocks_.metrics().add_recovering();
        return undo(recovering(call.id_, w->recovering_ms));
      case Outcome::Lost:
        blocks_.metrics().add_session_lost();
        return undo(lost(call.id_));
      case Outcome::Conflict:
      case Outcome::Absent:
      case Outcome::Listed:  // (a delete's answer only)
        blocks_.metrics().add_session_conflict();
        if (call.is_new_)
          return undo(ApiError(409, "session '" + call.id_ + "' exists (made on another replica)",
                               "id", "session_exists"));
        return undo(
            ApiError(409,
                     "session '" + call.id_ +
                         "' was changed on another replica while this call ran; this call's "
                         "change was undone: read the session again and retry",
                     "id", "session_conflict"));
    }
  }
}

std::vector<std::string> SharedSessions::list(const std::string& tenant) {
  std::optional<std::pair<std::vector<std::string>, int64_t>> r;
  try {
    r = records_.list(tenant_hash(tenant));
  } catch (const store::StoreRefused& e) {
    throw ApiError(507, e.what(), "", "store_refused");
  }
  if (!r) throw unreachable("the session list is kept there");
  if (r->second > 0) {
    blocks_.metrics().add_recovering();
    throw ApiError(503,
                   "the session store is recovering from a loss: the list is complete again in "
                   "about " +
                       std::to_string(r->second) + " ms",
                   "", "store_recovering");
  }
  // The set is complete once its rebuild window closes, and a replica whose sweep did not run in
  // that window (a loaded host) has not put its sessions back: the sessions this replica knows as
  // live that the set lacks are checked now, and a live record goes back into the set (the check
  // adds it) and into this answer.
  std::vector<std::pair<std::string, std::string>> unlisted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, k] : known_)
      if (key.first == tenant && !k.deleted &&
          std::find(r->first.begin(), r->first.end(), key.second) == r->first.end())
        unlisted.push_back({tenant_hash(tenant), key.second});
  }
  if (!unlisted.empty())
    if (const auto recs = records_.check_many(unlisted))
      for (size_t i = 0; i < unlisted.size(); ++i)
        if ((*recs)[i].state == store::SessionRecord::State::Live)
          r->first.push_back(unlisted[i].second);
  std::sort(r->first.begin(), r->first.end());
  return r->first;
}

void SharedSessions::remove(const std::string& tenant, const std::string& id) {
  using Outcome = store::SessionWrite::Outcome;
  const Key key{tenant, id};
  Call call(*this, tenant, id);
  const std::optional<Known> k = known(key);
  const int64_t known_seq = k && !k->deleted ? k->version.seq : 0;
  const std::string wid = store::SessionRecords::new_wid();
  const auto deadline = std::chrono::steady_clock::now() + options_.wait;
  std::optional<store::SessionWrite> w;
  for (;;) {
    try {
      w = records_.remove(tenant_hash(tenant), id, known_seq, wid);
    } catch (const store::StoreRefused& e) {
      throw ApiError(507, e.what(), "", "store_refused");
    }
    if (w || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!w) throw unreachable("a delete must reach it before it returns");
  if (w->outcome == Outcome::Recovering) {
    blocks_.metrics().add_recovering();
    throw recovering(id, w->recovering_ms);
  }
  // Lost (its record evicted while the tenant's id set still names it) and unknown here: never a
  // 404 for a session that was made, but the window in which the replicas that know it put it
  // back, as a lookup gets; the retried delete then lands above what they put back.
  if (w->outcome == Outcome::Listed) put_back_unknown(key);
  drop_copy(key);
  const bool existed = w->outcome == Outcome::Committed || known_seq > 0;
  if (w->outcome == Outcome::Committed || w->seq > 0) learn(key, {w->seq, wid}, true);
  if (!existed) throw not_found(id);
}

void SharedSessions::wait_recovered(std::chrono::steady_clock::time_point deadline) {
  bool said = false;
  for (;;) {
    std::optional<std::pair<std::string, int64_t>> gen;
    try {
      gen = records_.generation(/*force=*/true);
    } catch (const store::StoreRefused&) {
      return;
    }
    if (!gen || gen->second <= 0 || std::chrono::steady_clock::now() >= deadline) return;
    if (!said)
      log_("the store is in a recovery window for " + std::to_string(gen->second) +
           " ms more (it restarted, failed over or is new): listening after it");
    said = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(gen->second, 200)));
  }
}

void SharedSessions::sweep(bool all, const std::optional<std::set<std::string>>& wanted) {
  using State = store::SessionRecord::State;
  // Tombstones are remembered for a while only (a loss later than that can bring a deleted
  // session back; deploy/README.md's Consistency section says so); versions for as long as the
  // replica runs.
  constexpr auto kTombstoneMemory = std::chrono::minutes(10);
  constexpr size_t kSlice = 2000;
  std::vector<Key> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(known_, [&](const auto& kv) {
      return kv.second.deleted && now - kv.second.since > kTombstoneMemory;
    });
    if (wanted) {
      for (const auto& [key, k] : known_) {
        const std::string hash = tenant_hash(key.first);
        if (wanted->count(hash) || wanted->count(hash + "\t" + key.second)) keys.push_back(key);
      }
    } else {
      if (sweep_from_ >= known_.size()) sweep_from_ = 0;
      auto it = std::next(known_.begin(), ptrdiff_t(all ? 0 : sweep_from_));
      for (; it != known_.end() && (all || keys.size() < kSlice); ++it) keys.push_back(it->first);
      sweep_from_ = all || it == known_.end() ? 0 : sweep_from_ + kSlice;
    }
  }
  if (keys.empty()) return;
  std::vector<std::pair<std::string, std::string>> ids;
  for (const Key& k : keys) ids.push_back({tenant_hash(k.first), k.second});
  const auto recs = records_.check_many(ids);
  if (!recs) return;  // unreachable: the next round
  for (size_t i = 0; i < keys.size(); ++i) {
    const store::SessionRecord& rec = (*recs)[i];
    const std::optional<Known> seen = known(keys[i]);
    if (!seen || (rec.state == State::Live && rec.version == seen->version) ||
        (rec.state == State::Deleted && seen->deleted && rec.version == seen->version))
      continue;  // as this replica knows it: nothing to do, nothing to hold
    if (!lock_for_sweep(keys[i])) {
      // A call on it runs here. The call checked the store when it started, not since: if the
      // record went missing or back meanwhile (an evicted key, a restart), a replica holding an
      // older copy puts that back and, after the window, serves it, and were this replica to
      // die before the call ends, nobody would know better. So the version this replica knows
      // goes back now, version only (the call is changing the copy). The call's commit lands on
      // that placeholder of its own version after the window; inside it, it is undone (503
      // store_recovering) and a later round fills the placeholder from the copy the call rolled
      // back to. Were this replica to die first, the session is reported lost, never served older.
      const bool behind = rec.state == State::Missing || rec.version.seq < seen->version.seq;
      if (!seen->deleted && rec.state != State::Lost && behind) {
        try {
          restore(keys[i], *seen, /*version_only=*/true);
        } catch (const ApiError& e) {
          if (e.status == 503) return;
          log_(std::string("warning: session '") + keys[i].second + "': " + e.what());
        }
      }
      continue;
    }
    struct Release {
      SharedSessions& s;
      const Key& key;
      ~Release() { s.unlock_sweep(key); }
    } release{*this, keys[i]};
    const std::optional<Known> k = known(keys[i]);
    if (!k) continue;
    const bool behind = rec.state == State::Missing || rec.version.seq < k->version.seq ||
                        (rec.version.seq == k->version.seq && rec.version.wid != k->version.wid);
    const bool unfilled = rec.state == State::Pending && rec.version == k->version;
    try {
      if (rec.state != State::Lost && (behind || (unfilled && holds(keys[i])))) {
        restore(keys[i], *k);
      } else if (rec.version.seq > k->version.seq || rec.state == State::Lost) {
        // Moved on elsewhere (or lost): this copy is stale; remember the newer version.
        drop_copy(keys[i]);
        if (rec.state != State::Lost) learn(keys[i], rec.version, rec.state == State::Deleted);
      }
    } catch (const ApiError& e) {
      if (e.status == 503) return;  // unreachable again: the next round
      log_(std::string("warning: session '") + keys[i].second + "': " + e.what());
    }
  }
}

}  // namespace fak::server
