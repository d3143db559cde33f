// Matmul dispatch: picks the kernel family once (CPU features), splits rows across threads.
#include "ops/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul_kernels.h"

namespace fak {

namespace kernels {
bool cpu_has_avx2() {
  return cpu_features().avx2;
}
bool cpu_has_avx512() {
  return cpu_features().avx512 && cpu_features().avx512_vnni;
}

bool cpu_has_bf16_dot() {
  return cpu_has_avx512() && cpu_features().avx512_bf16;
}

bool cpu_has_amx_int8() {
  return cpu_has_avx512() && cpu_features().amx_int8;
}

namespace {
bool g_avx512_enabled = true;
bool g_amx_enabled = true;
}  // namespace

void set_amx_enabled(bool enabled) {
  g_amx_enabled = enabled;
}
bool amx_enabled() {
  return g_amx_enabled && avx512_enabled() && cpu_has_amx_int8();
}

void set_avx512_enabled(bool enabled) {
  g_avx512_enabled = enabled;
}
bool avx512_enabled() {
  return g_avx512_enabled && cpu_has_avx512();
}
}  // namespace kernels

namespace {

kernels::MatmulRowsFn float_kernel() {
  if (kernels::avx512_enabled()) return kernels::matmul_rows_avx512;
  static const kernels::MatmulRowsFn fn =
      kernels::cpu_has_avx2() ? kernels::matmul_rows_avx2 : kernels::matmul_rows_ref;
  return fn;
}

}  // namespace

std::string_view wtype_name(WType t) {
  switch (t) {
    case WType::F32:
      return "f32";
    case WType::F16:
      return "f16";
    case WType::BF16:
      return "bf16";
    case WType::Q8_0:
      return "q8_0";
    case WType::Q4_0:
      return "q4_0";
    case WType::Q4_1:
      return "q4_1";
    case WType::Q5_0:
      return "q5_0";
    case WType::Q5_1:
      return "q5_1";
    case WType::Q4_K:
      return "q4_k";
    case WType::Q5_K:
      return "q5_k";
    case WType::Q6_K:
      return "q6_k";
    case WType::MXFP4:
      return "mxfp4";
    case WType::Q2_K:
      return "q2_k";
    case WType::Q3_K:
      return "q3_k";
    case WType::IQ4_NL:
      return "iq4_nl";
    case WType::IQ4_XS:
      return "iq4_xs";
  }
  return "?";
}

int64_t wtype_block(WType t) {
  switch (t) {
    case WType::F32:
    case WType::F16:
    case WType::BF16:
      return 1;
    case WType::Q8_0:
    case WType::Q4_0:
    case WType::Q4_1:
    case WType::Q5_0:
    case WType::Q5_1:
    case WType::MXFP4:
    case WType::IQ4_NL:
      return 32;
    case WType::Q4_K:
    case WType::Q5_K:
    case WType::Q6_K:
    case WType::Q2_K:
    case WType::Q3_K:
    case WType::IQ4_XS:
      return 256;
  }
  return 1;
}

size_t wtype_row_bytes(WType t, int64_t cols) {
  size_t blocks = size_t(cols / wtype_block(t));
  switch (t) {
    case WType::F32:
      return 4 * size_t(cols);
    case WType::F16:
    case WType::BF16:
      return 2 * size_t(cols);
    case WType::Q8_0:
      return blocks * 34;
    case WType::Q4_0:
      return blocks * 18;
    case WType::Q4_1:
      return blocks * 20;
    case WType::Q5_0:
      return blocks * 22;
    case WType::Q5_1:
      return blocks * 24;
    case WType::Q4_K:
      return blocks * 144;
    case WType::Q5_K:
      return blocks * 176;
    case WType::Q6_K:
      return blocks * 210;
    case WType::MXFP4:
      return blocks * 17;
    case WType::Q2_K:
      return blocks * 84;
    case WType::Q3_K:
      return blocks * 110;
    case WType::IQ4_NL:
      return blocks * 18;
    case WType::IQ4_XS:
      return blocks * 136;
  }
  return 0;
}

namespace {
std::atomic<bool> g_bf16_activations{false};

bool takes_bf16_dot(const WeightMatrix& w) {
  return w.type == WType::BF16 && bf16_activations();
}

size_t bf16_ldx(int64_t cols) {
  return size_t((cols + 31) / 32 * 32);
}

// x rounded to bf16 for a bf16-dot product, in `buf` (grown as needed); where the tile unit takes
// the product (more than one token), its pair layout after them in the same buffer (*xt).
const uint16_t* round_bf16(const float* x, int n_tokens, int64_t cols, std::vector<uint16_t>& buf,
                           const uint16_t** xt) {
  const size_t ldx = bf16_ldx(cols), rounded = ldx * size_t(n_tokens);
  const bool pairs = n_tokens > 1 && kernels::cpu_has_bf16_amx();
  const size_t need = rounded + (pairs ? kernels::bf16amx_pairs_elems(n_tokens, ldx) : 0);
  if (buf.size() < need) buf.resize(need);
  kernels::round_activations_bf16_avx512(x, n_tokens, cols, buf.data(), ldx);
  *xt = nullptr;
  if (pairs) {
    const int tiles = (n_tokens + 15) / 16;
    uint16_t* out = buf.data() + rounded;
    // Both threads (a 512-token call's 896-wide rows: 0.9 MB of pairs).
#pragma omp parallel for schedule(static) if (tiles > 4)
    for (int j = 0; j < tiles; ++j)
      kernels::bf16amx_pack_pairs(buf.data(), ldx, n_tokens, j, j + 1, out);
    *xt = out;
  }
  return buf.data();
}

// The bf16 product of rows [r0, r1): on the tile unit where the CPU has one, else vdpbf16ps.
void bf16_rows(const WeightMatrix& w, const uint16_t* xb, const uint16_t* xt, int n_tokens,
               float* y, int64_t r0, int64_t r1) {
  if (kernels::cpu_has_bf16_amx())
    return kernels::bf16amx_rows(w, xb, xt, bf16_ldx(w.cols), n_tokens, y, r0, r1);
  kernels::bf16dot_rows_avx512(w, xb, bf16_ldx(w.cols), n_tokens, y, r0, r1);
}
}  // namespace

void set_bf16_activations(bool on) {
  g_bf16_activations.store(on, std::memory_order_relaxed);
}

bool bf16_activations_available() {
  return kernels::avx512_enabled() && kernels::cpu_has_bf16_dot();
}

bool bf16_activations() {
  return g_bf16_activations.load(std::memory_order_relaxed) && bf16_activations_available();
}

bool bf16_activations_on_tiles() {
  return bf16_activations() && kernels::cpu_has_bf16_amx();
}

bool bf16_activations_faster() {
  return bf16_activations_available() &&
         (kernels::cpu_has_bf16_amx() || cpu_features().bf16_dot_full_rate);
}

std::string_view matmul_isa() {
  if (kernels::amx_enabled()) return "avx512+amx";
  if (kernels::avx512_enabled()) return "avx512";
  return kernels::cpu_has_avx2() ? "avx2" : "scalar";
}

namespace kernels {
void append_row_chunks(std::vector<RowChunk>& out, size_t job, int64_t rows, int64_t unit,
                       int threads, int n_tokens, int64_t later_rows) {
  const int64_t parts = std::max(threads, 1);
  const auto units = [unit](int64_t n) { return (n + unit - 1) / unit * unit; };
  int64_t equal = std::max(unit, units(rows / (parts * 4)));
  if (n_tokens > 1 && later_rows >= 4 * parts * rows) equal = units(rows);  // see the header
  for (int64_t r0 = 0; r0 < rows;) {
    const int64_t left = rows - r0 + later_rows;
    const int64_t size =
        n_tokens <= 1 ? std::max(2 * unit, units((left + parts - 1) / parts)) : equal;
    const int64_t r1 = std::min(rows, r0 + size);
    out.push_back({job, r0, r1});
    r0 = r1;
  }
}
}  // namespace kernels

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
  if (n_tokens <= 0 || w.rows == 0) return;
  if (wtype_quant(w.type)) return kernels::matmul_quant(w, x, n_tokens, y);
  thread_local std::vector<uint16_t> tls_xb;
  const uint16_t* xt = nullptr;
  const uint16_t* xb = takes_bf16_dot(w) ? round_bf16(x, n_tokens, w.cols, tls_xb, &xt) : nullptr;
  const kernels::MatmulRowsFn float_fn = float_kernel();
  const auto fn = [&](const WeightMatrix& m, const float* xf, int nt, float* out, int64_t r0,
                      int64_t r1) {
    if (xb)
      bf16_rows(m, xb, xt, nt, out, r0, r1);
    else
      float_fn(m, xf, nt, out, r0, r1);
  };
  // Chunks of whole 8-row groups so tiles stay full (16 for the bf16 tile unit's), taken by
  // whichever thread is free.
  const int threads = omp_get_max_threads();
  thread_local std::vector<kernels::RowChunk> tls_chunks;
  std::vector<kernels::RowChunk>& chunks = tls_chunks;
  chunks.clear();
  kernels::append_row_chunks(chunks, 0, w.rows, xb && kernels::cpu_has_bf16_amx() ? 16 : 8, threads,
                             n_tokens);
  const int64_t n_chunks = int64_t(chunks.size());
  // Small products are not worth waking threads for (and on a loaded machine a spinning team
  // costs far more than the work).
  const double work = double(w.rows) * double(w.cols) * double(n_tokens);
  if (n_chunks == 1 || threads == 1 || work < 256.0 * 1024) {
    fn(w, x, n_tokens, y, 0, w.rows);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < n_chunks; ++c)
    fn(w, x, n_tokens, y, chunks[size_t(c)].r0, chunks[size_t(c)].r1);
}

void matmul_many(std::span<const MatmulJob> jobs) {
  // note: references to the caller's thread_local, so OpenMP workers read the caller's buffers.
  thread_local std::vector<kernels::QuantPrepared> tls_prepared;
  std::vector<kernels::QuantPrepared>& prepared = tls_prepared;
  if (prepared.size() < jobs.size()) prepared.resize(jobs.size());
  using Chunk = kernels::RowChunk;
  thread_local std::vector<Chunk> tls_chunks;
  std::vector<Chunk>& chunks = tls_chunks;
  chunks.clear();
  // BF16 jobs on the bf16-dot path: each one's activations rounded once (shared by jobs on one x).
  thread_local std::vector<std::vector<uint16_t>> tls_xb;
  thread_local std::vector<const uint16_t*> tls_xb_of;
  std::vector<std::vector<uint16_t>>& xbs = tls_xb;
  std::vector<const uint16_t*>& xb_of = tls_xb_of;
  thread_local std::vector<const uint16_t*> tls_xt_of;
  std::vector<const uint16_t*>& xt_of = tls_xt_of;
  if (xbs.size() < jobs.size()) xbs.resize(jobs.size());
  xb_of.assign(jobs.size(), nullptr);
  xt_of.assign(jobs.size(), nullptr);
  const int threads = omp_get_max_threads();
  // One guided split over all the jobs (see append_row_chunks).
  thread_local std::vector<double> tls_later;
  std::vector<double>& later = tls_later;  // work (rows x cols) of the jobs after each
  later.assign(jobs.size(), 0.0);
  for (size_t i = jobs.size(); i-- > 1;)
    later[i - 1] =
        later[i] + (jobs[i].n_tokens > 0 ? double(jobs[i].w->rows) * double(jobs[i].w->cols) : 0.0);
  // Jobs that take their tokens by row: from their quantised rows (xq) where those fit the
  // weights, else gathered here into rows of their own (float weights; xq for another type).
  thread_local std::vector<std::vector<float>> tls_gathered;
  std::vector<std::vector<float>>& gathered = tls_gathered;
  if (gathered.size() < jobs.size()) gathered.resize(jobs.size());
  thread_local std::vector<const float*> tls_x_of;
  std::vector<const float*>& x_of = tls_x_of;
  x_of.assign(jobs.size(), nullptr);
  const auto takes_rows = [&](const MatmulJob& j) {
    return j.x_rows && j.xq && j.xq->prepared() && kernels::quant_rows_fit(*j.w, *j.xq->prepared());
  };
  double work = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatmulJob& j = jobs[i];
    x_of[i] = j.x;
    if (j.n_tokens <= 0 || j.w->rows == 0) continue;
    // Jobs on the same tokens (the gate and up of one expert) gather, quantise or round them once.
    const auto same_tokens = [&](size_t k) {
      return jobs[k].x == j.x && jobs[k].x_rows == j.x_rows && jobs[k].xq == j.xq &&
             jobs[k].n_tokens == j.n_tokens && jobs[k].w->cols == j.w->cols;
    };
    const bool by_rows = takes_rows(j);
    if (j.x_rows && !by_rows) {
      for (size_t k = 0; k < i && x_of[i] == j.x; ++k)
        if (same_tokens(k) && x_of[k] != jobs[k].x) x_of[i] = x_of[k];
      if (x_of[i] == j.x) {
        const size_t cols = size_t(j.w->cols);
        std::vector<float>& g = gathered[i];
        if (g.size() < cols * size_t(j.n_tokens)) g.resize(cols * size_t(j.n_tokens));
        for (int t = 0; t < j.n_tokens; ++t)
          std::memcpy(g.data() + size_t(t) * cols, j.x + size_t(j.x_rows[t]) * cols,
                      sizeof(float) * cols);
        x_of[i] = g.data();
      }
    }
    if (wtype_quant(j.w->type)) {
      const kernels::QuantPrepared* reuse = nullptr;
      for (size_t k = 0; k < i && !reuse; ++k)
        if (same_tokens(k) && wtype_quant(jobs[k].w->type) && jobs[k].w->rows > 0)
          reuse = &prepared[k];
      kernels::prepare_quant(*j.w, x_of[i], j.n_tokens, j.y, prepared[i], reuse,
                             by_rows ? j.xq->prepared() : nullptr, by_rows ? j.x_rows : nullptr);
    }
    if (takes_bf16_dot(*j.w)) {
      for (size_t k = 0; k < i && !xb_of[i]; ++k)
        if (xb_of[k] && same_tokens(k)) {
          xb_of[i] = xb_of[k];
          xt_of[i] = xt_of[k];
        }
      if (!xb_of[i]) xb_of[i] = round_bf16(x_of[i], j.n_tokens, j.w->cols, xbs[i], &xt_of[i]);
    }
    work += double(j.w->rows) * double(j.w->cols) * double(j.n_tokens);
    // Whole 16-row groups (the tile kernels' unit; float kernels take 8).
    kernels::append_row_chunks(chunks, i, j.w->rows, 16, threads, j.n_tokens,
                               j.w->cols > 0 ? int64_t(later[i] / double(j.w->cols)) : 0);
  }
  const kernels::MatmulRowsFn fn = float_kernel();
  auto run = [&](const Chunk& c) {
    const MatmulJob& j = jobs[c.job];
    if (wtype_quant(j.w->type))
      kernels::run_quant(prepared[c.job], c.r0, c.r1);
    else if (xb_of[c.job])
      bf16_rows(*j.w, xb_of[c.job], xt_of[c.job], j.n_tokens, j.y, c.r0, c.r1);
    else
      fn(*j.w, x_of[c.job], j.n_tokens, j.y, c.r0, c.r1);
  };
  const int64_t n = int64_t(chunks.size());
#pragma omp parallel for schedule(dynamic, 1) if (threads > 1 && n > 1 && work >= 256.0 * 1024)
  for (int64_t c = 0; c < n; ++c) run(chunks[size_t(c)]);
}

void dequantize_packed_row(const WeightMatrix& w, int64_t r, float* out);  // matmul_quant.cpp

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  if (w.panels) return dequantize_packed_row(w, r, out);
  const uint8_t* row = w.row(r);
  switch (w.type) {
    case WType::F32:
      std::memcpy(out, row, 4 * size_t(w.cols));
      return;
    case WType::BF16:
      for (int64_t k = 0; k < w.cols; ++k) {
        uint16_t h;
        std::memcpy(&h, row + 2 * k, 2);
        out[k] = bf16_to_f32(h);
      }
      return;
    case WType::F16:
      for (int64_t k = 0; k < w.cols; ++k) {
        uint16_t h;
        std::memcpy(&h, row + 2 * k, 2);
        out[k] = f16_to_f32(h);
      }
      return;
    default:
      return dequantize_row(*wtype_quant(w.type), row, out, w.cols);
  }
}

}  // namespace fak
