// /v1/fak/ sessions shared by replicas through the store (`fak serve --store`). A session lives in
// the store (store/session_records.h: tokens, segments, a version); each replica holds copies in
// its SessionTable and, before every call on one, asks the store for its version: a copy that is
// behind is read again — a dense session's KV from the shared block records (what is missing is
// prefilled, bit-exactly), a hybrid's or shifted one's whole — so any replica with the API key can
// carry on any session where another left it.
//
// The guarantee: a change is acknowledged (2xx) only once the store has it (compare-and-set on
// the version the call started from; with --store-sync-replicas, once a Redis replica has it too),
// and every later call on any replica either sees it or fails loudly: 409 session_conflict (another
// replica wrote first; this change was undone), 409 session_lost (the store lost acknowledged
// versions that no replica could put back), 503 store_unavailable (the store cannot be reached:
// nothing is served from a copy that may be stale) or 503 store_recovering (a recovery window:
// replicas are putting back what the store lost). Never a 200 with older content.
//
// What each replica remembers of a session (Known: its version, or its tombstone) outlives its
// copy: after a loss (Redis restarted empty, a failover that lost the last writes, an evicted key)
// the replicas put back what they acknowledged, highest version first, and a version someone
// remembers but nobody holds any more is reported lost rather than silently replaced by an older
// one. A background sweep watches the store's generation (a restart or failover) and re-checks
// the sessions this replica knows, a slice every second, so losses are repaired within the
// recovery window (--store-recovery-grace) even for sessions nobody is calling, and for those a
// long call holds here (their version goes back at once; the call's commit lands on it).
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

#include "server/session_table.h"
#include "store/block_store.h"
#include "store/session_records.h"

namespace fak::server {

struct ServerContext;

class SharedSessions {
 public:
  using Log = std::function<void(const std::string& line)>;
  // Reads an edit's missing tokens through the scheduler and commits it (fak_routes' run_edit).
  using Prefill = std::function<ojson(const SessionEdit&)>;
  struct Options {
    std::chrono::milliseconds wait{10000};  // how long a write waits for an unreachable store
    int64_t recovery_grace_ms = 3000;       // the recovery window (store/session_records.h)
    int sync_replicas = 0;                  // Redis replicas a write waits for (WAIT)
  };
  SharedSessions(ServerContext& ctx, store::BlockStore& blocks, Log log, Options options);
  ~SharedSessions();
  SharedSessions(const SharedSessions&) = delete;
  SharedSessions& operator=(const SharedSessions&) = delete;

  // One call on one session: while it lives no other call on that session runs on this replica
  // (409), and what the replica holds is the store's latest version.
  class Call {
   public:
    ~Call();
    // The call changed the session: it is in the store when this returns, or it was undone here
    // and this throws (see the top of this file).
    void commit();
    // The call's change failed before it was committed: this replica's copy goes back to the
    // version the call started from (as a failed commit undoes it).
    void undo();

   private:
    friend class SharedSessions;
    Call(SharedSessions& s, std::string tenant, std::string id);
    SharedSessions& s_;
    std::string tenant_, id_;
    bool is_new_ = false;
    std::optional<SessionTable::Copy> before_;  // what to roll back to
  };

  // An existing session, brought up to the store's version. 404 when it is gone, 409 when
  // another call on it runs here or it was lost, 503 when the store is unreachable or recovering.
  std::unique_ptr<Call> open(const std::string& tenant, const std::string& id,
                             const Prefill& prefill);
  // Before making a session under a wanted id: 409 when the store has a live one.
  void check_new(const std::string& tenant, const std::string& id);
  // A session this replica has just made (create, clone, load): commit() publishes it; when
  // another replica made one of that id first, this one is dropped and the caller gets 409.
  std::unique_ptr<Call> made(const std::string& tenant, const std::string& id);
  std::vector<std::string> list(const std::string& tenant);
  void remove(const std::string& tenant, const std::string& id);
  // Waits (up to the deadline) while the store is in a recovery window: a replica that starts
  // then listens once it is over.
  void wait_recovered(std::chrono::steady_clock::time_point deadline);
  // Whether this replica's copy may be dropped to make room (SessionTable::share).
  bool spare(const std::string& tenant, const std::string& id);

 private:
  // What this replica knows of a session: the version it acknowledged or read last (its copy,
  // when it holds one, is that version), or the tombstone of a delete.
  struct Known {
    store::SessionVersion version;
    bool deleted = false;
    std::chrono::steady_clock::time_point since;  // when learnt (tombstones are forgotten later)
  };
  struct Payload {
    std::string meta, blob;
    std::vector<store::BlockUpload> blocks;
  };
  using Key = std::pair<std::string, std::string>;
  void lock(const Key& key);  // 409 when held by another call
  void unlock(const Key& key);
  bool lock_for_sweep(const Key& key);  // false when a call holds it
  void unlock_sweep(const Key& key);
  std::optional<Known> known(const Key& key);
  void learn(const Key& key, const store::SessionVersion& v, bool deleted);
  bool holds(const Key& key);
  void drop_copy(const Key& key);
  // Brings this replica's copy to the store's version, or throws (404, 409 lost, 503).
  void bring_current(const std::string& tenant, const std::string& id, const Prefill& prefill,
                     int depth = 0);
  void materialise(const std::string& tenant, const std::string& id, const Prefill& prefill,
                   int depth);
  // Puts what this replica knows of the session back into the store (the key must be locked;
  // version_only: a placeholder of the version, for a session a call holds).
  store::SessionWrite restore(const Key& key, const Known& k, bool version_only = false);
  // A session this replica does not know, whose record is missing while the tenant's id set still
  // names it (lost, not deleted): a placeholder opens a recovery window in which the replicas that
  // know it put it back (it is reported lost if none does). Throws 503 store_recovering, or 409
  // session_lost (the key must be locked).
  [[noreturn]] void put_back_unknown(const Key& key);
  Payload payload(const std::string& tenant, const std::string& id, bool blocks);  // scheduler
  void publish(Call& call);
  void rollback(Call& call);
  // The background check of what this replica knows: a slice, everything (all), or what `wanted`
  // names (tenant hashes: their every session; "hash\tid": that session).
  void sweep(bool all, const std::optional<std::set<std::string>>& wanted = std::nullopt);

  ServerContext& ctx_;
  store::BlockStore& blocks_;
  store::SessionRecords records_;
  Log log_;
  Options options_;
  std::mutex mu_;
  std::set<Key> calls_;
  std::set<Key> sweeping_;  // held by the background check for a moment
  std::map<Key, Known> known_;
  size_t sweep_from_ = 0;   // where the next slice of known_ starts
  std::string generation_;  // the store's generation last seen
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread sweeper_;
};

}  // namespace fak::server
