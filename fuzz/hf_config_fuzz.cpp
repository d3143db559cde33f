// libFuzzer target for a checkpoint's config.json (parse_hf_config): any JSON must give a config or
// throw fak::Error naming the field, never another exception or a crash. A config that parses is
// checked for the invariants the model code relies on.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;  // not JSON: load_hf_config refuses it before parsing fields
  try {
    const fak::ModelConfig c = fak::parse_hf_config(j, "fuzz");
    if (c.dim <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 ||
        c.head_dim <= 0 || c.vocab <= 0 || c.rotary_dim <= 0 || c.rotary_dim > c.head_dim)
      __builtin_trap();
  } catch (const fak::Error&) {
  }
  return 0;
}
