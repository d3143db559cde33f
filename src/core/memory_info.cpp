#include "core/memory_info.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace fak {

namespace fs = std::filesystem;

namespace {

// The first whitespace-separated number in a file ("max" and missing files: 0).
size_t read_number(const fs::path& p) {
  std::ifstream in(p);
  unsigned long long v = 0;
  if (!(in >> v)) return 0;
  return size_t(v);
}

// A "key value" line of a stat file (memory.stat), or 0.
size_t read_stat(const fs::path& p, const std::string& key) {
  std::ifstream in(p);
  std::string k;
  unsigned long long v = 0;
  while (in >> k >> v)
    if (k == key) return size_t(v);
  return 0;
}

struct Limit {
  size_t limit = 0, usage = 0;
};

// The tightest limit from `dir` up to `base` (inclusive). A cgroup path that does not exist in
// this mount namespace (a container sees its own cgroup as the root) starts at base.
Limit tightest(const fs::path& base, const std::string& cgroup_path, const char* limit_file,
               const char* usage_file, const char* inactive_key) {
  const fs::path rel = fs::path(cgroup_path).relative_path();
  fs::path dir = rel.empty() ? base : base / rel;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) dir = base;
  Limit best;
  for (;;) {
    const size_t limit = read_number(dir / limit_file);
    // v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages); v2 writes "max".
    if (limit > 0 && limit < (size_t(1) << 60)) {
      size_t usage = read_number(dir / usage_file);
      // Inactive file cache is reclaimed before the limit bites: what `docker stats` shows too.
      usage -= std::min(usage, read_stat(dir / "memory.stat", inactive_key));
      const size_t room = limit - std::min(limit, usage);
      if (best.limit == 0 || room < best.limit - std::min(best.limit, best.usage))
        best = {limit, usage};
    }
    if (dir == base || !dir.has_parent_path() || dir.parent_path() == dir) break;
    const fs::path up = dir.parent_path();
    if (up.string().size() < base.string().size()) break;
    dir = up;
  }
  return best;
}

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", double(bytes) / double(size_t(1) << 30));
  return buf;
}

}  // namespace

size_t MemoryInfo::available() const {
  size_t a = mem_available;
  if (cgroup_limit > 0) {
    const size_t room = cgroup_limit - std::min(cgroup_limit, cgroup_usage);
    a = a == 0 ? room : std::min(a, room);
  }
  return a;
}

std::string MemoryInfo::describe() const {
  std::string s = (available() ? gib(available()) : std::string("unknown")) +
                  " available (MemAvailable " + (mem_available ? gib(mem_available) : "unknown");
  if (cgroup_limit)
    s += ", cgroup limit " + gib(cgroup_limit) + " with " + gib(cgroup_usage) + " used";
  return s + ")";
}

MemoryInfo read_memory_info(const fs::path& root) {
  MemoryInfo m;
  {
    std::ifstream in(root / "proc/meminfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("MemAvailable:", 0) == 0) {
        std::istringstream ss(line.substr(13));
        unsigned long long kib = 0;
        if (ss >> kib) m.mem_available = size_t(kib) * 1024;
      }
  }
  std::ifstream in(root / "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    Limit l;
    if (controllers.empty()) {
      l = tightest(root / "sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file");
    } else {
      std::stringstream ss(controllers);
      std::string c;
      bool memory = false;
      while (std::getline(ss, c, ',')) memory = memory || c == "memory";
      if (!memory) continue;
      l = tightest(root / "sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                   "memory.usage_in_bytes", "total_inactive_file");
    }
    if (l.limit == 0) continue;
    const size_t room = l.limit - std::min(l.limit, l.usage);
    if (m.cgroup_limit == 0 || room < m.cgroup_limit - std::min(m.cgroup_limit, m.cgroup_usage)) {
      m.cgroup_limit = l.limit;
      m.cgroup_usage = l.usage;
    }
  }
  return m;
}

}  // namespace fak
