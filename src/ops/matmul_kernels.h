// The per-ISA matmul entry points behind ops/matmul.h's dispatch. Internal to ops/.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/matmul.h"
#include "quant/quant.h"

namespace fak::kernels {

// Computes y[t][r] for t in [0, n_tokens), r in [r0, r1). x rows are w.cols long, y rows w.rows.
using MatmulRowsFn = void (*)(const WeightMatrix& w, const float* x, int n_tokens, float* y,
                              int64_t r0, int64_t r1);

void matmul_rows_ref(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                     int64_t r1);
void matmul_rows_avx2(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                      int64_t r1);
// Same bits as matmul_rows_avx2 (see matmul_avx512.cpp): 8-row x up-to-6-token tiles, on the
// stored rows for a few tokens (whole 8-column chunks) and on rows widened into a zero-padded panel
// for more; one token goes to the AVX2 kernel.
void matmul_rows_avx512(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                        int64_t r1);

// matmul_bf16dot_avx512.cpp (AVX512-BF16): x rounded to bf16 (nearest even) into xb, rows ldx
// elements apart, zero past cols (ldx: cols rounded up to 32); and the product of bf16 rows with
// those activations, one fixed sequence of f32 operations per output (any batch, any tile).
void round_activations_bf16_avx512(const float* x, int n_tokens, int64_t cols, uint16_t* xb,
                                   size_t ldx);
void bf16dot_rows_avx512(const WeightMatrix& w, const uint16_t* xb, size_t ldx, int n_tokens,
                         float* y, int64_t r0, int64_t r1);
bool cpu_has_bf16_dot();
// matmul_bf16amx_avx512.cpp (AMX-BF16, where amx_enabled()): the same product on the tile unit,
// which sums differently from vdpbf16ps, so it takes every call where the CPU has it. xt: the
// activations in the tile unit's pair layout (bf16amx_pack_pairs: per 16 tokens, the last
// zero-padded, and 32 elements, 16 lines of the tokens' elements 2p, 2p + 1), tiles [tile0,
// tile1) of bf16amx_pairs_elems(n_tokens, ldx); one token reads xb instead (xt may be null).
bool cpu_has_bf16_amx();
size_t bf16amx_pairs_elems(int n_tokens, size_t ldx);
void bf16amx_pack_pairs(const uint16_t* xb, size_t ldx, int n_tokens, int tile0, int tile1,
                        uint16_t* xt);
void bf16amx_rows(const WeightMatrix& w, const uint16_t* xb, const uint16_t* xt, size_t ldx,
                  int n_tokens, float* y, int64_t r0, int64_t r1);

bool cpu_has_avx2();
// AVX-512 F/BW/DQ/VL + VNNI: the avx512 kernels (float prefill, int8 prefill with vpdpbusd). They
// reproduce the AVX2 kernels' outputs bit for bit, so they are a speed choice only.
bool cpu_has_avx512();
// Test hook: false makes every call take the AVX2 kernels (to compare the two bit for bit).
void set_avx512_enabled(bool enabled);
bool avx512_enabled();
// AMX-INT8 on top of AVX-512 VNNI: the prefill tiles of 16 tokens take their integer block sums
// from the tile unit (amx_sums_amx.cpp); the sums are exact, so the outputs are the same bits.
bool cpu_has_amx_int8();
// Test hook: false makes the avx512 tiles make every sum with vpdpbusd (to compare the two).
void set_amx_enabled(bool enabled);
bool amx_enabled();

// A share of a product's rows that one thread computes: rows [r0, r1) of job `job`.
struct RowChunk {
  size_t job;
  int64_t r0, r1;
};
// Appends job's rows [0, rows) cut into chunks of whole `unit`s (the tiles' row groups), in the
// order threads take them. Each chunk is a stream the hardware prefetcher starts again, so for
// one token (decode: a read of the weights at memory speed) they are long ones first, each what
// is left over the threads (OpenMP's guided schedule), down to two units, so the last ones even the
// threads out. `later_rows`: the work still to share out after this job, in its rows, when several
// matrices are split in turn (matmul_many): while much is left a thread takes whole matrices (a
// MoE layer's 16 expert gate/up projections: one stream each, not a share of every one), and the
// last ones are shared. Alternated runs, tg32 tok/s, medians: 0.5B F16 51.4 (four equal chunks a
// thread) -> 54.0 (two) -> 58.2 (these); 0.5B Q8_0 107.4 (two) -> 112.6; Qwen3-30B-A3B 6-layer Q8_0
// cut 77.2 (four) -> 83.4 (whole experts to a thread) -> 63.9 / 65.2 (whole, then shared; a
// slower hour). Prefill takes four equal chunks a thread, except a matrix with at least four
// threads' shares of four of its size still to come (a MoE prefill's experts, 10-60 tokens each:
// as much a stream as compute), which a thread takes whole. Two threads, the Qwen3.5-35B-A3B Q8_0
// cut's pp512, three alternations: experts 0.475-0.484 -> 0.404-0.417 ms a token
// (matmul_quant_bench moe_prefill Q8_0_16tok 240-262 -> 311-321 GMAC/s, _32tok 287-332 -> 368-388).
void append_row_chunks(std::vector<RowChunk>& out, size_t job, int64_t rows, int64_t unit,
                       int threads, int n_tokens, int64_t later_rows = 0);

// Block-quantised weights (matmul_quant.cpp): the activations already quantised, one row per token.
struct QuantTask {
  const WeightMatrix* w = nullptr;
  const uint8_t* act = nullptr;  // [n_tokens][act_row_bytes], Q8_0 or Q8_K
  size_t act_row_bytes = 0;
  int n_tokens = 0;
  // Q8_0 activations with n_tokens > 1: each block's fp16 scale as a float, [n_tokens][cols / 32]
  // (the prefill kernels would otherwise convert it once per 8 rows).
  const float* act_scales = nullptr;
  // Q8_0 activations with n_tokens > 1: Σ of each activation block's quants, same layout.
  const int32_t* act_sums = nullptr;
  float* y = nullptr;  // [n_tokens][w->rows]
  VecDotFn dot = nullptr;
  // The AMX tiles' activations, or null: every tile of 16 tokens (the last one padded with zero
  // rows), [tile][block] of kAmxActBlockBytes, their quant sums times amx_sum_factor (or, for
  // amx_sum_factor kAmxQ8KFactor, of kAmxQ8KActBlockBytes).
  const uint8_t* amx_acts = nullptr;
  int amx_sum_factor = 0;
  // Q8_0 activations in the same blocks of 16 tokens (kAmxActBlockBytes, their sums times
  // act_blocks16_factor), for the VNNI tiles too: one pointer a block instead of a code, scale and
  // sum row for each of a tile's 8 tokens (24 pointers: GCC spilled them, and the accumulators,
  // every block). The same buffer as amx_acts where the AMX tiles run; else null.
  const uint8_t* act_blocks16 = nullptr;
  int act_blocks16_factor = 0;
};
// One block of 16 tokens' Q8_0 activations as the AMX tiles read them: the 16 rows of 32 quants
// (token m's at 32 m: the tile unit's A operand, contiguous), then their 16 scales (float) and
// their 16 quant sums (int32) times minus the weight type's code offset (amx_sum_factor), which
// the tile adds to each sum (the q4_1 / q5_1 tiles, with no offset, take the plain sum for their
// mins term).
inline constexpr size_t kAmxActBlockBytes = 16 * 32 + 16 * 4 + 16 * 4;
// The same for the K-quant AMX tiles (q2_K ... q6_K, iq4_xs), whose activations are Q8_K
// (amx_sum_factor kAmxQ8KFactor marks them): one 256-element block of 16 tokens is their 16 rows of
// 256 quants (token m's at 256 m), their 16 scales (float), per token the four int32 words the
// q4_K / q5_K mins term takes (word k: the int16 pair of sub-block sums bsum_4k + bsum_4k+1 and
// bsum_4k+2 + bsum_4k+3, 16 bytes a token), then per token its 16 bsums as stored (32 bytes).
inline constexpr size_t kAmxQ8KActScalesAt = 16 * 256, kAmxQ8KActPairsAt = kAmxQ8KActScalesAt + 64,
                        kAmxQ8KActBsumsAt = kAmxQ8KActPairsAt + 16 * 16;
inline constexpr size_t kAmxQ8KActBlockBytes = kAmxQ8KActBsumsAt + 16 * 32;
inline constexpr int kAmxQ8KFactor = -1;
// What the AMX tiles of weight type t multiply the activation sums by (minus their codes' offset,
// or 1 for q4_1 / q5_1), or 0 where t's tiles do not take AMX on this CPU (q.amx_acts is then not
// made).
int amx_sum_factor(QuantType t);
// The same for the 32-element block types' VNNI tiles (act_blocks16), whatever the CPU's AMX; 0
// for the types whose tiles take Q8_K activations or no tiles.
int block16_sum_factor(QuantType t);
// The fewest tokens the AMX tiles take as a tile of 16 (the rest zero rows, their sums not
// stored): a tile of 16 costs the tile unit the same at any fill, and from about this many tokens
// it is cheaper than the VNNI tiles for them. A MoE layer's experts see a few tens of tokens each
// in a prefill, so a tile's worth left over is common (half the tokens of Qwen3.5's 256 experts).
inline constexpr int kAmxFewestTokens = 10;
// Packed q8_0's 8-row AMX tiles (a few sequences decoding together) from this many tokens: at 8
// they beat the VNNI tile of 8 (two threads, tg32 x8 at depth 16: Qwen2.5-0.5B Q8_0 256 -> 291
// tok/s, the Qwen3-30B-A3B 6-layer Q8_0 cut with one token for all 211-219 -> 225-232), at 7
// and 6 they lost to the VNNI tiles of 7 and 6 (the cut: 218-223 -> 191-193, 189-202 -> 176-178).
inline constexpr int kAmx8FewestTokens = 8;
// The fewest tokens for which a call's Q8_0 activations are also laid out in blocks of 16 tokens
// for the VNNI tiles (QuantTask::act_blocks16).
inline constexpr int kActBlocks16FewestTokens = 4;
// quantize_act_avx512.cpp: x (cols a multiple of 32) quantised to Q8_0 blocks in act, the same
// bytes as the quantiser's, with each block's fp16 scale widened into scales and the sum of its
// quants into sums (cols / 32 of each). Only when avx512_enabled().
void quantize_q8_0_act_avx512(const float* x, int64_t cols, uint8_t* act, float* scales,
                              int32_t* sums);
// The same for Q8_K (cols a multiple of 256): the quantiser's bytes, block sums included.
void quantize_q8_k_act_avx512(const float* x, int64_t cols, uint8_t* act);
void matmul_quant(const WeightMatrix& w, const float* x, int n_tokens, float* y);

// Computes outputs of rows [r0, r1) for every token of q, bit-identical to q.dot per output.
using QuantTileFn = void (*)(const QuantTask& q, int64_t r0, int64_t r1);

// One quantised product made ready to run row range by row range: its activations quantised (in
// buffers of its own) and its kernel chosen, exactly as matmul_quant does.
struct QuantPrepared {
  QuantTask q;
  QuantType act_type = QuantType::Q8_0;
  QuantTileFn tile = nullptr;  // null: rows by vec_dot
  std::vector<uint8_t> act;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  std::vector<uint8_t> amx_acts;      // 64 bytes more than the tiles: q.amx_acts is aligned in it
  std::vector<uint8_t> act_blocks16;  // q.act_blocks16, where it is not q.amx_acts
};
// `reuse`: a prepared product over the same x (same activation type and width) whose quantised
// activations are taken instead of quantising x again; may be null. `source` (from quantize_rows,
// fitting w: quant_rows_fit): token t's activations are row rows[t] of it, copied.
void prepare_quant(const WeightMatrix& w, const float* x, int n_tokens, float* y, QuantPrepared& p,
                   const QuantPrepared* reuse = nullptr, const QuantPrepared* source = nullptr,
                   const int32_t* rows = nullptr);
// x's rows quantised into p as products against w_type (a quantised type) quantise them, Q8_0's
// block scales and sums included, for prepare_quant's `source`. (In place: p.q points into p's own
// buffers.)
void quantize_rows(WType w_type, const float* x, int n_tokens, int64_t cols, QuantPrepared& p);
// Whether source holds activations w's products can take.
bool quant_rows_fit(const WeightMatrix& w, const QuantPrepared& source);
void run_quant(const QuantPrepared& p, int64_t r0, int64_t r1);
// The register-tiled prefill kernel for t on this CPU, or null (rows are then done by vec_dot).
QuantTileFn quant_tile_kernel(QuantType t);
QuantTileFn quant_tile_avx2(QuantType t);  // gemm_avx2.cpp; only when cpu_has_avx2()
// gemm_avx512.cpp (VNNI, 16-row panels; same bits as the AVX2 tiles); only when avx512_enabled().
// Needs QuantTask::act_sums for every Q8_0-activation type.
QuantTileFn quant_tile_avx512(QuantType t);
// gemm_avx512.cpp: rewrites n_rows rows of type t in place into prepacked panels (the
// quant::kPackedQ8* / Q4K* / Q5K* layouts), or returns false where it cannot (only q8_0, q4_K and
// q5_K, rows a multiple of 16); and the kernel that reads them, for any n_tokens (q8_0 needs
// act_scales and act_sums even for one token). q8_codes_u8: q8_0's codes stored + 128
// (WeightMatrix::panel_codes_u8).
bool pack_panels16_avx512(QuantType t, uint8_t* rows, int64_t n_rows, int64_t cols,
                          size_t row_bytes, bool q8_codes_u8);
QuantTileFn quant_tile_packed_avx512(QuantType t, bool q8_codes_u8);
// The decode kernel (n_tokens == 1) for t on this CPU, or null (rows are then done by vec_dot).
QuantTileFn quant_gemv_kernel(QuantType t);
QuantTileFn quant_gemv_avx2(QuantType t);  // gemv_avx2.cpp; only when cpu_has_avx2()
// gemv_mxfp4_avx512.cpp (VNNI; same bits as the AVX2 kernels), or null; only when avx512_enabled().
QuantTileFn quant_gemv_avx512(QuantType t);
// Test hook: forces vec_dot rows even where a tile or decode kernel exists (to compare them).
void set_quant_tiles_enabled(bool enabled);

}  // namespace fak::kernels
