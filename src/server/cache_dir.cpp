#include "server/cache_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "io/private_dir.h"

namespace fak::server {

namespace {

std::string seconds_since(std::chrono::steady_clock::time_point t0) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return buf;
}

// "1 file", "2 files".
std::string count(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

CacheDir::CacheDir(const std::filesystem::path& dir, const Model& model, const KvCache& cache) {
  block_size_ = size_t(cache.block_size());
  const std::string flag = "--cache-dir " + dir.string();
  // note: both the folder given and the model's folder in it must be this user's alone: a file
  // planted by another user would be served to this server's tenants.
  ensure_private_dir(dir, flag);
  folder_ = dir / ("model-" + model.identity() + "-" + kv_type_name(cache.dtype()) +
                   (cache.keeps_kraw() ? "" : "-nokraw"));
  ensure_private_dir(folder_, flag);
  // Two servers on one folder would each drop the files the other wrote.
  const std::filesystem::path lock = folder_ / "lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    const int err = errno;
    throw StorageError("cannot open " + lock.string() + ": " + std::strerror(err), err);
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    fail(folder_.string() + " is in use by another fak serve (" + flag + ")");
  }
}

CacheDir::~CacheDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // and the lock with it
}

void CacheDir::reload(PrefixCache& cache, const std::function<bool(const std::string&)>& keep,
                      const Log& log) const {
  const auto t0 = std::chrono::steady_clock::now();
  const PrefixCacheFileReport r = cache.reload(folder_, keep);
  for (const auto& w : r.warnings) log("warning: " + w);
  std::string line = "prefix cache: reloaded " + count(r.blocks * block_size_, "token") + " (" +
                     count(r.blocks, "block");
  if (r.checkpoints) line += ", " + count(r.checkpoints, "state checkpoint");
  line += ") from " + count(size_t(r.files), "file") + " in " + folder_.string() + " in " +
          seconds_since(t0);
  if (r.dropped_blocks)
    line += "; " + count(r.dropped_blocks, "block") +
            " left out, the least valuable first: the KV budget holds no more";
  if (r.ignored)
    line += "; ignored " + count(size_t(r.ignored), "file") +
            " of API keys no longer configured (removed at the next stop)";
  log(line);
}

void CacheDir::spill(const PrefixCache& cache, size_t max_bytes, const Log& log) const {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const PrefixCacheFileReport r = cache.spill(folder_, max_bytes);
    for (const auto& w : r.warnings) log("warning: " + w);
    std::string line = "prefix cache: saved " + count(r.blocks * block_size_, "token") + " (" +
                       count(r.blocks, "block");
    if (r.checkpoints) line += ", " + count(r.checkpoints, "state checkpoint");
    line += ") in " + count(size_t(r.files), "file") + " (" + mib(r.bytes) + ") to " +
            folder_.string() + " in " + seconds_since(t0);
    if (r.dropped_blocks)
      line += "; " + count(r.dropped_blocks, "block") + " not saved" +
              (r.warnings.empty() ? " (over --cache-dir-max), the least valuable first" : "");
    log(line);
  } catch (const std::exception& e) {
    // Stopping must not fail for the cache's sake.
    log(std::string("warning: prefix cache not saved to ") + folder_.string() + ": " + e.what());
  }
}

}  // namespace fak::server
