// The table of named sessions a replica holds in memory, for the /v1/fak/ API (not to be confused
// with the store: store/ is the Redis one replicas share, server/shared_sessions.h keeps this table
// in step with it; saved sessions are files under --session-dir). Named sessions: an agent keeps
// its context on the server and edits it — append text, ids or messages, generate, clone, save/load
// under --session-dir, and quarantine (evict) a token span or a whole segment. A segment is what
// one append (one per message) or one generate added, so "forget message 3" is one call.
//
// Not thread-safe: every call runs on the scheduler thread (Scheduler::run_job), which owns the KV
// cache these sessions live in.
//
// Edits that need forward passes (create or append with content, an exact quarantine's replay)
// come in two halves so that the scheduler can read their tokens in --prefill-chunk pieces
// between everyone else's decode steps, charged to the tenant like any prompt: begin_* checks
// everything that can be refused, lends the session out (busy) and says which tokens it must come
// to hold; end_edit commits, or rolls back so that a refused or failed call changes nothing (a
// session whose create failed was never there).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_prompt.h"
#include "core/json.h"
#include "runtime/generate.h"
#include "runtime/session.h"

namespace fak::server {

using ojson = fak::ojson;

struct Segment {
  int begin = 0, end = 0;
  std::string kind;  // "text", "ids", "message:<role>", "generated"
};

struct EvictReport {
  int evicted = 0;            // tokens removed
  int tokens_recomputed = 0;  // forward positions re-run to keep the rest exact / logits fresh
  int size = 0;               // tokens left
};

// What sessions may hold, so that kept contexts never starve live requests nor one tenant the
// others: a session's KV comes out of the server's one KV budget. Tokens count whole sessions
// (a clone counts as much as its original, though they share blocks: conservative).
struct SessionQuota {
  size_t max_sessions = 256;  // all tenants together
  size_t max_sessions_per_tenant = 64;
  int64_t max_tokens = INT64_MAX;             // all sessions together
  int64_t max_tokens_per_tenant = INT64_MAX;  // one tenant's sessions
};

// The default: sessions together hold at most half of what the KV budget holds (the rest stays
// for requests and the prefix cache), one tenant's at most a quarter, and always one context.
SessionQuota default_session_quota(int64_t kv_capacity_tokens, int ctx);

// An edit in flight: the session (lent out) must come to hold `target`, which extends what it
// holds now. reply: what the call answers once committed (end_edit completes it).
struct SessionEdit {
  std::string tenant, id;
  Session* session = nullptr;
  std::vector<int32_t> target;
  ojson reply;
};

class SessionTable {
 public:
  SessionTable(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
               const chat::ChatPrompt* chat, std::filesystem::path session_dir, int ctx,
               SessionQuota quota = {});

  // Each call names the tenant; a session is visible only to the tenant that made it.
  void remove(const std::string& tenant, const std::string& id);
  std::vector<std::string> list(const std::string& tenant) const;
  ojson describe(const std::string& tenant, const std::string& id) const;

  // POST /sessions: a new session (id: wanted, or made up), with the body's content if it has any
  // ({"text"} | {"ids"} | {"messages", "add_generation_prompt"}, as append). Hidden until
  // end_edit commits it.
  SessionEdit begin_create(const std::string& tenant, const std::string& wanted, const ojson& body);
  // body: {"text": str} | {"ids": [int]} | {"messages": [...], "add_generation_prompt": bool,
  // "special_tokens_in_content": bool}. The whole of it (generation prompt included) is checked
  // against the context and the quota before anything is appended.
  SessionEdit begin_append(const std::string& tenant, const std::string& id, const ojson& body);
  // Span [begin, end) or a segment (index >= 0); exact mode unless shift. Shift, and a span at
  // the end, are done here (no replay); exact cuts the session at `begin` and replays the rest.
  SessionEdit begin_evict(const std::string& tenant, const std::string& id, int begin, int end,
                          int segment, EvictMode mode);
  // ok: the session holds edit.target; commits and returns the reply. Otherwise puts everything
  // back as it was before begin_* and returns null.
  ojson end_edit(const SessionEdit& edit, bool ok);

  // Generation runs in the scheduler's batch: begin_generate lends the session out (clamping
  // max_tokens to the context) and marks it busy, so every other call on it gets 409 until
  // end_generate takes it back — which appends the last token when the reply ended on length
  // (as fak::generate does), records the generated segment and returns the session's new size.
  Session* begin_generate(const std::string& tenant, const std::string& id,
                          GenerateOptions& options, int* begin);
  int end_generate(const std::string& tenant, const std::string& id, const std::string& reason,
                   int32_t last, int begin);
  std::string clone(const std::string& tenant, const std::string& id, const std::string& new_id);
  // Files live in a folder of the tenant's own under --session-dir: tenants never see each
  // other's names.
  void save(const std::string& tenant, const std::string& id, const std::string& name) const;
  std::string load(const std::string& tenant, const std::string& name, const std::string& id);

  // Hooks for --store (store/shared_sessions.h), where sessions live in a shared store and this
  // replica holds copies. None of them answers 404 or 409: they see whatever this replica holds.
  // canonical: the KV is what a cold prefill of the tokens computes (no shift eviction, not read
  // from a file), so its whole blocks can be shared by content.
  struct Copy {
    Session session;
    std::vector<Segment> segments;
    bool canonical = true;
  };
  bool holds(const std::string& tenant, const std::string& id) const;
  // A copy (blocks shared) of what this replica holds: to roll back to, or to publish.
  Copy copy(const std::string& tenant, const std::string& id) const;
  const Session& session_of(const std::string& tenant, const std::string& id) const;
  // Replaces (or adds) this replica's copy; 429 when it would pass the quota.
  void put(const std::string& tenant, const std::string& id, Copy copy);
  void drop(const std::string& tenant, const std::string& id);
  // A copy read from the store that holds `partial` so far and must come to hold target (the
  // scheduler reads the rest, as for an append); end_edit commits it, or it is gone.
  SessionEdit begin_install(const std::string& tenant, const std::string& id, Session partial,
                            std::vector<int32_t> target, std::vector<Segment> segments);
  // Ids made up by create are random (replicas must not pick the same one), and copies `spare`
  // accepts (they are in the store) are dropped, least recently used first, to make room for
  // others within the quota.
  void share(std::function<bool(const std::string& tenant, const std::string& id)> spare);

 private:
  struct Entry {
    Entry(std::string tenant, Session session, std::vector<Segment> segments = {})
        : tenant(std::move(tenant)), session(std::move(session)), segments(std::move(segments)) {}
    std::string tenant;
    Session session;
    std::vector<Segment> segments;
    bool busy = false;      // lent to the scheduler (generation or an edit)
    bool creating = false;  // made by a create still in flight: invisible until it commits
    // An edit in flight: the session as it was (a clone: blocks shared), the segments it will
    // have, and the size it is growing to (counted against the quota meanwhile).
    std::optional<Session> backup;
    std::vector<Segment> segments_after;
    int pending_size = 0;
    bool canonical = true;  // see Copy
    uint64_t used = 0;      // when last got (for dropping spare copies)
  };
  Entry& get(const std::string& tenant, const std::string& id);
  const Entry& get(const std::string& tenant, const std::string& id) const;
  // The tokens of one edit's content, one segment each (kind: "text", "ids", "message:<role>").
  struct Piece {
    std::vector<int32_t> ids;
    std::string kind;
  };
  std::vector<Piece> pieces_of(const ojson& body) const;
  // Lends e out for an edit that grows it to target with `segments` afterwards.
  SessionEdit lend(Entry& e, const std::string& id, std::vector<int32_t> target,
                   std::vector<Segment> segments, ojson reply);
  std::string new_id(const std::string& tenant, const std::string& wanted);
  void check_count(const std::string& tenant);  // 429 when one more session would pass the quota
  // 429 when `tenant`'s sessions would hold more than the quota with `more` tokens added.
  void check_tokens(const std::string& tenant, int64_t more);
  int64_t tokens_of(const std::string& tenant) const;  // "" = every tenant's
  std::filesystem::path file_for(const std::string& tenant, const std::string& name,
                                 bool create_dir) const;
  // --store: drops spare copies (least recently used first) until `more` tokens and one more
  // session fit, or none is left to drop.
  void make_room(const std::string& tenant, int64_t more);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  const chat::ChatPrompt* chat_;
  std::filesystem::path dir_;
  int ctx_;
  SessionQuota quota_;
  uint64_t counter_ = 0;
  uint64_t clock_ = 0;                                                 // Entry::used
  std::function<bool(const std::string&, const std::string&)> spare_;  // null: not shared
  std::map<std::pair<std::string, std::string>, Entry> sessions_;      // (tenant, id)
};

}  // namespace fak::server
