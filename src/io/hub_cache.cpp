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

std::optional<RepoRef> parse_repo_ref(const std::string& text) {
  RepoRef r;
  const size_t colon = text.find(':');
  r.repo = text.substr(0, colon);
  if (colon != std::string::npos) {
    r.file = text.substr(colon + 1);
    // note: a file naming ".." or an absolute path would escape the snapshot folder.
    if (r.file.empty() || r.file.front() == '/' || fs::path(r.file).lexically_normal() != r.file ||
        r.file.starts_with(".."))
      return std::nullopt;
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
