#include "server/scheduler.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <map>
#include <optional>

#include "core/error.h"
#include "runtime/model_cache.h"
#include "runtime/mtp_draft.h"
#include "server/api_error.h"
#include "server/fair_share.h"
#include "server/scheduler_active.h"
#include "store/block_store.h"

namespace fak::server {

void GenStream::push(GenEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

std::vector<GenEvent> GenStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<GenEvent> out(std::make_move_iterator(events_.begin()),
                            std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

namespace {

// log-softmax of the chosen token and the k most likely ones, under the model's own distribution
// (the raw logits, before penalties, temperature or a grammar's mask), as OpenAI reports them.
void fill_logprobs(std::span<const float> logits, int32_t chosen, int k, GenEvent& e) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - mx);
  const double log_z = mx + std::log(sum);
  e.logprob = float(double(logits[size_t(chosen)]) - log_z);
  if (k <= 0) return;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  k = std::min<int>(k, int(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  for (int i = 0; i < k; ++i)
    e.top.emplace_back(ids[size_t(i)], float(double(logits[size_t(ids[size_t(i)])]) - log_z));
}

}  // namespace

Scheduler::Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options, Metrics* metrics)
    : model_(std::move(model)), options_(options), metrics_(metrics) {
  const int model_ctx = model_->config().context_limit();
  // Never past what the model was trained for (or, with YaRN, stretched to): positions it has
  // never seen. A longer --ctx is cut to it, with one line that says so before anything is
  // allocated.
  if (options_.ctx > model_ctx)
    std::fprintf(stderr,
                 "fak serve: warning: --ctx %d is longer than the model's context of %d%s: using "
                 "%d\n",
                 options_.ctx, model_ctx,
                 model_->config().rope_scaling == RopeScaling::Yarn
                     ? " (its YaRN factor included; --ctx-past-training keeps it anyway)"
                     : " (a YaRN rope_scaling stretches it where the model card gives one; "
                       "--ctx-past-training keeps it anyway)",
                 model_ctx);
  ctx_ = options_.ctx > 0 ? std::min(options_.ctx, model_ctx) : model_ctx;
  options_.parallel = std::max(1, options_.parallel);
  options_.max_queue = std::max(0, options_.max_queue);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  memory_ = read_memory_info();
  KvBudgetOptions bo;
  bo.dtype = options_.kv_type;
  bo.keep_kraw = options_.keep_kraw;
  bo.keep_window_rows = options_.keep_window_rows;
  bo.ctx = ctx_;
  bo.parallel = options_.parallel;
  bo.total_bytes = options_.kv_bytes;
  bo.cache_bytes = options_.cache_bytes;
  bo.available = options_.available_memory ? options_.available_memory : memory_.available();
  bo.weights_bytes = options_.available_memory ? 0 : mapped_weight_bytes(*model_);
  std::shared_ptr<KvStorage> storage = model_->make_kv_storage();
  if (!storage->host_accessible() && !options_.available_memory) {
    // KV on a GPU: bounded by the device's free memory, once its weights and the forward's working
    // memory for the largest step this scheduler makes are out of it.
    const int per_sequence = 1 + (options_.draft ? options_.draft->max_draft : 0);
    model_->reserve_device_scratch(options_.prefill_chunk + options_.parallel * per_sequence,
                                   options_.parallel * per_sequence);
    bo.available = storage->available_bytes();
    bo.weights_bytes = 0;
  }
  if (options_.draft && options_.draft->mtp)
    bo.draft_head_bytes =
        MtpDrafter::kv_bytes(*model_, ctx_ + options_.draft->max_draft + 1, options_.kv_type);
  budget_ = plan_kv_budget(*model_, bo);
  KvCacheOptions ko;
  ko.storage = storage;
  ko.keep_kraw = options_.keep_kraw;
  ko.keep_window_rows = options_.keep_window_rows;
  ko.dtype = options_.kv_type;
  ko.max_bytes = budget_.cache_bytes();
  cache_ = make_kv_cache(*model_, ko);
  if (options_.map_kv_at_start && cache_->has_windows()) {
    log()(
        "KV memory: mapped as needed (sliding-window layers: how much goes to their rows follows "
        "the sequences)");
  } else if (options_.map_kv_at_start) {
    const auto start = std::chrono::steady_clock::now();
    const size_t mapped = cache_->map_all();
    char line[160];
    std::snprintf(line, sizeof(line),
                  "KV memory: %zu MiB mapped at start in %.1f s (--kv-lazy maps it as needed)",
                  mapped >> 20,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    log()(line);
  }
  // No sequence can hold more than the budget: a prompt that could never fit is refused up front
  // (400 context_length_exceeded) instead of failing half-way through its prefill.
  ctx_ = int(std::min<size_t>(size_t(ctx_), cache_->capacity_tokens()));
  // The prefix cache gives blocks back whenever a sequence needs one (it is the KV cache's
  // reclaimer); its own cap only bounds hybrid models' state checkpoints, which are not KV blocks.
  prefix_ = std::make_unique<PrefixCache>(model_, cache_, budget_.cache_bytes());
  if (!options_.cache_dir.empty()) {
    cache_dir_ = std::make_unique<CacheDir>(options_.cache_dir, *model_, *cache_);
    cache_dir_->reload(*prefix_, options_.cache_dir_keep, log());
  }
  // The forward runs on the scheduler's thread with as many OpenMP threads as its creator was set
  // to use (omp_set_num_threads holds for the calling thread only).
  // The warm-up runs there too (its buffers are that thread's), and is over before the server
  // listens.
  const int threads = omp_get_max_threads();
  std::promise<void> warm;
  std::future<void> warmed = warm.get_future();
  thread_ = std::thread([this, threads, &warm] {
    omp_set_num_threads(threads);
    // From here the KV cache is this thread's alone (KvCache::bind_thread).
    cache_->bind_thread(std::this_thread::get_id());
    if (options_.warm_up) warm_up();
    warm.set_value();
    loop();
    cache_->bind_thread({});
  });
  warmed.wait();
}

Scheduler::~Scheduler() {
  shutdown();
}

const std::shared_ptr<const grammar::TokenIndex>& Scheduler::token_index() {
  // Built once, on the scheduler thread, when the first constrained request arrives (~0.1 s for a
  // 151k-token vocabulary), and shared by every sequence after.
  if (!token_index_) {
    check(model_->tokenizer() != nullptr, "constrained decoding needs the model's tokenizer");
    token_index_ = grammar::TokenIndex::build(*model_->tokenizer());
  }
  return token_index_;
}

void Scheduler::submit(GenRequest request) {
  if (request.n < 1 || request.n > options_.parallel)
    throw ApiError(400,
                   "`n` must be between 1 and the server's --parallel (" +
                       std::to_string(options_.parallel) + "), got " + std::to_string(request.n),
                   "n");
  // The shared store's blocks are read here, on the caller's thread: the scheduler's never waits
  // on the network.
  if (store_ && !request.session && request.prompt.size() > 1)
    request.prefetched = store_->fetch(*prefix_, request.partition, request.prompt);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    // Requests that can start right away do not count against the queue bound.
    const int free_slots = std::max(0, options_.parallel - active_count_) / request.n;
    const size_t capacity = size_t(options_.max_queue + free_slots);
    if (queue_.size() >= capacity) {
      // Full. Each API key with requests queued has an equal share of it: a key under its share
      // takes the place of the newest request of the key furthest over its own, so one key
      // filling the queue cannot lock the others out (fair_share.h).
      std::vector<std::string> tenants;
      for (const GenRequest& q : queue_) tenants.push_back(q.tenant);
      const std::optional<size_t> victim =
          capacity > 0 ? queue_victim(tenants, request.tenant, capacity) : std::nullopt;
      if (!victim)
        throw ApiError(429,
                       "the server is busy: " + std::to_string(queue_.size()) +
                           " requests are already queued (--max-queue " +
                           std::to_string(options_.max_queue) +
                           "), as many of them yours as your API key's share; retry later",
                       "", "queue_full");
      auto dropped = std::make_shared<GenRequest>(std::move(queue_[*victim]));
      queue_.erase(queue_.begin() + std::ptrdiff_t(*victim));
      // note: on_finish touches a lent session, which only the scheduler thread may: the refusal
      // is delivered there, as a job.
      const std::string message = "the server is busy: this request left the queue (--max-queue " +
                                  std::to_string(options_.max_queue) +
                                  ") to make room for another API key's, since yours held more "
                                  "than its share; retry later";
      jobs_.push_back([dropped, message] {
        if (dropped->on_finish) dropped->on_finish("error", -1);
        dropped->stream->push(GenEvent::error(message, 0, 429));
      });
    }
    queue_.push_back(std::move(request));
  }
  cv_.notify_one();
}

void Scheduler::run_job(std::function<void()> fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    jobs_.push_back([fn = std::move(fn), done] {
      try {
        fn();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_one();
  result.get();
}

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  // Every sequence is gone and no job runs any more: the cache is this thread's alone.
  if (cache_dir_) {
    cache_dir_->spill(*prefix_, options_.cache_dir_bytes, log());
    cache_dir_.reset();
  }
}

CacheDir::Log Scheduler::log() const {
  if (options_.log) return options_.log;
  return [](const std::string&) {};
}

SchedulerGauges Scheduler::gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {int(queue_.size()), active_count_, options_.parallel, options_.max_queue};
}

// Throwaway sequences: nothing goes into the prefix cache or the metrics, and their KV goes back.
void Scheduler::warm_up() {
  const auto start = std::chrono::steady_clock::now();
  try {
    const int prompt = std::max(1, std::min(options_.prefill_chunk, ctx_ - 2));
    std::vector<int32_t> tokens(static_cast<size_t>(prompt));
    for (int i = 0; i < prompt; ++i) tokens[size_t(i)] = int32_t(i % model_->config().vocab);
    Session first(model_, cache_);
    first.append(tokens);
    std::vector<Session> clones;
    for (int i = 0; i < options_.parallel; ++i) clones.push_back(first.clone());
    std::vector<Session*> batch;
    for (Session& s : clones) batch.push_back(&s);
    decode_batch(batch, std::vector<int32_t>(batch.size(), 0));
  } catch (const std::exception& e) {
    log()(std::string("warm-up skipped: ") + e.what());
    return;
  }
  char line[96];
  std::snprintf(line, sizeof(line), "warmed up in %.2f s (--no-warmup skips it)",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  log()(line);
}

void Scheduler::loop() {
  for (;;) {
    std::deque<std::function<void()>> jobs;
    std::vector<GenRequest> admitted;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !jobs_.empty() || !active_.empty() ||
               (!queue_.empty() && int(active_.size()) < options_.parallel);
      });
      stopping = stopping_;
      jobs.swap(jobs_);
      // Sequences: a request of n choices takes n slots (its first choice clones the rest).
      int sequences = 0;
      for (const auto& a : active_) sequences += 1 + a->choices_left;
      // The next free slot goes to the oldest request of the API key with the fewest sequences
      // running (fair_share.h): a key that queued many requests does not make the others wait
      // behind all of them.
      std::map<std::string, int> running;
      for (const auto& a : active_) running[a->req.tenant] += 1 + a->choices_left;
      while (!stopping && !queue_.empty()) {
        std::vector<std::string> tenants;
        std::vector<int> counts;
        std::vector<uint64_t> last;
        for (const GenRequest& q : queue_) {
          tenants.push_back(q.tenant);
          counts.push_back(running[q.tenant]);
          const auto it = last_admitted_.find(q.tenant);
          last.push_back(it == last_admitted_.end() ? 0 : it->second);
        }
        const size_t next = next_admitted(tenants, counts, last);
        if (sequences + queue_[next].n > options_.parallel) break;
        sequences += queue_[next].n;
        running[queue_[next].tenant] += queue_[next].n;
        last_admitted_[queue_[next].tenant] = ++admissions_;
        // An open server makes a tenant of every bearer token: keep only those still waiting.
        if (last_admitted_.size() > 4096)
          std::erase_if(last_admitted_, [&](const auto& entry) {
            return std::none_of(queue_.begin(), queue_.end(),
                                [&](const GenRequest& q) { return q.tenant == entry.first; });
          });
        admitted.push_back(std::move(queue_[next]));
        queue_.erase(queue_.begin() + std::ptrdiff_t(next));
      }
      // Counted as active from here, so submit() never sees a free slot that is already taken.
      active_count_ = sequences;
    }
    for (auto& job : jobs) job();
    if (stopping) break;
    // A reply that is out but not yet in the cache (its last token still to append, see finish)
    // goes there before anyone new is admitted: an agent's next turn, sent as soon as it read the
    // reply, then finds all of it.
    if (!admitted.empty() &&
        std::any_of(active_.begin(), active_.end(), [](const auto& a) { return a->closing; }))
      step();
    for (auto& r : admitted) admit(std::move(r));
    step();
    std::lock_guard<std::mutex> lock(mu_);
    active_count_ = 0;
    for (const auto& a : active_) active_count_ += 1 + a->choices_left;
  }
  // Shutting down: whoever is still waiting hears so.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& a : active_) {
    if (!a->closing)  // a closing sequence's reply is out already
      a->req.stream->push(GenEvent::error("the server is shutting down", a->index, 503));
    // With --cache-dir, what a sequence has read so far is saved too: the client that retries
    // after the restart starts from it.
    if (cache_dir_ && a->owned) {
      try {
        prefix_->insert(a->req.partition, *a->owned);
      } catch (const std::exception&) {
      }
    }
  }
  for (auto& r : queue_) r.stream->push(GenEvent::error("the server is shutting down", 0, 503));
  for (auto& job : jobs_) job();  // they see stopping_ = true only via their own checks
  active_.clear();
  queue_.clear();
  jobs_.clear();
  active_count_ = 0;
}

// One forward call for every active sequence: a sampled token for each one that is decoding, and
// a chunk of the prompt for those still prefilling (at most prefill_chunk prompt tokens per step in
// all, oldest request first), so a long prompt never stalls the others' decoding for its whole
// prefill. Chunking changes nothing in the results: each position is computed the same way
// whatever the batch (ops/matmul.h).
void Scheduler::step() {
  spawn_choices();
  std::vector<Session*> batch;
  std::vector<std::span<const int32_t>> spans;
  std::vector<Active*> members;  // spans point into their plans (Active::step)
  // Draft length this step: the weights are read once per step whatever the batch, so drafting
  // pays while the step is bound by that read; a full batch is compute-bound already.
  int decoding = 0;
  for (const auto& ap : active_) decoding += !ap->done && !ap->prefilling();
  const int draft_len = options_.draft ? options_.draft->max_draft / std::max(1, decoding) : 0;
  const std::vector<int> prefill = plan_prefill();
  for (size_t ai = 0; ai < active_.size(); ++ai) {
    Active& a = *active_[ai];
    a.verify_base = -1;
    a.read_prompt = false;
    if (a.closing) {
      // The reply is out already: only its last token goes into the session.
      batch.push_back(a.session);
      spans.emplace_back(&a.close_token, 1);
      members.push_back(&a);
      continue;
    }
    if (a.req.stream->cancelled() || a.req.stream->choice_cancelled(a.index)) {
      if (metrics_ && a.req.stream->client_gone() && a.index == 0) metrics_->add_cancelled();
      finish(a, "cancelled");
      continue;
    }
    if (a.prefilling()) {
      int n = prefill[ai];
      // A chunk ends where the prefix cache wants a checkpoint.
      if (!a.checkpoint_at.empty())
        n = std::min(n, std::max(1, a.checkpoint_at.front() - a.session->size()));
      // ... and where a sequence waiting for this one clones it (scheduler_admit.cpp).
      n = std::min(n, next_follow_point(a) - a.session->size());
      if (n <= 0) continue;
      a.read_prompt = true;
      batch.push_back(a.session);
      spans.emplace_back(a.req.prompt.data() + a.session->size(), size_t(n));
      members.push_back(&a);
      // Streams show the reading of a long prompt (keep-alives that say how far it is).
      a.req.stream->push(GenEvent::progress(int(a.req.prompt.size()), a.session->size() + n));
      continue;
    }
    if (a.req.prefill_only) {
      finish(a, "prefilled");
      continue;
    }
    // Only ids the tokenizer can decode: padded embedding rows never come back as tokens.
    const std::span<const float> logits = a.session->sampleable_logits();
    a.step = a.run->plan(*a.session, a.speculates ? draft_len : 0);
    if (a.step.token) {
      const int32_t next = *a.step.token;
      if (a.generated == 0 && a.index == 0 && metrics_)
        metrics_->observe_ttft(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - a.req.arrived)
                .count());
      GenEvent token = GenEvent::token_of(next, a.index);
      // note: a sequence that wants logprobs never drafts, so its token came from these logits.
      if (a.req.top_logprobs >= 0) fill_logprobs(logits, next, a.req.top_logprobs, token);
      a.req.stream->push(std::move(token));
      ++a.generated;
      a.last = next;
    }
    if (!a.step.finish.empty()) {
      finish(a, a.step.finish, a.step.tail ? *a.step.tail : -1);
      continue;
    }
    if (a.step.verifies()) a.verify_base = a.session->size();
    batch.push_back(a.session);
    spans.emplace_back(a.step.append);
    members.push_back(&a);
  }
  reserve_kv(batch, spans, members);
  if (!batch.empty()) {
    try {
      std::vector<std::vector<float>*> rows;
      for (Active* a : members) rows.push_back(a->verify_base >= 0 ? &a->verify_rows : nullptr);
      append_batch(batch, spans, rows);
      for (Active* a : members) {
        if (a->verify_base >= 0) accept_verified(*a);
        if (a->closing) {
          a->closing = false;
          a->done = true;
          offer_to_cache(*a);
        } else if (a->read_prompt && a->owned) {
          after_prompt_chunk(*a);
        }
      }
    } catch (const std::exception& e) {
      // E.g. the KV memory budget is spent: these sequences end, the server goes on.
      for (Active* a : members) {
        a->done = true;
        if (a->closing) {  // its reply is out already
          a->closing = false;
          continue;
        }
        if (a->req.on_finish) {
          try {
            a->req.on_finish("error", -1);
          } catch (const std::exception&) {
          }
        }
        a->req.stream->push(GenEvent::error(e.what(), a->index));
      }
    }
  }
  join_followers();
  std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->done; });
}

// --draft mtp: the sequence's session keeps its hidden states from here (a cached prefix's were
// not kept: the head then starts after them, which costs acceptance, never exactness).
void Scheduler::start_mtp(Active& a) {
  a.session->keep_hidden(true);
  a.mtp = std::make_unique<MtpDrafter>(*a.session, options_.draft->max_draft);
  MtpDrafter* head = a.mtp.get();
  a.run->set_drafter([head](std::span<const int32_t> history, int limit) {
    try {
      return head->draft(history, limit);
    } catch (const std::exception&) {
      return std::vector<int32_t>{};  // no draft: a plain decode step
    }
  });
}

// The tokens a verify call confirmed go out as plain decoding would have sent them; the token
// chosen after them is the run's next one.
void Scheduler::accept_verified(Active& a) {
  const SequenceRun::Committed c = a.run->commit(*a.session, a.step, a.verify_base, a.verify_rows);
  if (metrics_) metrics_->add_speculation(int(a.step.append.size()) - 1, int(c.tokens.size()));
  for (int32_t t : c.tokens) {
    a.req.stream->push(GenEvent::token_of(t, a.index));
    ++a.generated;
    a.last = t;
  }
  if (!c.finish.empty()) finish(a, c.finish);  // a grammar completed: all of it is appended
}

}  // namespace fak::server
