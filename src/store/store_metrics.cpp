#include "store/store_metrics.h"

#include <cstdio>

namespace fak::store {

void StoreMetrics::observe_call(double seconds, size_t out, size_t in, bool failed) {
  bytes_out_ += int64_t(out);
  bytes_in_ += int64_t(in);
  if (failed) ++unreachable_;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++latency_counts_[i];
  ++latency_n_;
  latency_sum_ += seconds;
}

std::string StoreMetrics::render(bool up) const {
  std::string out;
  char line[256];
  auto add = [&](const char* name, const char* type, const char* help, long long v) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name,
                  type, name, v);
    out += line;
  };
  add("fak_store_up", "gauge", "1 while the shared store (--store) answers", up ? 1 : 0);
  add("fak_store_lookups_total", "counter", "prompts looked up in the store beyond the local cache",
      lookups_.load());
  add("fak_store_hit_blocks_total", "counter",
      "KV blocks loaded from the store instead of prefilled", blocks_hit_.load());
  add("fak_store_misses_total", "counter", "lookups that found nothing beyond the local cache",
      misses_.load());
  add("fak_store_published_blocks_total", "counter", "KV blocks written to the store",
      blocks_published_.load());
  add("fak_store_bytes_in_total", "counter", "bytes read from the store", bytes_in_.load());
  add("fak_store_bytes_out_total", "counter", "bytes written to the store", bytes_out_.load());
  out +=
      "# HELP fak_store_errors_total store calls that failed, by kind\n"
      "# TYPE fak_store_errors_total counter\n";
  std::snprintf(line, sizeof line,
                "fak_store_errors_total{kind=\"unreachable\"} %lld\n"
                "fak_store_errors_total{kind=\"refused\"} %lld\n"
                "fak_store_errors_total{kind=\"damaged_record\"} %lld\n",
                (long long)unreachable_.load(), (long long)refused_.load(),
                (long long)damaged_.load());
  out += line;
  add("fak_store_skipped_calls_total", "counter",
      "store calls not made while backing off after a failure", skipped_.load());
  add("fak_store_upload_queue_bytes", "gauge", "KV blocks waiting to be written to the store",
      queue_bytes_.load());
  add("fak_store_uploads_dropped_total", "counter",
      "batches of blocks not written (store down or queue full)", uploads_dropped_.load());
  add("fak_store_sessions_published_total", "counter", "session versions written to the store",
      sessions_published_.load());
  add("fak_store_sessions_materialised_total", "counter",
      "sessions loaded from the store onto this replica", sessions_materialised_.load());
  add("fak_store_session_conflicts_total", "counter",
      "session writes that lost a race with another replica (409)", session_conflicts_.load());
  std::lock_guard<std::mutex> lock(mu_);
  out +=
      "# HELP fak_store_call_seconds round trips to the store\n"
      "# TYPE fak_store_call_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    std::snprintf(line, sizeof line, "fak_store_call_seconds_bucket{le=\"%g\"} %lld\n", kBuckets[i],
                  (long long)latency_counts_[i]);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "fak_store_call_seconds_bucket{le=\"+Inf\"} %lld\n"
                "fak_store_call_seconds_sum %.6f\nfak_store_call_seconds_count %lld\n",
                (long long)latency_n_, latency_sum_, (long long)latency_n_);
  out += line;
  return out;
}

}  // namespace fak::store
