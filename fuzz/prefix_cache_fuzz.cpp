// libFuzzer target for prefix cache files (PrefixCache::reload, runtime/prefix_cache_file.cpp):
// any bytes must load, in part or not at all with a warning, never crash, read or write out of
// bounds, or leave blocks allocated once the cache is gone. What loads must survive a spill and a
// second reload whole: the same blocks and checkpoints come back.
//
// The input's first byte picks the model (a dense or a hybrid tiny oracle), the cache's KV type
// and whether it keeps Kraw, and whether the harness closes the rest with its correct checksum
// (without it, nearly every mutation would stop at the checksum). Seeds: files written by spill on
// those models, in fuzz/corpus/prefix_cache, without their checksum, behind the selector byte
// 0x01 | hybrid << 1 | kraw << 2 | KV type << 3 (0 f32, 1 f16).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cache_file_input.h"
#include "core/error.h"
#include "core/hash.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/prefix_cache.h"

namespace {

std::filesystem::path scratch(const char* name) {
  const auto p = std::filesystem::temp_directory_path() /
                 ("fak_prefix_fuzz_" + std::to_string(getpid())) / name;
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = fuzz::decode_input(data, size);
  if (!input) return 0;
  const auto in = scratch("in"), out = scratch("out");
  fuzz::write_or_trap(in / "input.fakprefix", input->file);
  auto m = fuzz::oracle_model(input->hybrid);
  const fak::ModelConfig& c = m->config();
  const fak::KvCacheOptions o = input->cache;
  auto cache = std::make_shared<fak::KvCache>(m->n_attention_layers(), c.n_kv_heads, c.head_dim, o);
  {
    fak::PrefixCache pc(m, cache, 0);
    const fak::PrefixCacheFileReport r = pc.reload(in);
    const fak::PrefixCacheStats st = pc.stats();
    if (st.blocks != r.blocks || st.checkpoints != r.checkpoints) __builtin_trap();
    if (st.blocks > 0) {
      // Written and read back whole: nothing the first reload took in is lost or refused.
      const fak::PrefixCacheFileReport w = pc.spill(out, 0);
      auto cache2 =
          std::make_shared<fak::KvCache>(m->n_attention_layers(), c.n_kv_heads, c.head_dim, o);
      fak::PrefixCache again(m, cache2, 0);
      const fak::PrefixCacheFileReport r2 = again.reload(out);
      if (!w.warnings.empty() || !r2.warnings.empty() || r2.blocks != st.blocks ||
          r2.checkpoints != st.checkpoints)
        __builtin_trap();
    }
  }
  if (cache->blocks_in_use() != 0) __builtin_trap();  // every block went with the cache
  std::error_code ec;
  std::filesystem::remove_all(in.parent_path(), ec);
  return 0;
}
