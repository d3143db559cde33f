#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace fak {

using nlohmann::json;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64},
      {"I64", DType::I64}, {"I32", DType::I32}, {"I16", DType::I16},   {"I8", DType::I8},
      {"U8", DType::U8},   {"BOOL", DType::BOOL}};
  for (auto& [name, t] : kNames) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// note: the header is attacker-controlled (files come from strangers): every number is checked
// before it is used for arithmetic that could overflow or index outside the map.
void parse_header(std::string_view bytes, const std::string& label, std::vector<TensorInfo>* tensors,
                  std::map<std::string, std::string>* metadata) {
  if (bytes.size() < 8) fail(label + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    fail(label + ": truncated safetensors file (header says " + std::to_string(header_len) +
         " header bytes, file has " + std::to_string(bytes.size() - 8) + " after the length)");
  if (header_len > (100u << 20)) fail(label + ": safetensors header larger than 100 MiB");
  json header;
  try {
    header = json::parse(bytes.substr(8, header_len));
  } catch (const json::exception& e) {
    fail(label + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) fail(label + ": safetensors header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = bytes.size() - data_start;
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data()) + data_start;
  std::vector<std::pair<size_t, size_t>> spans;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(label + ": __metadata__ is not an object");
      for (auto& [k, v] : entry.items())
        (*metadata)[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    const std::string where = label + ": tensor '" + name + "'";
    if (!entry.is_object()) fail(where + " entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) fail(where + " has no dtype");
    if (sh == entry.end() || !sh->is_array()) fail(where + " has no shape");
    if (off == entry.end() || !off->is_array() || off->size() != 2) fail(where + " has no data_offsets");
    TensorInfo t;
    t.name = name;
    t.file = label;
    if (!parse_dtype(dt->get<std::string>(), &t.dtype))
      fail(where + " has unsupported dtype " + dt->get<std::string>());
    uint64_t numel = 1;
    for (auto& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail(where + " has an invalid shape " + sh->dump());
      uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > (uint64_t(1) << 48) / v) fail(where + " shape is absurdly large");
      numel *= v;
      t.shape.push_back(int64_t(v));
    }
    for (auto& o : *off)
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        fail(where + " has invalid data_offsets " + off->dump());
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail(where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           "] lie outside the " + std::to_string(data_size) + "-byte data section (truncated file?)");
    uint64_t expected = numel * dtype_size(t.dtype);
    if (end - begin != expected)
      fail(where + " shape " + t.shape_string() + " " + std::string(dtype_name(t.dtype)) + " needs " +
           std::to_string(expected) + " bytes but data_offsets span " + std::to_string(end - begin));
    t.data = base + begin;
    t.nbytes = size_t(expected);
    if (expected > 0) spans.emplace_back(begin, end);
    tensors->push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) fail(label + ": tensors overlap in the data section");
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path);
  parse_header(f.file_.bytes(), path.string(), &f.tensors_, &f.metadata_);
  return f;
}

SafetensorsFile SafetensorsFile::from_memory(std::string_view bytes, std::string label) {
  SafetensorsFile f;
  parse_header(bytes, label, &f.tensors_, &f.metadata_);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

TensorStore TensorStore::open_file(const std::filesystem::path& path) {
  TensorStore s;
  s.source_ = path;
  s.files_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open(path)));
  for (auto& t : s.files_.back()->tensors()) s.by_name_[t.name] = &t;
  return s;
}

TensorStore TensorStore::open_dir(const std::filesystem::path& dir) {
  auto single = dir / "model.safetensors";
  auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) {
    TensorStore s = open_file(single);
    s.source_ = dir;
    return s;
  }
  if (!std::filesystem::exists(index))
    fail(dir.string() + ": no model.safetensors or model.safetensors.index.json");
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(index.string() + ": not valid JSON: " + e.what());
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index.string() + ": no weight_map object");
  TensorStore s;
  s.source_ = dir;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(index.string() + ": weight_map entry for " + name + " is not a string");
    std::string shard = file.get<std::string>();
    if (shard.find('/') != std::string::npos || shard == "..")
      fail(index.string() + ": shard name '" + shard + "' must be a plain file name");
    auto& f = shards[shard];
    if (!f) {
      f = std::make_shared<SafetensorsFile>(SafetensorsFile::open(dir / shard));
      s.files_.push_back(f);
    }
    const TensorInfo* t = f->find(name);
    if (!t) fail(index.string() + " maps " + name + " to " + shard + ", which does not hold it");
    s.by_name_[name] = t;
  }
  return s;
}

std::vector<std::filesystem::path> TensorStore::file_paths() const {
  std::vector<std::filesystem::path> out;
  for (const auto& f : files_)
    if (!f->path().empty()) out.push_back(f->path());
  return out;
}

const TensorInfo* TensorStore::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& TensorStore::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("missing tensor '" + std::string(name) + "' in " + source_.string());
  return *t;
}

std::vector<const TensorInfo*> TensorStore::all() const {
  std::vector<const TensorInfo*> v;
  for (auto& [_, t] : by_name_) v.push_back(t);
  return v;
}

std::vector<float> read_f32(const TensorInfo& t) {
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case DType::F64: {
        double d;
        std::memcpy(&d, t.data + 8 * i, 8);
        out[i] = float(d);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      }
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = f16_to_f32(h);
        break;
      }
      default: fail(t.file + ": tensor '" + t.name + "' is not floating point");
    }
  }
  return out;
}

std::vector<int64_t> read_i64(const TensorInfo& t) {
  std::vector<int64_t> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::I64: std::memcpy(&out[i], t.data + 8 * i, 8); break;
      case DType::I32: {
        int32_t v;
        std::memcpy(&v, t.data + 4 * i, 4);
        out[i] = v;
        break;
      }
      default: fail(t.file + ": tensor '" + t.name + "' is not an integer tensor");
    }
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    check(size_t(numel) * dtype_size(t.dtype) == t.bytes.size(),
          "write_safetensors: tensor " + t.name + " has the wrong number of bytes");
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // keep tensor data 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t len = h.size();
  out.append(reinterpret_cast<const char*>(&len), 8);
  out += h;
  for (auto& t : tensors) out.append(t.bytes);
  write_file_atomic(path, out);
}

}  // namespace fak
