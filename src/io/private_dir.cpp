#include "io/private_dir.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace fak {

namespace {

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(mode & 07777));
  return buf;
}

void check_stat(const struct stat& st, const std::filesystem::path& path, const std::string& what,
                bool directory) {
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    fail(what + ": " + path.string() + " is not a " + (directory ? "directory" : "plain file") +
         " (a link?); refusing to use it");
  if (st.st_uid != ::geteuid())
    fail(what + ": " + path.string() + " belongs to uid " + std::to_string(st.st_uid) +
         ", not to this user (uid " + std::to_string(::geteuid()) +
         "): fak keeps tenants' prompts there; use a folder of your own (mode 0700)");
  if ((st.st_mode & 022) != 0)
    fail(what + ": " + path.string() + " is writable by " +
         ((st.st_mode & 002) ? "others" : "its group") + " (mode " + octal_mode(st.st_mode) +
         "): another user could plant files there; chmod 700 it or use a folder of your own");
}

}  // namespace

void check_private_dir(const std::filesystem::path& dir, const std::string& what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    const int err = errno;
    throw StorageError(what + ": cannot open " + dir.string() + ": " + std::strerror(err), err);
  }
  check_stat(st, dir, what, true);
}

void ensure_private_dir(const std::filesystem::path& dir, const std::string& what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      const int err = errno;
      throw StorageError(what + ": cannot open " + dir.string() + ": " + std::strerror(err), err);
    }
    std::error_code ec;
    if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
    if (ec)
      throw StorageError(what + ": cannot create " + dir.string() + ": " + ec.message(),
                         ec.value());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      throw StorageError(what + ": cannot create " + dir.string() + ": " + std::strerror(err), err);
    }
  }
  check_private_dir(dir, what);
}

std::string folder_key(const std::filesystem::path& dir) {
  constexpr size_t kBytes = 32;
  const std::filesystem::path path = dir / "key";
  const std::string what = "the key of " + dir.string();
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      std::string key(kBytes, '\0');
      const bool ok = ::fstat(fd, &st) == 0 && ::read(fd, key.data(), kBytes) == ssize_t(kBytes);
      ::close(fd);
      if (!ok) fail(what + " (" + path.string() + ") cannot be read or is too short");
      check_stat(st, path, what, false);
      if ((st.st_mode & 077) != 0)
        fail(what + ": " + path.string() + " is readable by others (mode " +
             octal_mode(st.st_mode) + "); chmod 600 it");
      return key;
    }
    if (errno != ENOENT) {
      const int err = errno;
      throw StorageError(what + ": cannot open " + path.string() + ": " + std::strerror(err), err);
    }
    unsigned char bytes[kBytes];
    if (RAND_bytes(bytes, int(kBytes)) != 1) fail(what + ": no random bytes");
    // O_EXCL: two servers making it at once agree on the one that won.
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      const int err = errno;
      throw StorageError(what + ": cannot create " + path.string() + ": " + std::strerror(err),
                         err);
    }
    const bool ok = ::write(fd, bytes, kBytes) == ssize_t(kBytes) && ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      throw StorageError(what + ": cannot write " + path.string() + ": " + std::strerror(err), err);
    }
    return std::string(reinterpret_cast<const char*>(bytes), kBytes);
  }
  fail(what + ": " + path.string() + " keeps changing");
}

}  // namespace fak
