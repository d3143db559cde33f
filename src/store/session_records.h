// /v1/fak/ sessions as the store keeps them (store/store_keys.h): one Redis hash per session with
// its version, its meta (tokens, segments, how its KV is kept) and, when its KV cannot be shared
// by content (hybrid models, shifted rows), the whole session as Session::to_bytes writes it.
// Dense sessions' KV lives in the content-addressed block records the prefix cache shares.
//
// Every write is a compare-and-set in one Lua script (atomic in Redis): it names the version it
// was made on, and only the first writer of a version wins; each write takes a fresh version from
// one counter, so a session deleted and made again never repeats a version a replica may hold.
// A delete leaves a tombstone (no TTL: a few bytes), so a replica holding an old copy learns the
// session is gone rather than that the store lost it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "store/redis_client.h"

namespace fak::store {

class BlockStore;

struct SessionRecord {
  enum class State { Missing, Deleted, Live };
  State state = State::Missing;
  int64_t version = -1;  // Live and Deleted
  std::string meta;      // Live, when read whole: JSON
  std::string blob;      // Live, when read whole: Session::to_bytes, or empty
};

// The outcome of a write.
struct SessionWrite {
  bool committed = false;
  int64_t version = -1;  // the new version, or the one that won (-1: none, or deleted)
};

// Redis answered a session write with an error (out of memory, a value over its limits).
class StoreRefused : public Error {
 public:
  using Error::Error;
};

class SessionRecords {
 public:
  // Calls go through blocks' pool (its metrics, its backoff).
  SessionRecords(BlockStore& blocks, std::string ns);

  // Each returns nullopt when the store is unreachable (or backing off, unless force);
  // StoreRefused when Redis answers with an error.
  std::optional<SessionRecord> version(const std::string& tenant, const std::string& id,
                                       bool force = false);
  std::optional<SessionRecord> read(const std::string& tenant, const std::string& id);
  // expected: the version the write was made on; -1: the session must not exist (or be deleted).
  std::optional<SessionWrite> write(const std::string& tenant, const std::string& id,
                                    int64_t expected, const std::string& meta,
                                    const std::string& blob);
  // A tombstone in its place; returns the tombstone's version, or -1 when there was no session.
  std::optional<int64_t> remove(const std::string& tenant, const std::string& id);
  std::optional<std::vector<std::string>> list(const std::string& tenant);

 private:
  std::optional<RedisReply> run(const RedisArgs& args, bool force = false);
  BlockStore& blocks_;
  std::string ns_;
};

}  // namespace fak::store
