#include "hub_client.h"

#include <openssl/evp.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "core/error.h"

namespace fak::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxRedirects = 10;
// A model listing with blobs=true is a few MB even for repositories of thousands of files.
constexpr size_t kMaxJsonBytes = size_t(32) << 20;
constexpr int kDownloadAttempts = 6;  // a first try and five resumptions

struct Url {
  std::string base;  // scheme://host[:port]
  std::string path;  // /path?query
};

Url parse_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos ||
      (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0))
    fail("'" + url + "' is not an http(s) URL");
  const size_t path_start = url.find('/', scheme_end + 3);
  if (path_start == std::string::npos) return {url, "/"};
  return {url.substr(0, path_start), url.substr(path_start)};
}

}  // namespace

std::string url_quote(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

void fail_http(const std::string& what, const httplib::Response& res, bool has_token) {
  const std::string code = res.get_header_value("X-Error-Code");
  const std::string msg = res.get_header_value("X-Error-Message");
  std::string line = what + ": the hub answered " + std::to_string(res.status);
  if (code == "RepoNotFound" || (res.status == 404 && code.empty()))
    line += " (not found): check the name" +
            std::string(has_token ? "" : ", or set HF_TOKEN if the repository is private");
  else if (code == "RevisionNotFound")
    line += " (no such revision): check --revision";
  else if (code == "EntryNotFound")
    line += " (no such file in the repository)";
  else if (code == "GatedRepo" || res.status == 401 || res.status == 403)
    line += has_token ? " (access denied): accept the model's terms on the hub with the account "
                        "HF_TOKEN belongs to, or use a token with read access"
                      : " (authentication required): set HF_TOKEN to a token with access "
                        "(gated or private repository)";
  else if (!msg.empty())
    line += ": " + msg;
  fail(line);
}

Hub::Hub(std::string endpoint, std::string token)
    : endpoint_(std::move(endpoint)), token_(std::move(token)) {
  while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
  origin_ = parse_url(endpoint_).base;
}

httplib::Result Hub::send(const std::string& method, const std::string& url,
                          const httplib::Headers& extra, bool follow_cross_host,
                          const std::function<bool(const httplib::Response&)>& on_response,
                          const std::function<bool(const char*, size_t)>& on_body) {
  Url u = parse_url(url);
  for (int hop = 0;; ++hop) {
    httplib::Client cli(u.base);
    cli.set_connection_timeout(30);
    cli.set_read_timeout(60);
    cli.set_follow_location(false);
    httplib::Headers h = extra;
    h.emplace("User-Agent", "fak");
    // note: the default would ask for gzip, and a compressed body breaks Range offsets and sizes.
    h.emplace("Accept-Encoding", "identity");
    if (!token_.empty() && u.base == origin_) h.emplace("Authorization", "Bearer " + token_);
    int status = 0;
    httplib::Result r = method == "HEAD" ? cli.Head(u.path, h)
                                         : cli.Get(
                                               u.path, h,
                                               [&](const httplib::Response& res) {
                                                 status = res.status;
                                                 if (status >= 300 && status < 400) return true;
                                                 return on_response ? on_response(res) : true;
                                               },
                                               [&](const char* data, size_t n) {
                                                 if (status >= 300 && status < 400) return true;
                                                 return on_body ? on_body(data, n) : true;
                                               });
    if (!r || r->status < 300 || r->status >= 400) return r;
    const std::string location = r->get_header_value("Location");
    if (location.empty() || hop == kMaxRedirects) return r;
    const bool relative = location.front() == '/';
    if (!relative && !follow_cross_host) return r;
    u = relative ? Url{u.base, location} : parse_url(location);
  }
}

nlohmann::json Hub::get_json(const std::string& path, const std::string& what) {
  std::string body;
  httplib::Result r =
      send("GET", endpoint_ + path, {}, true, nullptr, [&](const char* d, size_t n) {
        body.append(d, n);
        return body.size() <= kMaxJsonBytes;
      });
  if (!r) fail(what + ": cannot reach " + endpoint_ + ": " + httplib::to_string(r.error()));
  if (r->status != 200) fail_http(what, r.value(), has_token());
  if (body.size() > kMaxJsonBytes)
    fail(what + ": the hub's answer is larger than " + human_bytes(double(kMaxJsonBytes)));
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception&) {
    fail(what + ": the hub's answer is not JSON");
  }
}

namespace {

// Progress on stderr: a redrawn bar on a terminal, one line per file otherwise (logs, CI).
class Progress {
 public:
  Progress(std::string name, uint64_t total, uint64_t already)
      : name_(std::move(name)),
        total_(total),
        start_bytes_(already),
        done_(already),
        tty_(::isatty(2)),
        start_(Clock::now()) {}
  void add(size_t n) {
    done_ += n;
    if (!tty_) return;
    auto now = Clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(false);
  }
  void finish(const char* how) {
    if (tty_) {
      draw(true);
    } else {
      std::fprintf(stderr, "fak: %s %s (%s, %s/s)\n", how, name_.c_str(),
                   human_bytes(double(total_)).c_str(), human_bytes(rate()).c_str());
    }
  }
  void note(const std::string& line) {
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "fak: %s\n", line.c_str());
  }

 private:
  double rate() const {
    double s = std::chrono::duration<double>(Clock::now() - start_).count();
    return s > 0 ? double(done_ - start_bytes_) / s : 0;
  }
  void draw(bool final) {
    const int width = 24;
    const double frac = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
    std::string bar(size_t(frac * width), '=');
    bar.resize(width, ' ');
    const double r = rate();
    std::string eta = "--:--";
    if (r > 0 && total_ > done_) {
      long s = long(double(total_ - done_) / r);
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
      eta = buf;
    }
    std::fprintf(stderr, "\r\033[K%s [%s] %s / %s  %s/s  ETA %s%s", name_.c_str(), bar.c_str(),
                 human_bytes(double(done_)).c_str(), human_bytes(double(total_)).c_str(),
                 human_bytes(r).c_str(), final ? "0:00:00" : eta.c_str(), final ? "\n" : "");
  }

  std::string name_;
  uint64_t total_, start_bytes_, done_;
  bool tty_;
  Clock::time_point start_, last_draw_{};
};

}  // namespace

std::string file_hash(const fs::path& path, bool git_blob_sha1) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), git_blob_sha1 ? EVP_sha1() : EVP_sha256(), nullptr);
  if (git_blob_sha1) {
    std::string header = "blob " + std::to_string(fs::file_size(path));
    EVP_DigestUpdate(ctx.get(), header.data(), header.size() + 1);  // with the NUL
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path.string());
  std::vector<char> buf(size_t(1) << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    EVP_DigestUpdate(ctx.get(), buf.data(), size_t(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += {kHex[md[i] >> 4], kHex[md[i] & 15]};
  return hex;
}

std::string normalize_etag(std::string e) {
  if (e.starts_with("W/")) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

void download(Hub& hub, const std::string& url, const fs::path& partial, uint64_t size,
              const std::string& name) {
  std::error_code ec;
  uint64_t have = fs::exists(partial, ec) ? fs::file_size(partial) : 0;
  if (have > size) fs::remove(partial), have = 0;
  Progress progress(name, size, have);
  if (have > 0) progress.note("resuming " + name + " at " + human_bytes(double(have)));
  for (int attempt = 1;; ++attempt) {
    if (have == size && size > 0) break;  // a previous run got every byte but did not verify them
    httplib::Headers h;
    if (have > 0) h.emplace("Range", "bytes=" + std::to_string(have) + "-");
    std::FILE* out = std::fopen(partial.c_str(), have > 0 ? "ab" : "wb");
    if (!out)
      throw StorageError("cannot write " + partial.string() + ": " + std::strerror(errno), errno);
    int status = 0, write_errno = 0;
    bool bad_range = false;
    httplib::Result r = hub.send(
        "GET", url, h, true,
        [&](const httplib::Response& res) {
          status = res.status;
          if (status == 200 && have > 0) {
            // The server ignored the Range: start over rather than append the file to itself.
            if (std::fflush(out) != 0 || ::ftruncate(::fileno(out), 0) != 0) return false;
            have = 0;
          }
          if (status == 206 && !res.get_header_value("Content-Range")
                                    .starts_with("bytes " + std::to_string(have) + "-"))
            return !(bad_range = true);
          return true;
        },
        [&](const char* d, size_t n) {
          if (status != 200 && status != 206) return true;  // an error page: the status says it
          if (std::fwrite(d, 1, n, out) != n) return !(write_errno = errno ? errno : EIO);
          have += n;
          progress.add(n);
          return have <= size;
        });
    if (std::fflush(out) != 0 || ::fsync(::fileno(out)) != 0) write_errno = errno;
    std::fclose(out);
    if (write_errno)
      throw StorageError("cannot write " + partial.string() + ": " + std::strerror(write_errno),
                         write_errno);
    if (bad_range || have > size) {
      fs::remove(partial, ec);
      fail(name + ": the server sent " +
           (bad_range ? "a range other than the one asked for"
                      : "more bytes than the hub announced") +
           "; the partial download was deleted");
    }
    if (r && (status == 200 || status == 206) && have == size) break;
    if (r && status == 416 && have > 0) {  // the partial file is not a prefix of this file
      fs::remove(partial, ec);
      have = 0;
    } else if (r && status != 200 && status != 206 &&
               (status < 500 || attempt == kDownloadAttempts)) {
      fail_http(name, r.value(), hub.has_token());
    }
    const std::string why = r ? "the connection closed early" : httplib::to_string(r.error());
    if (attempt == kDownloadAttempts)
      fail(name + ": download failed " + std::to_string(attempt) + " times (" + why +
           "); run `fak pull` again to resume from " + human_bytes(double(have)));
    progress.note(name + ": " + why + " at " + human_bytes(double(have)) + ", resuming");
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));
  }
  progress.finish("pulled");
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string hub_token() {
  if (auto t = env("HF_TOKEN"); !t.empty()) return t;
  fs::path path = env("HF_TOKEN_PATH");
  if (path.empty()) {
    if (auto home = env("HF_HOME"); !home.empty())
      path = fs::path(home) / "token";
    else if (auto xdg = env("XDG_CACHE_HOME"); !xdg.empty())
      path = fs::path(xdg) / "huggingface" / "token";
    else
      path = fs::path(env("HOME")) / ".cache" / "huggingface" / "token";
  }
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  return token;
}

void check_free_space(const fs::path& dir, uint64_t bytes, const std::string& what) {
  fs::path probe = dir;
  std::error_code ec;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st {};
  if (probe.empty() || ::statvfs(probe.c_str(), &st) != 0) return;  // cannot tell: the write will
  const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  // A margin so that the pull does not leave the disk full for everything else on it.
  const uint64_t margin = std::max<uint64_t>(uint64_t(256) << 20, bytes / 100);
  if (bytes > free_bytes || free_bytes - bytes < margin)
    throw StorageError(what + " needs " + human_bytes(double(bytes)) + " but " + probe.string() +
                           " has " + human_bytes(double(free_bytes)) + " free (keeping " +
                           human_bytes(double(margin)) + " spare); nothing was downloaded",
                       ENOSPC);
}

}  // namespace fak::cli
