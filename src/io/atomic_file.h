// Files that appear whole or not at all: written to a temp file of this process's own beside the
// target, fsynced, renamed over it, and the directory fsynced so the rename is durable too. A
// failure at any step (a full disk, a missing directory) throws naming the target, removes the
// temp file and leaves any previous file at the target as it was.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace fak {

class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& target);
  ~AtomicFile();  // removes the temp file unless commit() renamed it into place
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write_all(const void* data, size_t n);
  void commit();

 private:
  std::filesystem::path target_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `bytes` as the file at path, through an AtomicFile.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Removes the temp files that AtomicFile writers left in dir (not below it) when they were killed
// mid-write: those of processes that no longer run, and this process's own (call it before this
// process writes there). Returns how many it removed.
int remove_stale_temp_files(const std::filesystem::path& dir);

}  // namespace fak
