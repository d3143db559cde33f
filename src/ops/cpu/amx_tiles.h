// The AMX tile configuration a thread has loaded, shared by the kernels that use the tile unit
// (the int8 prefill tiles, ops/quant/block_sums_amx.h; the bf16 attention tiles,
// ops/cpu/attention_amx_avx512.cpp). Include only from files compiled with -mamx-tile.
//
// A thread's tiles keep their configuration (the OS saves it with the tile data), so a kernel
// loads its own only when the thread last loaded another one: each kernel names one static
// configuration and passes it here before its first tile instruction of a call.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/isa_namespace.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// Palette 1's 64-byte tile configuration (Intel SDM, LDTILECFG): tile t has rows[t] lines of
// bytes_per_row[t] bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// All eight tiles at their largest, 16 lines of 64 bytes (the bf16 attention tiles and the
// K-quant planes tiles: each names what it keeps in which tile).
inline const AmxTileConfig& full_tiles_config() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.bytes_per_row[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  return config;
}

inline thread_local const AmxTileConfig* tls_amx_config = nullptr;

inline void amx_use_config(const AmxTileConfig& config) {
  if (tls_amx_config == &config) return;
  _tile_loadconfig(&config);
  tls_amx_config = &config;
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
