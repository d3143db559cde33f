#include "io/atomic_file.h"

#include <fcntl.h>
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
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("cannot create " + path_.string() + " to write " + target.string() + ": " +
         std::strerror(errno));
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
    if (w <= 0)
      fail("cannot write " + target_.string() + ": " + std::strerror(w < 0 ? errno : ENOSPC));
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    fail("cannot write " + target_.string() + ": fsync: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    fail("cannot write " + target_.string() + ": close: " + std::strerror(errno));
  if (::rename(path_.c_str(), target_.c_str()) != 0)
    fail("cannot rename " + path_.string() + " to " + target_.string() + ": " +
         std::strerror(errno));
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

}  // namespace fak
