// --cache-dir: the prefix cache on disk, so a restarted server does not prefill its tenants'
// cached prefixes again. The files (runtime/prefix_cache_file.cpp) live in a folder of their own
// per model and KV layout, DIR/model-<identity>-<kv type>[-nokraw], so servers of several models
// can share DIR and none of them drops another's files as foreign. DIR and the folder are private:
// made 0700 when fak makes them, and refused when they are links, another user's, or writable by
// group or others (io/private_dir.h: they hold the tenants' prompts, and a planted file would be
// served); the files carry a MAC under the folder's key; the folder is locked while a server uses
// it.
//
// When: reloaded at start, before the server listens; written when the server stops cleanly
// (SIGTERM / SIGINT). Not while it runs: writing means reading every cached block, which would
// stall decoding, and a crash keeps the files of the last clean stop, which are still exact (a
// prefix's KV depends only on the model and its tokens), only older.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "models/model.h"
#include "runtime/prefix_cache.h"

namespace fak::server {

class CacheDir {
 public:
  // Makes and locks the model's folder under dir; throws fak::Error naming it when it cannot (a
  // link or a file in the way, another server using it).
  CacheDir(const std::filesystem::path& dir, const Model& model, const KvCache& cache);
  ~CacheDir();
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  const std::filesystem::path& folder() const { return folder_; }

  // The lines they print go to log, one call each.
  using Log = std::function<void(const std::string& line)>;
  // Partitions keep refuses (of API keys no longer configured) are not loaded.
  void reload(PrefixCache& cache, const std::function<bool(const std::string&)>& keep,
              const Log& log) const;
  // max_bytes: --cache-dir-max (0: what the cache holds, which the KV budget bounds). Never
  // throws: a full disk is a warning.
  void spill(const PrefixCache& cache, size_t max_bytes, const Log& log) const;

 private:
  std::filesystem::path folder_;
  int lock_fd_ = -1;
  size_t block_size_ = 0;
};

}  // namespace fak::server
