// Integer block sums of 16 tokens against 16 weight rows by the AMX tile unit, for the AVX-512
// prefill tiles (gemm_avx512.cpp, compiled with -mamx-tile -mamx-int8) on CPUs with AMX-INT8
// (kernels::amx_enabled()).
//
// One TDPBSUD multiplies a 16 x 32 tile of signed activation bytes (A: a token per row) by a
// 32 x 16 tile of unsigned codes (B: a VNNI panel as the VPDPBUSD tiles read it, 4 codes of a row
// per dword) into 16 x 16 int32 sums: a block of 16 tokens x 16 rows in one instruction, where
// VPDPBUSD needs 128. The products are exact and the sums cannot overflow (32 x 255 x 128 < 2^31),
// so they are the VNNI tiles' sums bit for bit, and the float steps after them stay the tiles'.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/isa_namespace.h"
#include "ops/cpu/amx_tiles.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// The tiles' shapes for `tokens` tokens: two sets, so one block's products run while the other's
// are stored: sums (C) in tiles 0 / 3, tokens x 16 int32; activations (A) in 1 / 4, tokens x 32
// bytes; codes (B) in 2 / 5, 8 lines of 64 bytes. (GCC's tile intrinsics paste the tile number
// into the instruction's text, so the loop below names them as literals.)
inline AmxTileConfig block_sums_config_for(uint8_t tokens) {
  AmxTileConfig c;
  const uint16_t bytes[6] = {64, 32, 64, 64, 32, 64};
  const uint8_t rows[6] = {tokens, tokens, 8, tokens, tokens, 8};
  for (int t = 0; t < 6; ++t) {
    c.bytes_per_row[t] = bytes[t];
    c.rows[t] = rows[t];
  }
  return c;
}
inline const AmxTileConfig& block_sums_tile_config() {
  static const AmxTileConfig config = block_sums_config_for(16);
  return config;
}

inline void amx_configure_tiles() {
  amx_use_config(block_sums_tile_config());
}

// 8 tokens: C 8 x 16 int32, A 8 x 32 bytes (the first 8 rows of a 16-token activation block). A
// call of a few sequences' tokens (batched decode) then stores and reads back half the sums and
// makes half the float steps of a padded 16-token tile.
inline const AmxTileConfig& block_sums8_tile_config() {
  static const AmxTileConfig config = block_sums_config_for(8);
  return config;
}

// For blocks i in [0, n_blocks): out[kOutStride i + 16 m + k] = Σ_e a_m[e] * c_k[e], the exact
// dot product of token m's 32 signed activation bytes (acts + i * act_block_bytes + m *
// act_stride) and row k's 32 codes, unsigned (TDPBSUD) or kSignedCodes signed (TDPBSSD: q8_0's,
// which then need no offset taken off), from the VNNI panel at codes + i * code_block_bytes: line
// g holds codes 4g..4g+3 of row k at bytes 4k..4k+3. out: 64-byte aligned; token m's 16 sums are
// then one line, one row per lane, where the VPDPBUSD tile has them. kOutStride: 256, or 128 with
// block_sums8_tile_config()'s 8 tokens, whose tiles read and store 8 lines.
template <bool kSignedCodes = false, size_t kOutStride = 256>
[[gnu::always_inline]] inline void amx_block_sums16(const uint8_t* acts, size_t act_stride,
                                                    size_t act_block_bytes, const uint8_t* codes,
                                                    size_t code_block_bytes, int n_blocks,
                                                    int32_t* out) {
// The tile numbers are pasted into the instruction's text: literals, hence a macro.
#define FAK_AMX_BLOCK_PRODUCT(c, a, b) \
  if constexpr (kSignedCodes)          \
    _tile_dpbssd(c, a, b);             \
  else                                 \
    _tile_dpbsud(c, a, b)
  const long stride = long(act_stride);
  int i = 0;
  for (; i + 2 <= n_blocks; i += 2) {
    _tile_loadd(1, acts + size_t(i) * act_block_bytes, stride);
    _tile_loadd(2, codes + size_t(i) * code_block_bytes, 64);
    _tile_zero(0);
    FAK_AMX_BLOCK_PRODUCT(0, 1, 2);
    _tile_loadd(4, acts + size_t(i + 1) * act_block_bytes, stride);
    _tile_loadd(5, codes + size_t(i + 1) * code_block_bytes, 64);
    _tile_zero(3);
    FAK_AMX_BLOCK_PRODUCT(3, 4, 5);
    _tile_stored(0, out + size_t(i) * kOutStride, 64);
    _tile_stored(3, out + size_t(i + 1) * kOutStride, 64);
  }
  if (i < n_blocks) {
    _tile_loadd(1, acts + size_t(i) * act_block_bytes, stride);
    _tile_loadd(2, codes + size_t(i) * code_block_bytes, 64);
    _tile_zero(0);
    FAK_AMX_BLOCK_PRODUCT(0, 1, 2);
    _tile_stored(0, out + size_t(i) * kOutStride, 64);
  }
#undef FAK_AMX_BLOCK_PRODUCT
}

// The K-quant AMX tiles' shapes (amx_planes_pass.h's families): full_tiles_config(), every tile
// 16 lines of 64 bytes. Sums (C) in tiles 0 / 1 (/ 2), activations (A: 16 tokens x 64 bytes) in
// 2 / 5 (3 / 7), codes (B: 16 lines of 4 codes for each of 16 rows) in 3, 4 / 6, 7 (4-6): the
// second set takes every other 64 elements, so a step's loads need not wait for the products
// before them.

// For one 256-element block: out0[16 m + k] = Σ_e a_m[e] * c0_k[e] and out1 the same over c1, the
// exact dot products of token m's 256 signed activation bytes (acts + m * act_stride) with row k's
// unsigned bytes in the two VNNI planes (TDPBSUD; plane line l: elements 4l..4l+3 of row k at bytes
// 4k..4k+3, 64 lines). |sum| < 256 x 128 x 255 < 2^31. Needs full_tiles_config() loaded.
// kSigned: both planes signed bytes (TDPBSSD), for q3_K's signed digits.
template <bool kSigned = false>
[[gnu::always_inline]] inline void amx_block_sums256x2(const uint8_t* acts, size_t act_stride,
                                                       const uint8_t* plane0, const uint8_t* plane1,
                                                       int32_t* out0, int32_t* out1) {
  const long stride = long(act_stride);
#define FAK_AMX_PLANE_PRODUCT(c, a, b) \
  if constexpr (kSigned)               \
    _tile_dpbssd(c, a, b);             \
  else                                 \
    _tile_dpbsud(c, a, b)
  _tile_zero(0);
  _tile_zero(1);
#pragma GCC unroll 2
  for (int k = 0; k < 4; k += 2) {
    _tile_loadd(2, acts + 64 * k, stride);
    _tile_loadd(3, plane0 + 1024 * k, 64);
    _tile_loadd(4, plane1 + 1024 * k, 64);
    FAK_AMX_PLANE_PRODUCT(0, 2, 3);
    FAK_AMX_PLANE_PRODUCT(1, 2, 4);
    _tile_loadd(5, acts + 64 * (k + 1), stride);
    _tile_loadd(6, plane0 + 1024 * (k + 1), 64);
    _tile_loadd(7, plane1 + 1024 * (k + 1), 64);
    FAK_AMX_PLANE_PRODUCT(0, 5, 6);
    FAK_AMX_PLANE_PRODUCT(1, 5, 7);
  }
  _tile_stored(0, out0, 64);
  _tile_stored(1, out1, 64);
#undef FAK_AMX_PLANE_PRODUCT
}

// The same with one plane of unsigned bytes into out (q2_K's codes times their scales).
[[gnu::always_inline]] inline void amx_block_sums256x1(const uint8_t* acts, size_t act_stride,
                                                       const uint8_t* plane, int32_t* out) {
  const long stride = long(act_stride);
  _tile_zero(0);
#pragma GCC unroll 2
  for (int k = 0; k < 4; k += 2) {
    _tile_loadd(2, acts + 64 * k, stride);
    _tile_loadd(3, plane + 1024 * k, 64);
    _tile_dpbsud(0, 2, 3);
    _tile_loadd(5, acts + 64 * (k + 1), stride);
    _tile_loadd(6, plane + 1024 * (k + 1), 64);
    _tile_dpbsud(0, 5, 6);
  }
  _tile_stored(0, out, 64);
}

// The same with three planes of signed bytes (TDPBSSD; q6_K's, planes one after another
// plane_bytes apart) into out[0..2]. |sum| < 256 x 128 x 128 < 2^31.
[[gnu::always_inline]] inline void amx_block_sums256x3(const uint8_t* acts, size_t act_stride,
                                                       const uint8_t* planes, size_t plane_bytes,
                                                       int32_t (*out)[256]) {
  const long stride = long(act_stride);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
#pragma GCC unroll 2
  for (int k = 0; k < 4; k += 2) {
    _tile_loadd(3, acts + 64 * k, stride);
    _tile_loadd(4, planes + 1024 * k, 64);
    _tile_loadd(5, planes + plane_bytes + 1024 * k, 64);
    _tile_loadd(6, planes + 2 * plane_bytes + 1024 * k, 64);
    _tile_dpbssd(0, 3, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_dpbssd(2, 3, 6);
    _tile_loadd(7, acts + 64 * (k + 1), stride);
    _tile_loadd(4, planes + 1024 * (k + 1), 64);
    _tile_loadd(5, planes + plane_bytes + 1024 * (k + 1), 64);
    _tile_loadd(6, planes + 2 * plane_bytes + 1024 * (k + 1), 64);
    _tile_dpbssd(0, 7, 4);
    _tile_dpbssd(1, 7, 5);
    _tile_dpbssd(2, 7, 6);
  }
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
