// The CUDA backend: the forward's ops (backend/backend.h) as kernels of cuda/kernels.h,
// cuda/deltanet_kernels.h and cuda/moe_kernels.h over a KvCache whose slabs are in device memory
// (cuda_kv_storage). Weights are copied to the device once at load: f32/f16/bf16 and q8_0 as
// stored (the kernels read them directly), other quantised types widened to f32 (no fused kernel
// for them yet). Embedding lookups stay on the host (one row per token), so the device holds no
// embedding table unless the output head is tied to it. Hybrid models' recurrent states go to the
// device for a call and come back at its end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_support.h"
#include "cuda/deltanet_kernels.h"
#include "cuda/kernels.h"
#include "cuda/moe_kernels.h"
#include "memory/kv_cache.h"
#include "memory/recurrent_state.h"

namespace fak {

namespace {

using cuda::DevMatrix;
using cuda::DevWType;

// Memory of the backend's calls (they only grow; one call at a time holds them).
struct DeviceScratch {
  std::array<DeviceBuffer, size_t(Buf::kCount)> bufs;
  DeviceBuffer cos, sin, pos, table_start, tables, slabs, states, first;
  DeviceBuffer ids, pairs, rows, normed, logits;
};

class CudaBackend;

class CudaCall final : public BackendCall {
 public:
  CudaCall(const CudaBackend& be, std::unique_lock<std::mutex> lock,
           std::span<const BatchItem> batch, KvCache& cache, const BufferSizes& sizes,
           const std::vector<float>& cos, const std::vector<float>& sin, int half);

  float* buf(Buf b) override { return s_.bufs[size_t(b)].as<float>(); }

  void embed(const WeightMatrix& table, float* x) override {
    std::vector<float> host(size_t(T_) * size_t(table.cols));
    for (int t = 0; t < T_; ++t)
      dequantize_row(table, tokens_[size_t(t)], &host[size_t(t) * size_t(table.cols)]);
    cuda_check(cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy (embeddings)");
  }
  void rmsnorm(const float* x, const std::vector<float>& w, int rows, int width, float eps,
               float* y) override {
    cuda::rmsnorm(x, vec(w), rows, width, eps, y, nullptr, kStream);
  }
  void matmul(const WeightMatrix& w, const float* x, int rows, float* y) override {
    cuda::matmul(mat(w), x, rows, y, kStream);
  }
  void matmuls(std::span<const MatmulJob> jobs) override {
    for (const MatmulJob& j : jobs) matmul(*j.w, j.x, j.n_tokens, j.y);
  }
  void add_bias(float* y, const std::vector<float>& bias, int rows) override {
    if (!bias.empty()) cuda::add_bias(y, vec(bias), rows, int(bias.size()), kStream);
  }
  void add(float* x, const float* y, size_t n) override { cuda::add_inplace(x, y, n, kStream); }
  void silu_mul(const float* gate, const float* up, size_t n, float* out) override {
    cuda::silu_mul(gate, up, n, out, kStream);
  }
  // Gemma 3's ops: a model that needs them is refused for this device at load (Model::load).
  void gelu_mul(const float*, const float*, size_t, float*) override {
    fail("GeGLU is not implemented on the CUDA backend yet");
  }
  void scale(float*, size_t, float) override {
    fail("scaled embeddings are not implemented on the CUDA backend yet");
  }
  void sigmoid_mul(float* x, const float* gate, size_t n) override {
    cuda::sigmoid_mul(x, gate, n, kStream);
  }
  void silu_gate(float* x, const float* z, size_t n) override { cuda::silu_gate(x, z, n, kStream); }
  void split_gate(const float* q2, int heads, int head_dim, float* q, float* gate) override {
    cuda::split_gate(q2, T_, heads, head_dim, q, gate, kStream);
  }
  void rope(float* x, int heads, int head_dim, int table) override {
    const size_t base = size_t(table) * size_t(T_) * size_t(half_);
    cuda::rope(x, T_, heads, head_dim, half_, s_.cos.as<float>() + base, s_.sin.as<float>() + base,
               kStream);
  }
  void kv_store(int attn_layer, KvPlane plane, const float* rows) override {
    if (plane == KvPlane::Kraw && !cache_.keeps_kraw()) return;
    const int p = plane == KvPlane::K ? 0 : plane == KvPlane::V ? 1 : 2;
    cuda::kv_store(kv_, places_, attn_layer, p, rows, T_, kStream);
  }
  void attention(int attn_layer, const float* q, int n_heads, int n_kv_heads, int head_dim,
                 const AttentionSpec& spec, float* out) override {
    check(n_kv_heads == cache_.n_kv_heads() && head_dim == cache_.head_dim(),
          "forward: the KV cache's shape does not match the model");
    if (spec.window > 0)
      fail("sliding-window attention is not implemented on the CUDA backend yet");
    if (spec.sinks) fail("attention sinks are not implemented on the CUDA backend yet");
    cuda::attention(kv_, places_, attn_layer, q, T_, n_heads, spec.scale, out, kStream);
  }
  void deltanet(const DeltaNetParams& p, int layer, const float* qkv, const float* b,
                const float* a, float* core) override;
  void moe_route(const float* logits, const MoeRouting& r, float* weights) override {
    if (r.kind != RouterKind::Softmax || r.scale != 1.0f)
      fail("sigmoid MoE routers are not implemented on the CUDA backend yet");
    s_.ids.reserve(size_t(T_) * size_t(r.k) * sizeof(int32_t), "MoE routes");
    cuda::moe_route(logits, T_, r.n_experts, r.k, r.renorm, s_.ids.as<int32_t>(), weights, kStream);
  }
  void moe_experts(const MoeExperts& e, const float* x, int k, const float* weights,
                   float* out) override;
  void add_gated(float* out, const float* y, const float* gate, int width) override {
    cuda::add_gated(out, y, gate, T_, width, kStream);
  }
  void logits(const float* x, const std::vector<float>& norm, float eps, const WeightMatrix& head,
              const LogitRows& rows) override;
  const float* host_view(const float* x, size_t n) override {
    host_.resize(n);
    cuda_check(cudaMemcpy(host_.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost),
               "cudaMemcpy (hidden states)");
    return host_.data();
  }
  void from_host(float* dst, const float* src, size_t n) override {
    cuda_check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy (MTP hidden states)");
  }
  void concat(const float* a, int width_a, const float* b, int width_b, float* out) override {
    const size_t wa = size_t(width_a) * sizeof(float), wb = size_t(width_b) * sizeof(float);
    const size_t rows = size_t(T_);
    cuda_check(cudaMemcpy2DAsync(out, wa + wb, a, wa, wa, rows, cudaMemcpyDeviceToDevice, kStream),
               "cudaMemcpy2D (concat)");
    cuda_check(cudaMemcpy2DAsync(reinterpret_cast<char*>(out) + wa, wa + wb, b, wb, wb, rows,
                                 cudaMemcpyDeviceToDevice, kStream),
               "cudaMemcpy2D (concat)");
  }
  void finish() override;

 private:
  // The legacy default stream: copies order with kernels.
  static constexpr cudaStream_t kStream = nullptr;

  const DevMatrix& mat(const WeightMatrix& w) const;
  const float* vec(const std::vector<float>& v) const;

  const CudaBackend& be_;
  std::unique_lock<std::mutex> lock_;  // one call at a time: the scratch is the backend's
  DeviceScratch& s_;
  std::span<const BatchItem> batch_;
  KvCache& cache_;
  int T_ = 0, half_ = 0;
  std::vector<int32_t> tokens_;
  cuda::KvLayout kv_;
  cuda::TokenPlaces places_;
  cuda::DeltaNetStates states_;
  std::vector<float> host_states_, host_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    cuda_use_device(index_);
    storage_ = cuda_kv_storage(index_);
  }

  std::string name() const override { return "cuda:" + std::to_string(index_); }
  std::shared_ptr<KvStorage> kv_storage() const override { return storage_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  std::string unsupported(const ForwardSpec& forward) const override {
    return cuda_unsupported(forward);
  }
  void check_shapes(int head_dim, int conv_kernel, int v_head_dim) const override {
    if (head_dim > 256) fail("--device cuda: head_dim " + std::to_string(head_dim) + " > 256");
    if (conv_kernel > 8 || v_head_dim > 1024)
      fail("--device cuda: a DeltaNet conv kernel of " + std::to_string(conv_kernel) +
           " or value heads of " + std::to_string(v_head_dim) + " (at most 8 and 1024)");
  }

  // A matrix in device memory, as stored where the kernels read that type, else widened to f32.
  void upload(const WeightMatrix& w) override {
    if (matrices_.count(&w)) return;
    cuda_use_device(index_);
    DevMatrix d;
    d.rows = int(w.rows);
    d.cols = int(w.cols);
    DeviceBuffer& buffer = owned_.emplace_back();
    const bool direct =
        !w.panels && (w.type == WType::F32 || w.type == WType::F16 || w.type == WType::BF16 ||
                      (w.type == WType::Q8_0 && w.cols % 32 == 0));
    if (direct) {
      d.type = w.type == WType::F32    ? DevWType::F32
               : w.type == WType::F16  ? DevWType::F16
               : w.type == WType::BF16 ? DevWType::BF16
                                       : DevWType::Q8_0;
      d.row_bytes = w.row_bytes;
      buffer.reserve(w.bytes(), "weights");
      buffer.upload(w.data, w.bytes());
    } else {
      d.type = DevWType::F32;
      d.row_bytes = size_t(w.cols) * sizeof(float);
      buffer.reserve(d.row_bytes * size_t(w.rows), "weights (widened to f32)");
      // Widened in chunks of rows, so the host never holds a whole f32 copy.
      const int64_t chunk = std::max<int64_t>(1, int64_t((64u << 20) / d.row_bytes));
      std::vector<float> rows;
      for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
        const int64_t n = std::min(chunk, w.rows - r0);
        rows.resize(size_t(n) * size_t(w.cols));
        for (int64_t r = 0; r < n; ++r)
          dequantize_row(w, r0 + r, &rows[size_t(r) * size_t(w.cols)]);
        cuda_check(cudaMemcpy(buffer.as<uint8_t>() + size_t(r0) * d.row_bytes, rows.data(),
                              rows.size() * sizeof(float), cudaMemcpyHostToDevice),
                   "cudaMemcpy (weights)");
      }
    }
    d.data = buffer.data();
    weight_bytes_ += buffer.bytes();
    matrices_[&w] = d;
  }

  void upload(const std::vector<float>& v) override {
    if (v.empty() || vectors_.count(&v)) return;
    cuda_use_device(index_);
    DeviceBuffer b;
    b.reserve(v.size() * sizeof(float), "weights (vectors)");
    b.upload(v.data(), v.size() * sizeof(float));
    weight_bytes_ += b.bytes();
    vectors_[&v] = std::move(b);
  }

  void reserve(const BufferSizes& sizes, int tokens, int logit_rows, int vocab) const override {
    std::lock_guard lock(mutex_);
    cuda_use_device(index_);
    reserve_locked(sizes, tokens, logit_rows, vocab);
  }

  std::unique_ptr<BackendCall> begin(std::span<const BatchItem> batch, KvCache& cache,
                                     const BufferSizes& sizes, std::vector<float> cos,
                                     std::vector<float> sin, int half) const override {
    check(&cache.storage() == storage_.get(),
          "forward: the model runs on " + name() + " but its KV cache lives in " +
              cache.storage().name() + " (make the cache with Model::make_kv_storage())");
    std::unique_lock lock(mutex_);
    cuda_use_device(index_);
    return std::make_unique<CudaCall>(*this, std::move(lock), batch, cache, sizes, cos, sin, half);
  }

  const DevMatrix& matrix(const WeightMatrix& w) const {
    auto it = matrices_.find(&w);
    check(it != matrices_.end(), "forward: a weight matrix was not copied to " + name());
    return it->second;
  }
  const float* vector(const std::vector<float>& v) const {
    if (v.empty()) return nullptr;
    auto it = vectors_.find(&v);
    check(it != vectors_.end(), "forward: a weight vector was not copied to " + name());
    return it->second.as<const float>();
  }

  // The buffers of a call of these sizes (the caller holds mutex_).
  void reserve_locked(const BufferSizes& sizes, int tokens, int logit_rows, int vocab) const {
    static const char* const kWhat = "activations";
    for (size_t i = 0; i < sizes.size(); ++i)
      s_.bufs[i].reserve(std::max<size_t>(sizes[i], 1) * sizeof(float), kWhat);
    const size_t T = size_t(std::max(tokens, 1));
    s_.pos.reserve(T * sizeof(int32_t), "positions");
    s_.table_start.reserve(T * sizeof(int32_t), "block tables");
    if (logit_rows > 0) {
      const size_t R = size_t(logit_rows);
      const size_t dim = sizes[size_t(Buf::X)] / T;
      s_.rows.reserve(R * sizeof(int32_t), "logit rows");
      s_.normed.reserve(R * std::max<size_t>(dim, 1) * sizeof(float), "normed rows");
      s_.logits.reserve(R * size_t(vocab) * sizeof(float), "logits");
    }
  }

  DeviceScratch& scratch() const { return s_; }

 private:
  int index_;
  std::shared_ptr<KvStorage> storage_;
  std::vector<DeviceBuffer> owned_;  // every matrix's memory
  std::unordered_map<const WeightMatrix*, DevMatrix> matrices_;
  std::unordered_map<const std::vector<float>*, DeviceBuffer> vectors_;
  size_t weight_bytes_ = 0;
  mutable std::mutex mutex_;
  mutable DeviceScratch s_;
};

CudaCall::CudaCall(const CudaBackend& be, std::unique_lock<std::mutex> lock,
                   std::span<const BatchItem> batch, KvCache& cache, const BufferSizes& sizes,
                   const std::vector<float>& cos, const std::vector<float>& sin, int half)
    : be_(be), lock_(std::move(lock)), s_(be.scratch()), batch_(batch), cache_(cache), half_(half) {
  // Host side: tokens, positions and where each token's KV goes.
  std::vector<int32_t> pos, table_start, tables;
  for (const BatchItem& it : batch) {
    const int32_t start = int32_t(tables.size());
    const size_t n_blocks =
        size_t((it.start_pos + it.n_tokens + cache.block_size() - 1) / cache.block_size());
    check(it.blocks && it.blocks->size() >= n_blocks, "forward: block table too short");
    tables.insert(tables.end(), it.blocks->begin(), it.blocks->begin() + long(n_blocks));
    for (int i = 0; i < it.n_tokens; ++i) {
      tokens_.push_back(it.tokens[i]);
      pos.push_back(it.start_pos + i);
      table_start.push_back(start);
    }
  }
  T_ = int(tokens_.size());
  std::vector<uint8_t*> slabs(cache.n_slabs());
  for (size_t i = 0; i < slabs.size(); ++i) slabs[i] = cache.slab(i);

  be.reserve_locked(sizes, T_, 0, 0);
  auto put = [](DeviceBuffer& b, const void* data, size_t bytes, const char* what) {
    b.reserve(std::max<size_t>(bytes, 1), what);
    if (bytes > 0) b.upload(data, bytes);
  };
  put(s_.cos, cos.data(), cos.size() * sizeof(float), "RoPE angles");
  put(s_.sin, sin.data(), sin.size() * sizeof(float), "RoPE angles");
  put(s_.pos, pos.data(), pos.size() * sizeof(int32_t), "positions");
  put(s_.table_start, table_start.data(), table_start.size() * sizeof(int32_t), "block tables");
  put(s_.tables, tables.data(), tables.size() * sizeof(int32_t), "block tables");
  put(s_.slabs, slabs.data(), slabs.size() * sizeof(uint8_t*), "slab table");

  kv_.slabs = s_.slabs.as<uint8_t* const>();
  kv_.blocks_per_slab = cache.blocks_per_slab();
  kv_.block_size = cache.block_size();
  kv_.n_kv_heads = cache.n_kv_heads();
  kv_.head_dim = cache.head_dim();
  kv_.planes = cache.keeps_kraw() ? 3 : 2;
  check(!dtype_blocked(cache.dtype()), std::string("--kv-type ") + kv_type_name(cache.dtype()) +
                                           " is not implemented on the CUDA backend yet");
  kv_.elem_bytes = int(dtype_size(cache.dtype()));
  kv_.is_bf16 = cache.dtype() == DType::BF16;
  kv_.head_bytes = cache.head_bytes();
  kv_.head_stride = cache.head_stride();
  places_ = {s_.pos.as<int32_t>(), s_.table_start.as<int32_t>(), s_.tables.as<int32_t>()};

  // Hybrid models: every item's recurrent state goes to the device for the call and comes back
  // after it (sessions keep states, and their checkpoints, in host memory).
  if (!batch.empty() && batch[0].state && !batch[0].state->empty()) {
    const size_t stride = batch[0].state->data.size();
    std::vector<int32_t> first{0};
    for (const BatchItem& it : batch) {
      check(it.state && !it.state->empty() && it.state->data.size() == stride,
            "forward: a hybrid model needs a RecurrentState for every batch item");
      // Each item's state goes up and comes back whole: two items on one state would race.
      for (const BatchItem& other : batch) {
        if (&other == &it) break;
        check(other.state != it.state, "forward: two batch items share one RecurrentState");
      }
      host_states_.insert(host_states_.end(), it.state->data.begin(), it.state->data.end());
      first.push_back(first.back() + it.n_tokens);
    }
    put(s_.states, host_states_.data(), host_states_.size() * sizeof(float), "recurrent states");
    put(s_.first, first.data(), first.size() * sizeof(int32_t), "batch items");
    states_.states = s_.states.as<float>();
    states_.state_stride = stride;
    states_.first = s_.first.as<int32_t>();
    states_.n_items = int(batch.size());
  }
}

const DevMatrix& CudaCall::mat(const WeightMatrix& w) const {
  return be_.matrix(w);
}
const float* CudaCall::vec(const std::vector<float>& v) const {
  return be_.vector(v);
}

void CudaCall::deltanet(const DeltaNetParams& p, int layer, const float* qkv, const float* b,
                        const float* a, float* core) {
  check(states_.states != nullptr,
        "forward: a hybrid model needs a RecurrentState for every batch item");
  const cuda::DeltaNetShape shape{p.n_k_heads,  p.n_v_heads,   p.k_head_dim,
                                  p.v_head_dim, p.conv_kernel, p.tiled_v_heads};
  const RecurrentState& st = *batch_[0].state;
  cuda::DeltaNetStates states = states_;
  states.conv_offset = size_t(st.conv(layer) - st.data.data());
  states.ssm_offset = size_t(st.ssm(layer) - st.data.data());
  float* rows = buf(Buf::DeltaConv);
  float* beta = buf(Buf::DeltaBeta);
  float* g = buf(Buf::DeltaG);
  cuda::deltanet_conv(shape, vec(*p.conv), states, qkv, rows, kStream);
  cuda::deltanet_prepare(shape, rows, T_, b, a, vec(*p.ssm_a), vec(*p.dt_bias),
                         1.0 / std::sqrt(double(shape.dk)), beta, g, kStream);
  cuda::deltanet_recurrence(shape, states, rows, beta, g, core, kStream);
}

// The (token, rank) pairs are grouped by expert on the host (the routes come back first), then
// each expert runs one matmul over its group: one gather before, a rank-ordered sum after.
void CudaCall::moe_experts(const MoeExperts& e, const float* x, int k, const float* weights,
                           float* out) {
  if (e.b_gate || e.b_up || e.b_down || e.act != Activation::Silu)
    fail("MoE experts with biases or a clamped SwiGLU are not implemented on the CUDA backend yet");
  const std::span<const WeightMatrix> gate = e.gate, up = e.up, down = e.down;
  const int n_experts = int(gate.size());
  const int D = int(down.front().rows), I = int(gate.front().rows);
  const size_t n_pairs = size_t(T_) * size_t(k);
  std::vector<int32_t> ids(n_pairs);
  cuda_check(
      cudaMemcpy(ids.data(), s_.ids.data(), n_pairs * sizeof(int32_t), cudaMemcpyDeviceToHost),
      "cudaMemcpy (MoE routes)");
  std::vector<int32_t> first(size_t(n_experts) + 1, 0), pairs(n_pairs), row_of(n_pairs);
  for (int32_t e : ids) {
    check(e >= 0 && e < n_experts, "forward: a MoE route names no expert");
    ++first[size_t(e) + 1];
  }
  for (int e = 0; e < n_experts; ++e) first[size_t(e) + 1] += first[size_t(e)];
  {
    std::vector<int32_t> at(first.begin(), first.end() - 1);
    for (size_t i = 0; i < n_pairs; ++i) {
      row_of[i] = at[size_t(ids[i])]++;
      pairs[size_t(row_of[i])] = int32_t(i);
    }
  }
  s_.pairs.reserve(2 * n_pairs * sizeof(int32_t), "MoE pairs");
  s_.pairs.upload(pairs.data(), n_pairs * sizeof(int32_t));
  cuda_check(cudaMemcpy(s_.pairs.as<int32_t>() + n_pairs, row_of.data(), n_pairs * sizeof(int32_t),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy (MoE rows)");
  float* xs = buf(Buf::MoeRows);  // the inputs by group, then (spent) the outputs
  float* g = buf(Buf::MoeGate);
  float* u = buf(Buf::MoeUp);
  float* ys = xs;
  cuda::gather_rows(x, s_.pairs.as<int32_t>(), k, int(n_pairs), D, xs, kStream);
  for (int e = 0; e < n_experts; ++e) {
    const size_t r0 = size_t(first[size_t(e)]);
    const int n = first[size_t(e) + 1] - first[size_t(e)];
    if (n == 0) continue;
    cuda::matmul(mat(gate[size_t(e)]), xs + r0 * size_t(D), n, g + r0 * size_t(I), kStream);
    cuda::matmul(mat(up[size_t(e)]), xs + r0 * size_t(D), n, u + r0 * size_t(I), kStream);
    cuda::silu_mul(g + r0 * size_t(I), u + r0 * size_t(I), size_t(n) * size_t(I),
                   g + r0 * size_t(I), kStream);
    cuda::matmul(mat(down[size_t(e)]), g + r0 * size_t(I), n, ys + r0 * size_t(D), kStream);
  }
  cuda::moe_combine(ys, s_.pairs.as<int32_t>() + n_pairs, weights, T_, k, D, out, kStream);
}

void CudaCall::logits(const float* x, const std::vector<float>& norm, float eps,
                      const WeightMatrix& head, const LogitRows& rows) {
  if (rows.rows.empty()) return;
  const size_t R = rows.rows.size(), vocab = size_t(head.rows), D = size_t(head.cols);
  s_.rows.reserve(R * sizeof(int32_t), "logit rows");
  s_.normed.reserve(R * D * sizeof(float), "normed rows");
  s_.logits.reserve(R * vocab * sizeof(float), "logits");
  s_.rows.upload(rows.rows.data(), R * sizeof(int32_t));
  cuda::rmsnorm(x, vec(norm), int(R), int(D), eps, s_.normed.as<float>(), s_.rows.as<int32_t>(),
                kStream);
  cuda::matmul(mat(head), s_.normed.as<float>(), int(R), s_.logits.as<float>(), kStream);
  std::vector<float> out(R * vocab);
  s_.logits.download(out.data(), out.size() * sizeof(float));
  for (size_t i = 0; i < R; ++i) std::memcpy(rows.outs[i], &out[i * vocab], sizeof(float) * vocab);
}

// The items' states come back last, after everything that can throw: a failed call leaves every
// state as it was (the session has not committed the append either).
void CudaCall::finish() {
  cuda_check(cudaDeviceSynchronize(), "forward");
  if (host_states_.empty()) return;
  s_.states.download(host_states_.data(), host_states_.size() * sizeof(float));
  size_t at = 0;
  for (const BatchItem& it : batch_) {
    std::copy_n(host_states_.begin() + long(at), it.state->data.size(), it.state->data.begin());
    at += it.state->data.size();
  }
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index) {
  return std::make_unique<CudaBackend>(index);
}

}  // namespace fak
