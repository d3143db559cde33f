// GgufWriter: collects metadata and tensors and writes a GGUF v3 file atomically (temp file in the
// same directory, fsync, rename), so a crash or a full disk never leaves a half-written model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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

  // Adds a tensor whose bytes `make` hands to its sink, in order and in any number of pieces, when
  // write() reaches it: a file of many GB is written without holding its tensors (fak synth
  // --gguf). write() fails naming the tensor if they do not add up to what its type and dims need.
  using TensorSink = std::function<void(std::span<const uint8_t>)>;
  using TensorMaker = std::function<void(const TensorSink&)>;
  void add_tensor_made(std::string name, uint32_t ggml_type, std::vector<int64_t> dims,
                       TensorMaker make);

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
    size_t nbytes = 0;  // data.size(), or what `make` must hand over
    TensorMaker make;
  };
  // Checks name, type and dims; the bytes they need.
  size_t check_tensor(const std::string& name, uint32_t ggml_type,
                      const std::vector<int64_t>& dims) const;
  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace fak
