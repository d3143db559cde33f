// Session files: tokens, KV rows, next-token logits and (hybrid models) the DeltaNet state, behind
// a header that names the model, the format version and the KV layout, closed by a checksum.
// Written atomically (temp, fsync, rename); a load refuses a file from another model, another
// version, or one that is truncated or corrupted, naming which.
//
// Layout (little-endian):
//   magic "FAKSESS\0" | u32 version | u32 header_len | header JSON | payload | u64 fnv1a(all
//   before) payload: i32 tokens[n] | f32 logits[vocab] | per attention layer: K, V, (Kraw) rows
//   [n][kv_dim]
//            | f32 recurrent state (RecurrentState layout; empty on dense models)
// Version 3 dropped version 2's append boundaries: a hybrid state no longer depends on how its
// tokens were grouped into calls (ops/deltanet.cpp), so edits need no record of them. A version 2
// file is refused: its state came from the chunked prefill, whose bits a replay today would not
// reproduce.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/hash.h"
#include "io/atomic_file.h"
#include "io/checked_file.h"
#include "io/mapped_file.h"
#include "runtime/session.h"

namespace fak {

namespace {

constexpr char kMagic[8] = {'F', 'A', 'K', 'S', 'E', 'S', 'S', '\0'};
constexpr uint32_t kVersion = 3;

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// The header's fields, each checked for its JSON type: a crafted file (its checksum made to
// match) must get the same one-line refusal as a damaged one, not a JSON library error.
struct SessionHeader {
  nlohmann::json meta;  // the caller's, null if none
  std::string model, model_type, kv_dtype;
  int64_t n_tokens = -1, vocab = 0, attention_layers = -1, kv_dim = 0, recurrent_bytes = -1;
  bool kraw = false;
  // Blocks (indices in the session) whose sliding-window layers' rows were dropped: their rows
  // there are written as zeros and dropped again at load (memory/kv_cache.h).
  std::vector<int64_t> window_rows_dropped;
};

SessionHeader parse_header(std::string_view text, const std::string& label) {
  const auto bad = [&]() { fail(label + " has a corrupted header"); };
  const nlohmann::json h = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object()) bad();
  const auto str = [&](const char* key) {
    const auto it = h.find(key);
    if (it == h.end() || !it->is_string()) bad();
    return it->get<std::string>();
  };
  const auto num = [&](const char* key) {
    const auto it = h.find(key);
    if (it == h.end() || !it->is_number_integer()) bad();
    // Unsigned values past int64's range read as -1: every caller refuses a negative count.
    return it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
               ? int64_t(-1)
               : it->get<int64_t>();
  };
  SessionHeader r;
  r.model = str("model");
  r.model_type = str("model_type");
  r.kv_dtype = str("kv_dtype");
  r.n_tokens = num("n_tokens");
  r.vocab = num("vocab");
  r.attention_layers = num("attention_layers");
  r.kv_dim = num("kv_dim");
  r.recurrent_bytes = num("recurrent_bytes");
  const auto kraw = h.find("kraw");
  if (kraw == h.end() || !kraw->is_boolean()) bad();
  r.kraw = kraw->get<bool>();
  if (const auto meta = h.find("meta"); meta != h.end()) r.meta = *meta;
  if (const auto dropped = h.find("window_rows_dropped"); dropped != h.end()) {
    if (!dropped->is_array()) bad();
    for (const auto& b : *dropped) {
      if (!b.is_number_integer()) bad();
      r.window_rows_dropped.push_back(b.get<int64_t>());
    }
  }
  return r;
}

}  // namespace

void Session::save(const std::filesystem::path& path, const nlohmann::json& meta) const {
  write_file_atomic(path, to_bytes(meta));
}

std::string Session::to_bytes(const nlohmann::json& meta) const {
  check(logits_valid_ || tokens().empty(), "save: session has no logits");
  const ModelConfig& c = model_->config();
  const int n = size();
  nlohmann::json h{{"model", model_->identity()},
                   {"model_type", c.model_type},
                   {"n_tokens", n},
                   {"vocab", c.vocab},
                   {"attention_layers", model_->n_attention_layers()},
                   {"kv_dim", c.kv_dim()},
                   {"kv_dtype", kv_type_name(cache_->dtype())},
                   {"kraw", cache_->keeps_kraw()},
                   {"recurrent_bytes", state_.bytes()}};
  if (!meta.is_null()) h["meta"] = meta;
  const int bs = cache_->block_size();
  std::vector<bool> dropped(blocks().size(), false);
  if (cache_->has_windows()) {
    nlohmann::json list = nlohmann::json::array();
    for (size_t b = 0; b * size_t(bs) < size_t(n); ++b)
      if (!cache_->has_window_rows(blocks()[b])) {
        dropped[b] = true;
        list.push_back(b);
      }
    if (!list.empty()) h["window_rows_dropped"] = list;
  }
  const std::string header = h.dump();
  std::string out;
  const size_t kv_rows_bytes = size_t(n) * cache_->row_bytes();
  out.reserve(64 + header.size() + size_t(n) * 4 + logits_.size() * 4 +
              size_t(model_->n_attention_layers()) * 3 * kv_rows_bytes);
  out.append(kMagic, 8);
  put(out, kVersion);
  put(out, uint32_t(header.size()));
  out += header;
  out.append(reinterpret_cast<const char*>(tokens().data()), tokens().size() * 4);
  if (n > 0) out.append(reinterpret_cast<const char*>(logits_.data()), size_t(c.vocab) * 4);
  const size_t row = cache_->row_bytes();
  for (int l = 0; l < model_->n_attention_layers(); ++l) {
    for (int which = 0; which < (cache_->keeps_kraw() ? 3 : 2); ++which) {
      for (int p = 0; p < n; p += bs) {
        const int rows = std::min(bs, n - p);
        const size_t at = out.size();
        out.resize(at + row * size_t(rows));  // zeros where a windowed layer's rows were dropped
        if (!cache_->windowed(l) || !dropped[size_t(p / bs)])
          cache_->read_rows(blocks()[size_t(p / bs)], l, KvPlane(which), rows,
                            reinterpret_cast<uint8_t*>(out.data() + at));
      }
    }
  }
  state_.write(out);
  Fnv1a sum;
  sum.update(out);
  put(out, sum.digest());
  return out;
}

Session Session::load(const std::filesystem::path& path, std::shared_ptr<const Model> model,
                      std::shared_ptr<KvCache> cache, nlohmann::json* meta) {
  MappedFile f = MappedFile::open(path);
  return from_bytes(f.bytes(), "session file " + path.string(), std::move(model), std::move(cache),
                    meta);
}

Session Session::from_bytes(std::string_view bytes, const std::string& label,
                            std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                            nlohmann::json* meta) {
  const CheckedFileView v = open_checked_file(bytes, kMagic, kVersion, label, "session");
  const SessionHeader h = parse_header(v.header, label);
  const ModelConfig& c = model->config();
  if (h.model != model->identity())
    fail(label + " was saved with a different model (" + h.model_type + " " + h.model + "), not " +
         model->path().string());
  if (h.n_tokens < 0 || h.n_tokens > c.context_limit() || h.kv_dim != c.kv_dim() ||
      h.attention_layers != model->n_attention_layers() || h.vocab != c.vocab)
    fail(label + " has a KV layout that does not match the model");
  const int n = int(h.n_tokens);
  const bool kraw = h.kraw;
  if (h.kv_dtype != kv_type_name(cache->dtype()))
    fail(label + " holds " + h.kv_dtype + " KV rows but this cache stores " +
         kv_type_name(cache->dtype()) + " (use the same --kv-type)");
  const size_t state_bytes = RecurrentState(c.recurrent_shape()).bytes();
  if (h.recurrent_bytes != int64_t(state_bytes))
    fail(label + " has a recurrent state layout that does not match the model");
  const size_t row = cache->row_bytes();
  const size_t expect = size_t(n) * 4 + (n > 0 ? size_t(c.vocab) * 4 : 0) +
                        size_t(model->n_attention_layers()) * (kraw ? 3 : 2) * size_t(n) * row +
                        state_bytes;
  if (v.body.size() != expect) fail(label + " is truncated or has trailing bytes");

  Session s(std::move(model), std::move(cache));
  const char* p = v.body.data();
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  if (n > 0) std::memcpy(tokens.data(), p, size_t(n) * 4);
  p += size_t(n) * 4;
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab) fail(label + " holds a token id outside the vocabulary");
  if (n > 0) {
    s.logits_.resize(size_t(c.vocab));
    std::memcpy(s.logits_.data(), p, size_t(c.vocab) * 4);
    p += size_t(c.vocab) * 4;
    s.logits_valid_ = true;
  }
  s.cells_.reserve(0, n);
  s.cells_.push(tokens);
  const int bs = s.cache_->block_size();
  for (int l = 0; l < s.model_->n_attention_layers(); ++l) {
    for (int which = 0; which < (kraw ? 3 : 2); ++which) {
      for (int q = 0; q < n; q += bs) {
        const int32_t blk = s.blocks()[size_t(q / bs)];
        const int rows = std::min(bs, n - q);
        s.cache_->write_rows(blk, l, KvPlane(which), rows, reinterpret_cast<const uint8_t*>(p));
        p += row * size_t(rows);
      }
    }
  }
  if (!h.window_rows_dropped.empty() && !s.cache_->has_windows())
    fail(label +
         " was saved with the rows its sliding-window layers no longer read dropped, and "
         "this cache keeps every row (--swa-full): load it without --swa-full");
  for (int64_t b : h.window_rows_dropped) {
    if (b < 0 || b >= int64_t(s.blocks().size())) fail(label + " has a corrupted header");
    s.cache_->drop_window_rows(s.blocks()[size_t(b)]);
  }
  s.state_.read(p, state_bytes);
  p += state_bytes;
  // The loaded state is a restart point like the saving session's last checkpoint.
  if (n > 0) s.checkpoint();
  if (s.cache_->keeps_kraw() && !kraw && n > 0)
    fail(label + " was saved without Kraw, which this cache needs (for shift eviction)");
  if (meta) *meta = h.meta;
  return s;
}

}  // namespace fak
