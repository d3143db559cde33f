// What the two cache-file fuzz targets (session files, prefix cache files) share: the tiny oracle
// models they load into, and how an input's first byte chooses the model, the cache's KV type and
// Kraw, and whether the harness closes the rest of the input with its correct checksum (without
// that, nearly every mutation would stop at the checksum and the checks behind it go unfuzzed).
//
//   selector = add_checksum | hybrid << 1 | keep_kraw << 2 | KV type << 3 (0 f32, 1 f16, 2 bf16)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/hash.h"
#include "memory/kv_cache.h"
#include "models/model.h"

namespace fuzz {

inline std::shared_ptr<const fak::Model> oracle_model(bool hybrid) {
  static const auto dense =
      fak::Model::load(FAK_SOURCE_DIR "/tests/data/oracle/qwen2-tiny", {.load_tokenizer = false});
  static const auto recurrent = fak::Model::load(
      FAK_SOURCE_DIR "/tests/data/oracle/qwen35-hybrid-tiny", {.load_tokenizer = false});
  return hybrid ? recurrent : dense;
}

struct CacheFileInput {
  bool hybrid = false;
  fak::KvCacheOptions cache;
  std::string file;  // the bytes to load, with the checksum appended when the selector asked
};

inline std::optional<CacheFileInput> decode_input(const uint8_t* data, size_t size) {
  if (size < 1) return std::nullopt;
  const uint8_t sel = data[0];
  CacheFileInput in;
  in.hybrid = sel & 2;
  in.cache.keep_kraw = sel & 4;
  in.cache.dtype = (sel >> 3) % 3 == 0   ? fak::DType::F32
                   : (sel >> 3) % 3 == 1 ? fak::DType::F16
                                         : fak::DType::BF16;
  in.file.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  if (sel & 1) {
    fak::Fnv1a sum;
    sum.update(in.file);
    const uint64_t d = sum.digest();
    in.file.append(reinterpret_cast<const char*>(&d), sizeof(d));
  }
  return in;
}

// Writes the bytes whole or stops the fuzzer: a short write would fuzz nothing.
inline void write_or_trap(const std::filesystem::path& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  std::fclose(f);
  if (!ok) __builtin_trap();
}

}  // namespace fuzz
