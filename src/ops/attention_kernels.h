// Attention inner kernels, below ops/attention.cpp (which builds tiles and threads over them).
//
// A tile is up to kTileQueries queries that share one KV head (heads of a GQA group, of one or
// several consecutive tokens); the kernel reads each K and V row once per tile and keeps the
// queries in SIMD lanes, so prefill is a small matrix product per key block instead of one dot
// product per query and key.
//
// note: every lane's arithmetic is fixed by its own query and its own key count: the score of key
// j is one fma chain over the head dimension, the softmax sum runs over keys in order, the output
// accumulates p_j * v_j in key order. Which other queries share the tile (or whether the tile is
// a decode step with one token or a prefill with many) never changes a lane's result, so prefill,
// decode, batched decode and replays agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace fak::kernels {

inline constexpr int kTileQueries = 48;      // the AVX-512 tile; attend_tile_avx2 takes up to
inline constexpr int kTileQueriesAvx2 = 16;  // this many
// Full AVX-512 tiles of one sequence and KV head that run as one unit (attend_tiles_avx512): each
// f16 / bf16 / quantised key block is widened once for all of them rather than once per tile (at
// depth the widening was a sixth of prefill attention's time).
inline constexpr int kMaxTilesPerUnit = 4;

struct AttentionTile {
  int n = 0;                     // queries in the tile, 1..kTileQueries
  const float* q[kTileQueries];  // head_dim floats each, RoPE applied
  float* out[kTileQueries];      // head_dim floats each
  int n_keys[kTileQueries];      // query i attends to keys [0, n_keys[i]) (causal)
  // ... from key first_key[i] on (a sliding window's start; 0 without): keys before it are masked
  // as keys past n_keys are, adding exact zeros, so a query's bits are those of a tile whose rows
  // start at its first key.
  int first_key[kTileQueries];
  // Query i's sink logit (ops/attention.h AttentionShape::sinks), -inf without: its softmax's max
  // starts there and its sum at exp(sink - max).
  float sink[kTileQueries];
  AttentionTile() {
    for (float& x : sink) x = -std::numeric_limits<float>::infinity();
    for (int& f : first_key) f = 0;
  }
};

struct KvRows {
  const uint8_t* const* k;  // k[j]: K plane row of position j (all KV heads)
  const uint8_t* const* v;
  size_t head_offset;  // bytes from a row's start to this KV head
  DType dtype;         // F32, F16, BF16 or Q8_0
};

// Per-thread working memory of the tile kernel, grown on demand and reused across tiles.
struct AttentionScratch {
  std::vector<float> buf;
};

// n rows of `elems` f16/bf16 values each (rows[i]) as f32 into out[i * elems ...], exactly.
// AVX2 + F16C (the tiled attention path runs only there).
void widen_rows(const uint8_t* const* rows, size_t offset, int n, int elems, DType dtype,
                float* out);

// False when the kernel has no specialisation for this head size (the caller falls back).
bool attend_tile_avx2(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                      AttentionScratch& scratch);
bool attend_tile_supported(int head_dim);
// The same bits with 16 query lanes per register (tiles of more than 8 queries); only when
// avx512_enabled() (ops/matmul_kernels.h).
bool attend_tile_avx512(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                        AttentionScratch& scratch);
// Up to kMaxTilesPerUnit tiles over the same rows: the same bits as each tile alone.
bool attend_tiles_avx512(const AttentionTile* tiles, int count, const KvRows& rows, int head_dim,
                         float scale, AttentionScratch& scratch);
// One decode step (one new token) of up to kMaxDecodeGroup sequences over one KV head: each
// sequence's `heads` queries (consecutive, head_dim floats each) attend to its keys [0, n_keys).
// Keys [0, shared_keys) are the same rows in every sequence (blocks of a prefix they were cloned
// from): the kernel reads them once for all. Outputs are the same bits as attend_tile_avx2 on
// each sequence alone.
inline constexpr int kMaxDecodeGroup = 6;
inline constexpr int kMaxDecodeHeads = 8;  // queries per sequence; larger GQA groups are split

struct DecodeSeq {
  const float* q;  // heads * head_dim
  float* out;      // heads * head_dim
  int n_keys;
  KvRows rows;
};

struct DecodeGroup {
  int n = 0;      // sequences, 1..kMaxDecodeGroup
  int heads = 0;  // 1..kMaxDecodeHeads
  int shared_keys = 0;
  DecodeSeq seq[kMaxDecodeGroup];
};

// False when it has no specialisation (head size, group shape): the caller runs attend_tile.
bool attend_decode_avx512(const DecodeGroup& group, int head_dim, float scale);

// AMX-BF16 tiles (attention_amx_avx512.cpp), on CPUs with AMX-BF16 and f16 / bf16 KV rows.
//
// Each product goes through the tile unit in pieces exact in bf16: a query element or a
// probability as the sum of two bf16 numbers (its leading 16 significant bits), a key or value
// element (f16 or bf16) as the exact sum of two, and the dot products take hi*hi + hi*lo + lo*hi
// with f32 sums: scores and outputs within about 2^-16 of the f32 products, well inside the f16
// rounding of the stored KV. The softmax runs over blocks of kAmxKeyBlock keys counted from key 0
// (flash attention's order): per block each query's max is updated once and, where it grew, its
// sum and outputs are rescaled by exp(old - new), so a unit reads each key once for all its
// queries and keeps no score row per key. The arithmetic differs from the AVX2 / AVX-512 tiles
// (which agree with each other bit for bit), so one process uses one of them for every attention
// call; within it the reuse guarantees hold as before: every step of a query's arithmetic is fixed
// by its own query, its own keys and the block and chunk boundaries (all counted from key 0),
// whatever unit, call, batch or thread computes it (keys it does not attend add exact zeros and
// leave its max alone).
inline constexpr int kAmxUnitQueries = 256;  // a unit: up to 16 tiles of 16 query lanes
inline constexpr int kAmxKeyChunk = 32;      // keys per product of probabilities and values
inline constexpr int kAmxKeyBlock = 128;     // keys per softmax step

// A unit of the AMX path: up to kAmxUnitQueries queries of one KV head, as AttentionTile's (a
// null q and out: an unused lane, whose n_keys and first_key must still be one of its q-tile's).
struct AmxUnit {
  int n = 0;
  const float* q[kAmxUnitQueries];
  float* out[kAmxUnitQueries];
  int n_keys[kAmxUnitQueries];
  int first_key[kAmxUnitQueries];
  float sink[kAmxUnitQueries];
  // A batched decode step of sequences cloned from one prefix (n_tile_rows > 0): q-tile i holds
  // sequence i's queries and reads tile_rows[i]; keys [0, shared_keys) are the same rows in every
  // sequence, read once for all. Each lane's arithmetic is its sequence's alone.
  int n_tile_rows = 0;
  int shared_keys = 0;
  KvRows tile_rows[kAmxUnitQueries / 16];
};

// On (AMX-BF16 present, not turned off by set_amx_enabled(false) or FAK_ISA) and the head size and
// KV type have tiles: 32, 64, 128 or 256; F16 or BF16.
bool amx_attention_enabled();
bool amx_attention_supported(int head_dim, DType dtype);

// One unit; rows (and the unit's n_keys and first_key) count from key 0, and rows before
// first_stored are not there (a window dropped them; read as zeros, which no query's window
// reaches).
void attend_unit_amx(const AmxUnit& unit, const KvRows& rows, int first_stored, int head_dim,
                     float scale);

}  // namespace fak::kernels
