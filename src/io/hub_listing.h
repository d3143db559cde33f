// What a Hugging Face hub says about a repository, read strictly: the model listing (GET
// /api/models/{repo}/revision/{rev}?blobs=true), a shard index's weight_map, and byte counts. A
// value of the wrong type, an unsafe file name (hub_cache.h) or an invalid size is one fak::Error
// naming the repository, never an exception from the JSON library. No network here (fuzzed).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace fak::hub {

struct RemoteFile {
  std::string name;  // checked: a safe relative path
  uint64_t size = 0;
  std::string lfs_sha256;  // empty: a small file kept in git
};

// The files of a model listing; `commit` receives its 40-hex commit.
std::vector<RemoteFile> parse_listing(const nlohmann::json& info, const std::string& repo,
                                      std::string& commit);
// The shard names a model.safetensors.index.json's weight_map holds (text: the file).
std::set<std::string> index_shards(const std::string& text, const std::string& repo);

// A byte count the hub sent (a JSON number, or a header's digits): anything but a whole number
// in [0, kMaxFileBytes] is an error naming `what`.
constexpr uint64_t kMaxFileBytes = uint64_t(1) << 50;  // 1 PiB: no model file is larger
uint64_t hub_size(const nlohmann::json& value, const std::string& what);
uint64_t hub_size(const std::string& header, const std::string& what);

bool is_sha256_hex(const std::string& s);

}  // namespace fak::hub
