// Named sessions for the /v1/fak/ API: an agent keeps its context on the server and edits it —
// append text, ids or messages, generate, clone, save/load under --session-dir, and quarantine
// (evict) a token span or a whole segment. A segment is what one append (one per message) or one
// generate added, so "forget message 3" is one call.
//
// Not thread-safe: every call runs on the scheduler thread (Scheduler::run_job), which owns the KV
// cache these sessions live in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "server/chat_prompt.h"

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

class SessionStore {
 public:
  SessionStore(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
               const ChatPrompt* chat, std::filesystem::path session_dir, int ctx,
               SessionQuota quota = {});

  // Each call names the tenant; a session is visible only to the tenant that made it.
  std::string create(const std::string& tenant, const std::string& id);
  void remove(const std::string& tenant, const std::string& id);
  std::vector<std::string> list(const std::string& tenant) const;
  ojson describe(const std::string& tenant, const std::string& id) const;

  // body: {"text": str} | {"ids": [int]} | {"messages": [...], "add_generation_prompt": bool}
  ojson append(const std::string& tenant, const std::string& id, const ojson& body);
  // Generation runs in the scheduler's batch: begin_generate lends the session out (clamping
  // max_tokens to the context) and marks it busy, so every other call on it gets 409 until
  // end_generate takes it back — which appends the last token when the reply ended on length
  // (as fak::generate does), records the generated segment and returns the session's new size.
  Session* begin_generate(const std::string& tenant, const std::string& id,
                          GenerateOptions& options, int* begin);
  int end_generate(const std::string& tenant, const std::string& id, const std::string& reason,
                   int32_t last, int begin);
  std::string clone(const std::string& tenant, const std::string& id, const std::string& new_id);
  // Span [begin, end) or segment index; exact mode unless shift.
  EvictReport evict_span(const std::string& tenant, const std::string& id, int begin, int end,
                         EvictMode mode);
  EvictReport evict_segment(const std::string& tenant, const std::string& id, int index,
                            EvictMode mode);
  // Files live in a folder of the tenant's own under --session-dir: tenants never see each
  // other's names.
  void save(const std::string& tenant, const std::string& id, const std::string& name) const;
  std::string load(const std::string& tenant, const std::string& name, const std::string& id);

 private:
  struct Entry {
    std::string tenant;
    Session session;
    std::vector<Segment> segments;
    bool busy = false;  // lent to the scheduler for generation
  };
  Entry& get(const std::string& tenant, const std::string& id);
  const Entry& get(const std::string& tenant, const std::string& id) const;
  std::string new_id(const std::string& tenant, const std::string& wanted);
  // 429 when `tenant`'s sessions would hold more than the quota with `more` tokens added.
  void check_tokens(const std::string& tenant, int64_t more) const;
  int64_t tokens_of(const std::string& tenant) const;  // "" = every tenant's
  std::filesystem::path file_for(const std::string& tenant, const std::string& name,
                                 bool create_dir) const;
  void add(Entry& e, const std::vector<int32_t>& ids, const std::string& kind);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  const ChatPrompt* chat_;
  std::filesystem::path dir_;
  int ctx_;
  SessionQuota quota_;
  uint64_t counter_ = 0;
  std::map<std::pair<std::string, std::string>, Entry> sessions_;  // (tenant, id)
};

}  // namespace fak::server
