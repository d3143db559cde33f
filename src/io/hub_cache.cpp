#include "io/hub_cache.h"

#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace fak::hub {

namespace fs = std::filesystem;

namespace {

bool valid_name_part(const std::string& s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::optional<std::string> unsafe_repo_path(std::string_view name) {
  // note: a file system allows 255 bytes a segment; the hub allows no longer names, and a bound
  // keeps a hostile listing from making paths the OS refuses halfway through a pull.
  constexpr size_t kMaxName = 1024, kMaxSegment = 255;
  if (name.empty()) return "empty";
  if (name.size() > kMaxName) return "longer than " + std::to_string(kMaxName) + " bytes";
  if (name.front() == '/') return "an absolute path";
  if (name.back() == '/') return "ends with '/'";
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view segment = name.substr(start, end - start);
    if (segment.empty()) return "an empty path segment";
    if (segment == "." || segment == "..") return "a '" + std::string(segment) + "' segment";
    if (segment.size() > kMaxSegment)
      return "a segment longer than " + std::to_string(kMaxSegment) + " bytes";
    start = end + 1;
  }
  for (unsigned char c : name) {
    // Control characters would also reach the terminal through progress lines; a backslash is a
    // separator on other systems sharing the cache.
    if (c < 0x20 || c == 0x7f) return "a control character";
    if (c == '\\') return "a backslash";
  }
  return std::nullopt;
}

void check_repo_path(std::string_view name, const std::string& what) {
  if (auto why = unsafe_repo_path(name)) {
    std::string shown;
    for (unsigned char c : name.substr(0, 200)) {
      if (c < 0x20 || c == 0x7f) {
        static const char* kHex = "0123456789abcdef";
        shown += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
      } else {
        shown += char(c);
      }
    }
    if (name.size() > 200) shown += "...";
    fail(what + ": the hub named an unsafe file '" + shown + "' (" + *why + ")");
  }
}

std::optional<RepoRef> parse_repo_ref(const std::string& text) {
  RepoRef r;
  const size_t colon = text.find(':');
  r.repo = text.substr(0, colon);
  if (colon != std::string::npos) {
    r.file = text.substr(colon + 1);
    // note: a file naming ".." or an absolute path would escape the snapshot folder.
    if (unsafe_repo_path(r.file)) return std::nullopt;
  }
  const size_t slash = r.repo.find('/');
  if (slash == std::string::npos || r.repo.find('/', slash + 1) != std::string::npos)
    return std::nullopt;
  if (!valid_name_part(r.repo.substr(0, slash)) || !valid_name_part(r.repo.substr(slash + 1)))
    return std::nullopt;
  return r;
}

fs::path cache_dir() {
  if (auto v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (auto v = env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "huggingface" / "hub";
  return fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
}

fs::path repo_dir(const fs::path& cache, const std::string& repo) {
  std::string folder = "models--" + repo;
  // huggingface_hub's repo_folder_name: every '/' becomes "--".
  for (size_t p = 0; (p = folder.find('/', p)) != std::string::npos;) folder.replace(p, 1, "--");
  return cache / folder;
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string resolve_model_arg(const std::string& arg, const std::string& revision) {
  std::error_code ec;
  if (arg.empty() || fs::exists(arg, ec)) return arg;
  auto ref = parse_repo_ref(arg);
  if (!ref) return arg;
  const fs::path cache = cache_dir();
  const fs::path dir = repo_dir(cache, ref->repo);
  std::string commit = revision;
  if (!is_commit_hash(revision)) {
    std::ifstream in(dir / "refs" / revision);
    std::getline(in, commit);
  }
  if (is_commit_hash(commit)) {
    fs::path snapshot = dir / "snapshots" / commit;
    if (!ref->file.empty()) snapshot /= ref->file;
    if (fs::exists(snapshot, ec)) return snapshot.string();
  }
  fail("'" + arg + "' is neither a path nor a model in the Hugging Face cache (" + cache.string() +
       "): fetch it with `fak pull " + arg + "`");
}

}  // namespace fak::hub
