#include "io/gguf_writer.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/ggml_type.h"

namespace fak {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;

// Little-endian serialization into a byte string (the header is small; tensor data is written
// straight from the caller's buffers).
struct Out {
  std::string bytes;
  template <typename T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.append(s);
  }
  void put_array(const GgufArray& a) {
    put<uint32_t>(uint32_t(a.type));
    put<uint64_t>(a.size());
    if (a.type == GgufType::STRING) {
      for (const std::string& s : a.strings) put_string(s);
    } else if (a.type == GgufType::ARRAY) {
      for (const GgufArray& inner : a.arrays) put_array(inner);
    } else {
      bytes.append(reinterpret_cast<const char*>(a.raw.data()), a.raw.size());
    }
  }
  void put_value(const GgufValue& v) {
    switch (v.type) {
      case GgufType::U8:
        return put<uint8_t>(uint8_t(v.u));
      case GgufType::I8:
        return put<int8_t>(int8_t(v.i));
      case GgufType::U16:
        return put<uint16_t>(uint16_t(v.u));
      case GgufType::I16:
        return put<int16_t>(int16_t(v.i));
      case GgufType::U32:
        return put<uint32_t>(uint32_t(v.u));
      case GgufType::I32:
        return put<int32_t>(int32_t(v.i));
      case GgufType::U64:
        return put<uint64_t>(v.u);
      case GgufType::I64:
        return put<int64_t>(v.i);
      case GgufType::F32:
        return put<float>(float(v.f));
      case GgufType::F64:
        return put<double>(v.f);
      case GgufType::BOOL:
        return put<uint8_t>(v.u ? 1 : 0);
      case GgufType::STRING:
        return put_string(v.s);
      case GgufType::ARRAY:
        return put_array(v.array);
    }
    fail("gguf writer: unknown value type " + std::to_string(uint32_t(v.type)));
  }
  void pad_to(uint64_t alignment) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, '\0');
  }
};

}  // namespace

void GgufWriter::set(std::string key, GgufValue value) {
  for (GgufKv& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back({std::move(key), std::move(value)});
}

uint32_t GgufWriter::alignment() const {
  for (const GgufKv& kv : kvs_) {
    if (kv.key != "general.alignment") continue;
    check(kv.value.type == GgufType::U32 && kv.value.u != 0 && (kv.value.u & (kv.value.u - 1)) == 0,
          "gguf writer: general.alignment must be a u32 power of two");
    return uint32_t(kv.value.u);
  }
  return kDefaultAlignment;
}

size_t GgufWriter::check_tensor(const std::string& name, uint32_t ggml_type,
                                const std::vector<int64_t>& dims) const {
  const std::string what = "gguf writer: tensor '" + name + "': ";
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  check(info != nullptr, what + "unknown ggml type id " + std::to_string(ggml_type));
  check(dims.size() <= 4, what + std::to_string(dims.size()) + " dimensions (at most 4)");
  int64_t n = 1;
  for (int64_t d : dims) {
    check(d >= 0, what + "negative dimension");
    n *= d;
  }
  const int64_t ne0 = dims.empty() ? 1 : dims[0];
  check(ne0 % info->block_size == 0, what + "first dimension " + std::to_string(ne0) +
                                         " is not a multiple of the block size " +
                                         std::to_string(info->block_size));
  for (const Tensor& t : tensors_) check(t.name != name, what + "duplicate name");
  return size_t(n / info->block_size) * info->block_bytes;
}

void GgufWriter::add_tensor(std::string name, uint32_t ggml_type, std::vector<int64_t> dims,
                            std::span<const uint8_t> data) {
  const size_t expect = check_tensor(name, ggml_type, dims);
  check(data.size() == expect, "gguf writer: tensor '" + name +
                                   "': " + std::to_string(data.size()) + " bytes given, " +
                                   std::string(ggml_type_info(ggml_type)->name) +
                                   " of these dims needs " + std::to_string(expect));
  tensors_.push_back({std::move(name), ggml_type, std::move(dims), data, data.size(), {}});
}

void GgufWriter::add_tensor_made(std::string name, uint32_t ggml_type, std::vector<int64_t> dims,
                                 TensorMaker make) {
  const size_t expect = check_tensor(name, ggml_type, dims);
  tensors_.push_back({std::move(name), ggml_type, std::move(dims), {}, expect, std::move(make)});
}

void GgufWriter::write(const std::filesystem::path& path) const {
  const uint32_t align = alignment();
  Out out;
  out.put<uint32_t>(0x46554747);  // "GGUF"
  out.put<uint32_t>(kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kvs_.size());
  for (const GgufKv& kv : kvs_) {
    out.put_string(kv.key);
    out.put<uint32_t>(uint32_t(kv.value.type));
    out.put_value(kv.value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) out.put<int64_t>(d);
    out.put<uint32_t>(t.ggml_type);
    out.put<uint64_t>(offset);
    offset += (t.nbytes + align - 1) / align * align;
  }
  out.pad_to(align);

  AtomicFile file(path);
  file.write_all(out.bytes.data(), out.bytes.size());
  static const char kZeros[256] = {};
  for (const Tensor& t : tensors_) {
    if (t.make) {
      size_t made = 0;
      t.make([&](std::span<const uint8_t> piece) {
        check(made + piece.size() <= t.nbytes, "gguf writer: tensor '" + t.name +
                                                   "': made more than its " +
                                                   std::to_string(t.nbytes) + " bytes");
        file.write_all(piece.data(), piece.size());
        made += piece.size();
      });
      check(made == t.nbytes, "gguf writer: tensor '" + t.name + "': made " + std::to_string(made) +
                                  " of its " + std::to_string(t.nbytes) + " bytes");
    } else {
      file.write_all(t.data.data(), t.data.size());
    }
    const size_t pad = (align - t.nbytes % align) % align;
    for (size_t left = pad; left > 0;) {
      const size_t n = std::min(left, sizeof kZeros);
      file.write_all(kZeros, n);
      left -= n;
    }
  }
  file.commit();
}

}  // namespace fak
