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

void StoreMetrics::observe_publish_lag(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++lag_counts_[i];
  ++lag_n_;
  lag_sum_ += seconds;
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
  add("fak_store_sessions_restored_total", "counter",
      "sessions this replica put back into a store that had lost them", sessions_restored_.load());
  add("fak_store_sessions_lost_total", "counter",
      "calls answered 409 session_lost: the store lost acknowledged versions",
      sessions_lost_.load());
  add("fak_store_recovering_refusals_total", "counter",
      "session calls answered 503 store_recovering (a recovery window)", recovering_.load());
  add("fak_store_unreplicated_writes_total", "counter",
      "session writes not yet on --store-sync-replicas Redis replicas when WAIT returned (retried)",
      unreplicated_.load());
  add("fak_store_publish_oldest_queued_ms", "gauge",
      "how long the oldest batch of prefix-cache blocks waiting for the store has waited",
      oldest_queued_ms_.load());
  std::lock_guard<std::mutex> lock(mu_);
  const auto histogram = [&](const char* name, const char* help,
                             const std::array<int64_t, kBuckets.size()>& counts, int64_t n,
                             double sum) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %lld\n", name, kBuckets[i],
                    (long long)counts[i]);
      out += line;
    }
    std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n",
                  name, (long long)n, name, sum, name, (long long)n);
    out += line;
  };
  histogram("fak_store_call_seconds", "round trips to the store", latency_counts_, latency_n_,
            latency_sum_);
  histogram("fak_store_publish_lag_seconds",
            "from a reply to its prefix-cache blocks being in the store (published in the "
            "background: another replica misses them until then)",
            lag_counts_, lag_n_, lag_sum_);
  return out;
}

}  // namespace fak::store
