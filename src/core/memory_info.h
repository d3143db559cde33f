// How much memory this process can still take: the kernel's MemAvailable, and the limit of the
// cgroup it runs in (a container's, a systemd unit's) where one is set. Used to size the server's
// KV budget to the machine.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace fak {

struct MemoryInfo {
  size_t mem_available = 0;      // /proc/meminfo MemAvailable (0 = unknown)
  size_t cgroup_limit = 0;       // the tightest memory limit of this process's cgroups (0 = none)
  size_t cgroup_usage = 0;       // what that cgroup uses, less its inactive file cache
  size_t available() const;      // the smaller of MemAvailable and limit - usage (0 = unknown)
  std::string describe() const;  // "21.3 GiB available (MemAvailable 21.3 GiB, cgroup limit none)"
};

// Reads /proc and /sys/fs/cgroup (v2 memory.max / memory.current, or v1 memory.limit_in_bytes /
// memory.usage_in_bytes), walking up from this process's cgroup. `root` is for tests.
MemoryInfo read_memory_info(const std::filesystem::path& root = "/");

}  // namespace fak
