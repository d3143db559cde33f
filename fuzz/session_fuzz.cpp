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
// byte is the harness's selector, 0x01 | model bit; see the README's fuzzing line).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "models/model.h"
#include "memory/kv_cache.h"
#include "runtime/session.h"

namespace {

std::shared_ptr<const fak::Model> model(bool hybrid) {
  static const auto dense =
      fak::Model::load(FAK_SOURCE_DIR "/tests/data/oracle/qwen2-tiny", {.load_tokenizer = false});
  static const auto recurrent = fak::Model::load(
      FAK_SOURCE_DIR "/tests/data/oracle/qwen35-hybrid-tiny", {.load_tokenizer = false});
  return hybrid ? recurrent : dense;
}

const std::filesystem::path& scratch_file() {
  static const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                         ("fak_session_fuzz_" + std::to_string(getpid()) + ".fak");
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  const bool add_checksum = sel & 1, hybrid = sel & 2, keep_kraw = sel & 4;
  const fak::DType kv = (sel >> 3) % 3 == 0   ? fak::DType::F32
                        : (sel >> 3) % 3 == 1 ? fak::DType::F16
                                              : fak::DType::BF16;
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (add_checksum) {
    fak::Fnv1a sum;
    sum.update(file);
    const uint64_t d = sum.digest();
    file.append(reinterpret_cast<const char*>(&d), sizeof(d));
  }
  if (FILE* f = std::fopen(scratch_file().c_str(), "wb")) {
    const bool ok = std::fwrite(file.data(), 1, file.size(), f) == file.size();
    std::fclose(f);
    if (!ok) __builtin_trap();
  }
  auto m = model(hybrid);
  const fak::ModelConfig& c = m->config();
  auto cache =
      std::make_shared<fak::KvCache>(m->n_attention_layers(), c.n_kv_heads, c.head_dim,
                                     fak::KvCacheOptions{.keep_kraw = keep_kraw, .dtype = kv});
  try {
    fak::Session s = fak::Session::load(scratch_file(), m, cache);
    if (s.size() < c.max_seq_len) s.append(std::vector<int32_t>{1});
  } catch (const fak::Error&) {
  }
  if (cache->blocks_in_use() != 0) __builtin_trap();  // a failed or finished load frees its blocks
  return 0;
}
