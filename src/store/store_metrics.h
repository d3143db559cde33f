// The shared store's counters for /metrics (`fak serve --store`): block hits and misses, bytes in
// and out, call latency, errors by kind, sessions published, materialised and lost races.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace fak::store {

class StoreMetrics {
 public:
  // Every call to Redis (RedisPool's observer).
  void observe_call(double seconds, size_t out, size_t in, bool failed);
  void add_skipped() { ++skipped_; }  // a call not made: the store is backing off
  void add_refused() { ++refused_; }  // Redis answered with an error
  void add_damaged() { ++damaged_; }  // a record that failed its checks (skipped)
  void add_lookup(size_t hits) {      // a prompt looked up beyond the local cache
    ++lookups_;
    if (hits)
      blocks_hit_ += int64_t(hits);
    else
      ++misses_;
  }
  void add_published(size_t blocks) { blocks_published_ += int64_t(blocks); }
  void add_dropped_upload() { ++uploads_dropped_; }
  void add_session_published() { ++sessions_published_; }
  void add_session_materialised() { ++sessions_materialised_; }
  void add_session_conflict() { ++session_conflicts_; }
  void add_session_restored() { ++sessions_restored_; }  // put back into a store that lost it
  void add_session_lost() { ++sessions_lost_; }          // answered 409 session_lost
  void add_recovering() { ++recovering_; }               // a call refused in a recovery window
  void add_unreplicated_write() { ++unreplicated_; }     // WAIT saw fewer Redis replicas
  void set_queue_bytes(size_t n) { queue_bytes_ = int64_t(n); }
  // Prefix-cache blocks are published in the background: how long the oldest batch waiting has
  // waited (0: none), and each batch's time from its reply to the store.
  void set_oldest_queued(double seconds) { oldest_queued_ms_ = int64_t(seconds * 1000); }
  void observe_publish_lag(double seconds);

  std::string render(bool up) const;

 private:
  static constexpr std::array<double, 9> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.1,   0.5,    2.5};
  mutable std::mutex mu_;
  std::array<int64_t, kBuckets.size()> latency_counts_{};
  int64_t latency_n_ = 0;
  double latency_sum_ = 0;
  std::array<int64_t, kBuckets.size()> lag_counts_{};
  int64_t lag_n_ = 0;
  double lag_sum_ = 0;
  std::atomic<int64_t> sessions_restored_{0}, sessions_lost_{0}, recovering_{0}, unreplicated_{0},
      oldest_queued_ms_{0};
  std::atomic<int64_t> bytes_in_{0}, bytes_out_{0}, unreachable_{0}, refused_{0}, damaged_{0},
      skipped_{0}, lookups_{0}, blocks_hit_{0}, misses_{0}, blocks_published_{0},
      uploads_dropped_{0}, sessions_published_{0}, sessions_materialised_{0}, session_conflicts_{0},
      queue_bytes_{0};
};

}  // namespace fak::store
