// The Hugging Face hub cache as huggingface_hub lays it out, so that models pulled by `fak pull`,
// transformers or `huggingface-cli download` are the same files:
//
//   <cache>/models--org--name/blobs/<etag>                  the bytes (etag: sha256 for LFS files,
//                                                           the git blob sha1 for small ones)
//   <cache>/models--org--name/snapshots/<commit>/<file>     a relative symlink to
//   ../../blobs/<etag> <cache>/models--org--name/refs/<revision>               the commit hash the
//   revision named
//
// <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. Nothing here touches the network.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace fak::hub {

// "org/name" or "org/name:file" (file may hold '/', e.g. "org/name:q4/model.gguf").
struct RepoRef {
  std::string repo;
  std::string file;  // empty: the whole snapshot
};

// nullopt when text is not a hub model id (one '/', each side of letters, digits, '.', '_', '-').
std::optional<RepoRef> parse_repo_ref(const std::string& text);

std::filesystem::path cache_dir();
// <cache>/models--org--name
std::filesystem::path repo_dir(const std::filesystem::path& cache, const std::string& repo);

// True for a 40-digit lowercase hex string (a git commit or blob hash).
bool is_commit_hash(const std::string& s);

// Names a hub hands us (file lists, a shard index's weight_map, names matched by --include, the
// revision) are data, never paths to follow: a name is accepted only as a normalised relative
// path of plain segments, so that <snapshot>/<name> stays inside the snapshot. Returns why `name`
// is refused, or nullopt when it is safe.
std::optional<std::string> unsafe_repo_path(std::string_view name);
// The same, throwing fak::Error "<what>: the hub named an unsafe file '<name>' (<why>)".
void check_repo_path(std::string_view name, const std::string& what);

// What `-m ARG` names: ARG itself when it exists on disk (or is empty: the caller's default),
// else the snapshot of org/name (or the file in it) that refs/<revision> points at in the cache.
// ARG that is neither a path nor a hub id comes back unchanged (the loader names it). A hub id
// that is not in the cache throws fak::Error suggesting `fak pull`.
std::string resolve_model_arg(const std::string& arg, const std::string& revision = "main");

}  // namespace fak::hub
