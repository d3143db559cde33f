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
//
// Every name and number the hub sends is data: file names are checked (io/hub_cache.h) before any
// is joined to a path, sizes are parsed strictly, and the free space is checked before a download.
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "common.h"
#include "core/error.h"
#include "hub_client.h"
#include "io/atomic_file.h"
#include "io/hub_cache.h"
#include "io/hub_listing.h"

namespace fak::cli {

namespace {

namespace fs = std::filesystem;
using hub::RemoteFile;

struct PullArgs {
  std::string ref, revision = "main";
  std::vector<std::string> include;
};

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
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
  fs::path snapshot() const { return repo / "snapshots" / commit; }
};

// Creates each folder of `rel` under `base`, refusing a component that is a symlink or a file, so
// that nothing placed in the cache can redirect a snapshot link outside it.
fs::path real_subdirectory(const fs::path& base, const fs::path& rel) {
  fs::path dir = base;
  for (const auto& part : rel) {
    dir /= part;
    std::error_code ec;
    const auto st = fs::symlink_status(dir, ec);
    if (fs::is_symlink(st) || (fs::exists(st) && !fs::is_directory(st)))
      fail(dir.string() +
           " is a link or a file where fak pull needs a folder; remove it and pull "
           "again");
    if (!fs::exists(st)) fs::create_directory(dir);
  }
  return dir;
}

// A blob name comes from the hub's ETag: a hash in practice; anything that is not a short run of
// letters, digits, '-' and '_' could name another file.
bool is_safe_etag(const std::string& etag) {
  if (etag.empty() || etag.size() > 128) return false;
  for (unsigned char c : etag)
    if (!(std::isalnum(c) || c == '-' || c == '_')) return false;
  return true;
}

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
  if (!is_safe_etag(etag))
    fail(f.name + ": the hub sent no usable ETag, so the file has no blob name");
  uint64_t size = f.size;
  if (auto s = r->get_header_value("X-Linked-Size"); !s.empty())
    size = hub::hub_size(s, f.name);
  else if (auto s2 = r->get_header_value("Content-Length"); !s2.empty() && r->status == 200)
    size = hub::hub_size(s2, f.name);
  // LFS files are named by their sha256, which also checks them; small git files by their blob
  // sha1, which checks them as well.
  const std::string sha256 =
      !f.lfs_sha256.empty() ? f.lfs_sha256 : (hub::is_sha256_hex(linked) ? linked : "");

  const fs::path blob = c.repo / "blobs" / etag;
  fs::create_directories(blob.parent_path());
  {
    BlobLock lock(c.root / ".locks" / c.repo.filename() / (etag + ".lock"));
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(blob, ec)) && fs::file_size(blob) == size) {
      std::fprintf(stderr, "fak: %s already in the cache\n", f.name.c_str());
    } else {
      const fs::path partial = fs::path(blob.string() + ".incomplete");
      const uint64_t have = fs::is_regular_file(partial, ec) ? fs::file_size(partial, ec) : 0;
      check_free_space(blob.parent_path(), size - std::min(size, have), f.name);
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
  // note: f.name passed hub::check_repo_path, and every folder on the way is a real folder, so
  // the link lands inside the snapshot; rename replaces a link without following it.
  const fs::path rel = fs::path(f.name);
  const fs::path dir =
      real_subdirectory(c.repo, fs::path("snapshots") / c.commit / rel.parent_path());
  const fs::path link = dir / rel.filename();
  if (std::error_code ec; fs::is_directory(fs::symlink_status(link, ec)))
    fail(link.string() + " is a folder where fak pull needs a file; remove it and pull again");
  const fs::path tmp = link.string() + ".fak-" + std::to_string(::getpid());
  fs::remove(tmp);
  fs::create_symlink(blob.lexically_relative(link.parent_path()), tmp);
  fs::rename(tmp, link);
  return link;
}

bool is_default_file(const std::string& name) {
  static const std::set<std::string> kNames = {"config.json",         "generation_config.json",
                                               "tokenizer.json",      "tokenizer_config.json",
                                               "chat_template.jinja", "chat_template.json"};
  return kNames.count(name) > 0;
}

// Bytes still to download for `files` (blobs already in the cache by their sha256 are skipped;
// small git files are counted, their names being unknown before the HEAD).
uint64_t bytes_to_fetch(const Cache& c, const std::vector<const RemoteFile*>& files) {
  uint64_t total = 0;
  for (const RemoteFile* f : files) {
    std::error_code ec;
    if (!f->lfs_sha256.empty() && fs::is_regular_file(c.repo / "blobs" / f->lfs_sha256, ec))
      continue;
    total += f->size;
  }
  return total;
}

void pull(const PullArgs& a) {
  const auto ref = hub::parse_repo_ref(a.ref);
  if (!ref) fail("'" + a.ref + "' is not a hub model id: give org/name or org/name:file");
  if (!ref->file.empty() && !a.include.empty())
    fail("give either org/name:file or --include, not both");
  if (auto why = hub::unsafe_repo_path(a.revision))
    fail("--revision '" + a.revision + "' is not a revision name (" + *why + ")");
  std::string endpoint = env_or("HF_ENDPOINT", "https://huggingface.co");
  Hub hub(endpoint, hub_token());

  const nlohmann::json info = hub.get_json(
      "/api/models/" + ref->repo + "/revision/" + url_quote(a.revision, false) + "?blobs=true",
      ref->repo);
  Cache c;
  c.repo_id = ref->repo;
  const std::vector<RemoteFile> remote = hub::parse_listing(info, ref->repo, c.commit);
  c.root = hub::cache_dir();
  c.repo = hub::repo_dir(c.root, ref->repo);
  auto find = [&](const std::string& name) -> const RemoteFile* {
    for (const auto& f : remote)
      if (f.name == name) return &f;
    return nullptr;
  };

  std::vector<const RemoteFile*> wanted;
  if (!ref->file.empty()) {
    const RemoteFile* f = find(ref->file);
    if (!f) fail(ref->repo + " has no file '" + ref->file + "' at " + a.revision);
    wanted.push_back(f);
  } else if (!a.include.empty()) {
    // FNM_PATHNAME: a '*' stays within one folder, as a shell glob does.
    for (const auto& f : remote)
      for (const auto& glob : a.include)
        if (::fnmatch(glob.c_str(), f.name.c_str(), FNM_PATHNAME) == 0) {
          wanted.push_back(&f);
          break;
        }
    if (wanted.empty()) fail(ref->repo + ": no file matches --include");
  } else {
    for (const auto& f : remote)
      if (is_default_file(f.name)) wanted.push_back(&f);
    // note: some repositories hold the weights twice (sharded, plus e.g. consolidated.safetensors
    // for another runtime); with an index only the shards it names are fak's.
    std::set<std::string> weights;
    if (const RemoteFile* index = find("model.safetensors.index.json")) {
      check_free_space(c.repo, index->size, ref->repo);
      weights = hub::index_shards(read_text_file(fetch_file(hub, c, *index).string()), ref->repo);
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
      wanted.push_back(f);
    }
  }
  // The whole pull against the free space before its first byte: a hub announcing a petabyte, or
  // a disk too small for the model, is refused here rather than after hours of downloading.
  check_free_space(c.repo, bytes_to_fetch(c, wanted), ref->repo);
  std::vector<fs::path> links;
  for (const RemoteFile* f : wanted) links.push_back(fetch_file(hub, c, *f));
  // Written last: a reader that follows refs/<revision> finds a complete snapshot.
  if (!hub::is_commit_hash(a.revision)) {
    fs::create_directories((c.repo / "refs" / a.revision).parent_path());
    write_file_atomic(c.repo / "refs" / a.revision, c.commit);
  }
  const fs::path out = ref->file.empty() ? c.snapshot() : links.front();
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
  c->add_option("--include", a->include,
                "pull the files matching these globs instead ('*' stays within a folder)")
      ->expected(1, -1);
  c->callback([a] { pull(*a); });
}

}  // namespace fak::cli
