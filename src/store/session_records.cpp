#include "store/session_records.h"

#include "store/block_store.h"
#include "store/store_keys.h"

namespace fak::store {

namespace {

// KEYS: session hash, the tenant's id set, the version counter. ARGV: expected version, meta,
// blob ("" for none), id. Returns {1, new version} or {0, the version there (-1: none)}.
// note: HGET of a missing field is false in Redis's Lua, not nil.
constexpr const char* kWrite = R"lua(
local v = redis.call('HGET', KEYS[1], 'v')
local cur = -1
if v and not redis.call('HGET', KEYS[1], 'deleted') then cur = tonumber(v) end
if cur ~= tonumber(ARGV[1]) then return {0, cur} end
local nv = redis.call('INCR', KEYS[3])
redis.call('DEL', KEYS[1])
if ARGV[3] == '' then
  redis.call('HSET', KEYS[1], 'v', nv, 'meta', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'v', nv, 'meta', ARGV[2], 'blob', ARGV[3])
end
redis.call('SADD', KEYS[2], ARGV[4])
return {1, nv}
)lua";

// Same KEYS; ARGV: id. Returns the tombstone's version, or -1 when there was no session.
constexpr const char* kRemove = R"lua(
local v = redis.call('HGET', KEYS[1], 'v')
if not v or redis.call('HGET', KEYS[1], 'deleted') then return -1 end
local nv = redis.call('INCR', KEYS[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', nv, 'deleted', '1')
redis.call('SREM', KEYS[2], ARGV[1])
return nv
)lua";

}  // namespace

SessionRecords::SessionRecords(BlockStore& blocks, std::string ns)
    : blocks_(blocks), ns_(std::move(ns)) {}

std::optional<RedisReply> SessionRecords::run(const RedisArgs& args, bool force) {
  RedisReply r;
  if (!blocks_.call([&](RedisConnection& c) { r = c.command(args); }, force)) return std::nullopt;
  if (r.error()) {
    blocks_.refused("a session " + std::string(args[0]), r.str);
    throw StoreRefused("the session store (" + blocks_.pool().url().shown + ") refused: " + r.str);
  }
  return r;
}

static std::optional<SessionRecord> parse_record(const std::optional<RedisReply>& r) {
  if (!r) return std::nullopt;
  SessionRecord rec;
  const auto& e = r->elements;
  if (r->type != RedisReply::Type::Array || e.size() < 2 || e[0].nil()) return rec;
  rec.version = std::atoll(e[0].str.c_str());
  rec.state = e[1].nil() ? SessionRecord::State::Live : SessionRecord::State::Deleted;
  if (e.size() > 2 && !e[2].nil()) rec.meta = e[2].str;
  if (e.size() > 3 && !e[3].nil()) rec.blob = e[3].str;
  return rec;
}

std::optional<SessionRecord> SessionRecords::version(const std::string& tenant,
                                                     const std::string& id, bool force) {
  const std::string key = session_key(ns_, tenant, id);
  return parse_record(run({"HMGET", key, "v", "deleted"}, force));
}

std::optional<SessionRecord> SessionRecords::read(const std::string& tenant,
                                                  const std::string& id) {
  const std::string key = session_key(ns_, tenant, id);
  // Only after version() found it: the store answered a moment ago, so try even in a backoff.
  return parse_record(run({"HMGET", key, "v", "deleted", "meta", "blob"}, true));
}

std::optional<SessionWrite> SessionRecords::write(const std::string& tenant, const std::string& id,
                                                  int64_t expected, const std::string& meta,
                                                  const std::string& blob) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    counter = version_key(ns_), want = std::to_string(expected);
  const auto r = run({"EVAL", kWrite, "3", key, list, counter, want, meta, blob, id});
  if (!r) return std::nullopt;
  if (r->type != RedisReply::Type::Array || r->elements.size() != 2)
    throw StoreRefused("the session store answered a write with something unexpected");
  return SessionWrite{r->elements[0].integer == 1, r->elements[1].integer};
}

std::optional<int64_t> SessionRecords::remove(const std::string& tenant, const std::string& id) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    counter = version_key(ns_);
  const auto r = run({"EVAL", kRemove, "3", key, list, counter, id});
  if (!r) return std::nullopt;
  return r->integer;
}

std::optional<std::vector<std::string>> SessionRecords::list(const std::string& tenant) {
  const auto r = run({"SMEMBERS", session_list_key(ns_, tenant)});
  if (!r) return std::nullopt;
  std::vector<std::string> ids;
  for (const auto& e : r->elements) ids.push_back(e.str);
  return ids;
}

}  // namespace fak::store
