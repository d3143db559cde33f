// GgufFile: parse and validate a GGUF file (see gguf.h for the layout) and typed metadata lookup.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "io/ggml_type.h"
#include "io/gguf.h"

namespace fak {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // arrays of arrays deeper than this are hostile, not data
// Smallest encodings, used to reject counts the remaining bytes cannot hold before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, a u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;               // element type, count

std::string str(uint64_t v) {
  return std::to_string(v);
}

// A bounds-checked little-endian cursor. `context_` names what is being read (a key, a tensor) so
// every error says where the file is wrong.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  [[noreturn]] void error(const std::string& what) const {
    fail(file_ + ": " + (context_.empty() ? "" : context_ + ": ") + what);
  }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > remaining())
      error(std::string("truncated file: ") + what + " needs " + str(n) + " bytes at offset " +
            str(pos_) + ", only " + str(remaining()) + " left");
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += size_t(n);
    return p;
  }

  template <typename T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    const uint8_t* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), size_t(len));
  }

  GgufType read_type(const char* what) {
    const uint32_t t = read<uint32_t>(what);
    if (t > uint32_t(GgufType::F64)) error("unknown metadata value type " + str(t));
    return GgufType(t);
  }

  GgufArray read_array(int depth) {
    if (depth >= kMaxArrayDepth) error("arrays nested deeper than " + str(kMaxArrayDepth));
    GgufArray a;
    a.type = read_type("array element type");
    const uint64_t count = read<uint64_t>("array length");
    if (a.type == GgufType::STRING) {
      check_count(count, 8, "string array");
      a.strings.reserve(size_t(count));
      for (uint64_t i = 0; i < count; ++i) a.strings.push_back(read_string("array string"));
    } else if (a.type == GgufType::ARRAY) {
      check_count(count, kMinArrayBytes, "array of arrays");
      a.arrays.reserve(size_t(count));
      for (uint64_t i = 0; i < count; ++i) a.arrays.push_back(read_array(depth + 1));
    } else {
      const size_t es = gguf_scalar_size(a.type);
      check_count(count, es, "array");
      const uint8_t* p = take(count * es, "array data");
      a.raw.assign(p, p + count * es);
    }
    return a;
  }

  GgufValue read_value(GgufType t) {
    switch (t) {
      case GgufType::U8:
        return GgufValue::make_u8(read<uint8_t>("u8 value"));
      case GgufType::I8:
        return GgufValue::make_i8(read<int8_t>("i8 value"));
      case GgufType::U16:
        return GgufValue::make_u16(read<uint16_t>("u16 value"));
      case GgufType::I16:
        return GgufValue::make_i16(read<int16_t>("i16 value"));
      case GgufType::U32:
        return GgufValue::make_u32(read<uint32_t>("u32 value"));
      case GgufType::I32:
        return GgufValue::make_i32(read<int32_t>("i32 value"));
      case GgufType::U64:
        return GgufValue::make_u64(read<uint64_t>("u64 value"));
      case GgufType::I64:
        return GgufValue::make_i64(read<int64_t>("i64 value"));
      case GgufType::F32:
        return GgufValue::make_f32(read<float>("f32 value"));
      case GgufType::F64:
        return GgufValue::make_f64(read<double>("f64 value"));
      case GgufType::BOOL: {
        const uint8_t b = read<uint8_t>("bool value");
        if (b > 1) error("bool value " + str(b) + " is neither 0 nor 1");
        return GgufValue::make_bool(b != 0);
      }
      case GgufType::STRING:
        return GgufValue::make_string(read_string("string value"));
      case GgufType::ARRAY:
        return GgufValue::make_array(read_array(0));
    }
    error("unknown metadata value type " + str(uint32_t(t)));
  }

  // A count whose elements each take at least `min_bytes` must fit in what is left of the file;
  // checked before any reserve() so a lying count cannot allocate.
  void check_count(uint64_t count, uint64_t min_bytes, const char* what) {
    if (min_bytes > 0 && count > remaining() / min_bytes)
      error(std::string(what) + " count " + str(count) + " cannot fit in the " + str(remaining()) +
            " bytes left");
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  size_t pos_ = 0;
  std::string context_;
};

uint32_t byte_swap(uint32_t v) {
  return __builtin_bswap32(v);
}

}  // namespace

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile f;
  f.map_ = MappedFile::open(path);
  f.name_ = path.string();
  f.parse(std::span<const uint8_t>(f.map_.data(), f.map_.size()));
  return f;
}

GgufFile GgufFile::from_memory(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  f.parse(bytes);
  return f;
}

void GgufFile::parse(std::span<const uint8_t> bytes) {
  Cursor c(bytes, name_);
  c.set_context("header");
  if (c.read<uint32_t>("magic") != kMagic) c.error("not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (version_ == 1)
    c.error("GGUF v1 is not supported (re-convert the model with a newer llama.cpp)");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = byte_swap(version_);
    if (swapped >= 1 && swapped <= 3) c.error("big-endian GGUF files are not supported");
    c.error("unsupported GGUF version " + str(version_));
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  c.check_count(n_tensors, kMinTensorInfoBytes, "tensor");
  c.check_count(n_kv, kMinKvBytes, "metadata");
  if (n_tensors * kMinTensorInfoBytes + n_kv * kMinKvBytes > c.remaining())
    c.error("tensor count " + str(n_tensors) + " and metadata count " + str(n_kv) +
            " cannot fit in the file");

  kvs_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    c.set_context("metadata entry " + str(k));
    std::string key = c.read_string("key");
    c.set_context("metadata key '" + key + "'");
    if (kv_index_.count(key)) c.error("duplicate key");
    const GgufType t = c.read_type("value type");
    GgufValue v = c.read_value(t);
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back({std::move(key), std::move(v)});
  }

  if (const GgufValue* a = find("general.alignment")) {
    c.set_context("metadata key 'general.alignment'");
    if (a->type != GgufType::U32)
      c.error("must be u32, is " + std::string(gguf_type_name(a->type)));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      c.error("alignment " + str(a->u) + " is not a power of two");
    alignment_ = uint32_t(a->u);
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t t = 0; t < n_tensors; ++t) {
    c.set_context("tensor info " + str(t));
    GgufTensor ti;
    ti.name = c.read_string("tensor name");
    c.set_context("tensor '" + ti.name + "'");
    if (tensor_index_.count(ti.name)) c.error("duplicate tensor name");
    const uint32_t n_dims = c.read<uint32_t>("dimension count");
    if (n_dims > kMaxDims) c.error(str(n_dims) + " dimensions (at most 4)");
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = c.read<int64_t>("dimension");
      if (ne < 0) c.error("negative dimension " + std::to_string(ne));
      if (ne != 0 && n_elements > std::numeric_limits<int64_t>::max() / ne)
        c.error("element count overflows");
      n_elements *= ne;
      ti.dims.push_back(ne);
    }
    ti.ggml_type = c.read<uint32_t>("type");
    const GgmlTypeInfo* info = ggml_type_info(ti.ggml_type);
    if (!info) c.error("unknown ggml type id " + str(ti.ggml_type));
    const int64_t ne0 = ti.dims.empty() ? 1 : ti.dims[0];
    if (ne0 % info->block_size != 0)
      c.error("first dimension " + std::to_string(ne0) + " is not a multiple of the " +
              std::string(info->name) + " block size " + std::to_string(info->block_size));
    const uint64_t blocks = uint64_t(n_elements / info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes)
      c.error("size overflows");
    ti.nbytes = size_t(blocks * info->block_bytes);
    ti.offset = c.read<uint64_t>("data offset");
    if (ti.offset % alignment_ != 0)
      c.error("data offset " + str(ti.offset) + " is not a multiple of the alignment " +
              str(alignment_));
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t size = bytes.size();
  for (GgufTensor& ti : tensors_) {
    c.set_context("tensor '" + ti.name + "'");
    const uint64_t avail = data_offset_ <= size ? size - data_offset_ : 0;
    if (ti.offset > avail || ti.nbytes > avail - ti.offset)
      c.error("data [" + str(ti.offset) + ", +" + str(ti.nbytes) + ") at data section offset " +
              str(data_offset_) + " extends past the end of the file (" + str(size) + " bytes)");
    ti.data = bytes.data() + data_offset_ + ti.offset;
  }

  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& prev = tensors_[order[k - 1]];
    const GgufTensor& cur = tensors_[order[k]];
    if (prev.nbytes > 0 && cur.nbytes > 0 && prev.offset + prev.nbytes > cur.offset)
      fail(name_ + ": tensors '" + prev.name + "' and '" + cur.name + "' overlap");
  }
}

void GgufFile::release_arrays() {
  for (GgufKv& kv : kvs_)
    if (kv.value.type == GgufType::ARRAY)
      kv.value.array = GgufArray{kv.value.array.type, {}, {}, {}};
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::fail_key(std::string_view key, const std::string& what) const {
  fail(name_ + ": metadata key '" + std::string(key) + "' " + what);
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail_key(key, "is missing");
  return *v;
}

namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

}  // namespace

uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue& v = require(key);
  if (is_unsigned(v.type)) return v.u;
  if (is_signed(v.type) && v.i >= 0) return uint64_t(v.i);
  fail_key(key, "is " + std::string(gguf_type_name(v.type)) +
                    (is_signed(v.type) ? " " + std::to_string(v.i) : "") +
                    ", expected a non-negative integer");
}

uint32_t GgufFile::get_u32(std::string_view key) const {
  const uint64_t v = get_u64(key);
  if (v > std::numeric_limits<uint32_t>::max()) fail_key(key, "value " + str(v) + " exceeds u32");
  return uint32_t(v);
}

int64_t GgufFile::get_i64(std::string_view key) const {
  const GgufValue& v = require(key);
  if (is_signed(v.type)) return v.i;
  if (is_unsigned(v.type) && v.u <= uint64_t(std::numeric_limits<int64_t>::max()))
    return int64_t(v.u);
  fail_key(key, "is " + std::string(gguf_type_name(v.type)) + ", expected an integer");
}

float GgufFile::get_f32(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type == GgufType::F32) return float(v.f);
  if (v.type == GgufType::F64) {
    // note: narrowing a double beyond float's range is undefined behaviour; it reads as the
    // infinity it rounds to, for the caller's range check to refuse.
    if (std::fabs(v.f) > double(std::numeric_limits<float>::max()) && std::isfinite(v.f))
      return v.f > 0 ? std::numeric_limits<float>::infinity()
                     : -std::numeric_limits<float>::infinity();
    return float(v.f);
  }
  fail_key(key, "is " + std::string(gguf_type_name(v.type)) + ", expected a float");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::BOOL)
    fail_key(key, "is " + std::string(gguf_type_name(v.type)) + ", expected bool");
  return v.u != 0;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::STRING)
    fail_key(key, "is " + std::string(gguf_type_name(v.type)) + ", expected a string");
  return v.s;
}

const GgufArray& GgufFile::get_array(std::string_view key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::ARRAY)
    fail_key(key, "is " + std::string(gguf_type_name(v.type)) + ", expected an array");
  return v.array;
}

uint32_t GgufFile::get_u32_or(std::string_view key, uint32_t fallback) const {
  return find(key) ? get_u32(key) : fallback;
}

float GgufFile::get_f32_or(std::string_view key, float fallback) const {
  return find(key) ? get_f32(key) : fallback;
}

}  // namespace fak
