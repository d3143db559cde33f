#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace fak {

AtomicFile::AtomicFile(const std::filesystem::path& target) : target_(target) {
  // A temp name of this process's own (pid, and a counter for its threads): two writers of one
  // target never write into each other's temp file, and the last rename wins whole.
  static std::atomic<int> counter{0};
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  path_ = dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                 std::to_string(counter++));
  // O_EXCL|O_NOFOLLOW: never write through a link someone planted at the temp name; the rename
  // below replaces a link at the target itself rather than following it.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw StorageError("cannot create " + path_.string() + " to write " + target.string() + ": " +
                           std::strerror(err),
                       err);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void AtomicFile::write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      throw StorageError("cannot write " + target_.string() + ": " + std::strerror(err), err);
    }
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  // A full disk can show only now (delayed allocation): these are storage failures too.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    throw StorageError("cannot write " + target_.string() + ": fsync: " + std::strerror(err), err);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    throw StorageError("cannot write " + target_.string() + ": close: " + std::strerror(err), err);
  }
  if (::rename(path_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    throw StorageError(
        "cannot rename " + path_.string() + " to " + target_.string() + ": " + std::strerror(err),
        err);
  }
  committed_ = true;
  // Make the rename itself durable; best effort, as some filesystems refuse fsync on directories.
  const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write_all(bytes.data(), bytes.size());
  f.commit();
}

int remove_stale_temp_files(const std::filesystem::path& dir) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    // "." + target name + ".tmp-" + pid + "-" + counter, as the constructor names them.
    const std::string name = entry.path().filename().string();
    const size_t tmp = name.rfind(".tmp-");
    if (name.empty() || name[0] != '.' || tmp == std::string::npos) continue;
    const std::string tail = name.substr(tmp + 5);
    const size_t dash = tail.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == tail.size() ||
        tail.find_first_not_of("0123456789-") != std::string::npos ||
        tail.find('-', dash + 1) != std::string::npos || dash > 9)
      continue;
    const pid_t pid = pid_t(std::stol(tail.substr(0, dash)));
    const bool owner_gone = pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH);
    if (owner_gone && !entry.is_symlink(ec) && std::filesystem::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace fak
