// Matmul against block-quantised weights: each activation row is quantised once per call to the
// format the weight type's dot product expects (Q8_0 or Q8_K), then every output is one integer
// vec_dot of a weight row with an activation row.
//
// note: an output y[t][r] is always exactly vec_dot(row r, act t), or the output of a prefill
// (gemm_*_avx2.cpp) or decode (gemv_avx2.cpp) kernel that follows the same block-serial float
// rule (dot_ref.cpp) lane by lane and is tested to be bit-identical to it, so results do not
// depend on n_tokens, the tiling or the thread count (see matmul.h). The activation quantisers
// are per-row and deterministic too.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul_kernels.h"
#include "quant/packed_blocks.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"

namespace fak {

std::optional<QuantType> wtype_quant(WType t) {
  switch (t) {
    case WType::Q8_0:
      return QuantType::Q8_0;
    case WType::Q4_0:
      return QuantType::Q4_0;
    case WType::Q4_1:
      return QuantType::Q4_1;
    case WType::Q5_0:
      return QuantType::Q5_0;
    case WType::Q5_1:
      return QuantType::Q5_1;
    case WType::Q4_K:
      return QuantType::Q4_K;
    case WType::Q5_K:
      return QuantType::Q5_K;
    case WType::Q6_K:
      return QuantType::Q6_K;
    case WType::MXFP4:
      return QuantType::MXFP4;
    case WType::Q2_K:
      return QuantType::Q2_K;
    case WType::Q3_K:
      return QuantType::Q3_K;
    case WType::IQ4_NL:
      return QuantType::IQ4_NL;
    case WType::IQ4_XS:
      return QuantType::IQ4_XS;
    default:
      return std::nullopt;
  }
}

std::optional<WType> wtype_from_quant(QuantType t) {
  for (WType w :
       {WType::Q8_0, WType::Q4_0, WType::Q4_1, WType::Q5_0, WType::Q5_1, WType::Q4_K, WType::Q5_K,
        WType::Q6_K, WType::MXFP4, WType::Q2_K, WType::Q3_K, WType::IQ4_NL, WType::IQ4_XS})
    if (wtype_quant(w) == t) return w;
  return std::nullopt;
}

namespace kernels {

namespace {

// Up to this many tokens a call reads the stored rows with the decode kernel (each 8-row group
// stays in L1 while every token passes over it, but its codes are unpacked again per token); more
// repack 16 rows per call into a VNNI panel that every token's tile then reads from cache. With
// the next rows prefetched during the repack and the repack kept in registers, the panels win
// early, and earliest where unpacking is dear: 131072 rows streamed from memory
// (matmul_quant_bench *_streamed_*), decode kernel vs panels, 2 / 3 tokens: Q4_0 3.6 / 5.4 vs
// 1.7 / 1.8 ms, Q5_0 4.6 / 7.0 vs 2.2 / 2.4; Q8_0 2.8-3.1 / 3.8-3.9 vs 3.0-3.2 / 3.7-3.8; Q4_K
// 2.7 / 4.0 vs 3.7 / 3.9; Q5_K 3.6 / 5.4-6.9 vs 4.2 / 4.2-4.4; Q6_K 3.5-3.7 / 5.1-5.2 vs
// 6.6-6.9 / 6.5-7.2. Without AVX-512 the 8-row AVX2 panels keep the old switch (5 sequences:
// 31 ms a step decoding, 45 ms through panels).
int gemv_max_tokens(QuantType t) {
  if (!avx512_enabled() || !quant_tile_avx512(t)) return 8;
  switch (t) {
    case QuantType::Q4_1:
    case QuantType::Q5_1:
      return 0;  // no decode kernel: vec_dot rows, which reduce two sums per block, are slower
    case QuantType::Q4_0:
    case QuantType::Q5_0:
    case QuantType::MXFP4:
    case QuantType::IQ4_NL:
      return 1;
    case QuantType::Q8_0:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::IQ4_XS:
      return 2;
    default:  // Q6_K
      return 3;
  }
}

// Rows x tokens of outputs from vec_dot, blocked so a few weight rows stay in L1 while a block of
// activation rows streams past them (prefill reads each weight row once per token block, not once
// per token).
void rows_vec_dot(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t kRowBlock = 16;
  const int kTokenBlock = 64;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int tb = 0; tb < q.n_tokens; tb += kTokenBlock) {
      const int te = std::min(q.n_tokens, tb + kTokenBlock);
      for (int t = tb; t < te; ++t) {
        const uint8_t* a = q.act + size_t(t) * q.act_row_bytes;
        float* yt = q.y + size_t(t) * size_t(q.w->rows);
        for (int64_t r = rb; r < re; ++r) yt[r] = q.dot(q.w->cols, q.w->row(r), a);
      }
    }
  }
}

}  // namespace

namespace {
bool g_tiles_enabled = true;
}  // namespace

void set_quant_tiles_enabled(bool enabled) {
  g_tiles_enabled = enabled;
}

QuantTileFn quant_tile_kernel(QuantType t) {
  if (!g_tiles_enabled) return nullptr;
  // The tiles reproduce the AVX2 vec_dot bit for bit; with the scalar dots they would not.
  if (quant_kernels().isa != "avx2") return nullptr;
  if (avx512_enabled())
    if (QuantTileFn fn = quant_tile_avx512(t)) return fn;
  return quant_tile_avx2(t);
}

QuantTileFn quant_gemv_kernel(QuantType t) {
  if (!g_tiles_enabled) return nullptr;
  if (quant_kernels().isa != "avx2") return nullptr;
  if (avx512_enabled())
    if (QuantTileFn fn = quant_gemv_avx512(t)) return fn;
  return quant_gemv_avx2(t);
}

int block16_sum_factor(QuantType t) {
  // The 32-element block types (gemm_avx512.cpp's Block32): minus their code offsets, the
  // correction the tiles add to each block's integer sums.
  switch (t) {
    case QuantType::Q8_0:
    case QuantType::IQ4_NL:
      return -128;
    case QuantType::Q4_0:
      return -8;
    case QuantType::Q5_0:
      return -16;
    case QuantType::MXFP4:
      return -12;
    case QuantType::Q4_1:
    case QuantType::Q5_1:
      return 1;
    default:
      return 0;
  }
}

int amx_sum_factor(QuantType t) {
  if (!amx_enabled()) return 0;
  switch (t) {
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::IQ4_XS:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
      return kAmxQ8KFactor;
    default:
      return block16_sum_factor(t);
  }
}

namespace {

// q.amx_acts from q's activations, scales and sums (times q.amx_sum_factor): every tile of 16
// tokens, block by block (kAmxActBlockBytes), the last one's missing tokens zeros. A copy of what
// the tiles would otherwise gather from 16 token rows per block, made once per call instead of
// once per 16 weight rows.
const uint8_t* act_tiles16(const QuantTask& q, int64_t nb, int factor,
                           std::vector<uint8_t>& buffer) {
  const int tiles = (q.n_tokens + 15) / 16;
  if (factor == kAmxQ8KFactor) {  // Q8_K: kAmxQ8KActBlockBytes
    const int64_t nbk = nb / (quant::kQKK / quant::kQK);
    buffer.assign(size_t(tiles) * size_t(nbk) * kAmxQ8KActBlockBytes + 64, 0);
    uint8_t* const start =
        buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
    uint8_t* out = start;
    for (int tile = 0; tile < tiles; ++tile)
      for (int64_t b = 0; b < nbk; ++b, out += kAmxQ8KActBlockBytes)
        for (int m = 0; m < 16 && tile * 16 + m < q.n_tokens; ++m) {  // the padding stays zeros
          const size_t t = size_t(tile) * 16 + size_t(m);
          const auto& a = reinterpret_cast<const quant::BlockQ8K*>(q.act + t * q.act_row_bytes)[b];
          std::memcpy(out + 256 * m, a.qs, 256);
          std::memcpy(out + kAmxQ8KActScalesAt + 4 * m, &a.d, 4);
          for (int k = 0; k < 4; ++k) {
            const auto pair = [&](int s) { return uint16_t(a.bsums[2 * s] + a.bsums[2 * s + 1]); };
            const uint32_t word = pair(2 * k) | uint32_t(pair(2 * k + 1)) << 16;
            std::memcpy(out + kAmxQ8KActPairsAt + 16 * m + 4 * k, &word, 4);
          }
          std::memcpy(out + kAmxQ8KActBsumsAt + 32 * m, a.bsums, 32);
        }
    return start;
  }
  buffer.resize(size_t(tiles) * size_t(nb) * kAmxActBlockBytes + 64);
  uint8_t* const start =
      buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
  uint8_t* out = start;
  for (int tile = 0; tile < tiles; ++tile)
    for (int64_t b = 0; b < nb; ++b, out += kAmxActBlockBytes)
      for (int m = 0; m < 16; ++m) {
        if (tile * 16 + m >= q.n_tokens) {  // the padding: quants, scale and sum 0
          std::memset(out + 32 * m, 0, 32);
          std::memset(out + 512 + 4 * m, 0, 4);
          std::memset(out + 576 + 4 * m, 0, 4);
          continue;
        }
        const size_t t = size_t(tile) * 16 + size_t(m), tb = t * size_t(nb) + size_t(b);
        std::memcpy(out + 32 * m, q.act + t * q.act_row_bytes + size_t(b) * 34 + 2, 32);
        std::memcpy(out + 512 + 4 * m, q.act_scales + tb, 4);
        const int32_t sum = q.act_sums[tb] * factor;
        std::memcpy(out + 576 + 4 * m, &sum, 4);
      }
  return start;
}

// q's activation tiles: the AMX ones (amx_factor, where they run), and the VNNI tiles' Q8_0
// blocks of 16 tokens (the same buffer where the AMX tiles take Q8_0 ones with the same factor).
void make_act_tiles(QuantTask& q, int64_t nb, int amx_factor, int blocks16_factor,
                    QuantPrepared& p) {
  if (amx_factor != 0) {
    q.amx_sum_factor = amx_factor;
    q.amx_acts = act_tiles16(q, nb, amx_factor, p.amx_acts);
  }
  if (blocks16_factor != 0) {
    q.act_blocks16_factor = blocks16_factor;
    q.act_blocks16 = amx_factor == blocks16_factor
                         ? q.amx_acts
                         : act_tiles16(q, nb, blocks16_factor, p.act_blocks16);
  }
}

}  // namespace

namespace {

// n_tokens rows of x (cols long) quantised to `at` into p's act rows (padded with zero rows to a
// whole tile of 16, which the AMX activation tiles copy), with Q8_0's
// widened block scales and quant sums where with_scales. Rows of `source` (already quantised the
// same way, scales and sums included) are copied instead where it is given: row t is its row
// rows[t].
void fill_activations(QuantType at, const float* x, int n_tokens, int64_t cols, bool with_scales,
                      bool parallel, QuantPrepared& p, const QuantPrepared* source,
                      const int32_t* rows) {
  QuantTask& q = p.q;
  const int64_t nb = cols / quant::kQK;
  p.act.resize(q.act_row_bytes * size_t((n_tokens + 15) / 16 * 16));
  std::fill(p.act.begin() + ptrdiff_t(q.act_row_bytes * size_t(n_tokens)), p.act.end(), 0);
  q.act = p.act.data();
  q.act_scales = nullptr;
  q.act_sums = nullptr;
  if (with_scales) {
    p.scales.resize(size_t(nb) * size_t(n_tokens));
    p.sums.resize(size_t(nb) * size_t(n_tokens));
    q.act_scales = p.scales.data();
    q.act_sums = p.sums.data();
  }
  uint8_t* act = p.act.data();
  float* scales = p.scales.data();
  int32_t* sums = p.sums.data();
  if (source) {
    for (int t = 0; t < n_tokens; ++t) {
      check(rows[t] >= 0 && rows[t] < source->q.n_tokens, "matmul: a token row past its source");
      const size_t from = size_t(rows[t]);
      std::memcpy(act + size_t(t) * q.act_row_bytes, source->q.act + from * q.act_row_bytes,
                  q.act_row_bytes);
      if (!with_scales) continue;
      std::memcpy(scales + size_t(t) * size_t(nb), source->q.act_scales + from * size_t(nb),
                  sizeof(float) * size_t(nb));
      std::memcpy(sums + size_t(t) * size_t(nb), source->q.act_sums + from * size_t(nb),
                  sizeof(int32_t) * size_t(nb));
    }
    return;
  }
  const QuantizeRowFn quantize = quant_kernels().quantize_act(at);
  const bool fused = at == QuantType::Q8_0 && with_scales && avx512_enabled();
  const int threads = omp_get_max_threads();
#pragma omp parallel for schedule(static) if (parallel && n_tokens >= 4 * threads)
  for (int t = 0; t < n_tokens; ++t) {
    uint8_t* a = act + size_t(t) * q.act_row_bytes;
    const float* xt = x + size_t(t) * size_t(cols);
    if (fused) {
      quantize_q8_0_act_avx512(xt, cols, a, scales + size_t(t) * size_t(nb),
                               sums + size_t(t) * size_t(nb));
      continue;
    }
    if (at == QuantType::Q8_K && avx512_enabled()) {
      quantize_q8_k_act_avx512(xt, cols, a);
      continue;
    }
    quantize(xt, a, cols);
    if (!with_scales) continue;
    const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(a);
    for (int64_t b = 0; b < nb; ++b) {
      scales[size_t(t) * size_t(nb) + size_t(b)] = f16_to_f32(blocks[b].d);
      int32_t sum = 0;
      for (int8_t v : blocks[b].qs) sum += v;
      sums[size_t(t) * size_t(nb) + size_t(b)] = sum;
    }
  }
}

}  // namespace

void prepare_quant(const WeightMatrix& w, const float* x, int n_tokens, float* y, QuantPrepared& p,
                   const QuantPrepared* reuse, const QuantPrepared* source, const int32_t* rows) {
  const QuantType qt = *wtype_quant(w.type);
  const QuantKernels& k = quant_kernels();
  const QuantType at = dot_activation_type(qt);
  check(w.cols % quant_block_size(qt) == 0,
        "matmul: " + std::string(wtype_name(w.type)) + " matrix with " + std::to_string(w.cols) +
            " columns (not a multiple of " + std::to_string(quant_block_size(qt)) + ")");
  QuantTask& q = p.q;
  q = QuantTask{};
  p.act_type = at;
  q.w = &w;
  q.n_tokens = n_tokens;
  q.y = y;
  q.dot = k.vec_dot(qt);
  q.act_row_bytes = row_bytes(at, w.cols);
  const int64_t nb = w.cols / quant::kQK;
  // The panel kernels (packed weights, or more tokens than the decode kernel takes) read each
  // activation block's scale as a float and its quant sum; the others need neither.
  const bool panels = w.panels || n_tokens > gemv_max_tokens(qt);
  const bool want_scales = at == QuantType::Q8_0 && panels;
  // The unsigned-code kernels subtract their code offset through the sums (q4_0 / q5_0 on AVX2,
  // q8_0 too with VNNI): they come with the scales.
  // The AMX tiles' activations: Q8_0 ones with their scales; Q8_K ones for the K-quants'.
  const bool amx_acts =
      (want_scales || (at == QuantType::Q8_K && panels)) &&
      n_tokens >= (w.type == WType::Q8_0 && w.panels ? kAmx8FewestTokens : kAmxFewestTokens);
  const int amx_factor = amx_acts ? amx_sum_factor(qt) : 0;
  // The VNNI tiles' blocks of 16 tokens: from a few tokens (a copy of the activations, once a
  // call, against a tile's float steps over all the weight's row groups).
  const int blocks16_factor =
      want_scales && n_tokens >= kActBlocks16FewestTokens && avx512_enabled()
          ? block16_sum_factor(qt)
          : 0;
  // Prefill repacks rows per call into a panel (8 rows, 16 with VNNI), which pays once many tokens
  // share it; a few tokens (decode, batched decode of a few sequences) read the stored rows
  // directly, each 8-row group staying in L1 while every token passes over it. Weights packed at
  // load (pack_weight_panels) have no rows left for those to read: their kernel takes every call.
  p.tile = w.panels ? quant_tile_packed_avx512(qt, w.panel_codes_u8)
           : panels ? quant_tile_kernel(qt)
                    : quant_gemv_kernel(qt);
  check(p.tile || !w.panels, "matmul: packed weights without their kernel");
  if (reuse && reuse->act_type == at && reuse->q.act_row_bytes == q.act_row_bytes &&
      reuse->q.n_tokens == n_tokens && (!want_scales || reuse->q.act_scales)) {
    q.act = reuse->q.act;
    q.act_scales = want_scales ? reuse->q.act_scales : nullptr;
    q.act_sums = want_scales ? reuse->q.act_sums : nullptr;
    const bool same_amx = amx_factor == 0 || reuse->q.amx_sum_factor == amx_factor;
    const bool same_blocks16 =
        blocks16_factor == 0 || reuse->q.act_blocks16_factor == blocks16_factor;
    if (same_amx && same_blocks16) {
      q.amx_sum_factor = amx_factor;
      q.amx_acts = amx_factor ? reuse->q.amx_acts : nullptr;
      q.act_blocks16_factor = blocks16_factor;
      q.act_blocks16 = blocks16_factor ? reuse->q.act_blocks16 : nullptr;
    } else {
      make_act_tiles(q, nb, amx_factor, blocks16_factor, p);
    }
    return;
  }
  check(!source || quant_rows_fit(w, *source), "matmul: activations quantised for another type");
  const double work = double(w.rows) * double(w.cols) * double(n_tokens);
  const bool parallel = omp_get_max_threads() > 1 && work >= 256.0 * 1024;
  fill_activations(at, x, n_tokens, w.cols, want_scales, parallel, p, source, rows);
  make_act_tiles(q, nb, amx_factor, blocks16_factor, p);
}

bool quant_rows_fit(const WeightMatrix& w, const QuantPrepared& source) {
  const std::optional<QuantType> qt = wtype_quant(w.type);
  if (!qt) return false;
  const QuantType at = dot_activation_type(*qt);
  return source.act_type == at && source.q.act_row_bytes == row_bytes(at, w.cols) &&
         (at != QuantType::Q8_0 || source.q.act_scales);
}

void quantize_rows(WType w_type, const float* x, int n_tokens, int64_t cols, QuantPrepared& p) {
  const QuantType qt = *wtype_quant(w_type);
  check(cols % quant_block_size(qt) == 0,
        "matmul: " + std::string(wtype_name(w_type)) + " rows of " + std::to_string(cols) +
            " columns (not a multiple of " + std::to_string(quant_block_size(qt)) + ")");
  const QuantType at = dot_activation_type(qt);
  p.q = QuantTask{};
  p.act_type = at;
  p.q.n_tokens = n_tokens;
  p.q.act_row_bytes = row_bytes(at, cols);
  fill_activations(at, x, n_tokens, cols, at == QuantType::Q8_0, omp_get_max_threads() > 1, p,
                   nullptr, nullptr);
}

void run_quant(const QuantPrepared& p, int64_t r0, int64_t r1) {
  if (p.tile)
    p.tile(p.q, r0, r1);
  else
    rows_vec_dot(p.q, r0, r1);
}

void matmul_quant(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
  // note: a reference to the caller's thread_local, so OpenMP workers read the caller's buffers.
  thread_local QuantPrepared tls;
  QuantPrepared& p = tls;
  prepare_quant(w, x, n_tokens, y, p);
  const int threads = omp_get_max_threads();
  const double work = double(w.rows) * double(w.cols) * double(n_tokens);
  const bool parallel = threads > 1 && work >= 256.0 * 1024;
  // Chunks of whole 16-row groups (tile kernels work on groups of rows), taken by whichever
  // thread is free.
  thread_local std::vector<RowChunk> tls_chunks;
  std::vector<RowChunk>& chunks = tls_chunks;
  chunks.clear();
  append_row_chunks(chunks, 0, w.rows, 16, threads, n_tokens);
  const int64_t n_chunks = int64_t(chunks.size());
  if (!parallel || n_chunks == 1) {
    run_quant(p, 0, w.rows);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < n_chunks; ++c) run_quant(p, chunks[size_t(c)].r0, chunks[size_t(c)].r1);
}

}  // namespace kernels

QuantizedRows::QuantizedRows(WType w_type, const float* x, int n_tokens, int64_t cols) {
  if (!wtype_quant(w_type)) return;
  prepared_ = std::make_unique<kernels::QuantPrepared>();
  kernels::quantize_rows(w_type, x, n_tokens, cols, *prepared_);
}

QuantizedRows::~QuantizedRows() = default;

bool pack_weight_panels(WeightMatrix& w, uint8_t* bytes) {
  check(bytes == w.data, "pack_weight_panels: bytes must be the matrix's own");
  if (w.panels) return true;
  // Only where the packed kernel can run: it is AVX-512 VNNI, and its outputs are the vec_dot's
  // bits only when the dots are the AVX2 ones (as for every tile, quant_tile_kernel).
  // Which types and shapes pack is the kernel's to say (pack_panels16_avx512 refuses the rest).
  const std::optional<QuantType> qt = wtype_quant(w.type);
  if (!kernels::avx512_enabled() || quant_kernels().isa != "avx2" || !qt) return false;
  const bool codes_u8 = *qt == QuantType::Q8_0 && !kernels::cpu_has_amx_int8();
  w.panels = kernels::pack_panels16_avx512(*qt, bytes, w.rows, w.cols, w.row_bytes, codes_u8);
  w.panel_codes_u8 = w.panels && codes_u8;
  return w.panels;
}

void dequantize_packed_row(const WeightMatrix& w, int64_t r, float* out) {
  // Row r's blocks put back together from its group's panels, then widened by the type's own
  // dequantiser: the same floats as from the stored row.
  const uint8_t* group = w.row(r / 16 * 16);
  const QuantType qt = *wtype_quant(w.type);
  const int block = quant_block_size(qt);
  const size_t panel = quant::packed_block_bytes(qt);
  alignas(8) uint8_t blk[sizeof(quant::BlockQ6K)];  // the largest of the packed types' blocks
  for (int64_t b = 0; b < w.cols / block; ++b) {
    quant::unpack_packed_block(qt, group + size_t(b) * panel, int(r % 16), blk, w.panel_codes_u8);
    dequantize_row(qt, blk, out + b * block, block);
  }
}

}  // namespace fak
