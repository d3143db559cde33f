// libFuzzer target for session files (Session::load): any bytes must load or throw fak::Error,
// never crash, read or write out of bounds, or leave the cache's blocks allocated.
//
// The input's first byte picks the model (a dense or a hybrid tiny oracle), the cache's KV type
// and whether it keeps Kraw, and whether the harness closes the rest with its correct checksum.
// Without that, nearly every mutation would stop at the checksum and the header and payload
// checks behind it would go unfuzzed. A file that loads is decoded one more token, so the rows and
// state it brought are used.
//
// Seeds: files saved by `fak run --session` on those models, in fuzz/corpus/session (their first
// byte is the harness's selector, 0x01 | model bit; see docs/layout.md's Fuzzing).
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
#include "runtime/session.h"
#include "scratch_path.h"

namespace {

const std::filesystem::path& scratch_file() {
  static const fuzz::ScratchPath p("fak_session_fuzz", ".fak");
  return p.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto in = fuzz::decode_input(data, size);
  if (!in) return 0;
  fuzz::write_or_trap(scratch_file(), in->file);
  auto m = fuzz::oracle_model(in->hybrid);
  const fak::ModelConfig& c = m->config();
  auto cache =
      std::make_shared<fak::KvCache>(m->n_attention_layers(), c.n_kv_heads, c.head_dim, in->cache);
  try {
    fak::Session s = fak::Session::load(scratch_file(), m, cache);
    if (s.size() < c.max_seq_len) s.append(std::vector<int32_t>{1});
  } catch (const fak::Error&) {
  }
  if (cache->blocks_in_use() != 0) __builtin_trap();  // a failed or finished load frees its blocks
  return 0;
}
