#include "io/hub_listing.h"

#include "core/error.h"
#include "io/hub_cache.h"

namespace fak::hub {

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

uint64_t hub_size(const nlohmann::json& value, const std::string& what) {
  // note: nlohmann converts a float or a negative number to uint64_t without a word (1e23 wraps),
  // and throws on a string: only a whole number the JSON itself holds as an integer is a size.
  if (value.is_number_unsigned()) {
    const uint64_t n = value.get<uint64_t>();
    if (n <= kMaxFileBytes) return n;
  } else if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return hub_size(nlohmann::json(value.get<uint64_t>()), what);
  }
  std::string shown = value.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  fail(what + ": the hub sent an invalid size " + shown +
       " (a whole number of bytes up to 1 PiB expected)");
}

uint64_t hub_size(const std::string& header, const std::string& what) {
  uint64_t n = 0;
  bool ok = !header.empty() && header.size() <= 16;  // 1 PiB has 16 digits
  for (char c : header) {
    if (c < '0' || c > '9') ok = false;
    if (!ok) break;
    n = n * 10 + uint64_t(c - '0');
  }
  if (!ok || n > kMaxFileBytes) {
    std::string shown = header.substr(0, 40);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    fail(what + ": the hub sent an invalid size '" + shown + "'");
  }
  return n;
}

std::vector<RemoteFile> parse_listing(const nlohmann::json& info, const std::string& repo,
                                      std::string& commit) {
  if (!info.is_object()) fail(repo + ": the hub's model listing is not a JSON object");
  const auto sha = info.find("sha");
  commit = sha != info.end() && sha->is_string() ? sha->get<std::string>() : "";
  if (!is_commit_hash(commit)) fail(repo + ": the hub's answer names no commit");
  std::vector<RemoteFile> remote;
  const auto siblings = info.find("siblings");
  if (siblings == info.end() || siblings->is_null()) return remote;
  if (!siblings->is_array()) fail(repo + ": the hub's file list (siblings) is not an array");
  std::set<std::string> seen;
  for (const auto& s : *siblings) {
    const auto name = s.is_object() ? s.find("rfilename") : s.end();
    if (!s.is_object() || name == s.end() || !name->is_string())
      fail(repo + ": the hub's file list has an entry without a file name (rfilename)");
    RemoteFile f;
    f.name = name->get<std::string>();
    check_repo_path(f.name, repo);
    if (!seen.insert(f.name).second) fail(repo + ": the hub lists '" + f.name + "' twice");
    const std::string what = repo + ": " + f.name;
    if (auto size = s.find("size"); size != s.end() && !size->is_null())
      f.size = hub_size(*size, what);
    if (auto lfs = s.find("lfs"); lfs != s.end() && !lfs->is_null()) {
      if (!lfs->is_object()) fail(what + ": the hub's lfs entry is not an object");
      auto oid = lfs->find("sha256");
      if (oid == lfs->end()) oid = lfs->find("oid");
      if (oid == lfs->end() || !oid->is_string() || !is_sha256_hex(oid->get<std::string>()))
        fail(what + ": the hub's lfs entry has no sha256");
      f.lfs_sha256 = oid->get<std::string>();
      if (auto size = lfs->find("size"); size != lfs->end()) f.size = hub_size(*size, what);
    }
    remote.push_back(f);
  }
  return remote;
}

std::set<std::string> index_shards(const std::string& text, const std::string& repo) {
  const std::string what = repo + ": model.safetensors.index.json";
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) fail(what + " is not JSON");
  const auto map = doc.is_object() ? doc.find("weight_map") : doc.end();
  if (map == doc.end() || !map->is_object()) fail(what + " has no weight_map");
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) fail(what + ": the weight_map entry of '" + tensor + "' is not a file");
    check_repo_path(shard.get<std::string>(), what);
    shards.insert(shard.get<std::string>());
  }
  return shards;
}

}  // namespace fak::hub
