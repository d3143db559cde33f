// Server counters in Prometheus text format: requests by route and status, prompt / generated /
// cached tokens, cancellations, and a time-to-first-token histogram. Gauges that live elsewhere
// (queue depth, active sequences, prefix-cache stats) are passed in when rendering.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/prefix_cache.h"

namespace fak::server {

struct SchedulerGauges {
  int queued = 0;
  int active = 0;
  int parallel = 0;
  int max_queue = 0;
};

class Metrics {
 public:
  void count_request(const std::string& route, int status);
  void add_prompt(int prompt_tokens, int cached_tokens);
  void add_generated(int tokens) { generated_ += tokens; }
  void add_cancelled() { ++cancelled_; }
  void add_speculation(int drafted, int accepted) {
    spec_drafted_ += drafted;
    spec_accepted_ += accepted;
  }
  void observe_ttft(double seconds);

  std::string render(const SchedulerGauges& g, const PrefixCacheStats& cache) const;

 private:
  static constexpr std::array<double, 10> kTtftBuckets = {0.005, 0.01, 0.025, 0.05, 0.1,
                                                          0.25,  0.5,  1,     2.5,  10};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::array<int64_t, kTtftBuckets.size()> ttft_counts_{};
  int64_t ttft_n_ = 0;
  double ttft_sum_ = 0;
  std::atomic<int64_t> prompt_{0}, cached_{0}, generated_{0}, cancelled_{0};
  std::atomic<int64_t> spec_drafted_{0}, spec_accepted_{0};
};

}  // namespace fak::server
