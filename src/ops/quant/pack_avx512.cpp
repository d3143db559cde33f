// Packing quantised weights once, at load, into the AVX-512 VNNI tiles' panels (the layouts:
// quant_blocks.h's kPacked* / packed32_*; the tiles that read them: gemm_avx512.cpp). Each group
// of 16 rows is copied aside and rewritten in place, block by block, into the bytes it took.
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/matmul_kernels.h"
#include "ops/quant/panels_avx512.h"
#include "quant/packed_blocks.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// The same for q6_K: d, then scales[], ql[] and qh[] a dword per lane.
void pack_block_q6_k(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i) {
    const BlockQ6K& blk = reinterpret_cast<const BlockQ6K*>(src[i])[b];
    std::memcpy(p + 2 * i, &blk.d, 2);
    for (int m = 0; m < 4; ++m)
      std::memcpy(p + quant::kPackedQ6KScalesOffset + 64 * m + 4 * i, blk.scales + 4 * m, 4);
    for (int m = 0; m < 32; ++m)
      std::memcpy(p + quant::kPackedQ6KLowOffset + 64 * m + 4 * i, blk.ql + 4 * m, 4);
    for (int m = 0; m < 16; ++m)
      std::memcpy(p + quant::kPackedQ6KHighOffset + 64 * m + 4 * i, blk.qh + 4 * m, 4);
  }
}

// The same for q2_K / q3_K / iq4_xs: the fp16 numbers 16 in a row, the byte arrays a dword per
// lane (quant_blocks.h's kPackedQ2K* / kPackedQ3K* / kPackedIq4Xs*).
void pack_dwords(const uint8_t* src, int n, uint8_t* dst, int i) {
  for (int m = 0; m < n; ++m) std::memcpy(dst + 64 * m + 4 * i, src + 4 * m, 4);
}
void pack_block_q2_k(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i) {
    const BlockQ2K& blk = reinterpret_cast<const BlockQ2K*>(src[i])[b];
    std::memcpy(p + 2 * i, &blk.d, 2);
    std::memcpy(p + 32 + 2 * i, &blk.dmin, 2);
    pack_dwords(blk.scales, 4, p + quant::kPackedQ2KScalesOffset, i);
    pack_dwords(blk.qs, 16, p + quant::kPackedQ2KCodesOffset, i);
  }
}
void pack_block_q3_k(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i) {
    const BlockQ3K& blk = reinterpret_cast<const BlockQ3K*>(src[i])[b];
    std::memcpy(p + 2 * i, &blk.d, 2);
    pack_dwords(blk.scales, 3, p + quant::kPackedQ3KScalesOffset, i);
    pack_dwords(blk.hmask, 8, p + quant::kPackedQ3KHighOffset, i);
    pack_dwords(blk.qs, 16, p + quant::kPackedQ3KCodesOffset, i);
  }
}
void pack_block_iq4_xs(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i) {
    const BlockIq4Xs& blk = reinterpret_cast<const BlockIq4Xs*>(src[i])[b];
    std::memcpy(p + 2 * i, &blk.d, 2);
    std::memcpy(p + quant::kPackedIq4XsHighOffset + 2 * i, &blk.scales_h, 2);
    pack_dwords(blk.scales_l, 1, p + quant::kPackedIq4XsLowOffset, i);
    pack_dwords(blk.qs, 32, p + quant::kPackedIq4XsCodesOffset, i);
  }
}

// 16 rows' block b of q8_0 (from a copy of the rows) as its packed panel at p; kU8: the codes
// + 128 (quant::unpack_packed_block's codes_u8).
template <bool kU8>
void pack_block_q8_0(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i)
    std::memcpy(p + 2 * i, &reinterpret_cast<const BlockQ8_0*>(src[i])[b].d, 2);
  __m256i lo[8], hi[8];
  for (int i = 0; i < 8; ++i) {
    lo[i] = load256(reinterpret_cast<const BlockQ8_0*>(src[i])[b].qs);
    hi[i] = load256(reinterpret_cast<const BlockQ8_0*>(src[8 + i])[b].qs);
    if constexpr (kU8) {
      lo[i] = _mm256_xor_si256(lo[i], _mm256_set1_epi8(-128));
      hi[i] = _mm256_xor_si256(hi[i], _mm256_set1_epi8(-128));
    }
  }
  store_transposed16(lo, hi, p + quant::kPackedQ8CodesOffset);
}

// The same for q4_0 / q4_1 / q5_0 / q5_1: d, m, the reordered fifth bits and the raw nibble bytes.
template <class Block>
void pack_block_32(const uint8_t* const* src, int64_t b, uint8_t* p) {
  constexpr bool kMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool kFiveBit = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  for (int i = 0; i < kRows; ++i) {
    const Block& blk = reinterpret_cast<const Block*>(src[i])[b];
    std::memcpy(p + 2 * i, &blk.d, 2);
    if constexpr (kMin) std::memcpy(p + quant::kPacked32MinsOffset + 2 * i, &blk.m, 2);
    if constexpr (kFiveBit) {
      uint32_t h;
      std::memcpy(&h, blk.qh, 4);
      h = quant::q5_high_bits_packed(h);
      std::memcpy(p + quant::packed32_high_offset(kMin) + 4 * i, &h, 4);
    }
    for (int k = 0; k < 4; ++k)
      std::memcpy(p + quant::packed32_codes_offset(kMin, kFiveBit) + 64 * k + 4 * i, blk.qs + 4 * k,
                  4);
  }
}

// The same for MXFP4: the exponents, then the raw nibble bytes.
void pack_block_mxfp4(const uint8_t* const* src, int64_t b, uint8_t* p) {
  for (int i = 0; i < kRows; ++i) {
    const BlockMxfp4& blk = reinterpret_cast<const BlockMxfp4*>(src[i])[b];
    p[i] = blk.e;
    for (int k = 0; k < 4; ++k)
      std::memcpy(p + quant::kPackedMxfp4CodesOffset + 64 * k + 4 * i, blk.qs + 4 * k, 4);
  }
}

// The same for q4_K / q5_K: scales' dwords, qh and raw nibble bytes transposed, nothing unpacked.
template <class Block>
void pack_block_k(const uint8_t* const* src, int64_t b, uint8_t* p) {
  constexpr bool kFiveBit = std::is_same_v<Block, BlockQ5K>;
  constexpr int kCodes = kFiveBit ? quant::kPackedQ5KCodesOffset : quant::kPackedQ4KCodesOffset;
  const Block* blk[kRows];
  for (int i = 0; i < kRows; ++i) blk[i] = reinterpret_cast<const Block*>(src[i]) + b;
  if constexpr (kFiveBit) {
    __m256i lo[8], hi[8];
    for (int i = 0; i < 8; ++i) {
      lo[i] = load256(blk[i]->qh);
      hi[i] = load256(blk[8 + i]->qh);
    }
    store_transposed16(lo, hi, p + quant::kPackedQ5KHighOffset);
  }
  for (int i = 0; i < kRows; ++i) {
    std::memcpy(p + 2 * i, &blk[i]->d, 2);
    std::memcpy(p + 32 + 2 * i, &blk[i]->dmin, 2);
    for (int k = 0; k < 3; ++k)
      std::memcpy(p + quant::kPackedQ4KScalesOffset + 64 * k + 4 * i, blk[i]->scales + 4 * k, 4);
  }
  for (int c = 0; c < 4; ++c) {
    __m256i lo[8], hi[8];
    for (int i = 0; i < 8; ++i) {
      lo[i] = load256(blk[i]->qs + 32 * c);
      hi[i] = load256(blk[8 + i]->qs + 32 * c);
    }
    store_transposed16(lo, hi, p + kCodes + 512 * c);
  }
}

}  // namespace

bool pack_panels16_avx512(QuantType t, uint8_t* rows, int64_t n_rows, int64_t cols,
                          size_t row_bytes, bool q8_codes_u8) {
  using PackBlockFn = void (*)(const uint8_t* const*, int64_t, uint8_t*);
  PackBlockFn pack = nullptr;
  switch (t) {
    case QuantType::Q8_0:
      pack = q8_codes_u8 ? pack_block_q8_0<true> : pack_block_q8_0<false>;
      break;
    case QuantType::Q4_0:
      pack = pack_block_32<BlockQ4_0>;
      break;
    case QuantType::Q4_1:
      pack = pack_block_32<BlockQ4_1>;
      break;
    case QuantType::Q5_0:
      pack = pack_block_32<BlockQ5_0>;
      break;
    case QuantType::Q5_1:
      pack = pack_block_32<BlockQ5_1>;
      break;
    case QuantType::IQ4_NL:  // q4_0's layout: d and the raw nibble bytes (the tile maps them)
      pack = pack_block_32<BlockIq4Nl>;
      break;
    case QuantType::MXFP4:
      pack = pack_block_mxfp4;
      break;
    case QuantType::Q4_K:
      pack = pack_block_k<BlockQ4K>;
      break;
    case QuantType::Q5_K:
      pack = pack_block_k<BlockQ5K>;
      break;
    case QuantType::Q6_K:
      pack = pack_block_q6_k;
      break;
    case QuantType::Q2_K:
      pack = pack_block_q2_k;
      break;
    case QuantType::Q3_K:
      pack = pack_block_q3_k;
      break;
    case QuantType::IQ4_XS:
      pack = pack_block_iq4_xs;
      break;
    default:
      return false;
  }
  const int block = quant_block_size(t);
  const size_t panel_bytes = quant::packed_block_bytes(t);
  if (n_rows % kRows != 0 || cols % block != 0 ||
      row_bytes != size_t(cols / block) * quant_block_bytes(t))
    return false;
  const int64_t nb = cols / block;
#pragma omp parallel
  {
    std::vector<uint8_t> group(size_t(kRows) * row_bytes);  // the 16 rows, before packing
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < n_rows; r += kRows) {
      uint8_t* base = rows + size_t(r) * row_bytes;
      std::memcpy(group.data(), base, group.size());
      const uint8_t* src[kRows];
      for (int i = 0; i < kRows; ++i) src[i] = group.data() + size_t(i) * row_bytes;
      for (int64_t b = 0; b < nb; ++b) pack(src, b, base + size_t(b) * panel_bytes);
    }
  }
  return true;
}

}  // namespace fak::kernels
