// Prefix cache files: one partition's radix tree of KV blocks (and a hybrid model's state
// checkpoints), written by PrefixCache::spill when a server stops and read back by reload when it
// starts again, so the prefixes it had cached do not cost a cold prefill after a restart.
// (Over 600 lines: the format's writer and its checking reader belong side by side.)
//
// Why a file of its own and not one session file per cached path: a prefix shared by many
// conversations (an agent's system prompt under each of its threads) would be on disk once per
// path, a hybrid path has several restart points where a session file keeps one state, and the
// tree's eviction priorities would be lost. A tree file holds each block once, with its priority,
// and keeps the session file's conventions: a header naming the model and the KV layout, a
// checksum, an atomic write (runtime/session_file.cpp).
//
// Layout (little-endian):
//   magic "FAKPREFX" | u32 version | u32 header_len | header JSON
//   | nodes[n]: i32 parent, i32 uses, f64 priority, u64 last_used, i32 len   (parents first)
//   | i32 tokens[len] per node (block_size, or fewer for a tail: a partly filled last block)
//   | checkpoints[m]: i32 node, i32 pos (the node's end)
//   | per node: per attention layer: K, V, (Kraw) rows [len][kv_dim]  (KvCache::read_rows)
//   | per checkpoint: f32 recurrent state (RecurrentState layout), f32 logits[vocab]
//   | u64 fnv1a(all before)
//   | 32 bytes HMAC-SHA-256(all before) under the folder's key (files only, not store records)
// The tables come before the rows so a reload decides what fits before it copies any KV.
// Version 2 added tails and checkpoints at any position (version 1: whole blocks, checkpoints on
// the 128-token grid of the chunked prefill, whose states a replay today would not reproduce).
// Version 3 added the MAC: a file planted in the folder (a valid checksum, altered KV rows) is
// refused unless it was made with the folder's key (io/private_dir.h), which only this user reads.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>

#include "core/error.h"
#include "core/hash.h"
#include "io/atomic_file.h"
#include "io/checked_file.h"
#include "io/keyed_digest.h"
#include "io/mapped_file.h"
#include "io/private_dir.h"
#include "runtime/prefix_cache.h"
#include "runtime/prefix_record.h"

namespace fak {

namespace {

constexpr char kMagic[8] = {'F', 'A', 'K', 'P', 'R', 'E', 'F', 'X'};
constexpr uint32_t kVersion = 3;
constexpr size_t kNodeRecord = 28, kCheckpointRecord = 8;
constexpr const char* kSuffix = ".fakprefix";

std::string file_name(const std::string& partition) {
  Fnv1a h;
  h.update(partition);
  return h.hex() + kSuffix;
}

// What the trimming below needs of a block, in a spill or a reload alike.
struct Meta {
  int parent = -1;
  int end = 0;  // the position after the entry's last token
  int len = 0;  // its tokens
  int children = 0;
  double priority = 0;
  uint64_t last_used = 0;
  bool checkpoint = false;
  bool kept = true;
};

// Drops leaves in PrefixCache::evict's order (on hybrids a leaf without a checkpoint first: nothing
// restarts from it; then the lowest priority, the least recently used, the shallower) until
// fits(blocks kept, checkpoints kept); on hybrids the leaves without a checkpoint go whatever
// fits says. Returns the blocks dropped.
size_t trim(std::vector<std::vector<Meta>>& parts, bool hybrid,
            const std::function<bool(size_t blocks, size_t checkpoints)>& fits) {
  size_t blocks = 0, checkpoints = 0;
  for (auto& p : parts)
    for (Meta& m : p) {
      if (!m.kept) continue;
      ++blocks;
      checkpoints += m.checkpoint;
      if (m.parent >= 0) ++p[size_t(m.parent)].children;
    }
  struct Leaf {
    int rank;
    double priority;
    uint64_t last_used;
    int end;
    size_t part, index;
    bool operator>(const Leaf& o) const {
      if (rank != o.rank) return rank > o.rank;
      if (priority != o.priority) return priority > o.priority;
      if (last_used != o.last_used) return last_used > o.last_used;
      return end > o.end;
    }
  };
  std::priority_queue<Leaf, std::vector<Leaf>, std::greater<Leaf>> heap;
  auto push = [&](size_t part, size_t index) {
    const Meta& m = parts[part][index];
    heap.push({hybrid && !m.checkpoint ? 0 : 1, m.priority, m.last_used, m.end, part, index});
  };
  for (size_t p = 0; p < parts.size(); ++p)
    for (size_t i = 0; i < parts[p].size(); ++i)
      if (parts[p][i].kept && parts[p][i].children == 0) push(p, i);
  size_t dropped = 0;
  while (!heap.empty() && (heap.top().rank == 0 || !fits(blocks, checkpoints))) {
    const Leaf l = heap.top();
    heap.pop();
    Meta& m = parts[l.part][l.index];
    m.kept = false;
    --blocks;
    checkpoints -= m.checkpoint;
    ++dropped;
    if (m.parent >= 0 && --parts[l.part][size_t(m.parent)].children == 0)
      push(l.part, size_t(m.parent));
  }
  return dropped;
}

// The layout fields every file carries, from the model and the cache it is written for.
nlohmann::json layout_header(const Model& model, const KvCache& cache) {
  const ModelConfig& c = model.config();
  return {{"model", model.identity()},
          {"model_type", c.model_type},
          {"vocab", c.vocab},
          {"attention_layers", model.n_attention_layers()},
          {"kv_dim", c.kv_dim()},
          {"kv_dtype", kv_type_name(cache.dtype())},
          {"kraw", cache.keeps_kraw()},
          {"block_size", cache.block_size()},
          {"recurrent_bytes", RecurrentState(c.recurrent_shape()).bytes()}};
}

// Streams a file through an AtomicFile, summing as it goes: a cache of gigabytes is never held
// twice in memory. Without a path it collects the bytes instead (a store record).
class FileWriter {
 public:
  FileWriter(const std::filesystem::path& path, std::string_view key)
      : file_(std::in_place, path), mac_(std::in_place, key) {}
  FileWriter() = default;
  void put(const void* data, size_t n) {
    sum_.update(data, n);
    if (mac_) mac_->update(data, n);
    buf_.append(static_cast<const char*>(data), n);
    if (file_ && buf_.size() >= (size_t(4) << 20)) flush();
  }
  template <typename T>
  void put(const T& v) {
    put(&v, sizeof(T));
  }
  size_t finish() {
    const uint64_t d = sum_.digest();
    buf_.append(reinterpret_cast<const char*>(&d), 8);
    if (mac_) {
      mac_->update(&d, 8);
      buf_ += mac_->finish();
    }
    if (!file_) return buf_.size();
    flush();
    file_->commit();
    return written_;
  }
  std::string take() { return std::move(buf_); }

 private:
  void flush() {
    file_->write_all(buf_.data(), buf_.size());
    written_ += buf_.size();
    buf_.clear();
  }
  std::optional<AtomicFile> file_;
  std::optional<KeyedDigest> mac_;
  Fnv1a sum_;
  std::string buf_;
  size_t written_ = 0;
};

// One file, checked whole and mapped, before anything of it goes into the cache.
struct ParsedFile {
  std::filesystem::path path;
  MappedFile map;
  std::string owned;  // a store record's bytes (map is empty then)
  std::string partition;
  nlohmann::json header;
  int depth = 0;                 // blocks above the first node (store records); 0 in files
  size_t n = 0, m = 0;           // blocks, checkpoints
  const char* nodes = nullptr;   // n records
  const char* tokens = nullptr;  // the nodes' tokens, one after another
  const char* cps = nullptr;     // m records
  const char* rows = nullptr;    // the nodes' rows, one after another
  const char* states = nullptr;  // m x (state + logits)
  std::vector<Meta> meta;
  std::vector<size_t> first_token;  // per node: its first token among all nodes'
  std::vector<int> checkpoint_of;   // per node: its index among checkpoints, or -1
  // Per node: its sliding-window layers' rows were dropped (zeros in the file, memory/kv_cache.h).
  std::vector<bool> window_rows_dropped;
};

template <typename T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Checks bytes (f.map's or f.owned) whole; throws fak::Error starting with label.
void parse_bytes(ParsedFile& f, std::string_view bytes, const std::string& label,
                 const Model& model, const KvCache& cache) {
  const CheckedFileView v = open_checked_file(bytes, kMagic, kVersion, label, "prefix cache");

  // Every field checked for its type: a crafted file gets the same one-line refusal.
  const auto h = nlohmann::json::parse(v.header, nullptr, false);
  const auto bad = [&]() { fail(label + " has a corrupted header"); };
  if (!h.is_object()) bad();
  const nlohmann::json want = layout_header(model, cache);
  for (const char* key : {"partition", "model", "model_type", "kv_dtype"})
    if (!h.contains(key) || !h[key].is_string()) bad();
  for (const char* key : {"vocab", "attention_layers", "kv_dim", "block_size", "recurrent_bytes",
                          "blocks", "checkpoints"})
    if (!h.contains(key) || !h[key].is_number_integer()) bad();
  if (!h.contains("kraw") || !h["kraw"].is_boolean()) bad();
  if (h["model"] != want["model"])
    fail(label + " was saved with a different model (" + h["model_type"].get<std::string>() + " " +
         h["model"].get<std::string>() + "), not " + model.path().string());
  for (const char* key : {"vocab", "attention_layers", "kv_dim", "recurrent_bytes"})
    if (h[key] != want[key]) fail(label + " has a KV layout that does not match the model");
  if (h["kv_dtype"] != want["kv_dtype"] || h["kraw"] != want["kraw"])
    fail(label + " holds " + h["kv_dtype"].get<std::string>() + " KV rows" +
         (h["kraw"].get<bool>() ? " with" : " without") + " Kraw, but this cache stores " +
         kv_type_name(cache.dtype()) + (cache.keeps_kraw() ? " with" : " without") + " Kraw");
  if (h["block_size"] != want["block_size"])
    fail(label + " has blocks of " + h["block_size"].dump() + " tokens, not " +
         std::to_string(cache.block_size()));
  f.partition = h["partition"].get<std::string>();
  // A store record holds a chain that starts below the root (runtime/prefix_record.h).
  if (h.contains("depth")) {
    if (!h["depth"].is_number_unsigned() || h["depth"].get<uint64_t>() > uint64_t(1) << 24) bad();
    f.depth = h["depth"].get<int>();
  }
  f.header = h;

  const ModelConfig& c = model.config();
  const size_t bs = size_t(cache.block_size());
  const size_t row_all = cache.block_bytes() / bs;  // one token's rows in every layer and plane
  const size_t state_bytes = RecurrentState(c.recurrent_shape()).bytes();
  const size_t cp_bytes = kCheckpointRecord + size_t(c.vocab) * 4 + state_bytes;
  const size_t body = v.body.size();
  // Counts are checked against the size before they are multiplied: no overflow from a header.
  const auto count = [&](const char* key) {
    const nlohmann::json& v = h[key];
    if (!v.is_number_unsigned()) bad();  // negative
    return v.get<uint64_t>();
  };
  const uint64_t n = count("blocks"), m = count("checkpoints");
  if (n > body / kNodeRecord) fail(label + " is truncated");
  if (m > n || (m > 0 && !c.is_hybrid())) bad();
  f.n = size_t(n);
  f.m = size_t(m);
  f.nodes = v.body.data();
  const auto corrupted = [&](const char* what) { fail(label + " has " + what); };
  f.meta.resize(f.n);
  f.first_token.resize(f.n);
  size_t total_tokens = 0;
  for (size_t i = 0; i < f.n; ++i) {
    const char* r = f.nodes + i * kNodeRecord;
    Meta& e = f.meta[i];
    e.parent = get<int32_t>(r);
    const int32_t uses = get<int32_t>(r + 4);
    e.priority = get<double>(r + 8);
    e.last_used = get<uint64_t>(r + 16);
    e.len = get<int32_t>(r + 24);
    if (e.parent < -1 || e.parent >= int64_t(i))
      corrupted("a corrupted tree (a parent after its child)");
    if (e.parent >= 0 && f.meta[size_t(e.parent)].len != int(bs))
      corrupted("a corrupted tree (a tail with children)");
    if (uses < 0 || !std::isfinite(e.priority) || e.len < 1 || size_t(e.len) > bs)
      corrupted("a corrupted node record");
    e.end = (e.parent < 0 ? f.depth * int(bs) : f.meta[size_t(e.parent)].end) + e.len;
    f.first_token[i] = total_tokens;
    total_tokens += size_t(e.len);
  }
  if (body != f.n * kNodeRecord + total_tokens * (4 + row_all) + f.m * cp_bytes)
    fail(label + " is truncated or has trailing bytes");
  f.tokens = f.nodes + f.n * kNodeRecord;
  f.cps = f.tokens + total_tokens * 4;
  f.rows = f.cps + f.m * kCheckpointRecord;
  f.states = f.rows + total_tokens * row_all;
  for (size_t t = 0; t < total_tokens; ++t) {
    const int32_t id = get<int32_t>(f.tokens + t * 4);
    if (id < 0 || id >= c.vocab) corrupted("a token id outside the vocabulary");
  }
  f.window_rows_dropped.assign(f.n, false);
  if (h.contains("window_rows_dropped")) {
    const nlohmann::json& list = h["window_rows_dropped"];
    if (!list.is_array()) bad();
    for (const nlohmann::json& i : list) {
      if (!i.is_number_unsigned() || i.get<uint64_t>() >= f.n) bad();
      f.window_rows_dropped[i.get<size_t>()] = true;
    }
    if (!list.empty() && !cache.has_windows())
      fail(label +
           " holds blocks whose sliding-window rows were dropped, and this cache keeps "
           "every row (--swa-full)");
  }
  f.checkpoint_of.assign(f.n, -1);
  for (size_t j = 0; j < f.m; ++j) {
    const int32_t node = get<int32_t>(f.cps + j * kCheckpointRecord);
    const int32_t pos = get<int32_t>(f.cps + j * kCheckpointRecord + 4);
    if (node < 0 || size_t(node) >= f.n || f.checkpoint_of[size_t(node)] >= 0 ||
        pos != f.meta[size_t(node)].end)
      corrupted("a corrupted checkpoint record");
    f.checkpoint_of[size_t(node)] = int(j);
    f.meta[size_t(node)].checkpoint = true;
  }
}

ParsedFile parse(const std::filesystem::path& path, std::string_view key, const Model& model,
                 const KvCache& cache) {
  ParsedFile f;
  f.path = path;
  f.map = MappedFile::open(path);
  const std::string label = "prefix cache file " + path.string();
  const std::string_view bytes = f.map.bytes();
  // The frame and its checksum first (not a prefix cache file, truncated, corrupted), then the MAC
  // of a file that is well formed: made with another key, it was not written here.
  if (bytes.size() < 64) {
    parse_bytes(f, bytes, label, model, cache);  // says what it is not
    fail(label + " is truncated");
  }
  const size_t body = bytes.size() - KeyedDigest::kBytes;
  parse_bytes(f, bytes.substr(0, body), label, model, cache);
  KeyedDigest mac(key);
  mac.update(bytes.data(), body);
  if (!same_digest(mac.finish(), bytes.substr(body)))
    fail(label +
         " was not written with this folder's key (another user's or another folder's "
         "file); not trusted");
  return f;
}

// The file's body after the layout fields in h: kept entries of list (parents first), cps those
// of them with a checkpoint, index each kept entry's position among them.
void write_tree(FileWriter& w, nlohmann::json h, const KvCache& cache,
                const std::vector<PrefixCacheEntry>& list, const std::vector<size_t>& kept,
                const std::vector<size_t>& cps, const std::vector<int>& index) {
  const int bs = cache.block_size();
  h["blocks"] = kept.size();
  h["checkpoints"] = cps.size();
  nlohmann::json dropped = nlohmann::json::array();
  for (size_t k = 0; k < kept.size(); ++k)
    if (!cache.has_window_rows(list[kept[k]].block)) dropped.push_back(k);
  if (!dropped.empty()) h["window_rows_dropped"] = dropped;
  const std::string header = h.dump();
  w.put(kMagic, 8);
  w.put(kVersion);
  w.put(uint32_t(header.size()));
  w.put(header.data(), header.size());
  for (size_t i : kept) {
    const PrefixCacheEntry& e = list[i];
    w.put(int32_t(e.parent < 0 ? -1 : index[size_t(e.parent)]));
    w.put(int32_t(e.uses));
    w.put(e.priority);
    w.put(e.last_used);
    w.put(int32_t(e.tokens.size()));
  }
  for (size_t i : kept) w.put(list[i].tokens.data(), list[i].tokens.size() * 4);
  for (size_t i : cps) {
    w.put(int32_t(index[i]));
    w.put(int32_t(list[i].checkpoint->pos()));
  }
  std::vector<uint8_t> rows(size_t(bs) * cache.row_bytes());
  for (size_t i : kept) {
    const int len = int(list[i].tokens.size());
    const bool window_rows = cache.has_window_rows(list[i].block);
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int plane = 0; plane < (cache.keeps_kraw() ? 3 : 2); ++plane) {
        if (window_rows || !cache.windowed(l))
          cache.read_rows(list[i].block, l, KvPlane(plane), len, rows.data());
        else
          std::fill(rows.begin(), rows.end(), uint8_t(0));
        w.put(rows.data(), size_t(len) * cache.row_bytes());
      }
  }
  std::vector<char> payload;
  for (size_t i : cps) {
    list[i].checkpoint->payload(payload);
    w.put(payload.data(), payload.size());
  }
}

}  // namespace

PrefixCacheFileReport PrefixCache::spill(const std::filesystem::path& dir, size_t max_bytes) const {
  PrefixCacheFileReport r;
  const bool hybrid = model_->config().is_hybrid();
  const int bs = cache_->block_size();
  std::map<std::string, std::vector<PrefixCacheEntry>> parts = snapshot();
  // The snapshot holds a reference on every block until the files are written.
  struct Release {
    const std::map<std::string, std::vector<PrefixCacheEntry>>& parts;
    KvCache& cache;
    ~Release() {
      for (const auto& [_, list] : parts)
        for (const PrefixCacheEntry& e : list) cache.release(e.block);
    }
  } release{parts, *cache_};

  const nlohmann::json layout = layout_header(*model_, *cache_);
  const size_t node_bytes = kNodeRecord + size_t(bs) * 4 + cache_->block_bytes();
  const size_t cp_bytes = kCheckpointRecord + size_t(model_->config().vocab) * 4 +
                          RecurrentState(model_->config().recurrent_shape()).bytes();
  std::vector<std::vector<Meta>> metas;
  for (const auto& [_, list] : parts) {
    std::vector<Meta>& m = metas.emplace_back(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const PrefixCacheEntry& e = list[i];
      Meta& x = m[i];
      x.parent = e.parent;
      x.len = int(e.tokens.size());
      x.end = (e.parent < 0 ? 0 : m[size_t(e.parent)].end) + x.len;
      x.priority = e.priority;
      x.last_used = e.last_used;
      x.checkpoint = e.checkpoint != nullptr;
    }
  }
  // Headers are a few hundred bytes each: counted roughly, the cap is on the KV (a tail counted as
  // a whole block).
  const size_t overhead = parts.size() * (512 + 16 + 8);
  r.dropped_blocks = trim(metas, hybrid, [&](size_t blocks, size_t checkpoints) {
    return max_bytes == 0 || overhead + blocks * node_bytes + checkpoints * cp_bytes <= max_bytes;
  });

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string key = folder_key(dir);
  std::set<std::string> keep_files;  // written now, or left as they were because a write failed
  size_t part_index = 0;
  for (const auto& [partition, list] : parts) {
    const std::vector<Meta>& meta = metas[part_index++];
    std::vector<int> index(list.size(), -1);  // new index of each kept entry
    std::vector<size_t> kept, cps;
    for (size_t i = 0; i < list.size(); ++i)
      if (meta[i].kept) {
        index[i] = int(kept.size());
        kept.push_back(i);
        if (list[i].checkpoint) cps.push_back(i);
      }
    const std::string name = file_name(partition);
    if (kept.empty()) continue;
    const std::filesystem::path path = dir / name;
    try {
      nlohmann::json h = layout;
      h["partition"] = partition;
      FileWriter w(path, key);
      write_tree(w, h, *cache_, list, kept, cps, index);
      r.bytes += w.finish();
      ++r.files;
      r.blocks += kept.size();
      r.checkpoints += cps.size();
      keep_files.insert(name);
    } catch (const std::exception& e) {
      // A full disk loses this partition's newer blocks, not the stop of the server; whatever
      // file it had before stays (still exact: a prefix's KV depends only on its tokens).
      r.warnings.push_back(std::string(e.what()) + "; not saved");
      r.dropped_blocks += kept.size();
      keep_files.insert(name);
    }
  }
  // What the cache no longer holds (evicted, left out, of keys no longer served) goes.
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= std::strlen(kSuffix) || !name.ends_with(kSuffix) || keep_files.count(name))
      continue;
    std::error_code rm;
    if (!std::filesystem::remove(entry.path(), rm) && rm)
      r.warnings.push_back("cannot remove " + entry.path().string() + ": " + rm.message());
  }
  return r;
}

PrefixCacheFileReport PrefixCache::reload(const std::filesystem::path& dir,
                                          const std::function<bool(const std::string&)>& keep) {
  PrefixCacheFileReport r;
  std::error_code ec;
  remove_stale_temp_files(dir);
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st {};
    // Only plain files: a link planted in the folder is not followed.
    if (name.ends_with(kSuffix) && ::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) return r;
  const std::string key = folder_key(dir);

  std::vector<ParsedFile> files;
  std::set<std::string> partitions;
  for (const auto& path : paths) {
    try {
      ParsedFile f = parse(path, key, *model_, *cache_);
      if (keep && !keep(f.partition)) {
        ++r.ignored;
        continue;
      }
      if (!partitions.insert(f.partition).second)
        fail("prefix cache file " + path.string() + " repeats a partition");
      files.push_back(std::move(f));
    } catch (const std::exception& e) {
      r.warnings.push_back(std::string(e.what()) + "; skipped");
    }
  }

  // Most valuable first, across every partition: what eviction would drop goes until the rest
  // fits the KV cache's free blocks and this cache's own cap.
  const bool hybrid = model_->config().is_hybrid();
  const size_t state_bytes = RecurrentState(model_->config().recurrent_shape()).bytes();
  const size_t payload_bytes = size_t(model_->config().vocab) * 4 + state_bytes;
  const size_t cp_blocks = hybrid ? StateCheckpoint::blocks_for(*cache_, payload_bytes) : 0;
  const size_t capacity = cache_->capacity_blocks();
  const size_t free_blocks =
      capacity == SIZE_MAX ? SIZE_MAX : capacity - std::min(capacity, cache_->blocks_in_use());
  const PrefixCacheStats now = stats();
  std::vector<std::vector<Meta>> metas;
  for (ParsedFile& f : files) metas.push_back(f.meta);
  // A checkpoint's state lives in KV blocks too (memory/state_checkpoint.h).
  r.dropped_blocks = trim(metas, hybrid, [&](size_t blocks, size_t checkpoints) {
    const size_t need = blocks + checkpoints * cp_blocks;
    return need <= free_blocks &&
           (max_bytes_ == 0 || now.bytes + need * cache_->block_bytes() <= max_bytes_);
  });

  const size_t planes = cache_->keeps_kraw() ? 3 : 2;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const ParsedFile& f = files[fi];
    const std::vector<Meta>& meta = metas[fi];
    std::vector<PrefixCacheEntry> entries;
    std::vector<int> index(f.n, -1);
    try {
      for (size_t i = 0; i < f.n; ++i) {
        if (!meta[i].kept) continue;
        PrefixCacheEntry e;
        e.parent = meta[i].parent < 0 ? -1 : index[size_t(meta[i].parent)];
        const char* rec = f.nodes + i * kNodeRecord;
        e.uses = get<int32_t>(rec + 4);
        e.priority = meta[i].priority;
        e.last_used = meta[i].last_used;
        const size_t len = size_t(meta[i].len);
        e.tokens.resize(len);
        std::memcpy(e.tokens.data(), f.tokens + f.first_token[i] * 4, len * 4);
        e.block = cache_->allocate();
        index[i] = int(entries.size());
        entries.push_back(std::move(e));
        const size_t plane_bytes = len * cache_->row_bytes();
        const char* p =
            f.rows + f.first_token[i] * planes * size_t(cache_->n_layers()) * cache_->row_bytes();
        for (int l = 0; l < cache_->n_layers(); ++l)
          for (size_t plane = 0; plane < planes; ++plane, p += plane_bytes)
            cache_->write_rows(entries.back().block, l, KvPlane(plane), int(len),
                               reinterpret_cast<const uint8_t*>(p));
        if (f.window_rows_dropped[i]) cache_->drop_window_rows(entries.back().block);
        if (const int j = f.checkpoint_of[i]; j >= 0)
          entries.back().checkpoint = StateCheckpoint::from_payload(
              cache_, meta[i].end, {f.states + size_t(j) * payload_bytes, payload_bytes},
              state_bytes);
      }
    } catch (const std::exception& e) {
      // Out of KV memory after all (something else took blocks): keep what is loaded so far, a
      // prefix of the list and so a tree whose parents are all there.
      r.warnings.push_back(f.path.string() + ": " + e.what() + "; loaded in part");
    }
    // Counted as the cache holds them: a file may repeat a block (restore keeps one).
    const PrefixCacheStats before = stats();
    restore(f.partition, entries);
    const PrefixCacheStats after = stats();
    r.blocks += after.blocks - before.blocks;
    r.checkpoints += after.checkpoints - before.checkpoints;
    r.bytes += f.map.size();
    ++r.files;
  }
  return r;
}

// Store records (runtime/prefix_record.h): one chain in the file format, in memory.

struct PrefixRecord::Parsed {
  ParsedFile f;
  std::shared_ptr<const void> owner;  // of the bytes, when f.owned does not hold them
  size_t bytes = 0;
  size_t bs = 0;
};

std::string write_prefix_record(const Model& model, const KvCache& cache,
                                const std::string& partition, int depth,
                                std::span<const PrefixRecordBlock> chain,
                                const nlohmann::json& header) {
  std::vector<PrefixCacheEntry> list;
  std::vector<size_t> kept, cps;
  std::vector<int> index;
  for (size_t i = 0; i < chain.size(); ++i) {
    check(chain[i].tokens.size() == size_t(cache.block_size()),
          "write_prefix_record: a block of the wrong size");
    list.push_back({int(i) - 1, chain[i].tokens, chain[i].block, 1, 0, 0, chain[i].checkpoint});
    kept.push_back(i);
    index.push_back(int(i));
    if (chain[i].checkpoint) cps.push_back(i);
  }
  nlohmann::json h = layout_header(model, cache);
  for (const auto& [key, value] : header.items()) h[key] = value;
  h["partition"] = partition;
  h["depth"] = depth;
  FileWriter w;
  write_tree(w, h, cache, list, kept, cps, index);
  w.finish();
  return w.take();
}

PrefixRecord::PrefixRecord(std::unique_ptr<Parsed> p) : p_(std::move(p)) {}
PrefixRecord::PrefixRecord(PrefixRecord&&) noexcept = default;
PrefixRecord& PrefixRecord::operator=(PrefixRecord&&) noexcept = default;
PrefixRecord::~PrefixRecord() = default;

PrefixRecord PrefixRecord::parse(std::string bytes, const Model& model, const KvCache& cache,
                                 const std::string& label) {
  auto p = std::make_unique<Parsed>();
  p->f.owned = std::move(bytes);
  p->bytes = p->f.owned.size();
  p->bs = size_t(cache.block_size());
  parse_bytes(p->f, p->f.owned, label, model, cache);
  for (size_t i = 0; i < p->f.n; ++i)
    if (p->f.meta[i].parent != int(i) - 1 || p->f.meta[i].len != cache.block_size())
      fail(label + " is not a chain of whole blocks");
  return PrefixRecord(std::move(p));
}

PrefixRecord PrefixRecord::parse(std::string_view bytes, std::shared_ptr<const void> owner,
                                 const Model& model, const KvCache& cache,
                                 const std::string& label) {
  auto p = std::make_unique<Parsed>();
  p->owner = std::move(owner);
  p->bytes = bytes.size();
  p->bs = size_t(cache.block_size());
  parse_bytes(p->f, bytes, label, model, cache);
  for (size_t i = 0; i < p->f.n; ++i)
    if (p->f.meta[i].parent != int(i) - 1 || p->f.meta[i].len != cache.block_size())
      fail(label + " is not a chain of whole blocks");
  return PrefixRecord(std::move(p));
}

const std::string& PrefixRecord::partition() const {
  return p_->f.partition;
}
const nlohmann::json& PrefixRecord::header() const {
  return p_->f.header;
}
int PrefixRecord::depth() const {
  return p_->f.depth;
}
size_t PrefixRecord::size() const {
  return p_->f.n;
}
size_t PrefixRecord::bytes() const {
  return p_->bytes;
}

std::vector<int32_t> PrefixRecord::tokens(size_t i) const {
  const size_t bs = p_->bs;
  std::vector<int32_t> out(bs);
  std::memcpy(out.data(), p_->f.tokens + p_->f.first_token[i] * 4, bs * 4);
  return out;
}

bool PrefixRecord::has_checkpoint(size_t i) const {
  return p_->f.checkpoint_of[i] >= 0;
}

int32_t PrefixRecord::load_block(size_t i, KvCache& cache) const {
  const int bs = cache.block_size();
  const size_t planes = cache.keeps_kraw() ? 3 : 2;
  const size_t plane_bytes = size_t(bs) * cache.row_bytes();
  const int32_t block = cache.allocate();
  const char* p =
      p_->f.rows + p_->f.first_token[i] * planes * size_t(cache.n_layers()) * cache.row_bytes();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (size_t plane = 0; plane < planes; ++plane, p += plane_bytes)
      cache.write_rows(block, l, KvPlane(plane), bs, reinterpret_cast<const uint8_t*>(p));
  if (p_->f.window_rows_dropped[i]) cache.drop_window_rows(block);
  return block;
}

std::shared_ptr<const StateCheckpoint> PrefixRecord::checkpoint(
    size_t i, const Model& model, const std::shared_ptr<KvCache>& cache) const {
  const int j = p_->f.checkpoint_of[i];
  if (j < 0) return nullptr;
  const ModelConfig& c = model.config();
  const size_t state_bytes = RecurrentState(c.recurrent_shape()).bytes();
  const size_t payload_bytes = size_t(c.vocab) * 4 + state_bytes;
  return StateCheckpoint::from_payload(cache, p_->f.meta[i].end,
                                       {p_->f.states + size_t(j) * payload_bytes, payload_bytes},
                                       state_bytes);
}

}  // namespace fak
