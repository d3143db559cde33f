#include "server/scheduler.h"

#include <algorithm>
#include <future>
#include <optional>

#include "core/error.h"
#include "server/api_error.h"

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

struct Scheduler::Active {
  GenRequest req;
  std::optional<Session> owned;  // from the prefix cache (empty for a caller's session)
  Session* session = nullptr;    // &owned or req.session
  Sampler sampler;
  int generated = 0;
  bool done = false;
  int32_t last = -1;  // last token sampled
  // Dense models prefill the uncached part of the prompt in chunks, inside decode steps.
  bool prefilling() const { return session->size() < int(req.prompt.size()); }
};

Scheduler::Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options, Metrics* metrics)
    : model_(std::move(model)), options_(options), metrics_(metrics) {
  const int model_ctx = model_->config().max_seq_len;
  ctx_ = options_.ctx > 0 ? std::min(options_.ctx, model_ctx) : model_ctx;
  options_.parallel = std::max(1, options_.parallel);
  options_.max_queue = std::max(0, options_.max_queue);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  memory_ = read_memory_info();
  KvBudgetOptions bo;
  bo.dtype = options_.kv_type;
  bo.keep_kraw = options_.keep_kraw;
  bo.ctx = ctx_;
  bo.parallel = options_.parallel;
  bo.total_bytes = options_.kv_bytes;
  bo.cache_bytes = options_.cache_bytes;
  bo.available = options_.available_memory ? options_.available_memory : memory_.available();
  bo.weights_bytes = options_.available_memory ? 0 : mapped_weight_bytes(*model_);
  budget_ = plan_kv_budget(*model_, bo);
  KvCacheOptions ko;
  ko.keep_kraw = options_.keep_kraw;
  ko.dtype = options_.kv_type;
  ko.max_bytes = budget_.bytes;
  cache_ = std::make_shared<KvCache>(model_->n_attention_layers(), model_->config().n_kv_heads,
                                     model_->config().head_dim, ko);
  // No sequence can hold more than the budget: a prompt that could never fit is refused up front
  // (400 context_length_exceeded) instead of failing half-way through its prefill.
  ctx_ = int(std::min<size_t>(size_t(ctx_), cache_->capacity_tokens()));
  // The prefix cache gives blocks back whenever a sequence needs one (it is the KV cache's
  // reclaimer); its own cap only bounds hybrid models' state checkpoints, which are not KV blocks.
  prefix_ = std::make_unique<PrefixCache>(model_, cache_, budget_.bytes);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown();
}

void Scheduler::submit(GenRequest request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    // Requests that can start right away do not count against the queue bound.
    const int free_slots = std::max(0, options_.parallel - active_count_);
    if (int(queue_.size()) >= options_.max_queue + free_slots)
      throw ApiError(429,
                     "the server is busy: " + std::to_string(queue_.size()) +
                         " requests are already queued (--max-queue " +
                         std::to_string(options_.max_queue) + "); retry later",
                     "", "queue_full");
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
}

SchedulerGauges Scheduler::gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {int(queue_.size()), active_count_, options_.parallel, options_.max_queue};
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
      if (!stopping)
        while (!queue_.empty() && int(active_.size() + admitted.size()) < options_.parallel) {
          admitted.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      // Counted as active from here, so submit() never sees a free slot that is already taken.
      active_count_ = int(active_.size() + admitted.size());
    }
    for (auto& job : jobs) job();
    if (stopping) break;
    for (auto& r : admitted) admit(std::move(r));
    step();
    std::lock_guard<std::mutex> lock(mu_);
    active_count_ = int(active_.size());
  }
  // Shutting down: whoever is still waiting hears so.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& a : active_)
    a->req.stream->push({GenEvent::Kind::Error, 0, 0, 0, "the server is shutting down"});
  for (auto& r : queue_)
    r.stream->push({GenEvent::Kind::Error, 0, 0, 0, "the server is shutting down"});
  for (auto& job : jobs_) job();  // they see stopping_ = true only via their own checks
  active_.clear();
  queue_.clear();
  jobs_.clear();
  active_count_ = 0;
}

void Scheduler::admit(GenRequest r) {
  if (r.stream->cancelled()) {
    if (metrics_) metrics_->add_cancelled();
    if (r.on_finish) r.on_finish("cancelled", -1);
    return;
  }
  // Everything that can fail happens before r is taken apart, so the error reaches r's own stream
  // (and a lent session goes back to its owner).
  try {
    Sampler sampler(r.sampling);
    std::optional<Session> owned;
    int reused = 0;
    if (!r.session) {
      // Dense models: only the cached prefix here; the rest is prefilled in chunks by step().
      owned.emplace(prefix_->acquire(r.partition, r.prompt, &reused, /*prefill_rest=*/false));
      if (metrics_) metrics_->add_prompt(int(r.prompt.size()), reused);
    }
    auto a = std::make_unique<Active>();
    active_.reserve(active_.size() + 1);
    r.stream->push({GenEvent::Kind::Started, 0, r.session ? 0 : int(r.prompt.size()), reused, ""});
    a->req = std::move(r);
    if (owned) {
      a->owned.emplace(std::move(*owned));
      a->session = &*a->owned;
    } else {
      a->session = a->req.session;  // a caller's session: decoding starts at the next step
    }
    a->sampler = std::move(sampler);
    active_.push_back(std::move(a));
  } catch (const std::exception& e) {
    if (r.on_finish) {
      try {
        r.on_finish("error", -1);
      } catch (const std::exception&) {
      }
    }
    r.stream->push({GenEvent::Kind::Error, 0, 0, 0, e.what()});
  }
}

void Scheduler::finish(Active& a, const std::string& reason) {
  a.done = true;
  if (metrics_) metrics_->add_generated(a.generated);
  if (a.req.on_finish) {
    // A caller's session goes back to its owner before the reply is released.
    try {
      a.req.on_finish(reason, a.last);
    } catch (const std::exception& e) {
      a.req.stream->push({GenEvent::Kind::Error, 0, 0, 0, e.what()});
      return;
    }
    a.req.stream->push({GenEvent::Kind::Done, 0, 0, 0, reason});
    return;
  }
  a.req.stream->push({GenEvent::Kind::Done, 0, 0, 0, reason});
  // The conversation so far, offered to the cache: an agent resending this history next turn
  // (prompt + this reply) starts from these blocks.
  try {
    prefix_->insert(a.req.partition, *a.session);
  } catch (const std::exception&) {
    // A full cache only costs the next turn a prefill.
  }
}

// One forward call for every active sequence: a sampled token for each one that is decoding, and
// a chunk of the prompt for those still prefilling (at most prefill_chunk prompt tokens per step in
// all, oldest request first), so a long prompt never stalls the others' decoding for its whole
// prefill. Chunking changes nothing in the results: each position is computed the same way
// whatever the batch (ops/matmul.h).
void Scheduler::step() {
  std::vector<Session*> batch;
  std::vector<std::span<const int32_t>> spans;
  std::vector<int32_t> sampled;
  std::vector<Active*> members;
  sampled.reserve(active_.size());  // spans point into it
  int prefill_budget = options_.prefill_chunk;
  for (auto& ap : active_) {
    Active& a = *ap;
    if (a.req.stream->cancelled()) {
      if (metrics_ && a.req.stream->client_gone()) metrics_->add_cancelled();
      finish(a, "cancelled");
      continue;
    }
    if (a.prefilling()) {
      const int left = int(a.req.prompt.size()) - a.session->size();
      const int n = std::min(left, prefill_budget);
      if (n <= 0) continue;
      prefill_budget -= n;
      batch.push_back(a.session);
      spans.emplace_back(a.req.prompt.data() + a.session->size(), size_t(n));
      members.push_back(&a);
      continue;
    }
    // Only ids the tokenizer can decode: padded embedding rows never come back as tokens.
    const int32_t next = a.sampler.sample(a.session->sampleable_logits(), a.session->tokens());
    if (std::find(a.req.stop_ids.begin(), a.req.stop_ids.end(), next) != a.req.stop_ids.end()) {
      finish(a, "stop");
      continue;
    }
    if (a.generated == 0 && metrics_)
      metrics_->observe_ttft(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - a.req.arrived).count());
    a.req.stream->push({GenEvent::Kind::Token, next, 0, 0, ""});
    ++a.generated;
    a.last = next;
    if (a.generated >= a.req.max_tokens || a.session->size() + 1 > ctx_) {
      finish(a, "length");
      continue;
    }
    sampled.push_back(next);
    batch.push_back(a.session);
    spans.emplace_back(&sampled.back(), 1);
    members.push_back(&a);
  }
  reserve_kv(batch, spans, members);
  if (!batch.empty()) {
    try {
      append_batch(batch, spans);
    } catch (const std::exception& e) {
      // E.g. the KV memory budget is spent: these sequences end, the server goes on.
      for (Active* a : members) {
        a->done = true;
        if (a->req.on_finish) {
          try {
            a->req.on_finish("error", -1);
          } catch (const std::exception&) {
          }
        }
        a->req.stream->push({GenEvent::Kind::Error, 0, 0, 0, e.what()});
      }
    }
  }
  std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->done; });
}

void Scheduler::stop_for_kv(Active& a, const std::string& message) {
  a.done = true;
  if (a.req.on_finish) {
    try {
      a.req.on_finish("error", -1);
    } catch (const std::exception&) {
    }
  }
  a.req.stream->push({GenEvent::Kind::Error, 0, 0, 0, message});
  // Its blocks go back now, for the sequences still in this step.
  a.session = nullptr;
  a.owned.reset();
}

// Each sequence of the batch gets the KV blocks its tokens need before the forward call, oldest
// first, so running out fails one sequence rather than the whole batch (append_batch would). The
// KV cache has already taken back what the prefix cache could give when it throws KvBudgetError;
// then the blocks of sequences that finished this step go, and then the newest sequence that owns
// its blocks is stopped to free them: an older request has the most work invested, and a new one
// fails at once instead of starving those before it. A sequence with nothing newer to take from
// fails itself.
void Scheduler::reserve_kv(std::vector<Session*>& batch,
                           std::vector<std::span<const int32_t>>& spans,
                           std::vector<Active*>& members) {
  const std::string flag = " (--kv-mem " + std::to_string(budget_.bytes >> 20) + " MiB)";
  for (size_t i = 0; i < members.size(); ++i) {
    Active& a = *members[i];
    if (a.done) continue;
    for (;;) {
      try {
        a.session->reserve_for_append(int(spans[i].size()));
        break;
      } catch (const KvBudgetError& e) {
        bool released = false;
        for (auto& other : active_)
          if (other->done && other->owned) {
            other->session = nullptr;
            other->owned.reset();
            released = true;
          }
        if (released) continue;
        Active* victim = nullptr;
        for (auto it = active_.rbegin(); it != active_.rend() && it->get() != &a; ++it)
          if (!(*it)->done && (*it)->owned) {
            victim = it->get();
            break;
          }
        if (!victim) {
          stop_for_kv(a, e.what() + flag + "; retry later");
          break;
        }
        stop_for_kv(*victim, std::string("stopped to free KV memory for an older request: ") +
                                 e.what() + flag + "; retry later");
      } catch (const std::exception& e) {
        stop_for_kv(a, e.what());
        break;
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (!members[i]->done) {
      batch[kept] = batch[i];
      spans[kept] = spans[i];
      members[kept] = members[i];
      ++kept;
    }
  batch.resize(kept);
  spans.resize(kept);
  members.resize(kept);
}

}  // namespace fak::server
