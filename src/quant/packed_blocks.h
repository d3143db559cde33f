// Reading one row's block back out of a group's prepacked panel (the layouts: quant_blocks.h's
// kPacked* constants), for the row lookups of packed weights and for kernels that would rather
// repack from rows. Plain C++: included by generic and ISA-specific files alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/quant_blocks.h"
#include "quant/quant_type.h"

namespace fak::quant {

// Bytes of one block of 16 rows in the packed layout of t (the rows' own 16 blocks).
inline size_t packed_block_bytes(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return kPackedQ8BlockBytes;
    case QuantType::Q4_0:
    case QuantType::IQ4_NL:
      return packed32_block_bytes(false, false);
    case QuantType::Q4_1:
      return packed32_block_bytes(true, false);
    case QuantType::Q5_0:
      return packed32_block_bytes(false, true);
    case QuantType::Q5_1:
      return packed32_block_bytes(true, true);
    case QuantType::MXFP4:
      return kPackedMxfp4BlockBytes;
    case QuantType::Q4_K:
      return kPackedQ4KBlockBytes;
    case QuantType::Q5_K:
      return kPackedQ5KBlockBytes;
    case QuantType::Q2_K:
      return kPackedQ2KBlockBytes;
    case QuantType::Q3_K:
      return kPackedQ3KBlockBytes;
    case QuantType::IQ4_XS:
      return kPackedIq4XsBlockBytes;
    default:
      return kPackedQ6KBlockBytes;
  }
}

// Row `lane` (0..15) of the 16 rows' block in panel p, as the stored block of type t at out.
// q8_codes_u8: q8_0's codes are in the panel + 128.
inline void unpack_packed_block(QuantType t, const uint8_t* p, int lane, void* out,
                                bool q8_codes_u8 = false) {
  const int i = lane;
  if (t == QuantType::Q8_0) {
    auto& blk = *static_cast<BlockQ8_0*>(out);
    std::memcpy(&blk.d, p + 2 * i, 2);
    const uint8_t flip = q8_codes_u8 ? 0x80 : 0;
    for (int k = 0; k < kQK; ++k)
      blk.qs[k] = int8_t(p[kPackedQ8CodesOffset + 64 * (k / 4) + 4 * i + k % 4] ^ flip);
    return;
  }
  auto dwords = [&](uint8_t* dst, int offset, int n) {  // dword m of the part: lane i's at 4i
    for (int m = 0; m < n; ++m) std::memcpy(dst + 4 * m, p + offset + 64 * m + 4 * i, 4);
  };
  if (t == QuantType::MXFP4) {
    auto& blk = *static_cast<BlockMxfp4*>(out);
    blk.e = p[i];
    dwords(blk.qs, kPackedMxfp4CodesOffset, 4);
    return;
  }
  const bool has_min = t == QuantType::Q4_1 || t == QuantType::Q5_1;
  const bool five_bit = t == QuantType::Q5_0 || t == QuantType::Q5_1;
  if (t == QuantType::Q4_0 || t == QuantType::IQ4_NL || has_min || five_bit) {
    // d, (q4_1 / q5_1) m, (q5_0 / q5_1) qh put back in element order, then the nibbles.
    uint8_t* base = static_cast<uint8_t*>(out);
    std::memcpy(base, p + 2 * i, 2);
    if (has_min) std::memcpy(base + 2, p + kPacked32MinsOffset + 2 * i, 2);
    uint8_t* rest = base + (has_min ? 4 : 2);
    if (five_bit) {
      uint32_t h;
      std::memcpy(&h, p + packed32_high_offset(has_min) + 4 * i, 4);
      h = q5_high_bits_stored(h);
      std::memcpy(rest, &h, 4);
      rest += 4;
    }
    dwords(rest, packed32_codes_offset(has_min, five_bit), 4);
    return;
  }
  if (t == QuantType::Q2_K) {
    auto& blk = *static_cast<BlockQ2K*>(out);
    std::memcpy(&blk.d, p + 2 * i, 2);
    std::memcpy(&blk.dmin, p + 32 + 2 * i, 2);
    dwords(blk.scales, kPackedQ2KScalesOffset, 4);
    dwords(blk.qs, kPackedQ2KCodesOffset, 16);
    return;
  }
  if (t == QuantType::Q3_K) {
    auto& blk = *static_cast<BlockQ3K*>(out);
    std::memcpy(&blk.d, p + 2 * i, 2);
    dwords(blk.scales, kPackedQ3KScalesOffset, 3);
    dwords(blk.hmask, kPackedQ3KHighOffset, 8);
    dwords(blk.qs, kPackedQ3KCodesOffset, 16);
    return;
  }
  if (t == QuantType::IQ4_XS) {
    auto& blk = *static_cast<BlockIq4Xs*>(out);
    std::memcpy(&blk.d, p + 2 * i, 2);
    std::memcpy(&blk.scales_h, p + kPackedIq4XsHighOffset + 2 * i, 2);
    dwords(blk.scales_l, kPackedIq4XsLowOffset, 1);
    dwords(blk.qs, kPackedIq4XsCodesOffset, 32);
    return;
  }
  if (t == QuantType::Q6_K) {
    auto& blk = *static_cast<BlockQ6K*>(out);
    std::memcpy(&blk.d, p + 2 * i, 2);
    dwords(reinterpret_cast<uint8_t*>(blk.scales), kPackedQ6KScalesOffset, 4);
    dwords(blk.ql, kPackedQ6KLowOffset, 32);
    dwords(blk.qh, kPackedQ6KHighOffset, 16);
    return;
  }
  // q4_K / q5_K: d, dmin, the scales' three dwords, (q5_K) qh, then the nibbles a chunk at a time.
  const bool five = t == QuantType::Q5_K;
  uint8_t* base = static_cast<uint8_t*>(out);
  std::memcpy(base, p + 2 * i, 2);
  std::memcpy(base + 2, p + 32 + 2 * i, 2);
  dwords(base + 4, kPackedQ4KScalesOffset, 3);
  if (five) dwords(static_cast<BlockQ5K*>(out)->qh, kPackedQ5KHighOffset, 8);
  uint8_t* qs = five ? static_cast<BlockQ5K*>(out)->qs : static_cast<BlockQ4K*>(out)->qs;
  dwords(qs, five ? kPackedQ5KCodesOffset : kPackedQ4KCodesOffset, 32);
}

}  // namespace fak::quant
