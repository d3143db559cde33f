#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace fak {

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly half-way between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16EveryValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << "half bits " << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // ties to even -> 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);
}

// KV rows narrowed to f16 / bf16: the same bits as the scalar conversions (eight at a time on an
// AVX2 + F16C CPU), over
// ordinary values, ties, subnormal and overflowing halves, infinities and NaNs of either sign and
// any payload; and the f16 ones equal to a round trip through the exact widening where finite.
TEST(DType, RowsNarrowedToHalvesAsTheScalarConversions) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff812345u, 0x477ff000u,
                               0x477fefffu, 0x33000000u, 0x33000001u, 0x38800000u, 0x387fffffu,
                               0x3f808000u, 0x3f818000u, 0x3f800fffu, 0x00000001u, 0x7f7fffffu};
  for (int n : {1, 7, 8, 9, 64, 128, 300}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = i % 3 == 0 ? 1e-6f : i % 3 == 1 ? 1.0f : 3e4f;
      x[i] = scale * nd(rng);
      if (i % 5 == 2) std::memcpy(&x[i], &specials[(i / 5) % std::size(specials)], 4);
    }
    for (bool bf : {false, true}) {
      std::vector<uint16_t> want(x.size()), got(x.size());
      for (int i = 0; i < n; ++i)
        want[size_t(i)] = bf ? f32_to_bf16(x[size_t(i)]) : f32_to_f16(x[size_t(i)]);
      (bf ? f32_to_bf16_row : f32_to_f16_row)(x.data(), n, got.data());
      ASSERT_EQ(want, got) << n << (bf ? " bf16" : " f16");
    }
  }
  for (uint32_t bits : specials) {  // the scalar conversions themselves, on the specials
    float v;
    std::memcpy(&v, &bits, 4);
    const uint16_t h = f32_to_f16(v);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(h))) << std::hex << bits;
    } else if (std::fabs(v) < 65520.0f) {
      EXPECT_LE(std::fabs(f16_to_f32(h) - v), std::fabs(v) * 0x1p-11f + 0x1p-25f)
          << std::hex << bits;
    } else {
      EXPECT_TRUE(std::isinf(f16_to_f32(h))) << std::hex << bits;
    }
  }
}

}  // namespace fak
