// /v1/fak/ sessions shared by replicas through the store (`fak serve --store`). A session lives in
// the store (store/session_records.h: tokens, segments, a version); each replica holds copies in
// its SessionStore and, before every call on one, asks the store for its version: a copy that is
// behind is read again — a dense session's KV from the shared block records (what is missing is
// prefilled, bit-exactly), a hybrid's or shifted one's whole — so any replica with the API key can
// carry on any session where another left it.
//
// A call that changes a session publishes it before it replies (blocks first, then the record,
// compare-and-set on the version the call started from): a replica killed after the reply loses
// nothing, and of two replicas writing one session at once the second gets 409 and its change is
// undone here, so nothing is torn. Quarantine and delete are fences: they return only once the
// store has them (waiting up to --store-wait for it), so no replica that can reach the store
// serves a pre-quarantine state after the quarantine returned.
//
// Store down: calls on sessions this replica holds are served from its copies; changes are kept
// (dirty) and published when the store is back, by the next call or by a sweep in the background
// (note: a replica cut off from a store that the others still reach serves its copies as they
// were; a quarantine made meanwhile through another replica reaches it when it reconnects).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/session_store.h"
#include "store/block_store.h"
#include "store/session_records.h"

namespace fak::server {

struct ServerContext;

class SharedSessions {
 public:
  using Log = std::function<void(const std::string& line)>;
  // Reads an edit's missing tokens through the scheduler and commits it (fak_routes' run_edit).
  using Prefill = std::function<ojson(const SessionEdit&)>;
  // wait: how long a fence waits for an unreachable store before it gives up (503).
  SharedSessions(ServerContext& ctx, store::BlockStore& blocks, Log log,
                 std::chrono::milliseconds wait);
  ~SharedSessions();
  SharedSessions(const SharedSessions&) = delete;
  SharedSessions& operator=(const SharedSessions&) = delete;

  // One call on one session: while it lives no other call on that session runs on this replica
  // (409), and what the replica holds is the store's latest version.
  class Call {
   public:
    ~Call();
    // The call changed the session: publish it (see the top of this file). fence: the store must
    // have it before this returns.
    void commit(bool fence = false);

   private:
    friend class SharedSessions;
    Call(SharedSessions& s, std::string tenant, std::string id);
    SharedSessions& s_;
    std::string tenant_, id_;
    bool is_new_ = false;
    std::optional<SessionStore::Copy> before_;  // what to roll back to
  };

  // An existing session, brought up to the store's version. 404 when it is gone, 409 when
  // another call on it runs here, 503 when the store is unreachable and this replica has no copy.
  std::unique_ptr<Call> open(const std::string& tenant, const std::string& id,
                             const Prefill& prefill);
  // Before making a session under a wanted id: 409 when the store has a live one.
  void check_new(const std::string& tenant, const std::string& id);
  // A session this replica has just made (create, clone, load): commit() publishes it; when
  // another replica made one of that id first, this one is dropped and the caller gets 409.
  std::unique_ptr<Call> made(const std::string& tenant, const std::string& id);
  std::vector<std::string> list(const std::string& tenant);
  void remove(const std::string& tenant, const std::string& id);
  // Publishes the changes kept while the store was down; returns how many are left.
  size_t catch_up(std::chrono::steady_clock::time_point deadline);
  // Whether this replica's copy may be dropped to make room (SessionStore::share).
  bool spare(const std::string& tenant, const std::string& id);

 private:
  // What this replica knows of its copy of a session.
  struct Held {
    int64_t version = -1;  // the store's version it equals (when not dirty)
    bool dirty = false;    // changed here while the store was unreachable
    int64_t base = -1;     // dirty: the version those changes were made on (-1: none, a new one)
  };
  struct Payload {
    std::string meta, blob;
    std::vector<store::BlockUpload> blocks;
  };
  using Key = std::pair<std::string, std::string>;
  void lock(const Key& key);  // 409 when held by another call
  void unlock(const Key& key);
  std::optional<Held> held(const Key& key);
  void set_held(const Key& key, std::optional<Held> h);
  void ensure_current(const std::string& tenant, const std::string& id, const Prefill& prefill);
  void materialise(const std::string& tenant, const std::string& id, const Prefill& prefill);
  void forget(const std::string& tenant, const std::string& id);      // local copy and state
  Payload payload(const std::string& tenant, const std::string& id);  // scheduler thread
  enum class Outcome { Committed, Conflict, Unreachable };
  // One attempt at writing what the replica holds, made on `expected`.
  Outcome write(const std::string& tenant, const std::string& id, int64_t expected,
                int64_t* version);
  void publish(Call& call, bool fence);
  void rollback(Call& call);
  void sweep();  // the background catch-up

  ServerContext& ctx_;
  store::BlockStore& blocks_;
  store::SessionRecords records_;
  Log log_;
  std::chrono::milliseconds wait_;
  std::mutex mu_;
  std::set<Key> calls_;
  std::map<Key, Held> held_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread sweeper_;
};

}  // namespace fak::server
