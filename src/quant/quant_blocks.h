// The on-disk block layouts of ggml's quantized types, byte for byte. GGUF tensors are used in
// place from the memory map, so these structs must match ggml-common.h exactly: same field order,
// no padding, fp16 scales stored as raw IEEE half bits. Packed (alignment 1): a row of blocks may
// start at any byte (tensor data is only 32-aligned, and tests hand the kernels odd offsets), and
// reading a 2-byte scale through a misaligned struct pointer would be undefined behaviour.
#pragma once

#include <cstdint>

#include "core/isa_namespace.h"

namespace fak::quant {

constexpr int kQK = 32;          // elements per block of the "legacy" types (q4_0 ... q8_0)
constexpr int kQKK = 256;        // elements per super-block of the K-quants
constexpr int kKScaleSize = 12;  // 8 six-bit scales + 8 six-bit mins of q4_K / q5_K

// x = d * q, q in [-127, 127].
struct [[gnu::packed]] BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Prepacked q8_0 (pack_weight_panels, ops/matmul.h): each group of 16 rows becomes one panel per
// block of 32 columns, in the 16 x 34 bytes that block of those rows took, and group g starts
// where row 16g did. A panel: the 16 fp16 scales (row i at byte 2i), then 8 x 64 bytes of the
// signed codes, where the 64 bytes at g hold codes 4g..4g+3 of row i at bytes 4i..4i+3 (the
// AVX-512 VNNI tile's register layout, gemm_avx512.cpp; its VPDPBUSD flips their sign bits, the
// AMX tile multiplies them as they are).
constexpr int kPackedQ8CodesOffset = 32;
constexpr int kPackedQ8BlockBytes = kPackedQ8CodesOffset + 8 * 64;
static_assert(kPackedQ8BlockBytes == 16 * sizeof(BlockQ8_0), "panels replace the rows in place");

// x = d * (q - 8); qs[j] holds element j in its low nibble and element j + 16 in its high nibble.
struct [[gnu::packed]] BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// x = d * q + m, nibbles as in q4_0.
struct [[gnu::packed]] BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

// x = d * (q - 16); the 5th bit of element j is bit j of qh (little-endian uint32).
struct [[gnu::packed]] BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x = d * q + m, bits as in q5_0.
struct [[gnu::packed]] BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// MXFP4 (OCP microscaling FP4, gpt-oss's experts): x = 2^(e - 127) * fp4(q), fp4 an E2M1 value
// (0, +-0.5, +-1, +-1.5, +-2, +-3, +-4, +-6); ggml stores it doubled (kMxfp4Values, integers) with
// the scale halved (e8m0_half), so the codes are exact int8. Nibbles as in q4_0.
struct [[gnu::packed]] BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) exactly (the scale of the doubled values), as ggml_e8m0_to_fp32_half: subnormal
// bit patterns for e < 2.
inline namespace FAK_ISA_NS {
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
}  // namespace FAK_ISA_NS

// Prepacked q4_0 / iq4_nl / q4_1 / q5_0 / q5_1 (as q8_0: 16 rows' block in the 16 x 18 / 18 / 20 /
// 22 / 24 bytes they took): the 16 fp16 d; (q4_1, q5_1) the 16 fp16 m; (q5_0, q5_1) 64 bytes of
// fifth bits, row i's dword at 4i, reordered by q5_high_bits_packed so that the tile shifts each
// register's bits into place; then 4 x 64 bytes of raw nibbles (the 64 bytes at k hold qs[4k..4k+3]
// of row i at 4i..4i+3; the tile splits them: register g < 4 the low nibbles of k = g, g >= 4 the
// high ones of k = g - 4).
constexpr int kPacked32MinsOffset = 32;
constexpr int packed32_high_offset(bool has_min) {
  return has_min ? 64 : 32;
}
constexpr int packed32_codes_offset(bool has_min, bool five_bit) {
  return packed32_high_offset(has_min) + (five_bit ? 64 : 0);
}
constexpr int packed32_block_bytes(bool has_min, bool five_bit) {
  return packed32_codes_offset(has_min, five_bit) + 4 * 64;
}
static_assert(packed32_block_bytes(false, false) == 16 * sizeof(BlockQ4_0));
static_assert(packed32_block_bytes(true, false) == 16 * sizeof(BlockQ4_1));
static_assert(packed32_block_bytes(false, true) == 16 * sizeof(BlockQ5_0));
static_assert(packed32_block_bytes(true, true) == 16 * sizeof(BlockQ5_1));

// Prepacked MXFP4 (16 rows' block in the 16 x 17 bytes they took): the 16 E8M0 exponents, then the
// raw nibbles as packed32's (the 64 bytes at 16 + 64k hold qs[4k..4k+3] of row i at 4i..4i+3), so
// a decode step reads each code register with one load, where the rows took four 16-byte loads,
// three inserts and a transpose per register and a gather for the exponents.
constexpr int kPackedMxfp4CodesOffset = 16;
constexpr int kPackedMxfp4BlockBytes = kPackedMxfp4CodesOffset + 4 * 64;

// A q5 block's fifth bits (bit k of qh: element k) reordered for the packed layout: the bit of
// element 4g + e moves to bit 8e + g, so byte e holds the bits of codes e, 4 + e, ... in order
// and register g's come into bit 4 of each byte with one shift by 4 - g. (Each step halves the
// spacing of 8 bits 4 apart: pairs, then quads, then the byte.)
constexpr uint32_t q5_high_bits_packed(uint32_t qh) {
  uint32_t out = 0;
  for (int e = 0; e < 4; ++e) {
    uint32_t t = (qh >> e) & 0x11111111u;  // bit 4g: element 4g + e
    t = (t | (t >> 3)) & 0x03030303u;
    t = (t | (t >> 6)) & 0x000F000Fu;
    t = (t | (t >> 12)) & 0xFFu;
    out |= t << (8 * e);
  }
  return out;
}
// Its inverse: the stored qh from a packed dword.
constexpr uint32_t q5_high_bits_stored(uint32_t packed) {
  uint32_t out = 0;
  for (int e = 0; e < 4; ++e) {
    uint32_t t = (packed >> (8 * e)) & 0xFFu;  // bit g: element 4g + e
    t = (t | (t << 12)) & 0x000F000Fu;
    t = (t | (t << 6)) & 0x03030303u;
    t = (t | (t << 3)) & 0x11111111u;
    out |= t << e;
  }
  return out;
}
static_assert(q5_high_bits_packed(1u << 5) == 1u << 9);  // element 5 = 4 * 1 + 1: bit 8 + 1
static_assert(q5_high_bits_stored(q5_high_bits_packed(0x9E3779B9u)) == 0x9E3779B9u);

// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in [0, 15]. Each 64-element chunk c uses
// the 32 bytes qs[32c..32c+31]: low nibbles are sub-block 2c, high nibbles sub-block 2c + 1.
// scales[] packs the 6-bit sc/m pairs (see unpack_scales_k4).
struct [[gnu::packed]] BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQKK / 2];
};

// Prepacked q4_K (as q8_0 above: 16 rows' super-block in the 16 x 144 bytes they took): the 16 fp16
// d, the 16 fp16 dmin, then 3 x 64 bytes of packed scales (the 64 bytes at k hold bytes
// 4k..4k+3 of row i's scales[] at 4i..4i+3), then for each 64-element chunk c 8 x 64 bytes of its
// raw nibble bytes qs[32c..32c+31], transposed the same way (the tile splits the nibbles).
constexpr int kPackedQ4KScalesOffset = 64;
constexpr int kPackedQ4KCodesOffset = kPackedQ4KScalesOffset + 3 * 64;
constexpr int kPackedQ4KBlockBytes = kPackedQ4KCodesOffset + 4 * 8 * 64;
static_assert(kPackedQ4KBlockBytes == 16 * sizeof(BlockQ4K), "panels replace the rows in place");

// As q4_K with a 5th bit: element l of chunk c takes bit 2c (low half) or 2c + 1 (high half) of
// qh[l], l in [0, 32).
struct [[gnu::packed]] BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Prepacked q5_K: q4_K's layout with the 32 qh bytes of each row transposed as 8 x 64 bytes
// between the scales and the nibbles (the 64 bytes at g hold qh[4g..4g+3] of row i at 4i..4i+3).
constexpr int kPackedQ5KHighOffset = kPackedQ4KCodesOffset;
constexpr int kPackedQ5KCodesOffset = kPackedQ5KHighOffset + 8 * 64;
constexpr int kPackedQ5KBlockBytes = kPackedQ5KCodesOffset + 4 * 8 * 64;
static_assert(kPackedQ5KBlockBytes == 16 * sizeof(BlockQ5K), "panels replace the rows in place");

// 16 sub-blocks of 16: x = d * scales[k] * (q - 32), q in [0, 63] split into 4 low bits (ql) and 2
// high bits (qh). Each 128-element half h uses ql[64h..64h+63], qh[32h..32h+31], scales[8h..].
struct [[gnu::packed]] BlockQ6K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// Prepacked q6_K (as the others: 16 rows' super-block in the 16 x 210 bytes they took): the 16 fp16
// d, then each row's scales[], ql[] and qh[] transposed a dword per lane, in that order (the 64
// bytes at m of a part hold its bytes 4m..4m+3 of row i at 4i..4i+3).
constexpr int kPackedQ6KScalesOffset = 32;
constexpr int kPackedQ6KLowOffset = kPackedQ6KScalesOffset + 4 * 64;
constexpr int kPackedQ6KHighOffset = kPackedQ6KLowOffset + 32 * 64;
constexpr int kPackedQ6KBlockBytes = kPackedQ6KHighOffset + 16 * 64;
static_assert(kPackedQ6KBlockBytes == 16 * sizeof(BlockQ6K), "panels replace the rows in place");

// The low-bit types of llama-quantize's small mixes (Q2_K, Q3_K_M, IQ4_XS) and unsloth's "UD"
// files. Element e of a q2_K / q3_K super-block sits in 128-element half h = e / 128, 32-element
// group j = (e % 128) / 32 at m = e % 32: its 2 low bits are bits 2j..2j+1 of qs[32h + m], and it
// belongs to 16-element sub-block e / 16.
//
// q2_K: x = d * (scales[k] & 15) * q - dmin * (scales[k] >> 4), q in [0, 3].
struct [[gnu::packed]] BlockQ2K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

// q3_K: x = d * (sc_k - 32) * q, q in [-4, 3]: the 2 low bits as q2_K's plus 4 where bit 4h + j of
// hmask[m] is set, minus 4. The 16 six-bit sc_k: low 4 bits in the low (k < 8) or high (k >= 8)
// nibble of scales[k % 8], high 2 bits at bit 2 (k / 4) of scales[8 + k % 4] (unpack_scales_q3_k).
struct [[gnu::packed]] BlockQ3K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};

// IQ4_NL: x = d * kIq4nlValues[q], nibbles as in q4_0. The 16 levels are a fixed non-uniform grid
// (denser near zero, where weights are), all in int8 range, so the codes are exact int8.
struct [[gnu::packed]] BlockIq4Nl {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_XS: IQ4_NL's grid in 8 sub-blocks of 32 with 6-bit scales: x = d * (ls_b - 32) * grid[q],
// ls_b's low 4 bits in nibble b % 2 of scales_l[b / 2], its high 2 bits at bit 2b of scales_h;
// sub-block b's codes are qs[16b..16b+15], nibbles as in q4_0 (low: elements 0..15).
struct [[gnu::packed]] BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};

// Prepacked q2_K, q3_K and iq4_xs (as the others: 16 rows' super-block in the 16 x 84 / 110 / 136
// bytes they took; the decode kernels read them with row i in lane i, gemv_packed_avx512.cpp): the
// fp16 numbers as 16 in a row, then each of the row's byte arrays transposed a dword per lane (the
// 64 bytes at m of a part hold its bytes 4m..4m+3 of row i at 4i..4i+3), nothing unpacked.
// q2_K: d[16], dmin[16], scales (4 dwords), qs (16).
constexpr int kPackedQ2KScalesOffset = 64;
constexpr int kPackedQ2KCodesOffset = kPackedQ2KScalesOffset + 4 * 64;
constexpr int kPackedQ2KBlockBytes = kPackedQ2KCodesOffset + 16 * 64;
static_assert(kPackedQ2KBlockBytes == 16 * sizeof(BlockQ2K), "panels replace the rows in place");
// q3_K: d[16], scales (3 dwords), hmask (8), qs (16).
constexpr int kPackedQ3KScalesOffset = 32;
constexpr int kPackedQ3KHighOffset = kPackedQ3KScalesOffset + 3 * 64;
constexpr int kPackedQ3KCodesOffset = kPackedQ3KHighOffset + 8 * 64;
constexpr int kPackedQ3KBlockBytes = kPackedQ3KCodesOffset + 16 * 64;
static_assert(kPackedQ3KBlockBytes == 16 * sizeof(BlockQ3K), "panels replace the rows in place");
// iq4_xs: d[16], scales_h[16], scales_l (1 dword), qs (32).
constexpr int kPackedIq4XsHighOffset = 32;
constexpr int kPackedIq4XsLowOffset = 64;
constexpr int kPackedIq4XsCodesOffset = kPackedIq4XsLowOffset + 64;
constexpr int kPackedIq4XsBlockBytes = kPackedIq4XsCodesOffset + 32 * 64;
static_assert(kPackedIq4XsBlockBytes == 16 * sizeof(BlockIq4Xs),
              "panels replace the rows in place");

// Activations for the K-quant dots: x = d * q with d a plain float, plus the sum of each group of
// 16 quants so the dots can apply mins and offsets without touching the quants again, and of each
// 32 (sums32[k] = bsums[2k] + bsums[2k + 1]): q4_K's and q5_K's mins are per 32, and their tiles
// take these pairs straight into VPDPWSSD's broadcast operand rather than pairing bsums per token
// and row group.
struct [[gnu::packed]] BlockQ8K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
  int16_t sums32[kQKK / 32];
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(kPackedMxfp4BlockBytes == 16 * sizeof(BlockMxfp4));
static_assert(sizeof(BlockQ4K) == 144);
static_assert(sizeof(BlockQ5K) == 176);
static_assert(sizeof(BlockQ6K) == 210);
static_assert(sizeof(BlockQ8K) == 308);
static_assert(sizeof(BlockQ2K) == 84);
static_assert(sizeof(BlockQ3K) == 110);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);
// note: every struct has alignment 2 or 4 but rows inside a GGUF tensor start at any multiple of
// the block size (e.g. 34 bytes), so kernels must read blocks through unaligned loads / memcpy-safe
// access and never assume 4-byte alignment of a BlockQ8K inside an arbitrary buffer.

// Unpacks the 12-byte q4_K/q5_K scale field into 8 six-bit scales and 8 six-bit mins. Sub-blocks
// 0..3 keep their values in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7
// store 4 low bits in bytes 8..11 and their 2 high bits in the top bits of bytes 0..7.
inline namespace FAK_ISA_NS {  // compiled into kernel files of every ISA
inline void unpack_scales_k4(const uint8_t* packed, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = packed[j] & 63;
    m[j] = packed[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = uint8_t((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    m[j] = uint8_t((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

// The 16 signed sub-block scales sc_k - 32 of a q3_K block (BlockQ3K says where the bits are).
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t* sc) {
  for (int k = 0; k < 16; ++k) {
    const int low = (packed[k % 8] >> (4 * (k / 8))) & 0xF;
    const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
    sc[k] = int8_t((low | (high << 4)) - 32);
  }
}

// IQ4_XS sub-block b's 6-bit scale minus 32.
inline int iq4_xs_scale(const uint8_t* scales_l, uint16_t scales_h, int b) {
  const int low = (scales_l[b / 2] >> (4 * (b % 2))) & 0xF;
  const int high = (scales_h >> (2 * b)) & 3;
  return (low | (high << 4)) - 32;
}
}  // namespace FAK_ISA_NS

}  // namespace fak::quant
