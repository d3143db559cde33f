#include "io/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
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

// The temp file: removed on any failure path unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(const std::filesystem::path& target) : target_(target) {
    static std::atomic<int> counter{0};
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    path_ = dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                   std::to_string(counter++));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail("cannot create " + path_.string() + " to write " + target.string() + ": " +
           std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        fail("cannot write " + target_.string() + ": " + std::strerror(w < 0 ? errno : EIO));
      p += w;
      n -= size_t(w);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0)
      fail("cannot write " + target_.string() + ": fsync: " + std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail("cannot write " + target_.string() + ": close: " + std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail("cannot rename " + path_.string() + " to " + target_.string() + ": " +
           std::strerror(errno));
    committed_ = true;
    // Make the rename itself durable; best effort, as some filesystems refuse fsync on directories.
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::filesystem::path target_, path_;
  int fd_ = -1;
  bool committed_ = false;
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

void GgufWriter::add_tensor(std::string name, uint32_t ggml_type, std::vector<int64_t> dims,
                            std::span<const uint8_t> data) {
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
  const size_t expect = size_t(n / info->block_size) * info->block_bytes;
  check(data.size() == expect, what + std::to_string(data.size()) + " bytes given, " +
                                   std::string(info->name) + " of these dims needs " +
                                   std::to_string(expect));
  for (const Tensor& t : tensors_) check(t.name != name, what + "duplicate name");
  tensors_.push_back({std::move(name), ggml_type, std::move(dims), data});
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
    offset += (t.data.size() + align - 1) / align * align;
  }
  out.pad_to(align);

  TempFile file(path);
  file.write_all(out.bytes.data(), out.bytes.size());
  static const char kZeros[256] = {};
  for (const Tensor& t : tensors_) {
    file.write_all(t.data.data(), t.data.size());
    const size_t pad = (align - t.data.size() % align) % align;
    for (size_t left = pad; left > 0;) {
      const size_t n = std::min(left, sizeof kZeros);
      file.write_all(kZeros, n);
      left -= n;
    }
  }
  file.commit();
}

}  // namespace fak
