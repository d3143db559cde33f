#include "io/file_digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fak {

namespace {

using Sha256 = std::array<uint8_t, 32>;

// Bump when the definition of a digest (tag, chunking, combination) changes: old cache entries
// then stop matching instead of answering with digests of another definition.
constexpr const char* kTag = "fak-file-digest-v1";

class Hasher {
 public:
  Hasher() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
      throw Error("SHA-256: cannot initialise the digest");
  }
  ~Hasher() { EVP_MD_CTX_free(ctx_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void update(const void* p, size_t n) {
    if (EVP_DigestUpdate(ctx_, p, n) != 1) throw Error("SHA-256: update failed");
  }
  Sha256 final() {
    Sha256 d{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_, d.data(), &len) != 1 || len != d.size())
      throw Error("SHA-256: final failed");
    return d;
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0xf];
  }
  return s;
}

int64_t ns_of(const timespec& t) {
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

// What a cache entry is keyed and checked on.
struct FileStamp {
  uint64_t dev = 0, ino = 0;
  int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const struct stat& st) {
  return {uint64_t(st.st_dev), uint64_t(st.st_ino), int64_t(st.st_size), ns_of(st.st_mtim),
          ns_of(st.st_ctim)};
}

std::filesystem::path entry_path(const std::filesystem::path& dir, const FileStamp& s) {
  return dir / (std::to_string(s.dev) + "-" + std::to_string(s.ino));
}

std::string entry_text(const FileStamp& s, const std::string& digest) {
  std::ostringstream o;
  o << kTag << ' ' << s.dev << ' ' << s.ino << ' ' << s.size << ' ' << s.mtime_ns << ' '
    << s.ctime_ns << ' ' << digest << '\n';
  return o.str();
}

bool is_hex_digest(const std::string& d) {
  return d.size() == 64 && std::all_of(d.begin(), d.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The cached digest for exactly this stamp, or empty (no entry, another file's or an older
// version's entry, a corrupt one, an unreadable folder: all the same to the caller).
std::string cache_lookup(const std::filesystem::path& dir, const FileStamp& s) {
  std::ifstream in(entry_path(dir, s), std::ios::binary);
  if (!in) return {};
  char buf[256];
  in.read(buf, sizeof buf);
  const std::string text(buf, size_t(in.gcount()));
  if (text.size() < 65 || text.size() == sizeof buf) return {};
  const std::string digest = text.substr(text.size() - 65, 64);
  if (!is_hex_digest(digest) || text != entry_text(s, digest)) return {};
  return digest;
}

void cache_store(const std::filesystem::path& dir, const FileStamp& s, const std::string& digest) {
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return;
    write_file_atomic(entry_path(dir, s), entry_text(s, digest));
  } catch (const std::exception&) {
    // A read-only or full cache folder costs the next start a hash, nothing else.
  }
}

// SHA-256 of each chunk of [0, size), on up to hardware_concurrency threads.
std::vector<Sha256> chunk_digests(int fd, int64_t size, const std::string& name) {
  const size_t n_chunks = size_t((uint64_t(size) + kDigestChunkBytes - 1) / kDigestChunkBytes);
  std::vector<Sha256> out(n_chunks);
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::string error;
  auto work = [&] {
    constexpr size_t kRead = size_t(4) << 20;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[kRead]);
    for (size_t c = next++; c < n_chunks; c = next++) {
      try {
        Hasher h;
        const uint64_t begin = uint64_t(c) * kDigestChunkBytes;
        const uint64_t end = std::min<uint64_t>(uint64_t(size), begin + kDigestChunkBytes);
        for (uint64_t at = begin; at < end;) {
          const ssize_t n =
              ::pread(fd, buf.get(), size_t(std::min<uint64_t>(kRead, end - at)), off_t(at));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0)
            throw Error(n == 0 ? "the file shrank while being read" : std::strerror(errno));
          h.update(buf.get(), size_t(n));
          at += uint64_t(n);
        }
        out[c] = h.final();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) error = e.what();
        next = n_chunks;  // the others stop at their next chunk
      }
    }
  };
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min(hw, n_chunks);
  if (n_threads <= 1) {
    work();
  } else {
    std::vector<std::thread> threads;
    threads.reserve(n_threads - 1);
    try {
      for (size_t i = 0; i + 1 < n_threads; ++i) threads.emplace_back(work);
    } catch (const std::system_error&) {
      // Fewer threads than asked for (a thread limit): the ones started and this one finish it.
    }
    work();
    for (auto& t : threads) t.join();
  }
  if (!error.empty()) throw Error("cannot read " + name + " to hash it: " + error);
  return out;
}

}  // namespace

std::filesystem::path default_digest_cache_dir() {
  if (const char* d = std::getenv("FAK_DIGEST_CACHE")) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "fak" / "digests";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "fak" / "digests";
  return {};
}

std::string sha256_hex(const void* data, size_t n) {
  Hasher h;
  h.update(data, n);
  const Sha256 d = h.final();
  return hex(d.data(), d.size());
}

std::string file_digest_fd(int fd, const std::string& name, const std::filesystem::path& cache_dir,
                           bool* from_cache) {
  if (from_cache) *from_cache = false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("cannot stat " + name + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(name + ": not a regular file");
  const FileStamp before = stamp_of(st);
  if (!cache_dir.empty()) {
    std::string cached = cache_lookup(cache_dir, before);
    if (!cached.empty()) {
      if (from_cache) *from_cache = true;
      return cached;
    }
  }
  const int64_t started = now_ns();
  const std::vector<Sha256> chunks = chunk_digests(fd, before.size, name);
  Hasher h;
  h.update(kTag, std::strlen(kTag) + 1);
  uint8_t size_le[8];
  for (int i = 0; i < 8; ++i) size_le[i] = uint8_t(uint64_t(before.size) >> (8 * i));
  h.update(size_le, sizeof size_le);
  for (const Sha256& c : chunks) h.update(c.data(), c.size());
  const Sha256 d = h.final();
  const std::string digest = hex(d.data(), d.size());
  // Cache only what is known to be this stamp's bytes: unchanged while read, and old enough that a
  // later same-size rewrite must move its ctime.
  if (!cache_dir.empty() && ::fstat(fd, &st) == 0 && stamp_of(st) == before &&
      before.ctime_ns + kRacyMarginNs < started)
    cache_store(cache_dir, before, digest);
  return digest;
}

std::string file_digest(const std::filesystem::path& path, const std::filesystem::path& cache_dir,
                        bool* from_cache) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path.string() + ": " + std::strerror(errno));
  try {
    std::string d = file_digest_fd(fd, path.string(), cache_dir, from_cache);
    ::close(fd);
    return d;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace fak
