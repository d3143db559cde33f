#include "server/metrics.h"

#include <cstdio>

namespace fak::server {

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::add_prompt(int prompt_tokens, int cached_tokens) {
  prompt_ += prompt_tokens;
  cached_ += cached_tokens;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kTtftBuckets.size(); ++i)
    if (seconds <= kTtftBuckets[i]) ++ttft_counts_[i];
  ++ttft_n_;
  ttft_sum_ += seconds;
}

std::string Metrics::render(const SchedulerGauges& g, const PrefixCacheStats& c) const {
  std::string out;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  auto metric = [&](const char* name, const char* type, const char* help) {
    add("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  };
  std::lock_guard<std::mutex> lock(mu_);
  metric("fak_requests_total", "counter", "HTTP requests by route and status");
  for (const auto& [key, n] : requests_)
    add("fak_requests_total{route=\"%s\",status=\"%d\"} %lld\n", key.first.c_str(), key.second,
        (long long)n);
  metric("fak_prompt_tokens_total", "counter", "prompt tokens of admitted requests");
  add("fak_prompt_tokens_total %lld\n", (long long)prompt_.load());
  metric("fak_cached_prompt_tokens_total", "counter", "prompt tokens served from the prefix cache");
  add("fak_cached_prompt_tokens_total %lld\n", (long long)cached_.load());
  metric("fak_generated_tokens_total", "counter", "tokens generated");
  add("fak_generated_tokens_total %lld\n", (long long)generated_.load());
  metric("fak_spec_drafted_tokens_total", "counter",
         "tokens proposed by speculative drafts (fak serve --draft)");
  add("fak_spec_drafted_tokens_total %lld\n", (long long)spec_drafted_.load());
  metric("fak_spec_accepted_tokens_total", "counter",
         "drafted tokens the model agreed with (each saved a decode step)");
  add("fak_spec_accepted_tokens_total %lld\n", (long long)spec_accepted_.load());
  metric("fak_requests_cancelled_total", "counter", "generations stopped because the client left");
  add("fak_requests_cancelled_total %lld\n", (long long)cancelled_.load());
  metric("fak_queue_depth", "gauge", "requests waiting for a sequence slot");
  add("fak_queue_depth %d\n", g.queued);
  metric("fak_active_sequences", "gauge", "sequences being generated");
  add("fak_active_sequences %d\n", g.active);
  metric("fak_parallel_max", "gauge", "--parallel");
  add("fak_parallel_max %d\n", g.parallel);
  metric("fak_prefix_cache_lookups_total", "counter", "prefix-cache lookups");
  add("fak_prefix_cache_lookups_total %lld\n", (long long)c.lookups);
  metric("fak_prefix_cache_hits_total", "counter", "lookups that reused at least one token");
  add("fak_prefix_cache_hits_total %lld\n", (long long)c.hits);
  metric("fak_prefix_cache_hit_ratio", "gauge", "hits / lookups");
  add("fak_prefix_cache_hit_ratio %.6f\n", c.lookups ? double(c.hits) / double(c.lookups) : 0.0);
  metric("fak_prefix_cache_reused_tokens_total", "counter", "prompt tokens taken from the cache");
  add("fak_prefix_cache_reused_tokens_total %lld\n", (long long)c.tokens_reused);
  metric("fak_prefix_cache_computed_tokens_total", "counter", "prompt tokens prefilled");
  add("fak_prefix_cache_computed_tokens_total %lld\n", (long long)c.tokens_computed);
  metric("fak_prefix_cache_bytes", "gauge",
         "bytes held by the prefix cache (KV blocks + hybrid state checkpoints)");
  add("fak_prefix_cache_bytes %zu\n", c.bytes);
  metric("fak_prefix_cache_checkpoints", "gauge",
         "hybrid models: recurrent-state checkpoints held");
  add("fak_prefix_cache_checkpoints %zu\n", c.checkpoints);
  metric("fak_prefix_cache_checkpoint_bytes", "gauge",
         "KV-budget bytes of those checkpoints (they are stored in KV blocks)");
  add("fak_prefix_cache_checkpoint_bytes %zu\n", c.checkpoint_bytes);
  metric("fak_prefix_cache_checkpoint_hits_total", "counter",
         "hybrid models: lookups that restarted from a state checkpoint");
  add("fak_prefix_cache_checkpoint_hits_total %lld\n", (long long)c.checkpoint_hits);
  metric("fak_prefix_cache_checkpoints_evicted_total", "counter",
         "hybrid models: state checkpoints the prefix cache let go");
  add("fak_prefix_cache_checkpoints_evicted_total %lld\n", (long long)c.checkpoints_evicted);
  metric("fak_time_to_first_token_seconds", "histogram", "from request arrival to first token");
  for (size_t i = 0; i < kTtftBuckets.size(); ++i)
    add("fak_time_to_first_token_seconds_bucket{le=\"%g\"} %lld\n", kTtftBuckets[i],
        (long long)ttft_counts_[i]);
  add("fak_time_to_first_token_seconds_bucket{le=\"+Inf\"} %lld\n", (long long)ttft_n_);
  add("fak_time_to_first_token_seconds_sum %.6f\n", ttft_sum_);
  add("fak_time_to_first_token_seconds_count %lld\n", (long long)ttft_n_);
  return out;
}

}  // namespace fak::server
