// Fairness between API keys; see fair_share.h.
#include "server/fair_share.h"

#include <algorithm>
#include <map>

namespace fak::server {

std::optional<size_t> queue_victim(const std::vector<std::string>& queued,
                                   const std::string& incoming, size_t capacity) {
  std::map<std::string, size_t> count;
  for (const std::string& t : queued) ++count[t];
  const size_t mine = count[incoming];  // also counts `incoming` among the tenants
  const size_t share = std::max<size_t>(1, capacity / count.size());
  if (mine >= share) return std::nullopt;
  // note: the queue is full and `incoming` is under its share, so some other tenant is over its
  // own (the shares add up to at most the capacity).
  const std::string* worst = nullptr;
  for (const auto& [t, n] : count)
    if (t != incoming && n > share && (!worst || n > count[*worst])) worst = &t;
  if (!worst) return std::nullopt;
  for (size_t i = queued.size(); i-- > 0;)
    if (queued[i] == *worst) return i;
  return std::nullopt;
}

size_t next_admitted(const std::vector<std::string>& queued, const std::vector<int>& running,
                     const std::vector<uint64_t>& last) {
  size_t best = 0;
  for (size_t i = 1; i < queued.size(); ++i)
    if (running[i] < running[best] || (running[i] == running[best] && last[i] < last[best]))
      best = i;
  return best;
}

std::vector<int> share_prefill(int budget, const std::vector<int>& wanted,
                               const std::vector<std::string>& tenant) {
  std::vector<int> got(wanted.size(), 0);
  // Tenants in the order of their oldest sequence.
  std::vector<std::string> order;
  for (const std::string& t : tenant)
    if (std::find(order.begin(), order.end(), t) == order.end()) order.push_back(t);
  if (order.empty() || budget <= 0) return got;
  const int share = std::max(1, budget / int(order.size()));
  int left = budget;
  for (const std::string& t : order) {
    int room = std::min(share, left);
    for (size_t i = 0; i < wanted.size() && room > 0; ++i) {
      if (tenant[i] != t) continue;
      const int n = std::min(room, wanted[i] - got[i]);
      got[i] += n;
      room -= n;
      left -= n;
    }
  }
  // What some tenants could not use goes to whoever still reads, oldest first.
  for (size_t i = 0; i < wanted.size() && left > 0; ++i) {
    const int n = std::min(left, wanted[i] - got[i]);
    got[i] += n;
    left -= n;
  }
  return got;
}

std::optional<size_t> kv_victim(const std::vector<KvHolder>& holders, size_t requester) {
  if (requester >= holders.size()) return std::nullopt;
  std::map<std::string, long long> held;
  long long total = 0;
  for (const KvHolder& h : holders) {
    held[h.tenant] += h.tokens;
    total += h.tokens;
  }
  const long long share = total / (long long)held.size();
  // Candidates: tenants with something to stop, and the requester's (it can always fail itself).
  const std::string* worst = nullptr;
  for (const auto& [t, n] : held) {
    bool candidate = t == holders[requester].tenant;
    for (const KvHolder& h : holders) candidate = candidate || (h.tenant == t && h.stoppable);
    if (!candidate) continue;
    if (!worst || n - share > held[*worst] - share) worst = &t;
  }
  if (!worst) return std::nullopt;
  std::optional<size_t> newest;
  for (size_t i = 0; i < holders.size(); ++i)
    if (holders[i].tenant == *worst && holders[i].stoppable) newest = i;
  // Within the requester's own tenant the older request wins: it has more work invested.
  if (*worst == holders[requester].tenant && (!newest || *newest < requester)) return requester;
  return newest;
}

}  // namespace fak::server
