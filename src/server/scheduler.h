// Continuous batching. One scheduler thread owns the model's KV cache, the prefix cache and every
// session: requests queue up, join the running batch between decode steps (their prompt is
// reused from the tenant's cached prefix, the rest prefilled in chunks inside the decode steps),
// and each step samples one token for every decoding sequence and runs one append_batch over all of
// them plus the prompt chunks. Tokens go back to the HTTP thread
// through a GenStream; a client that leaves cancels its stream and frees its slot at the next step.
//
// Anything else that touches sessions (the /v1/fak/ API) runs as a job on the same thread, between
// steps, so the KV cache is never shared across threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/memory_info.h"
#include "grammar/grammar.h"
#include "runtime/kv_budget.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/sequence_decoder.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "server/cache_dir.h"
#include "server/metrics.h"

namespace fak::store {
class BlockStore;
struct Prefetched;
}  // namespace fak::store

namespace fak::server {

struct GenEvent {
  enum class Kind { Started, Progress, Token, Done, Error };
  Kind kind = Kind::Token;
  int32_t token = 0;
  int prompt_tokens = 0, cached_tokens = 0;  // Started; Progress: prompt tokens read so far
  std::string text;                          // Done: finish reason; Error: message
  int index = 0;                             // Token, Done: which choice (GenRequest::n)
  // Token, when GenRequest::top_logprobs >= 0: the token's log-probability under the model's
  // distribution, and the most likely alternatives (id, logprob), most likely first.
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  // Error: the HTTP status it deserves (503 when the server is out of KV memory or shutting
  // down: retry later; 500 otherwise).
  int status = 500;

  static GenEvent started(int prompt_tokens, int cached_tokens) {
    return make(Kind::Started, prompt_tokens, cached_tokens, "", 0);
  }
  static GenEvent progress(int prompt_tokens, int read) {
    return make(Kind::Progress, prompt_tokens, read, "", 0);
  }
  static GenEvent token_of(int32_t id, int index) {
    GenEvent e = make(Kind::Token, 0, 0, "", index);
    e.token = id;
    return e;
  }
  static GenEvent done(std::string reason, int index) {
    return make(Kind::Done, 0, 0, std::move(reason), index);
  }
  static GenEvent error(std::string message, int index = 0, int status = 500) {
    GenEvent e = make(Kind::Error, 0, 0, std::move(message), index);
    e.status = status;
    return e;
  }

 private:
  static GenEvent make(Kind kind, int prompt, int cached, std::string text, int index) {
    GenEvent e;
    e.kind = kind;
    e.prompt_tokens = prompt;
    e.cached_tokens = cached;
    e.text = std::move(text);
    e.index = index;
    return e;
  }
};

// Scheduler -> HTTP thread. The consumer may cancel at any time; the scheduler notices at its
// next step.
class GenStream {
 public:
  void push(GenEvent e);
  // Waits up to `timeout` for events; returns what arrived (possibly nothing).
  std::vector<GenEvent> wait(std::chrono::milliseconds timeout);
  // client_gone: the client left (counted in metrics); otherwise the consumer has all it wants
  // (a stop string matched).
  void cancel(bool client_gone = true) {
    if (client_gone) client_gone_ = true;  // a later cancel for another cause keeps it
    cancelled_ = true;
  }
  bool cancelled() const { return cancelled_; }
  bool client_gone() const { return client_gone_; }
  // One choice of several is over for the consumer (its stop string matched): only it ends.
  void cancel_choice(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    if (size_t(index) >= cancelled_choices_.size()) cancelled_choices_.resize(size_t(index) + 1);
    cancelled_choices_[size_t(index)] = true;
  }
  bool choice_cancelled(int index) {
    std::lock_guard<std::mutex> lock(mu_);
    return size_t(index) < cancelled_choices_.size() && cancelled_choices_[size_t(index)];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> events_;
  std::vector<bool> cancelled_choices_;
  std::atomic<bool> cancelled_{false}, client_gone_{false};
};

struct GenRequest {
  std::string partition;  // prefix-cache tenant and salt
  // The API key's tenant (tenant_hash): fairness between keys (server/fair_share.h) counts the
  // queue, the batch, prompt reading and KV memory by it.
  std::string tenant;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  // How each choice chooses its tokens (runtime/sequence_decoder.h): sampling, stop ids, a
  // grammar every token follows (the stop ids end it once it is complete) except inside an
  // optional leading reasoning block, the reasoning budget.
  DecodeRules rules;
  std::shared_ptr<GenStream> stream;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  // /v1/fak/ sessions: decode into this caller-owned session (nobody else may touch it until
  // on_finish) instead of a prompt through the prefix cache, batched with everything else.
  // on_finish runs on the scheduler thread, before the Done or Error event, with the finish reason
  // and the last token sampled (-1 if none) — exactly once, whatever happens.
  // With a session, prompt is what the session must hold before decoding: the tokens past its
  // size are read in --prefill-chunk pieces like any prompt (session create, append and an exact
  // quarantine's replay), so they never stall the other streams.
  Session* session = nullptr;
  std::function<void(const std::string& reason, int32_t last)> on_finish;
  // Only read the prompt (into the session), generate nothing; ends with reason "prefilled".
  bool prefill_only = false;
  // Choices: the prompt is read once, then its session is cloned (blocks shared, copy-on-write)
  // into n sequences sampled with seeds seed, seed + 1, ... Each takes a batch slot.
  int n = 1;
  int top_logprobs = -1;  // -1: none; 0: the sampled token's; k: and the k most likely
  // --store: the prompt's blocks the shared store had beyond the local cache (fetched by submit,
  // installed by admit).
  std::shared_ptr<store::Prefetched> prefetched;
};

struct SchedulerOptions {
  int parallel = 4;    // active sequences at most
  int max_queue = 64;  // waiting requests at most; more get 429
  // KV memory (runtime/kv_budget.h): one hard budget for every sequence, the prefix cache and the
  // /v1/fak/ sessions. kv_bytes 0 = the default, sized from ctx x parallel + cache_bytes (0 = one
  // context, at least 256 MiB) and bounded by the machine's memory (available_memory, 0 = read it
  // from the system).
  size_t kv_bytes = 0;
  size_t cache_bytes = 0;
  size_t available_memory = 0;
  DType kv_type = DType::F32;
  bool keep_kraw = true;
  bool keep_window_rows = false;  // --swa-full (memory/kv_cache.h)
  // Map and back the whole KV budget at start (KvCache::map_all), so no request pays for the first
  // touch of its memory; false: slabs are mapped as sequences need them.
  bool map_kv_at_start = false;
  // Before the first request, on the scheduler's thread: one --prefill-chunk of a prompt and one
  // decode step of --parallel sequences, so that the first requests do not pay for sizing (and, on
  // a VM, faulting in) the forward's buffers: 150 ms on the first chunk of a 0.8B hybrid.
  bool warm_up = false;
  int ctx = 0;              // context limit (0 = the model's; never more than the budget holds)
  int prefill_chunk = 256;  // prompt tokens prefilled per step, all requests together
  // Speculative decoding (runtime/speculative.h): prompt-lookup drafts, or the MTP head's, for
  // every sequence that wants no logprobs (a grammar and a reasoning budget included; the MTP
  // head, which keeps a session's hidden states, not for a /v1/fak/ session's). Each step a
  // sequence drafts up to max_draft / (decoding sequences) tokens, so a full batch (already past
  // the weight-bandwidth bound) drafts few or none. nullopt: off.
  std::optional<DraftOptions> draft;
  // --cache-dir (server/cache_dir.h): the prefix cache is reloaded from there at start and written
  // there by shutdown(). Empty: off. cache_dir_bytes caps the files (0: what the cache holds);
  // cache_dir_keep says which saved partitions still belong to a tenant (null: all); log prints
  // the lines both say (null: silent).
  std::filesystem::path cache_dir;
  size_t cache_dir_bytes = 0;
  std::function<bool(const std::string& partition)> cache_dir_keep;
  std::function<void(const std::string& line)> log;
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options, Metrics* metrics);
  ~Scheduler();

  // Queues a generation. Throws ApiError 429 when the queue is full, 503 when shutting down, 400
  // when it asks for more choices than --parallel.
  void submit(GenRequest request);
  // --store (store/block_store.h): a prompt missing locally is looked up there (by submit, on the
  // caller's thread) and every sequence's blocks are published there when it ends. Set before
  // the first submit.
  void attach_store(std::shared_ptr<store::BlockStore> store) { store_ = std::move(store); }
  // Runs fn on the scheduler thread between steps and waits; rethrows what fn throws.
  void run_job(std::function<void()> fn);
  // Stops admitting, ends queued and active generations with an error, joins the thread; then
  // writes the prefix cache to --cache-dir, once.
  void shutdown();

  int ctx() const { return ctx_; }
  const KvBudget& kv_budget() const { return budget_; }
  const MemoryInfo& memory_info() const { return memory_; }
  SchedulerGauges gauges() const;
  PrefixCacheStats cache_stats() const { return prefix_->stats(); }
  // For jobs (scheduler thread only): the shared KV cache and prefix cache.
  const std::shared_ptr<KvCache>& kv_cache() const { return cache_; }
  PrefixCache& prefix_cache() { return *prefix_; }

 private:
  struct Active;
  void loop();
  void warm_up();
  void start_mtp(Active& a);
  void admit(GenRequest request);
  // A request's first choice clones the rest once its prompt is read: one prefill for n choices.
  void spawn_choices();
  // Shared prompt reading (scheduler_admit.cpp): the active sequence still reading the longest
  // common start of a's prompt, past what a has from the prefix cache, becomes a's leader.
  void follow_leader(Active& a);
  // Where a leader's next chunk must end: the nearest point a follower clones at.
  int next_follow_point(const Active& leader) const;
  // After a step: followers whose leader reached their point clone it; those whose leader ended
  // or went past read on their own.
  void join_followers();
  void step();
  void accept_verified(Active& a);
  // tail: the token sampled last and not appended (the stop token, or the last one emitted); a
  // sequence from the prefix cache appends it in the next step before it is offered back.
  void finish(Active& a, const std::string& reason, int32_t tail = -1);
  void offer_to_cache(Active& a);
  void after_prompt_chunk(Active& a);
  // KV for this step's batch before its forward call (see scheduler.cpp); drops who cannot have it.
  void reserve_kv(std::vector<Session*>& batch, std::vector<std::span<const int32_t>>& spans,
                  std::vector<Active*>& members);
  void stop_for_kv(Active& a, const std::string& message);
  // The prompt tokens each active sequence reads this step (fair_share.h), by index in active_.
  std::vector<int> plan_prefill() const;
  int prefill_budget() const;  // prompt tokens this step may read in all

  const std::shared_ptr<const grammar::TokenIndex>& token_index();
  CacheDir::Log log() const;

  std::shared_ptr<const Model> model_;
  SchedulerOptions options_;
  std::shared_ptr<const grammar::TokenIndex> token_index_;  // built at the first grammar
  Metrics* metrics_;
  int ctx_;
  MemoryInfo memory_;
  KvBudget budget_;
  std::shared_ptr<KvCache> cache_;
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<CacheDir> cache_dir_;
  std::shared_ptr<store::BlockStore> store_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenRequest> queue_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  int active_count_ = 0;  // sequences running or admitted (choices count one each)
  // Round robin between API keys: when each tenant last had a request admitted.
  std::map<std::string, uint64_t> last_admitted_;
  uint64_t admissions_ = 0;
  uint64_t next_active_id_ = 0;  // scheduler thread only

  std::vector<std::unique_ptr<Active>> active_;  // scheduler thread only
  std::thread thread_;
};

}  // namespace fak::server
