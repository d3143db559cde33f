#include "store/session_records.h"

#include <openssl/rand.h>

#include "store/block_store.h"
#include "store/store_keys.h"

namespace fak::store {

namespace {

// Shared by every script. KEYS[1]: the session's hash, KEYS[2]: the tenant's id set, KEYS[3]: the
// generation. ARGV[1]: "<recovery window ms>:<run>:<since>:<evicted>", the last three what this
// replica last saw of the generation (empty when it saw none). Record fields: seq, wid, meta, blob,
// and the markers deleted, pending, lost, restored (the Redis time in ms of the first restore).
// note: HGET of a missing field is false in Redis's Lua, not nil. A script on a replica (a
// demoted primary after a failover) answers 'notprimary' before reading anything: its data may be
// behind, and a write there would fail anyway.
//
// Eviction. Under an allkeys-* policy Redis may evict any key, the generation's and the tenants'
// id sets included. The generation's key alone going is not a new generation: when it is missing
// but the Redis process is the one this replica saw (same run_id) and Redis has evicted keys since
// (INFO's evicted_keys went up), the generation goes on with its old start, and no window opens
// for every session. An id set that may have lost members (allkeys, and no '' member, which marks
// it complete) is rebuilt by the replicas inside a window of its own (set_window): the tenant is
// put in <ns>want, every replica re-checks the sessions of that tenant it knows (a check of a live
// record adds it back to the set; a missing one is put back), and the set is complete after it.
constexpr const char* kPrelude = R"lua(
if string.match(redis.call('INFO', 'replication'), 'role:(%a+)') ~= 'master' then
  return {'notprimary'}
end
local grace, krun, ksince, kev = string.match(ARGV[1], '^(%d+):(%x*):(%d*):(%d*)$')
grace = tonumber(grace)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local g = redis.call('HMGET', KEYS[3], 'run', 'since')
local since = tonumber(g[2])
if g[1] ~= run or not since then
  since = now
  if not g[1] and krun == run and ksince ~= '' and kev ~= '' then
    local ev = tonumber(string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)'))
    if ev and ev > tonumber(kev) then since = tonumber(ksince) end
  end
  redis.call('HSET', KEYS[3], 'run', run, 'since', since)
end
local ns = string.sub(KEYS[3], 1, #KEYS[3] - 3)
local vkey = ns .. 'v:' .. string.sub(KEYS[2], #ns + 3)
local function witness(id, s, w) redis.call('HSET', vkey, id, s .. ':' .. w) end
local function set_window()
  if redis.call('SISMEMBER', KEYS[2], '') == 1 then return 0 end
  if not string.find(redis.call('INFO', 'memory'), 'maxmemory_policy:allkeys', 1, true) then
    return 0
  end
  local want, tenant = ns .. 'want', string.sub(KEYS[2], #ns + 3)
  local start = tonumber(redis.call('ZSCORE', want, tenant))
  -- A rebuild nobody completed soon after its window: the set may have gone again since.
  if not start or now - start > 2 * grace then
    start = now
    redis.call('ZADD', want, start, tenant)
  end
  local l = start + grace - now
  if l > 0 then return l end
  redis.call('SADD', KEYS[2], '')
  redis.call('ZREM', want, tenant)
  return 0
end
local r = redis.call('HMGET', KEYS[1], 'seq', 'wid', 'deleted', 'pending', 'lost', 'restored')
local untl = since + grace
if r[6] then untl = math.max(untl, tonumber(r[6]) + grace) end
local left = math.max(0, untl - now)
local st = 'missing'
if r[1] then
  if r[5] then st = 'lost' elseif r[3] then st = 'deleted' elseif r[4] then st = 'pending'
  else st = 'live' end
end
local seq = tonumber(r[1] or '0')
local wid = r[2] or ''
)lua";

// ARGV[2]: flags, 'c' to return meta and blob, 'w' to wait for the tenant's id set when the record
// is missing and unlisted; [3]: the session id. Returns {state, seq, wid, window ms left, listed[,
// meta, blob]}; listed: the tenant's id set names it (a missing record that is listed was lost,
// not deleted: a delete takes it out of the set in the same script). A live record the set lacks
// (the set was evicted) is added back.
constexpr const char* kCheck = R"lua(
local listed = redis.call('SISMEMBER', KEYS[2], ARGV[3])
if st == 'live' and listed == 0 then
  redis.call('SADD', KEYS[2], ARGV[3])
  listed = 1
end
if st == 'missing' and listed == 0 and string.find(ARGV[2], 'w', 1, true) then
  left = math.max(left, set_window())
end
local out = {st, seq, wid, left, listed}
if string.find(ARGV[2], 'c', 1, true) and st == 'live' then
  local c = redis.call('HMGET', KEYS[1], 'meta', 'blob')
  out[6] = c[1] or ''
  out[7] = c[2] or ''
end
return out
)lua";

// ARGV[2]: expected seq (0: a new session), [3]: expected wid, [4]: the new wid, [5]: meta,
// [6]: blob ('' for none), [7]: the session id. Returns {outcome, seq, window ms left}.
constexpr const char* kWrite = R"lua(
if st == 'live' and wid == ARGV[4] then return {'committed', seq, 0} end
if left > 0 then return {'recovering', seq, left} end
if st == 'lost' then return {'lost', seq, 0} end
-- A placeholder of the very version this write was made on (put back while the writer's call ran)
-- is that version: the writer had its content. Any other placeholder is a loss.
if st == 'pending' and (seq ~= tonumber(ARGV[2]) or wid ~= ARGV[3]) then return {'lost', seq, 0} end
if tonumber(ARGV[2]) == 0 then
  if st == 'live' then return {'conflict', seq, 0} end
elseif (st ~= 'live' and st ~= 'pending') or seq ~= tonumber(ARGV[2]) or wid ~= ARGV[3] then
  return {'conflict', seq, 0}
end
redis.call('DEL', KEYS[1])
if ARGV[6] == '' then
  redis.call('HSET', KEYS[1], 'seq', seq + 1, 'wid', ARGV[4], 'meta', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'seq', seq + 1, 'wid', ARGV[4], 'meta', ARGV[5], 'blob', ARGV[6])
end
redis.call('SADD', KEYS[2], ARGV[7])
witness(ARGV[7], seq + 1, ARGV[4])
return {'committed', seq + 1, 0}
)lua";

// ARGV[2]: the seq this replica knows (0: none), [3]: the tombstone's wid, [4]: the session id.
// Returns {'committed' | 'absent' | 'recovering' | 'listed', seq, window ms left}. 'listed': no
// record, but the tenant's id set names the id: it was lost (evicted), not deleted (a delete
// takes it out of the set in this script), and this replica does not know it. Nothing is written:
// the caller puts a placeholder back (as a lookup does), in whose window the replicas that know it
// restore it. A missing record the set may have lost (set_window) waits for the set's rebuild, as
// a lookup does. The tombstone goes above the newest commit the version witness names too: a
// replica that knows a version this one does not must find the session deleted, not behind.
constexpr const char* kRemove = R"lua(
if st == 'deleted' and wid == ARGV[3] then return {'committed', seq, 0} end
if left > 0 then return {'recovering', seq, left} end
local known = tonumber(ARGV[2])
if (st == 'missing' or st == 'deleted') and known <= seq then
  if st == 'missing' then
    if redis.call('SISMEMBER', KEYS[2], ARGV[4]) == 1 then return {'listed', seq, 0} end
    local l = set_window()
    if l > 0 then return {'recovering', seq, l} end
  end
  return {'absent', seq, 0}
end
local seen = redis.call('HGET', vkey, ARGV[4])
local nseq = math.max(seq, known, tonumber(seen and string.match(seen, '^(%d+):') or '0')) + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'seq', nseq, 'wid', ARGV[3], 'deleted', '1')
redis.call('SREM', KEYS[2], ARGV[4])
witness(ARGV[4], nseq, ARGV[3])
if st == 'live' or st == 'lost' or st == 'pending' then return {'committed', nseq, 0} end
return {'absent', nseq, 0}
)lua";

// ARGV[2]: seq, [3]: wid, [4]: 'copy' | 'ghost' | 'tomb', [5]: meta, [6]: blob, [7]: id.
// Returns {'committed' | 'lost', seq, window ms left}.
constexpr const char* kRestore = R"lua(
local mine = tonumber(ARGV[2])
-- A lost record carries the highest seq any replica knew, so that its delete's tombstone is
-- above everything they remember.
if st == 'lost' then
  if mine > seq then redis.call('HSET', KEYS[1], 'seq', mine) end
  return {'lost', math.max(seq, mine), left}
end
if st ~= 'missing' and seq == mine and wid == ARGV[3] then
  if st == 'pending' and ARGV[4] == 'copy' then
    redis.call('HDEL', KEYS[1], 'pending')
    if ARGV[6] == '' then
      redis.call('HSET', KEYS[1], 'meta', ARGV[5])
    else
      redis.call('HSET', KEYS[1], 'meta', ARGV[5], 'blob', ARGV[6])
    end
  end
  return {'committed', seq, left}
end
if st ~= 'missing' and seq > mine then return {'committed', seq, left} end
if st == 'missing' or (left > 0 and seq < mine) then
  -- The version witness (<ns>v:<tenant>, written with every commit) names this very version as
  -- the newest: no replica can hold a newer one, so it goes back with no window (an evicted
  -- record under an allkeys policy costs nothing). Otherwise a window opens for the others.
  local seen = redis.call('HGET', vkey, ARGV[7])
  local fresh = st == 'missing' and ARGV[4] ~= 'ghost' and seen == ARGV[2] .. ':' .. ARGV[3]
  local restored = r[6] or now
  redis.call('DEL', KEYS[1])
  if ARGV[4] == 'tomb' then
    redis.call('HSET', KEYS[1], 'seq', mine, 'wid', ARGV[3], 'deleted', '1')
    redis.call('SREM', KEYS[2], ARGV[7])
  elseif ARGV[4] == 'ghost' then
    redis.call('HSET', KEYS[1], 'seq', mine, 'wid', ARGV[3], 'pending', '1')
    redis.call('SADD', KEYS[2], ARGV[7])
  else
    redis.call('HSET', KEYS[1], 'seq', mine, 'wid', ARGV[3], 'meta', ARGV[5])
    if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'blob', ARGV[6]) end
    redis.call('SADD', KEYS[2], ARGV[7])
  end
  -- note: a restore never writes the witness: only a commit makes a version the newest for sure
  -- (a copy put back after its window is the newest nobody contested, not a proof of it).
  if fresh then return {'committed', mine, left} end
  redis.call('HSET', KEYS[1], 'restored', restored)
  -- Every replica looks at this session at its next tick (kWanted), well inside the window.
  redis.call('ZADD', ns .. 'want', 'NX', restored, string.sub(KEYS[2], #ns + 3) .. '\t' .. ARGV[7])
  return {'committed', mine, math.max(left, restored + grace - now)}
end
-- Behind what this replica acknowledged, after its window (or two states of one version): the
-- acknowledged writes are gone for the replicas that served the record meanwhile.
redis.call('HSET', KEYS[1], 'lost', '1', 'seq', math.max(seq, mine))
return {'lost', math.max(seq, mine), 0}
)lua";

// ARGV: the recovery window only. Returns {window ms left, members...} (members may hold '', the
// set's completeness mark).
constexpr const char* kList = R"lua(
local l = math.max(0, since + grace - now, set_window())
local ids = {}
if l == 0 then ids = redis.call('SMEMBERS', KEYS[2]) end
table.insert(ids, 1, l)
return ids
)lua";

// ARGV: the recovery window only. Returns {run, since, window ms left, evicted_keys}.
constexpr const char* kGeneration = R"lua(
local ev = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or '0'
return {run, tostring(since), math.max(0, since + grace - now), ev}
)lua";

// ARGV: the recovery window only. Returns what the replicas are asked to look at now: tenants
// whose id sets are being rebuilt (set_window) and "tenant\tid" of sessions in a restore window,
// dropping entries long past their window.
constexpr const char* kWanted = R"lua(
local want = ns .. 'want'
redis.call('ZREMRANGEBYSCORE', want, '-inf', now - 10 * grace)
return redis.call('ZRANGEBYSCORE', want, now - 2 * grace, '+inf')
)lua";

const std::string& script(const char* body) {
  // One string per script: the prelude then the body (EVAL caches them by SHA on the server).
  static const std::string check = std::string(kPrelude) + kCheck,
                           write = std::string(kPrelude) + kWrite,
                           remove = std::string(kPrelude) + kRemove,
                           restore = std::string(kPrelude) + kRestore,
                           list = std::string(kPrelude) + kList,
                           generation = std::string(kPrelude) + kGeneration,
                           wanted = std::string(kPrelude) + kWanted;
  if (body == kCheck) return check;
  if (body == kWrite) return write;
  if (body == kRemove) return remove;
  if (body == kRestore) return restore;
  if (body == kList) return list;
  if (body == kWanted) return wanted;
  return generation;
}

bool not_primary(const RedisReply& r) {
  return r.type == RedisReply::Type::Array && r.elements.size() == 1 &&
         r.elements[0].str == "notprimary";
}

int64_t to_int(const RedisReply& r) {
  if (r.type == RedisReply::Type::Integer) return r.integer;
  return std::atoll(std::string(r.text()).c_str());
}

SessionRecord parse_check(const RedisReply& r) {
  const auto& e = r.elements;
  if (r.type != RedisReply::Type::Array || e.size() < 5)
    throw StoreRefused("the session store answered a lookup with something unexpected");
  SessionRecord rec;
  const std::string& st = e[0].str;
  rec.state = st == "live"      ? SessionRecord::State::Live
              : st == "deleted" ? SessionRecord::State::Deleted
              : st == "pending" ? SessionRecord::State::Pending
              : st == "lost"    ? SessionRecord::State::Lost
                                : SessionRecord::State::Missing;
  rec.version = {to_int(e[1]), e[2].str};
  rec.recovering_ms = to_int(e[3]);
  rec.listed = to_int(e[4]) == 1;
  if (e.size() > 5) rec.meta = std::string(e[5].text());
  if (e.size() > 6) rec.blob = std::string(e[6].text());
  return rec;
}

SessionWrite parse_write(const RedisReply& r) {
  const auto& e = r.elements;
  if (r.type != RedisReply::Type::Array || e.size() < 3)
    throw StoreRefused("the session store answered a write with something unexpected");
  SessionWrite w;
  const std::string& o = e[0].str;
  w.outcome = o == "committed"    ? SessionWrite::Outcome::Committed
              : o == "recovering" ? SessionWrite::Outcome::Recovering
              : o == "lost"       ? SessionWrite::Outcome::Lost
              : o == "absent"     ? SessionWrite::Outcome::Absent
              : o == "listed"     ? SessionWrite::Outcome::Listed
                                  : SessionWrite::Outcome::Conflict;
  w.seq = to_int(e[1]);
  w.recovering_ms = to_int(e[2]);
  return w;
}

}  // namespace

SessionRecords::SessionRecords(BlockStore& blocks, std::string ns, int64_t grace_ms)
    : blocks_(blocks), ns_(std::move(ns)), grace_(std::to_string(grace_ms)) {}

std::string SessionRecords::window_arg() const {
  std::lock_guard<std::mutex> lock(seen_mu_);
  return grace_ + ":" + seen_run_ + ":" + seen_since_ + ":" + seen_evicted_;
}

std::string SessionRecords::new_wid() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) fail("no random bytes for a session version");
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

std::optional<std::vector<RedisReply>> SessionRecords::run(const std::vector<RedisArgs>& commands,
                                                           bool force) {
  std::vector<RedisReply> r;
  const bool ok = blocks_.call(
      [&](RedisConnection& c) {
        r = c.pipeline(commands);
        // A replica (a demoted primary): the pool drops its connections and finds the primary
        // again on the next call.
        for (const RedisReply& x : r)
          if (not_primary(x))
            throw StoreUnavailable(blocks_.pool().url().shown + " is not the primary");
      },
      force);
  if (!ok) return std::nullopt;
  for (const RedisReply& x : r)
    if (x.error()) {
      blocks_.refused("a session " + std::string(commands[0][0]), x.str);
      throw StoreRefused("the session store (" + blocks_.pool().url().shown +
                         ") refused: " + x.str);
    }
  return r;
}

std::optional<SessionRecord> SessionRecords::check(const std::string& tenant, const std::string& id,
                                                   bool with_content, bool force,
                                                   bool wait_for_list) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    gen = generation_key(ns_);
  const std::string flags = std::string(with_content ? "c" : "") + (wait_for_list ? "w" : "");
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kCheck), "3", key, list, gen, window, flags, id}}, force);
  if (!r) return std::nullopt;
  return parse_check((*r)[0]);
}

std::optional<std::vector<SessionRecord>> SessionRecords::check_many(
    const std::vector<std::pair<std::string, std::string>>& tenant_ids) {
  std::vector<std::string> keys;
  keys.reserve(tenant_ids.size() * 2);
  for (const auto& [tenant, id] : tenant_ids) {
    keys.push_back(session_key(ns_, tenant, id));
    keys.push_back(session_list_key(ns_, tenant));
  }
  // note: RedisArgs are views: the strings they name must outlive the call.
  const std::string gen = generation_key(ns_), window = window_arg();
  std::vector<RedisArgs> commands;
  for (size_t i = 0; i < tenant_ids.size(); ++i)
    commands.push_back({"EVAL", script(kCheck), "3", keys[2 * i], keys[2 * i + 1], gen, window, "",
                        tenant_ids[i].second});
  const auto r = run(commands, /*force=*/true);  // the background check: see its caller
  if (!r) return std::nullopt;
  std::vector<SessionRecord> out;
  for (const RedisReply& x : *r) out.push_back(parse_check(x));
  return out;
}

std::optional<SessionWrite> SessionRecords::write(const std::string& tenant, const std::string& id,
                                                  const SessionVersion& expected,
                                                  const std::string& wid, const std::string& meta,
                                                  const std::string& blob, int sync_replicas) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    gen = generation_key(ns_), seq = std::to_string(expected.seq),
                    replicas = std::to_string(sync_replicas),
                    wait_ms = std::to_string(blocks_.pool().timeout().count());
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  std::vector<RedisArgs> commands = {{"EVAL", script(kWrite), "3", key, list, gen, window, seq,
                                      expected.wid, wid, meta, blob, id}};
  // Acknowledged once a replica of Redis has it too (where there are replicas): a failover to that
  // replica then keeps it. WAIT answers how many did; fewer is counted, not refused (see
  // SessionWrite::unreplicated).
  if (sync_replicas > 0) commands.push_back({"WAIT", replicas, wait_ms});
  const auto r = run(commands);
  if (!r) return std::nullopt;
  SessionWrite w = parse_write((*r)[0]);
  if (sync_replicas > 0 && w.outcome == SessionWrite::Outcome::Committed &&
      (*r)[1].integer < sync_replicas) {
    w.unreplicated = true;
    blocks_.metrics().add_unreplicated_write();
  }
  return w;
}

std::optional<SessionWrite> SessionRecords::remove(const std::string& tenant, const std::string& id,
                                                   int64_t known_seq, const std::string& wid) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    gen = generation_key(ns_), known = std::to_string(known_seq);
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kRemove), "3", key, list, gen, window, known, wid, id}});
  if (!r) return std::nullopt;
  return parse_write((*r)[0]);
}

std::optional<SessionWrite> SessionRecords::restore(const std::string& tenant,
                                                    const std::string& id,
                                                    const SessionVersion& version, RestoreKind kind,
                                                    const std::string& meta,
                                                    const std::string& blob) {
  const std::string key = session_key(ns_, tenant, id), list = session_list_key(ns_, tenant),
                    gen = generation_key(ns_), seq = std::to_string(version.seq);
  const char* k = kind == RestoreKind::Copy    ? "copy"
                  : kind == RestoreKind::Ghost ? "ghost"
                                               : "tomb";
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kRestore), "3", key, list, gen, window, seq, version.wid, k,
                       meta, blob, id}});
  if (!r) return std::nullopt;
  return parse_write((*r)[0]);
}

std::optional<std::pair<std::vector<std::string>, int64_t>> SessionRecords::list(
    const std::string& tenant) {
  // KEYS[1] is the generation's hash: the prelude reads no session here.
  const std::string list = session_list_key(ns_, tenant), gen = generation_key(ns_);
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kList), "3", gen, list, gen, window}});
  if (!r) return std::nullopt;
  const auto& e = (*r)[0].elements;
  if (e.empty()) throw StoreRefused("the session store answered a list with something unexpected");
  std::pair<std::vector<std::string>, int64_t> out{{}, to_int(e[0])};
  for (size_t i = 1; i < e.size(); ++i)
    if (!e[i].str.empty()) out.first.push_back(e[i].str);  // '' marks the set complete
  return out;
}

std::optional<std::pair<std::string, int64_t>> SessionRecords::generation(bool force) {
  const std::string gen = generation_key(ns_);
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kGeneration), "3", gen, gen, gen, window}}, force);
  if (!r) return std::nullopt;
  const auto& e = (*r)[0].elements;
  if (e.size() != 4)
    throw StoreRefused("the session store answered a generation with something unexpected");
  {
    std::lock_guard<std::mutex> lock(seen_mu_);
    seen_run_ = e[0].str;
    seen_since_ = std::string(e[1].text());
    seen_evicted_ = std::string(e[3].text());
  }
  return std::pair<std::string, int64_t>{e[0].str + ":" + std::string(e[1].text()), to_int(e[2])};
}

std::optional<std::vector<std::string>> SessionRecords::wanted() {
  const std::string gen = generation_key(ns_);
  const std::string window = window_arg();  // kept alive: RedisArgs are views of it
  const auto r = run({{"EVAL", script(kWanted), "3", gen, gen, gen, window}});
  if (!r) return std::nullopt;
  std::vector<std::string> out;
  for (const RedisReply& x : (*r)[0].elements) out.push_back(x.str);
  return out;
}

}  // namespace fak::store
