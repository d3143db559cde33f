// Scalar quantize / dequantize of the low-bit types: q2_K, q3_K, iq4_nl, iq4_xs (layouts in
// quant_blocks.h). The dequantisers are the formats' definitions. The quantisers are
// llama-quantize's importance-free ones (what it writes without --imatrix), so fak quantize gives
// llama.cpp's bytes:
//   q2_K   per 16 values a weighted (|x|) scale+min fit by a 16-step search, minimising Σ w
//   |error|;
//          scales and mins quantised to 4 bits against two fp16 super-scales; codes redone
//   q3_K   per 16 values a symmetric fit weighted by x² with a few rounds of coordinate descent;
//          scales to 6 bits (the largest to -32) against one fp16 super-scale; codes redone
//   iq4_*  per 32 values the grid scale maximising (Σ w x q)² / Σ w q², w = x², over 15 trial
//          scales; iq4_xs then stores the scales in 6 bits (the largest to -32) and redoes codes
//
// note: bit-equality with llama.cpp's files rests on doing the same float operations in the same
// order (no fused multiply-adds: this file is compiled for baseline x86-64, where nothing fuses),
// with round-half-to-even (rint) where it rounds. quant_lowbit_test checks it on its fixture.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this |max| a group is all zeros

inline int nearest(float v) {
  return int(std::rint(v));
}

// The 2-bit codes of 256 values into qs: value 128h + 32j + m at bits 2j of qs[32h + m].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 32; ++m) {
      const uint8_t* l = L + 128 * h + m;
      qs[32 * h + m] = uint8_t(l[0] | (l[32] << 2) | (l[64] << 4) | (l[96] << 6));
    }
}

// Fits x ≈ scale * L - min (L in [0, nmax], min >= 0) minimising Σ w |error|: the plain range
// mapping, then nstep + 1 stretched ones, each refitted by weighted least squares (min clipped to
// <= 0 offset). Returns scale, *min_out = min.
float fit_scale_min_mad(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                        float rmin, float rdelta, int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -lo;
    return 0.0f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax));
    const float diff = scale * L[i] + lo - x[i];
    best_error += w[i] * std::fabs(diff);
  }
  uint8_t cand[16];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * step + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
      cand[i] = uint8_t(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * cand[i] + this_min - x[i];
        err += w[i] * std::fabs(diff);
      }
      if (err < best_error) {
        std::copy(cand, cand + n, L);
        best_error = err;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *min_out = -lo;
  return scale;
}

// Fits x ≈ scale * L, L in [-nmax, nmax - 1], weighted by x²: the largest magnitude maps to -nmax,
// then up to 5 sweeps move single codes while that raises (Σ w x l)² / Σ w l². Returns scale, with
// L biased to [0, 2 nmax). note: an all-zero group gets codes 0, unbiased (-nmax), as llama.cpp's
// make_q3_quants leaves them; with its zero scale they still dequantize to zeros, but of the sign
// the bytes say.
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int l = std::clamp(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (l != L[i]) {
          slx += w * x[i] * l;
          sl2 += w * l * l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The grid index nearest v (ties to the upper level), by bisection of the sorted grid.
int nearest_grid(float v) {
  const int8_t* g = kIq4nlValues;
  if (v <= g[0]) return 0;
  if (v >= g[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < g[mid])
      hi = mid;
    else
      lo = mid;
  }
  return v - g[hi - 1] < g[hi] - v ? hi - 1 : hi;
}

// One group of 32 values on the IQ4 grid: the scale d maximising (Σ w x q)² / Σ w q² (w = x²)
// over the range mapping and 15 trial scales around it. Returns d (0 for an all-zero group);
// codes are not kept (callers redo them against the scale they store).
float fit_iq4_group(const float* x) {
  constexpr int kTries = 7;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  const int8_t* g = kIq4nlValues;
  float d = -max / g[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = g[nearest_grid(id * x[j])];
    const float w = x[j] * x[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int t = -kTries; t <= kTries; ++t) {
    id = (t + g[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = g[nearest_grid(id * x[j])];
      const float w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// 32 codes on the grid for x / scale (scale 0: every code the level nearest 0), packed as q4_0.
void iq4_codes(const float* x, float inv_scale, uint8_t* qs) {
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_grid(inv_scale * x[j]));
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
}

}  // namespace

void quantize_q2_k_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ2K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int k = 0; k < 16; ++k) {
      float w[16];
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * k + l]);
      scales[k] = fit_scale_min_mad(16, 3, x + 16 * k, w, L + 16 * k, &mins[k], -0.5f, 0.1f, 15);
      if (scales[k] > max_scale) max_scale = scales[k];
      if (mins[k] > max_min) max_min = mins[k];
    }
    BlockQ2K b;
    // note: a code is stored modulo 256 as llama.cpp's int -> uint8_t assignment does (a negative
    // scale fit would wrap, never seen on real data but part of the byte-for-byte contract).
    if (max_scale > 0) {
      const float iscale = 15.0f / max_scale;
      for (int k = 0; k < 16; ++k) b.scales[k] = uint8_t(nearest(iscale * scales[k]));
      b.d = f32_to_f16(max_scale / 15.0f);
    } else {
      std::memset(b.scales, 0, sizeof b.scales);
      b.d = f32_to_f16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = 15.0f / max_min;
      for (int k = 0; k < 16; ++k) b.scales[k] |= uint8_t(nearest(iscale * mins[k]) << 4);
      b.dmin = f32_to_f16(max_min / 15.0f);
    } else {
      b.dmin = f32_to_f16(0.0f);
    }
    // Codes again against the scales and mins as stored (sub-blocks with a zero scale keep their
    // fit's codes, which dequantize the same: 0 * q).
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int k = 0; k < 16; ++k) {
      const float dk = d * (b.scales[k] & 0xF);
      if (!dk) continue;
      const float mk = dmin * (b.scales[k] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * k + l] = uint8_t(std::clamp(nearest((x[16 * k + l] + mk) / dk), 0, 3));
    }
    pack_2bit(L, b.qs);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q3_k_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ3K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int k = 0; k < 16; ++k) {
      scales[k] = fit_symmetric_descent(16, 4, x + 16 * k, L + 16 * k);
      if (std::fabs(scales[k]) > amax) {
        amax = std::fabs(scales[k]);
        max_scale = scales[k];
      }
    }
    BlockQ3K b;
    std::memset(b.scales, 0, sizeof b.scales);
    if (max_scale != 0) {
      // The largest scale maps to -32, the most negative 6-bit level.
      const float iscale = -32.0f / max_scale;
      for (int k = 0; k < 16; ++k) {
        // note: narrowed to int8 before clamping, as llama.cpp does (|value| <= 32 here anyway).
        const int l = std::clamp(int(int8_t(nearest(iscale * scales[k]))), -32, 31) + 32;
        b.scales[k % 8] |= uint8_t((l & 0xF) << (4 * (k / 8)));
        b.scales[8 + k % 4] |= uint8_t((l >> 4) << (2 * (k / 4)));
      }
      b.d = f32_to_f16(1 / iscale);
    } else {
      b.d = f32_to_f16(0.0f);
    }
    // Codes again against the stored scales, biased to [0, 7] (a sub-block with a zero scale
    // keeps its fit's codes, which dequantize to zeros all the same).
    int8_t sc[16];
    unpack_scales_q3_k(b.scales, sc);
    const float d = f16_to_f32(b.d);
    for (int k = 0; k < 16; ++k) {
      const float dk = d * sc[k];
      if (!dk) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * k + l] = int8_t(std::clamp(nearest(x[16 * k + l] / dk), -4, 3) + 4);
    }
    // Bit 2 of each code goes to hmask (value 128h + 32j + m at bit 4h + j of hmask[m]), the low
    // two to qs.
    std::memset(b.hmask, 0, sizeof b.hmask);
    uint8_t low[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      if (L[e] > 3) b.hmask[e % 32] |= uint8_t(1 << (e / 32));
      low[e] = uint8_t(L[e] & 3);
    }
    pack_2bit(low, b.qs);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_iq4_nl_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockIq4Nl*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    BlockIq4Nl b;
    const float d = fit_iq4_group(x);
    b.d = f32_to_f16(d);
    iq4_codes(x, d ? 1 / d : 0.0f, b.qs);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_iq4_xs_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockIq4Xs*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float scales[8];
    float max_scale = 0, amax = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = fit_iq4_group(x + 32 * s);
      if (std::fabs(scales[s]) > amax) {
        amax = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    BlockIq4Xs b;
    // The largest scale maps to -32. note: an all-zero block stores d = -0.0 (0x8000), as
    // llama.cpp's -max/32 does.
    const float d = -max_scale / 32;
    b.d = f32_to_f16(d);
    const float id = d ? 1 / d : 0.0f;
    uint16_t scales_h = 0;
    std::memset(b.scales_l, 0, sizeof b.scales_l);
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(nearest(id * scales[s]), -32, 31);
      // Codes against the scale before its fp16 rounding, as llama.cpp does.
      const float dl = d * l;
      iq4_codes(x + 32 * s, dl ? 1 / dl : 0.0f, b.qs + 16 * s);
      const int stored = l + 32;
      b.scales_l[s / 2] |= uint8_t((stored & 0xF) << (4 * (s % 2)));
      scales_h |= uint16_t((stored >> 4) << (2 * s));
    }
    b.scales_h = scales_h;
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void dequantize_q2_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sc = x[i].scales[e / 16];
      const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
      y[e] = dl * float(q) - ml;
    }
  }
}

void dequantize_q3_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = f16_to_f32(x[i].d);
    int8_t sc[16];
    unpack_scales_q3_k(x[i].scales, sc);
    for (int e = 0; e < kQKK; ++e) {
      const int low = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const bool high = (x[i].hmask[e % 32] >> (e / 32)) & 1;
      const float dl = d * sc[e / 16];
      y[e] = dl * float(low - (high ? 0 : 4));
    }
  }
}

void dequantize_iq4_nl_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq4Nl*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * float(kIq4nlValues[x[i].qs[j] & 0xF]);
      y[j + kQK / 2] = d * float(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIq4Xs*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int s = 0; s < 8; ++s, y += 32) {
      const float dl = d * float(iq4_xs_scale(x[i].scales_l, x[i].scales_h, s));
      const uint8_t* qs = x[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIq4nlValues[qs[j] & 0xF]);
        y[j + 16] = dl * float(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace fak::quant
