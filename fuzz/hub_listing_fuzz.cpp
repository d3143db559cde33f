// libFuzzer target for what a Hugging Face hub answers `fak pull` (io/hub_listing.h): any bytes as
// the model listing and as a shard index must give files with safe names or throw fak::Error,
// never another exception or a crash. Every name accepted must stay inside the snapshot folder.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/hub_cache.h"
#include "io/hub_listing.h"

namespace {

void check_inside(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path("/snap") / name;
  const std::string normal = p.lexically_normal().string();
  if (fak::hub::unsafe_repo_path(name) || !normal.starts_with("/snap/") ||
      name.find('\0') != name.npos)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded()) {
    try {
      std::string commit;
      for (const auto& f : fak::hub::parse_listing(j, "org/fuzz", commit)) {
        check_inside(f.name);
        if (f.size > fak::hub::kMaxFileBytes) __builtin_trap();
      }
      if (!fak::hub::is_commit_hash(commit)) __builtin_trap();
    } catch (const fak::Error&) {
    }
  }
  try {
    for (const auto& shard : fak::hub::index_shards(text, "org/fuzz")) check_inside(shard);
  } catch (const fak::Error&) {
  }
  // The size header parser on the raw bytes.
  try {
    if (fak::hub::hub_size(text.substr(0, 24), "fuzz") > fak::hub::kMaxFileBytes) __builtin_trap();
  } catch (const fak::Error&) {
  }
  return 0;
}
