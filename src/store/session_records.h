// /v1/fak/ sessions as the store keeps them (store/store_keys.h): one Redis hash per session with
// its version, its meta (tokens, segments, how its KV is kept) and, when its KV cannot be shared
// by content (hybrid models, shifted rows), the whole session as Session::to_bytes writes it.
// Dense sessions' KV lives in the content-addressed block records the prefix cache shares.
//
// Versions. A version is (seq, wid): seq counts the session's writes (it goes on across a delete
// and a re-create), wid is a random id the writer draws for each write. Equal versions are equal
// states: two writes never share a wid, so a store that restarted empty, lost a key or failed over
// to a replica that missed the last writes can never make a replica take a stale copy for the
// current one (a global counter could restart and hand out a number again; a wid cannot repeat).
// Every write is a compare-and-set in one Lua script (atomic in Redis) on the version it was made
// on, and a retried write (its reply was lost) is recognised by its wid and answered the same.
//
// Losses. The store may lose what it acknowledged: Redis restarted without persistence, a failover
// to a replica that missed the last writes, a key evicted under an allkeys policy. The replicas
// still hold what they acknowledged (their copies, or only the version of a copy they dropped),
// so a loss is repaired from them, highest version first, inside a recovery window:
//   - a generation names which Redis process serves the dataset (its run_id, in <ns>gen); a
//     restart or a failover starts a new generation and a window of `grace` ms (Redis time);
//   - a record found missing, or behind what a replica knows, is restored by that replica (its
//     copy, or a pending placeholder when it kept only the version), which opens a window on that
//     record; other replicas raise it to a higher version they hold while the window is open;
//   - during a window no call is served from the record (503 store_recovering): a replica that
//     holds an older copy must not answer before the one holding the newest has restored it;
//   - after the window, a record still behind a version some replica knows means acknowledged
//     writes are gone: the record is marked lost, and every replica answers 409 session_lost for
//     it (never a 200 with older content) until a client deletes it.
// A delete leaves a tombstone (a few bytes, no TTL) that restores like a version, so a session
// deleted just before a loss is not brought back by a replica that held a copy.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "store/redis_client.h"

namespace fak::store {

class BlockStore;

struct SessionVersion {
  int64_t seq = 0;  // 0: none
  std::string wid;
  bool operator==(const SessionVersion&) const = default;
};

struct SessionRecord {
  enum class State { Missing, Live, Deleted, Pending, Lost };
  State state = State::Missing;
  SessionVersion version;
  int64_t recovering_ms = 0;  // > 0: in a recovery window for that long (nothing is served)
  bool listed = false;        // the tenant's id set names it (Missing + listed: lost, not deleted)
  std::string meta;           // Live, when read with content: JSON
  std::string blob;           // Live, when read with content: Session::to_bytes, or empty
};

// What a write, a delete or a restore came to.
struct SessionWrite {
  enum class Outcome {
    Committed,   // written (restore: the record holds this version now, or a newer one)
    Conflict,    // the record is not at the expected version (or exists, for a new session)
    Recovering,  // in a recovery window: nothing written, retry after it
    Lost,        // the record is marked lost (or this restore marked it)
    Absent,      // delete: there was no session
    Listed,      // delete: no record, but the tenant's id set names it (lost, not deleted)
  };
  Outcome outcome = Outcome::Conflict;
  int64_t seq = 0;  // the record's seq after the call
  int64_t recovering_ms = 0;
  // Committed on the primary, but fewer Redis replicas than asked had it when WAIT returned: still
  // acknowledged (refusing would stop every session write while the only Redis replica is down),
  // counted in /metrics. deploy/README.md says what that can cost across a failover.
  bool unreplicated = false;
};

// Redis answered a session write with an error (out of memory, a value over its limits).
class StoreRefused : public Error {
 public:
  using Error::Error;
};

class SessionRecords {
 public:
  // Calls go through blocks' pool (its metrics, its backoff). grace_ms: the recovery window.
  SessionRecords(BlockStore& blocks, std::string ns, int64_t grace_ms);

  // Each returns nullopt when the store is unreachable (or backing off, unless force);
  // StoreRefused when Redis answers with an error. wait_for_list: a record missing and not in
  // the tenant's id set, where that set may have lost members to eviction, answers with the
  // window in which the replicas rebuild the set (recovering_ms), not as never made.
  std::optional<SessionRecord> check(const std::string& tenant, const std::string& id,
                                     bool with_content = false, bool force = true,
                                     bool wait_for_list = false);
  // Several records at once (one round trip), without content; past the pool's backoff.
  std::optional<std::vector<SessionRecord>> check_many(
      const std::vector<std::pair<std::string, std::string>>& tenant_ids);
  // expected.seq == 0: a new session (none live under the id). wid: this write's new version id.
  std::optional<SessionWrite> write(const std::string& tenant, const std::string& id,
                                    const SessionVersion& expected, const std::string& wid,
                                    const std::string& meta, const std::string& blob,
                                    int sync_replicas);
  // A tombstone above the record, above `known_seq` (what this replica knows of it) and above the
  // newest commit the version witness names. Listed (nothing written) when the record is missing
  // but the tenant's id set names it: lost, not deleted, and unknown to this replica.
  std::optional<SessionWrite> remove(const std::string& tenant, const std::string& id,
                                     int64_t known_seq, const std::string& wid);
  enum class RestoreKind { Copy, Ghost, Tombstone };
  // Puts back what this replica knows (see the top of this file).
  std::optional<SessionWrite> restore(const std::string& tenant, const std::string& id,
                                      const SessionVersion& version, RestoreKind kind,
                                      const std::string& meta, const std::string& blob);
  // The tenant's session ids; Recovering (with no ids) during a generation's window.
  std::optional<std::pair<std::vector<std::string>, int64_t>> list(const std::string& tenant);
  // The generation's identity ("run:since") and how long its window still lasts. Also what every
  // later call tells the store this replica saw of it (see the scripts: an evicted generation key
  // is told apart from a new generation by it).
  std::optional<std::pair<std::string, int64_t>> generation(bool force = false);
  // What every replica should look at now: tenants (hashes) whose id sets the replicas are
  // rebuilding (each re-checks the sessions of theirs it knows), and sessions ("tenant\tid") in a
  // restore window (a replica holding a newer version puts it back before the window ends).
  std::optional<std::vector<std::string>> wanted();

  // A fresh version id (128 random bits, hex).
  static std::string new_wid();

 private:
  std::optional<std::vector<RedisReply>> run(const std::vector<RedisArgs>& commands,
                                             bool force = true);
  std::string window_arg() const;  // ARGV[1] of every script
  BlockStore& blocks_;
  std::string ns_, grace_;
  mutable std::mutex seen_mu_;
  std::string seen_run_, seen_since_, seen_evicted_;  // the generation as last seen
};

}  // namespace fak::store
