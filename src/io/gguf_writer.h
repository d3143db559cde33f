// GgufWriter: collects metadata and tensors and writes a GGUF v3 file atomically (temp file in the
// same directory, fsync, rename), so a crash or a full disk never leaves a half-written model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace fak {

class GgufWriter {
 public:
  // Sets a metadata value, replacing an earlier value of the same key (file order is first-set).
  void set(std::string key, GgufValue value);
  void set_u32(std::string key, uint32_t v) { set(std::move(key), GgufValue::make_u32(v)); }
  void set_i32(std::string key, int32_t v) { set(std::move(key), GgufValue::make_i32(v)); }
  void set_u64(std::string key, uint64_t v) { set(std::move(key), GgufValue::make_u64(v)); }
  void set_f32(std::string key, float v) { set(std::move(key), GgufValue::make_f32(v)); }
  void set_bool(std::string key, bool v) { set(std::move(key), GgufValue::make_bool(v)); }
  void set_string(std::string key, std::string v) {
    set(std::move(key), GgufValue::make_string(std::move(v)));
  }

  // Adds a tensor; `data` is not copied and must stay valid until write(). Throws fak::Error on an
  // unknown ggml type, more than 4 dims, a first dim that is not a multiple of the block size, a
  // byte count that does not match type and dims, or a duplicate name.
  void add_tensor(std::string name, uint32_t ggml_type, std::vector<int64_t> dims,
                  std::span<const uint8_t> data);

  // Alignment of the data section: general.alignment when set (a u32 power of two), else 32.
  uint32_t alignment() const;

  // Writes the file. Throws fak::Error naming the path on any I/O failure (e.g. a full disk), in
  // which case the temp file is removed and an existing file at `path` is left untouched.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> dims;
    std::span<const uint8_t> data;
  };
  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace fak
