// fak pull: fetches a model from the Hugging Face hub into huggingface_hub's own cache layout
// (io/hub_cache.h), speaking the hub's HTTP protocol as huggingface_hub does:
//
//   GET  {endpoint}/api/models/{repo}/revision/{rev}?blobs=true   commit sha + files (+ lfs sha256)
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}                X-Repo-Commit, ETag /
//                                                                 X-Linked-Etag, X-Linked-Size
//   GET  {endpoint}/{repo}/resolve/{commit}/{file}                302 to a CDN for LFS files
//
// Downloads go to blobs/<etag>.incomplete and continue with a Range header after a broken
// connection (in this run or a later one); a file is checked (sha256 for LFS files, the git blob
// sha1 for small ones) before it is renamed to its final name, so a blob under its final name is
// always the right bytes.
#include <fcntl.h>
#include <fnmatch.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/hub_cache.h"

namespace fak::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kMaxRedirects = 10;
constexpr int kDownloadAttempts = 6;  // a first try and five resumptions

struct PullArgs {
  std::string ref, revision = "main";
  std::vector<std::string> include;
};

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

// huggingface_hub's quote(path, safe="/"): file names may hold spaces, '#', '?'.
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

// The hub's reasons (X-Error-Code) made into one line the user can act on.
[[noreturn]] void fail_http(const std::string& what, const httplib::Response& res, bool has_token) {
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

class Hub {
 public:
  Hub(std::string endpoint, std::string token)
      : endpoint_(std::move(endpoint)), token_(std::move(token)) {
    while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
    origin_ = parse_url(endpoint_).base;
  }
  const std::string& endpoint() const { return endpoint_; }
  bool has_token() const { return !token_.empty(); }

  // One request, following redirects by hand: httplib would forward every header, and a
  // presigned CDN URL refuses a request that also carries our Authorization header; and like
  // huggingface_hub we never send the token to another host. on_body (GET only) sees the final
  // response's body; res_out receives the final response's status and headers.
  httplib::Result send(const std::string& method, const std::string& url,
                       const httplib::Headers& extra, bool follow_cross_host,
                       const std::function<bool(const httplib::Response&)>& on_response = nullptr,
                       const std::function<bool(const char*, size_t)>& on_body = nullptr) {
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

  nlohmann::json get_json(const std::string& path, const std::string& what) {
    std::string body;
    httplib::Result r =
        send("GET", endpoint_ + path, {}, true, nullptr, [&](const char* d, size_t n) {
          body.append(d, n);
          return body.size() < (size_t(256) << 20);
        });
    if (!r) fail(what + ": cannot reach " + endpoint_ + ": " + httplib::to_string(r.error()));
    if (r->status != 200) fail_http(what, r.value(), has_token());
    try {
      return nlohmann::json::parse(body);
    } catch (const nlohmann::json::exception&) {
      fail(what + ": the hub's answer is not JSON");
    }
  }

 private:
  std::string endpoint_, origin_, token_;
};

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

// Lowercase hex digest of a file: sha256 (LFS oids) or git's blob sha1 ("blob <size>\0" + bytes).
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

// An ETag without quotes or the weak prefix, as huggingface_hub's _normalize_etag.
std::string normalize_etag(std::string e) {
  if (e.starts_with("W/")) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

struct RemoteFile {
  std::string name;
  uint64_t size = 0;
  std::string lfs_sha256;  // empty: a small file kept in git
};

// Downloads url into `partial`, continuing from its current length, until it holds `size` bytes.
// A broken connection is resumed with a Range header, a few times with a growing pause.
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

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// $HF_TOKEN, else the file `huggingface-cli login` writes ($HF_TOKEN_PATH or $HF_HOME/token).
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

// Holds huggingface_hub's lock for one blob (the same file, the same flock) while it is fetched,
// so that two pulls, or a pull and transformers, never write one .incomplete file together.
class BlobLock {
 public:
  explicit BlobLock(const fs::path& path) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open lock " + path.string() + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      std::fprintf(stderr, "fak: waiting for another download of the same file (%s)\n",
                   path.c_str());
      ::flock(fd_, LOCK_EX);
    }
  }
  ~BlobLock() { ::close(fd_); }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

struct Cache {
  fs::path root, repo;  // <cache>, <cache>/models--org--name
  std::string repo_id, commit;
};

// One file into blobs/ (unless there already) and its snapshot symlink; returns the link's path.
fs::path fetch_file(Hub& hub, const Cache& c, const RemoteFile& f) {
  const std::string url =
      hub.endpoint() + "/" + c.repo_id + "/resolve/" + c.commit + "/" + url_quote(f.name, true);
  // Stop at the CDN redirect: the hub's own answer carries the commit, etag and size.
  httplib::Result r = hub.send("HEAD", url, {}, false);
  if (!r) fail(f.name + ": cannot reach " + hub.endpoint() + ": " + httplib::to_string(r.error()));
  if (r->status >= 400) fail_http(f.name, r.value(), hub.has_token());
  const std::string linked = normalize_etag(r->get_header_value("X-Linked-Etag"));
  const std::string etag = linked.empty() ? normalize_etag(r->get_header_value("ETag")) : linked;
  if (etag.empty() || etag.find('/') != std::string::npos || etag.starts_with("."))
    fail(f.name + ": the hub sent no usable ETag, so the file has no blob name");
  uint64_t size = f.size;
  if (auto s = r->get_header_value("X-Linked-Size"); !s.empty())
    size = std::stoull(s);
  else if (auto s2 = r->get_header_value("Content-Length"); !s2.empty() && r->status == 200)
    size = std::stoull(s2);
  // LFS files are named by their sha256, which also checks them; small git files by their blob
  // sha1, which checks them as well.
  const std::string sha256 =
      !f.lfs_sha256.empty() ? f.lfs_sha256 : (is_sha256_hex(linked) ? linked : "");

  const fs::path blob = c.repo / "blobs" / etag;
  const fs::path link = c.repo / "snapshots" / c.commit / f.name;
  fs::create_directories(blob.parent_path());
  {
    BlobLock lock(c.root / ".locks" / c.repo.filename() / (etag + ".lock"));
    std::error_code ec;
    if (fs::is_regular_file(blob, ec) && fs::file_size(blob) == size) {
      std::fprintf(stderr, "fak: %s already in the cache\n", f.name.c_str());
    } else {
      const fs::path partial = fs::path(blob.string() + ".incomplete");
      download(hub, url, partial, size, f.name);
      if (!sha256.empty() || hub::is_commit_hash(etag)) {
        const std::string got = file_hash(partial, sha256.empty());
        const std::string want = sha256.empty() ? etag : sha256;
        if (got != want) {
          fs::remove(partial, ec);
          fail(f.name + ": " + (sha256.empty() ? "git sha1" : "sha256") +
               " mismatch (the hub says " + want + ", the download is " + got +
               "); the partial download was deleted");
        }
      }
      fs::rename(partial, blob);
    }
  }
  // The link is relative (../../blobs/<etag>, deeper for files in folders), so the cache can move.
  fs::create_directories(link.parent_path());
  const fs::path tmp = link.string() + ".fak-" + std::to_string(::getpid());
  fs::remove(tmp);
  fs::create_symlink(blob.lexically_relative(link.parent_path()), tmp);
  fs::rename(tmp, link);
  return link;
}

bool is_default_file(const std::string& name) {
  static const std::set<std::string> kNames = {"config.json", "generation_config.json",
                                               "tokenizer.json", "tokenizer_config.json"};
  return kNames.count(name) > 0;
}

void pull(const PullArgs& a) {
  const auto ref = hub::parse_repo_ref(a.ref);
  if (!ref) fail("'" + a.ref + "' is not a hub model id: give org/name or org/name:file");
  if (!ref->file.empty() && !a.include.empty())
    fail("give either org/name:file or --include, not both");
  std::string endpoint = env("HF_ENDPOINT");
  Hub hub(endpoint.empty() ? "https://huggingface.co" : endpoint, hub_token());

  const nlohmann::json info = hub.get_json(
      "/api/models/" + ref->repo + "/revision/" + url_quote(a.revision, false) + "?blobs=true",
      ref->repo);
  Cache c;
  c.repo_id = ref->repo;
  c.commit = info.value("sha", "");
  if (!hub::is_commit_hash(c.commit)) fail(ref->repo + ": the hub's answer names no commit");
  c.root = hub::cache_dir();
  c.repo = hub::repo_dir(c.root, ref->repo);

  std::vector<RemoteFile> remote;
  for (const auto& s : info.value("siblings", nlohmann::json::array())) {
    RemoteFile f;
    f.name = s.value("rfilename", "");
    f.size = s.value("size", uint64_t(0));
    if (auto lfs = s.find("lfs"); lfs != s.end() && lfs->is_object()) {
      f.lfs_sha256 = lfs->value("sha256", lfs->value("oid", ""));
      f.size = lfs->value("size", f.size);
    }
    if (!f.name.empty()) remote.push_back(f);
  }
  auto find = [&](const std::string& name) -> const RemoteFile* {
    for (const auto& f : remote)
      if (f.name == name) return &f;
    return nullptr;
  };

  std::vector<fs::path> links;
  if (!ref->file.empty()) {
    const RemoteFile* f = find(ref->file);
    if (!f) fail(ref->repo + " has no file '" + ref->file + "' at " + a.revision);
    links.push_back(fetch_file(hub, c, *f));
  } else if (!a.include.empty()) {
    for (const auto& f : remote)
      for (const auto& glob : a.include)
        if (::fnmatch(glob.c_str(), f.name.c_str(), 0) == 0) {
          links.push_back(fetch_file(hub, c, f));
          break;
        }
    if (links.empty()) fail(ref->repo + ": no file matches --include");
  } else {
    for (const auto& f : remote)
      if (is_default_file(f.name)) links.push_back(fetch_file(hub, c, f));
    // note: some repositories hold the weights twice (sharded, plus e.g. consolidated.safetensors
    // for another runtime); with an index only the shards it names are fak's.
    std::set<std::string> weights;
    if (const RemoteFile* index = find("model.safetensors.index.json")) {
      fs::path path = fetch_file(hub, c, *index);
      nlohmann::json map;
      try {
        map = nlohmann::json::parse(read_text_file(path.string())).at("weight_map");
        for (const auto& [tensor, shard] : map.items()) weights.insert(shard.get<std::string>());
      } catch (const nlohmann::json::exception&) {
        fail(ref->repo + ": model.safetensors.index.json has no weight_map");
      }
    } else {
      for (const auto& f : remote)
        if (f.name.ends_with(".safetensors") && f.name.find('/') == std::string::npos)
          weights.insert(f.name);
    }
    if (weights.empty()) {
      std::string ggufs;
      for (const auto& f : remote)
        if (f.name.ends_with(".gguf")) ggufs += (ggufs.empty() ? "" : ", ") + f.name;
      fail(ref->repo + " has no safetensors weights" +
           (ggufs.empty()
                ? std::string()
                : "; pull one GGUF file: fak pull " + ref->repo + ":FILE (" + ggufs + ")"));
    }
    for (const auto& w : weights) {
      const RemoteFile* f = find(w);
      if (!f) fail(ref->repo + ": the index names " + w + ", which the repository does not hold");
      links.push_back(fetch_file(hub, c, *f));
    }
  }
  // Written last: a reader that follows refs/<revision> finds a complete snapshot.
  if (!hub::is_commit_hash(a.revision)) {
    fs::create_directories((c.repo / "refs" / a.revision).parent_path());
    write_file_atomic(c.repo / "refs" / a.revision, c.commit);
  }
  const fs::path out = ref->file.empty() ? c.repo / "snapshots" / c.commit : links.front();
  std::printf("%s\n", out.c_str());
}

}  // namespace

void register_pull(CLI::App& app) {
  auto a = std::make_shared<PullArgs>();
  CLI::App* c = app.add_subcommand(
      "pull",
      "download a model from the Hugging Face hub into its cache ($HF_HUB_CACHE, $HF_HOME/hub or "
      "~/.cache/huggingface/hub); then -m org/name finds it");
  c->add_option("model", a->ref,
                "org/name (config, tokenizer and safetensors weights) or org/name:FILE (one file, "
                "e.g. a GGUF)")
      ->required();
  c->add_option("--revision", a->revision, "branch, tag or commit (default: main)");
  c->add_option("--include", a->include, "pull the files matching these globs instead")
      ->expected(1, -1);
  c->callback([a] { pull(*a); });
}

}  // namespace fak::cli
