// Trimming and packing byte automata; see automaton.h.
#include "grammar/automaton.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace fak::grammar {

namespace {

// The automata made lately, by source, kept alive (a request's grammar is gone before the next
// request with the same schema comes) up to a budget; the least recently asked go first.
struct Made {
  std::shared_ptr<const ByteDfa> dfa;
  uint64_t last_use = 0;
};
constexpr size_t kKeptBytes = size_t(32) << 20;
constexpr size_t kKeptAutomata = 4096;

size_t bytes_of(const ByteDfa& dfa) {
  return sizeof(ByteDfa) + dfa.next.size() * sizeof(uint32_t) + 2 * dfa.accepting.size();
}

}  // namespace

std::shared_ptr<const ByteDfa> shared_automaton(
    const std::string& source, const std::function<std::shared_ptr<const ByteDfa>()>& build) {
  static std::mutex mutex;
  static std::unordered_map<std::string, Made> made;
  static uint64_t clock = 0;
  static size_t kept_bytes = 0;
  {
    std::lock_guard lock(mutex);
    if (auto it = made.find(source); it != made.end()) {
      it->second.last_use = ++clock;
      return it->second.dfa;
    }
  }
  std::shared_ptr<const ByteDfa> dfa = build();  // unlocked: may take milliseconds, or throw
  if (!dfa) return dfa;
  std::lock_guard lock(mutex);
  auto [it, fresh] = made.try_emplace(source);
  if (!fresh) return it->second.dfa;  // another thread made it meanwhile
  it->second = {dfa, ++clock};
  kept_bytes += bytes_of(*dfa);
  while ((kept_bytes > kKeptBytes || made.size() > kKeptAutomata) && made.size() > 1) {
    auto oldest = made.begin();
    for (auto i = made.begin(); i != made.end(); ++i)
      if (i->second.last_use < oldest->second.last_use) oldest = i;
    kept_bytes -= bytes_of(*oldest->second.dfa);
    made.erase(oldest);
  }
  return dfa;
}

std::shared_ptr<const ByteDfa> finish_dfa(const DfaDraft& draft, const std::string& what) {
  constexpr uint32_t kNone = ByteDfa::kNone;
  const size_t n = draft.accepting.size();
  if (n == 0) return nullptr;

  // Reachable from the start, then (backwards) able to reach an accepting state.
  std::vector<uint8_t> reached(n, 0), live(n, 0);
  std::vector<uint32_t> queue = {0};
  reached[0] = 1;
  for (size_t i = 0; i < queue.size(); ++i)
    for (const auto& e : draft.edges[queue[i]])
      if (!reached[e.to]) {
        reached[e.to] = 1;
        queue.push_back(e.to);
      }
  std::vector<std::vector<uint32_t>> into(n);
  for (uint32_t s : queue)
    for (const auto& e : draft.edges[s]) into[e.to].push_back(s);
  std::vector<uint32_t> back;
  for (uint32_t s : queue)
    if (draft.accepting[s]) {
      live[s] = 1;
      back.push_back(s);
    }
  for (size_t i = 0; i < back.size(); ++i)
    for (uint32_t from : into[back[i]])
      if (!live[from]) {
        live[from] = 1;
        back.push_back(from);
      }
  if (!live[0]) return nullptr;

  // New numbers in breadth-first order from the start, over live states only.
  std::vector<uint32_t> id(n, kNone), order = {0};
  id[0] = 0;
  for (size_t i = 0; i < order.size(); ++i)
    for (const auto& e : draft.edges[order[i]])
      if (live[e.to] && id[e.to] == kNone) {
        id[e.to] = uint32_t(order.size());
        order.push_back(e.to);
      }

  // Byte classes: start with one, split a class whenever some state sends its bytes apart.
  static std::atomic<uint64_t> next_uid{1};
  auto dfa = std::make_shared<ByteDfa>();
  dfa->uid = next_uid.fetch_add(1);
  std::array<uint32_t, 256> row{};
  uint32_t n_classes = 1;
  for (uint32_t s : order) {
    row.fill(kNone);
    for (const auto& e : draft.edges[s])
      if (live[e.to])
        for (int b = e.lo; b <= e.hi; ++b) row[size_t(b)] = id[e.to];
    std::array<uint32_t, 256> first{};
    std::array<uint8_t, 256> seen{};
    std::vector<std::array<uint32_t, 3>> splits;  // old class, target, new class
    for (size_t b = 0; b < 256; ++b) {
      const uint32_t c = dfa->byte_class[b];
      if (!seen[c]) {
        seen[c] = 1;
        first[c] = row[b];
        continue;
      }
      if (first[c] == row[b]) continue;
      uint32_t fresh = kNone;
      for (const auto& [old, target, made] : splits)
        if (old == c && target == row[b]) fresh = made;
      if (fresh == kNone) {
        fresh = n_classes++;
        splits.push_back({c, row[b], fresh});
      }
      dfa->byte_class[b] = uint8_t(fresh);
    }
  }
  dfa->n_classes = n_classes;
  if (order.size() * n_classes > kMaxDfaTableEntries)
    fail(what + ": its automaton is too large (" + std::to_string(order.size()) + " states)");

  dfa->next.assign(order.size() * n_classes, kNone);
  dfa->accepting.resize(order.size());
  dfa->ends.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t s = order[i];
    bool any = false;
    for (const auto& e : draft.edges[s]) {
      if (!live[e.to]) continue;
      any = true;
      for (int b = e.lo; b <= e.hi; ++b)
        dfa->next[i * n_classes + dfa->byte_class[size_t(b)]] = id[e.to];
    }
    dfa->accepting[i] = draft.accepting[s];
    dfa->ends[i] = draft.accepting[s] && !any;
  }
  return dfa;
}

}  // namespace fak::grammar
