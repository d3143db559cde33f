// The forward pass on a CUDA GPU for every family (llama, qwen2, qwen3, the Qwen3.5 hybrids): the
// same steps as models/forward.cpp, each a kernel of cuda/kernels.h (Gated DeltaNet layers:
// cuda/deltanet_kernels.h, their states carried to the device and back each call), over a KvCache
// whose slabs are in device
// memory (cuda_kv_storage). Weights are copied to the device once at load: f32/f16/bf16 and q8_0
// as stored (the kernels read them directly), other quantised types widened to f32 (no fused
// kernel for them yet). Embedding lookups stay on the host (one row per token), so the device
// holds no embedding table unless the output head is tied to it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_device.h"
#include "cuda/deltanet_kernels.h"
#include "cuda/kernels.h"
#include "memory/kv_cache.h"
#include "memory/recurrent_state.h"
#include "models/device_forward.h"

namespace fak {

namespace {

using cuda::DevMatrix;
using cuda::DevWType;

struct DeviceLayer {
  bool linear = false;  // a Gated DeltaNet layer (else full attention)
  DevMatrix wq, wk, wv, wo, gate, up, down;
  DeviceBuffer attn_norm, mlp_norm, bq, bk, bv, bo, b_gate, b_up, b_down, q_norm, k_norm;
  DevMatrix in_qkv, in_z, in_b, in_a, out_proj;     // DeltaNet
  DeviceBuffer conv1d, dt_bias, ssm_a, delta_norm;  // DeltaNet
};

// A float vector on the device (empty stays empty: a null pointer means "none").
DeviceBuffer upload_floats(const std::vector<float>& v, const char* what) {
  DeviceBuffer b;
  if (v.empty()) return b;
  b.reserve(v.size() * sizeof(float), what);
  b.upload(v.data(), v.size() * sizeof(float));
  return b;
}

const float* ptr(const DeviceBuffer& b) {
  return b.as<const float>();
}

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const Model& model, int index) : model_(model), index_(index) {
    const ModelConfig& c = model.config();
    if (c.is_hybrid()) {
      delta_ =
          cuda::DeltaNetShape{c.linear_num_key_heads, c.linear_num_value_heads,
                              c.linear_key_head_dim, c.linear_value_head_dim, c.linear_conv_kernel};
      check(delta_.nk > 0 && delta_.nv % delta_.nk == 0, "--device cuda: DeltaNet heads");
      state_floats_ = RecurrentState(c.recurrent_shape()).data.size();
      if (delta_.kernel < 1 || delta_.kernel > 8 || delta_.dv > 1024)
        fail("--device cuda: a DeltaNet conv kernel of " + std::to_string(delta_.kernel) +
             " or value heads of " + std::to_string(delta_.dv) + " (at most 8 and 1024)");
    }
    if (c.head_dim > 256) fail("--device cuda: head_dim " + std::to_string(c.head_dim) + " > 256");
    check(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, "--device cuda: heads not grouped");
    cuda_use_device(index_);
    storage_ = cuda_kv_storage(index_);
    const ModelWeights& w = model.weights();
    layers_.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& L = w.layers[size_t(l)];
      DeviceLayer& D = layers_[size_t(l)];
      D.linear = L.kind == LayerKind::LinearAttention;
      if (D.linear) {
        D.in_qkv = upload(L.delta.in_proj_qkv);
        D.in_z = upload(L.delta.in_proj_z);
        D.in_b = upload(L.delta.in_proj_b);
        D.in_a = upload(L.delta.in_proj_a);
        D.out_proj = upload(L.delta.out_proj);
        D.conv1d = upload_floats(L.delta.conv1d, "DeltaNet conv");
        D.dt_bias = upload_floats(L.delta.dt_bias, "DeltaNet dt_bias");
        D.ssm_a = upload_floats(L.delta.ssm_a, "DeltaNet decay");
        D.delta_norm = upload_floats(L.delta.norm, "DeltaNet norm");
      } else {
        D.wq = upload(L.attn.wq);
        D.wk = upload(L.attn.wk);
        D.wv = upload(L.attn.wv);
        D.wo = upload(L.attn.wo);
      }
      D.gate = upload(L.mlp.gate);
      D.up = upload(L.mlp.up);
      D.down = upload(L.mlp.down);
      D.attn_norm = upload_floats(L.attn_norm, "attention norm");
      D.mlp_norm = upload_floats(L.mlp_norm, "MLP norm");
      D.bq = upload_floats(L.attn.bq, "q bias");
      D.bk = upload_floats(L.attn.bk, "k bias");
      D.bv = upload_floats(L.attn.bv, "v bias");
      D.bo = upload_floats(L.attn.bo, "o bias");
      D.b_gate = upload_floats(L.mlp.b_gate, "gate bias");
      D.b_up = upload_floats(L.mlp.b_up, "up bias");
      D.b_down = upload_floats(L.mlp.b_down, "down bias");
      D.q_norm = upload_floats(L.attn.q_norm, "q norm");
      D.k_norm = upload_floats(L.attn.k_norm, "k norm");
    }
    lm_head_ = upload(w.lm_head);
    final_norm_ = upload_floats(w.final_norm, "final norm");
  }

  void reserve_scratch(int tokens, int logit_rows) const override {
    std::lock_guard lock(mutex_);
    cuda_use_device(index_);
    reserve_scratch_locked(tokens, logit_rows);
  }

  std::string device_name() const override { return "cuda:" + std::to_string(index_); }
  std::shared_ptr<KvStorage> kv_storage() const override { return storage_; }
  size_t weight_bytes() const override { return weight_bytes_; }

  void forward(std::span<const BatchItem> batch, KvCache& cache,
               const HiddenHook* hook) const override {
    check(&cache.storage() == storage_.get(),
          "forward: the model runs on " + device_name() + " but its KV cache lives in " +
              cache.storage().name() + " (make the cache with Model::make_kv_storage())");
    const ModelConfig& c = model_.config();
    check(cache.n_layers() == model_.n_attention_layers() && cache.n_kv_heads() == c.n_kv_heads &&
              cache.head_dim() == c.head_dim,
          "forward: the KV cache's shape does not match the model");
    if (batch.empty()) return;
    std::lock_guard lock(mutex_);
    cuda_use_device(index_);
    const Rope& rope = model_.rope();
    const cudaStream_t stream = nullptr;  // the legacy default stream: copies order with kernels
    int T = 0;
    for (const BatchItem& it : batch) T += it.n_tokens;
    const size_t D = size_t(c.dim);
    const int hd = c.head_dim;
    const int half = rope.rotary_dim() / 2;

    // Host side: embeddings, RoPE angles, where each token's KV goes.
    std::vector<float> x(size_t(T) * D), cos(size_t(T) * size_t(half)), sin(cos.size());
    std::vector<int32_t> pos(static_cast<size_t>(T)), table_start(static_cast<size_t>(T)), tables;
    {
      int t = 0;
      for (const BatchItem& it : batch) {
        const int32_t start = int32_t(tables.size());
        const size_t n_blocks =
            size_t((it.start_pos + it.n_tokens + cache.block_size() - 1) / cache.block_size());
        check(it.blocks && it.blocks->size() >= n_blocks, "forward: block table too short");
        tables.insert(tables.end(), it.blocks->begin(), it.blocks->begin() + long(n_blocks));
        for (int i = 0; i < it.n_tokens; ++i, ++t) {
          dequantize_row(model_.weights().embed, it.tokens[i], &x[size_t(t) * D]);
          rope.angles(it.start_pos + i, &cos[size_t(t) * size_t(half)],
                      &sin[size_t(t) * size_t(half)]);
          pos[size_t(t)] = it.start_pos + i;
          table_start[size_t(t)] = start;
        }
      }
    }
    std::vector<uint8_t*> slabs(cache.n_slabs());
    for (size_t i = 0; i < slabs.size(); ++i) slabs[i] = cache.slab(i);

    reserve_scratch_locked(T, 0);
    s_.pos.reserve(pos.size() * sizeof(int32_t), "positions");
    s_.table_start.reserve(table_start.size() * sizeof(int32_t), "block tables");
    s_.tables.reserve(std::max<size_t>(tables.size(), 1) * sizeof(int32_t), "block tables");
    s_.slabs.reserve(std::max<size_t>(slabs.size(), 1) * sizeof(uint8_t*), "slab table");
    s_.x.upload(x.data(), x.size() * sizeof(float));
    s_.cos.upload(cos.data(), cos.size() * sizeof(float));
    s_.sin.upload(sin.data(), sin.size() * sizeof(float));
    s_.pos.upload(pos.data(), pos.size() * sizeof(int32_t));
    s_.table_start.upload(table_start.data(), table_start.size() * sizeof(int32_t));
    s_.tables.upload(tables.data(), tables.size() * sizeof(int32_t));
    s_.slabs.upload(slabs.data(), slabs.size() * sizeof(uint8_t*));

    cuda::KvLayout kv;
    kv.slabs = s_.slabs.as<uint8_t* const>();
    kv.blocks_per_slab = cache.blocks_per_slab();
    kv.block_size = cache.block_size();
    kv.n_kv_heads = c.n_kv_heads;
    kv.head_dim = hd;
    kv.planes = cache.keeps_kraw() ? 3 : 2;
    kv.elem_bytes = int(dtype_size(cache.dtype()));
    kv.is_bf16 = cache.dtype() == DType::BF16;
    kv.head_bytes = cache.head_bytes();
    kv.head_stride = cache.head_stride();
    cuda::TokenPlaces places{s_.pos.as<int32_t>(), s_.table_start.as<int32_t>(),
                             s_.tables.as<int32_t>()};

    // Hybrid models: every item's recurrent state goes to the device for the call and comes back
    // after it (sessions keep states, and their checkpoints, in host memory).
    cuda::DeltaNetStates states;
    std::vector<float> host_states;
    if (c.is_hybrid()) {
      const size_t stride = batch.empty() || !batch[0].state ? 0 : batch[0].state->data.size();
      std::vector<int32_t> first{0};
      for (const BatchItem& it : batch) {
        check(it.state && !it.state->empty() && it.state->data.size() == stride,
              "forward: a hybrid model needs a RecurrentState for every batch item");
        // Each item's state goes up and comes back whole: two items on one state would race.
        for (const BatchItem& other : batch) {
          if (&other == &it) break;
          check(other.state != it.state, "forward: two batch items share one RecurrentState");
        }
        host_states.insert(host_states.end(), it.state->data.begin(), it.state->data.end());
        first.push_back(first.back() + it.n_tokens);
      }
      s_.states.reserve(host_states.size() * sizeof(float), "recurrent states");
      s_.states.upload(host_states.data(), host_states.size() * sizeof(float));
      s_.first.reserve(first.size() * sizeof(int32_t), "batch items");
      s_.first.upload(first.data(), first.size() * sizeof(int32_t));
      states.states = s_.states.as<float>();
      states.state_stride = stride;
      states.first = s_.first.as<int32_t>();
      states.n_items = int(batch.size());
    }

    float* dx = s_.x.as<float>();
    float* dxn = s_.xn.as<float>();
    float* dproj = s_.proj.as<float>();
    float* dgate = s_.gate.as<float>();
    float* dup = s_.up.as<float>();
    std::vector<float> host_rows;
    auto call_hook = [&](int index, const float* device_rows) {
      host_rows.resize(size_t(T) * D);
      cuda_check(cudaMemcpy(host_rows.data(), device_rows, host_rows.size() * sizeof(float),
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy (hidden states)");
      (*hook)(index, host_rows.data(), T);
    };
    if (hook) call_hook(0, dx);

    const float eps = c.rms_eps;
    for (int l = 0; l < c.n_layers; ++l) {
      const DeviceLayer& L = layers_[size_t(l)];
      cuda::rmsnorm(dx, ptr(L.attn_norm), T, c.dim, eps, dxn, nullptr, stream);
      if (L.linear) {
        const RecurrentState& shape = *batch[0].state;
        states.conv_offset = size_t(shape.conv(l) - shape.data.data());
        states.ssm_offset = size_t(shape.ssm(l) - shape.data.data());
        deltanet_layer(L, states, dxn, T, dproj);
      } else {
        attention_layer(L, model_.attention_index(l), kv, places, T, dproj);
      }
      cuda::add_inplace(dx, dproj, size_t(T) * D, stream);

      cuda::rmsnorm(dx, ptr(L.mlp_norm), T, c.dim, eps, dxn, nullptr, stream);
      cuda::matmul(L.gate, dxn, T, dgate, stream);
      cuda::matmul(L.up, dxn, T, dup, stream);
      if (L.b_gate.data()) cuda::add_bias(dgate, ptr(L.b_gate), T, c.hidden_dim, stream);
      if (L.b_up.data()) cuda::add_bias(dup, ptr(L.b_up), T, c.hidden_dim, stream);
      cuda::silu_mul(dgate, dup, size_t(T) * size_t(c.hidden_dim), dgate, stream);
      cuda::matmul(L.down, dgate, T, dproj, stream);
      if (L.b_down.data()) cuda::add_bias(dproj, ptr(L.b_down), T, c.dim, stream);
      cuda::add_inplace(dx, dproj, size_t(T) * D, stream);
      if (hook) call_hook(l + 1, dx);
    }

    // The items' states come back last, after everything that can throw: a failed call leaves
    // every state as it was (the session has not committed the append either).
    if (c.is_hybrid()) s_.states.download(host_states.data(), host_states.size() * sizeof(float));
    auto commit_states = [&] {
      size_t at = 0;
      for (const BatchItem& it : batch) {
        if (!c.is_hybrid()) break;
        std::copy_n(host_states.begin() + long(at), it.state->data.size(), it.state->data.begin());
        at += it.state->data.size();
      }
    };

    // Final norm and logits for the rows someone asked for (as the CPU forward picks them).
    const auto [rows, outs] = logit_rows(batch, c.vocab);
    if (hook) {
      cuda::rmsnorm(dx, ptr(final_norm_), T, c.dim, eps, dxn, nullptr, stream);
      call_hook(c.n_layers + 1, dxn);
    }
    if (rows.empty()) {
      cuda_check(cudaDeviceSynchronize(), "forward");
      commit_states();
      return;
    }
    const size_t R = rows.size();
    reserve_scratch_locked(T, int(R));
    s_.rows.upload(rows.data(), R * sizeof(int32_t));
    cuda::rmsnorm(dx, ptr(final_norm_), int(R), c.dim, eps, s_.normed.as<float>(),
                  s_.rows.as<int32_t>(), stream);
    cuda::matmul(lm_head_, s_.normed.as<float>(), int(R), s_.logits.as<float>(), stream);
    std::vector<float> logits(R * size_t(c.vocab));
    s_.logits.download(logits.data(), logits.size() * sizeof(float));
    for (size_t i = 0; i < R; ++i)
      std::memcpy(outs[i], &logits[i * size_t(c.vocab)], sizeof(float) * size_t(c.vocab));
    commit_states();
  }

 private:
  // A full-attention layer: normed rows xn (scratch x n) -> proj [T][dim], KV written at places.
  void attention_layer(const DeviceLayer& L, int al, const cuda::KvLayout& kv,
                       const cuda::TokenPlaces& places, int T, float* dproj) const {
    const ModelConfig& c = model_.config();
    const cudaStream_t stream = nullptr;
    const int hd = c.head_dim, kv_dim = c.kv_dim(), q_dim = c.q_dim();
    const int half = model_.rope().rotary_dim() / 2;
    const float eps = c.rms_eps;
    const float* dxn = s_.xn.as<float>();
    float* dq = s_.q.as<float>();
    float* dk = s_.k.as<float>();
    float* dv = s_.v.as<float>();
    float* dattn = s_.attn.as<float>();
    if (c.attn_output_gate) {
      // q_proj gives per head [query | gate]: the query rows go to dq, the gate to attn_gate.
      cuda::matmul(L.wq, dxn, T, s_.q2.as<float>(), stream);
      if (L.bq.data()) cuda::add_bias(s_.q2.as<float>(), ptr(L.bq), T, 2 * q_dim, stream);
      cuda::split_gate(s_.q2.as<float>(), T, c.n_heads, hd, dq, s_.attn_gate.as<float>(), stream);
    } else {
      cuda::matmul(L.wq, dxn, T, dq, stream);
      if (L.bq.data()) cuda::add_bias(dq, ptr(L.bq), T, q_dim, stream);
    }
    cuda::matmul(L.wk, dxn, T, dk, stream);
    cuda::matmul(L.wv, dxn, T, dv, stream);
    if (L.bk.data()) cuda::add_bias(dk, ptr(L.bk), T, kv_dim, stream);
    if (L.bv.data()) cuda::add_bias(dv, ptr(L.bv), T, kv_dim, stream);
    if (c.qk_norm) {
      cuda::rmsnorm(dq, ptr(L.q_norm), T * c.n_heads, hd, eps, dq, nullptr, stream);
      cuda::rmsnorm(dk, ptr(L.k_norm), T * c.n_kv_heads, hd, eps, dk, nullptr, stream);
    }
    if (kv.planes == 3) cuda::kv_store(kv, places, al, 2, dk, T, stream);
    cuda::rope(dq, T, c.n_heads, hd, half, s_.cos.as<float>(), s_.sin.as<float>(), stream);
    cuda::rope(dk, T, c.n_kv_heads, hd, half, s_.cos.as<float>(), s_.sin.as<float>(), stream);
    cuda::kv_store(kv, places, al, 0, dk, T, stream);
    cuda::kv_store(kv, places, al, 1, dv, T, stream);
    const float scale = float(1.0 / std::sqrt(double(hd)));
    cuda::attention(kv, places, al, dq, T, c.n_heads, scale, dattn, stream);
    if (c.attn_output_gate)
      cuda::sigmoid_mul(dattn, s_.attn_gate.as<float>(), size_t(T) * size_t(q_dim), stream);
    cuda::matmul(L.wo, dattn, T, dproj, stream);
    if (L.bo.data()) cuda::add_bias(dproj, ptr(L.bo), T, c.dim, stream);
  }

  // A Gated DeltaNet layer (models/deltanet.cpp; cuda/deltanet_kernels.h): xn -> proj [T][dim].
  void deltanet_layer(const DeviceLayer& L, const cuda::DeltaNetStates& states, const float* dxn,
                      int T, float* dproj) const {
    const ModelConfig& c = model_.config();
    const cudaStream_t stream = nullptr;
    const cuda::DeltaNetShape& s = delta_;
    float* qkv = s_.delta_qkv.as<float>();
    float* rows = s_.delta_rows.as<float>();
    float* z = s_.delta_z.as<float>();
    float* core = s_.delta_core.as<float>();
    cuda::matmul(L.in_qkv, dxn, T, qkv, stream);
    cuda::matmul(L.in_z, dxn, T, z, stream);
    cuda::matmul(L.in_b, dxn, T, s_.delta_b.as<float>(), stream);
    cuda::matmul(L.in_a, dxn, T, s_.delta_a.as<float>(), stream);
    cuda::deltanet_conv(s, ptr(L.conv1d), states, qkv, rows, stream);
    cuda::deltanet_prepare(s, rows, T, s_.delta_b.as<float>(), s_.delta_a.as<float>(), ptr(L.ssm_a),
                           ptr(L.dt_bias), 1.0 / std::sqrt(double(s.dk)), s_.delta_beta.as<float>(),
                           s_.delta_g.as<float>(), stream);
    cuda::deltanet_recurrence(s, states, rows, s_.delta_beta.as<float>(), s_.delta_g.as<float>(),
                              core, stream);
    // Gated RMSNorm per value head (the weight as stored), then out_proj.
    cuda::rmsnorm(core, ptr(L.delta_norm), T * s.nv, s.dv, c.rms_eps, core, nullptr, stream);
    cuda::silu_gate(core, z, size_t(T) * size_t(s.value_dim()), stream);
    cuda::matmul(L.out_proj, core, T, dproj, stream);
  }

  // The activation buffers for a forward of `tokens` tokens and `logit_rows` rows of logits (they
  // only grow; the caller holds mutex_).
  void reserve_scratch_locked(int tokens, int logit_rows) const {
    const ModelConfig& c = model_.config();
    const size_t T = size_t(std::max(tokens, 1)), R = size_t(std::max(logit_rows, 1));
    const size_t D = size_t(c.dim), q_rows = size_t(std::max(c.q_dim(), c.dim));
    const size_t half = size_t(std::max(model_.rope().rotary_dim() / 2, 1));
    auto grow = [](DeviceBuffer& b, size_t floats, const char* what) {
      b.reserve(floats * sizeof(float), what);
    };
    grow(s_.x, T * D, "activations");
    grow(s_.xn, T * D, "activations");
    grow(s_.q, T * q_rows, "queries");
    grow(s_.k, T * size_t(c.kv_dim()), "keys");
    grow(s_.v, T * size_t(c.kv_dim()), "values");
    grow(s_.attn, T * q_rows, "attention output");
    grow(s_.proj, T * D, "projections");
    grow(s_.gate, T * size_t(c.hidden_dim), "MLP gate");
    grow(s_.up, T * size_t(c.hidden_dim), "MLP up");
    grow(s_.cos, T * half, "RoPE angles");
    grow(s_.sin, T * half, "RoPE angles");
    s_.pos.reserve(T * sizeof(int32_t), "positions");
    s_.table_start.reserve(T * sizeof(int32_t), "block tables");
    if (c.attn_output_gate) {
      grow(s_.q2, T * 2 * size_t(c.q_dim()), "gated queries");
      grow(s_.attn_gate, T * size_t(c.q_dim()), "attention gates");
    }
    if (c.is_hybrid()) {
      grow(s_.delta_qkv, T * size_t(delta_.conv_dim()), "DeltaNet projections");
      grow(s_.delta_rows, T * size_t(delta_.conv_dim()), "DeltaNet q, k, v");
      grow(s_.delta_z, T * size_t(delta_.value_dim()), "DeltaNet gates");
      grow(s_.delta_core, T * size_t(delta_.value_dim()), "DeltaNet output");
      for (DeviceBuffer* b : {&s_.delta_b, &s_.delta_a, &s_.delta_beta, &s_.delta_g})
        grow(*b, T * size_t(delta_.nv), "DeltaNet gates");
      // The states of as many sequences as a step has rows of logits (one each when decoding).
      const size_t items = std::max<size_t>(R, 1);
      grow(s_.states, items * (state_floats_ > 0 ? state_floats_ : 1), "recurrent states");
      s_.first.reserve((items + 1) * sizeof(int32_t), "batch items");
    }
    if (logit_rows > 0) {
      s_.rows.reserve(R * sizeof(int32_t), "logit rows");
      grow(s_.normed, R * D, "normed rows");
      grow(s_.logits, R * size_t(c.vocab), "logits");
    }
  }

  // A matrix in device memory, as stored where the kernels read that type, else widened to f32.
  DevMatrix upload(const WeightMatrix& w) {
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
    return d;
  }

  struct Scratch {
    DeviceBuffer x, xn, q, k, v, attn, proj, gate, up, cos, sin, pos, table_start, tables, slabs,
        rows, normed, logits;
    DeviceBuffer q2, attn_gate;  // gated attention
    DeviceBuffer delta_qkv, delta_rows, delta_z, delta_core, delta_b, delta_a, delta_beta, delta_g,
        states, first;  // DeltaNet
  };

  const Model& model_;
  int index_;
  std::shared_ptr<KvStorage> storage_;
  std::vector<DeviceLayer> layers_;
  cuda::DeltaNetShape delta_;  // hybrid models' linear layers
  size_t state_floats_ = 0;    // one sequence's recurrent state
  DevMatrix lm_head_;
  DeviceBuffer final_norm_;
  std::vector<DeviceBuffer> owned_;  // every matrix's memory
  size_t weight_bytes_ = 0;
  // One forward at a time per model: the scratch buffers are the model's.
  mutable std::mutex mutex_;
  mutable Scratch s_;
};

}  // namespace

std::unique_ptr<DeviceForward> make_cuda_forward(const Model& model, int index) {
  return std::make_unique<CudaForward>(model, index);
}

}  // namespace fak
