// GGUF model files (llama.cpp's format), versions 2 and 3, little-endian: metadata key/values and
// tensor infos parsed and validated up front, tensor data used in place from a memory map.
//
// Layout: "GGUF" u32 version, u64 n_tensors, u64 n_kv; n_kv × (string key, u32 value type, value);
// n_tensors × (string name, u32 n_dims, u64 dims[n_dims] (ne0 first), u32 ggml type, u64 offset);
// padding to general.alignment (default 32); tensor data at data_offset + offset. A string is a u64
// length and bytes (no NUL); an array is u32 element type, u64 count, elements.
//
// Every length, count, offset and size is checked against the file before use, so a truncated or
// hostile file gives a fak::Error naming the file and the key or tensor, never a crash or a huge
// allocation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/mapped_file.h"

namespace fak {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "u32", "string", "array", ...
size_t gguf_scalar_size(GgufType t);          // bytes of a numeric/bool value; 0 for string/array

// An array value. Exactly one storage is used, chosen by the element type.
struct GgufArray {
  GgufType type = GgufType::U8;      // element type
  std::vector<uint8_t> raw;          // numeric/bool elements, packed little-endian as in the file
  std::vector<std::string> strings;  // STRING elements
  std::vector<GgufArray> arrays;     // ARRAY elements (arrays of arrays)

  size_t size() const;
  // Element i of a numeric/bool array, widened. Throw fak::Error on a type that does not convert
  // (e.g. u64() of a negative i32, f64() of a string array).
  uint64_t u64(size_t i) const;
  int64_t i64(size_t i) const;
  double f64(size_t i) const;

  static GgufArray numbers(GgufType type, const void* data, size_t count);  // copies the elements
  static GgufArray of_strings(std::vector<std::string> strings);
  static GgufArray of_arrays(std::vector<GgufArray> arrays);
};

// A metadata value: the member matching `type` holds it.
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;   // U8, U16, U32, U64, BOOL (0 or 1)
  int64_t i = 0;    // I8, I16, I32, I64
  double f = 0;     // F32, F64 (F32 widened exactly)
  std::string s;    // STRING
  GgufArray array;  // ARRAY

  static GgufValue make_u8(uint8_t v) { return unsigned_of(GgufType::U8, v); }
  static GgufValue make_u16(uint16_t v) { return unsigned_of(GgufType::U16, v); }
  static GgufValue make_u32(uint32_t v) { return unsigned_of(GgufType::U32, v); }
  static GgufValue make_u64(uint64_t v) { return unsigned_of(GgufType::U64, v); }
  static GgufValue make_i8(int8_t v) { return signed_of(GgufType::I8, v); }
  static GgufValue make_i16(int16_t v) { return signed_of(GgufType::I16, v); }
  static GgufValue make_i32(int32_t v) { return signed_of(GgufType::I32, v); }
  static GgufValue make_i64(int64_t v) { return signed_of(GgufType::I64, v); }
  static GgufValue make_f32(float v);
  static GgufValue make_f64(double v);
  static GgufValue make_bool(bool v) { return unsigned_of(GgufType::BOOL, v ? 1 : 0); }
  static GgufValue make_string(std::string v);
  static GgufValue make_array(GgufArray v);

 private:
  static GgufValue unsigned_of(GgufType t, uint64_t v);
  static GgufValue signed_of(GgufType t, int64_t v);
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;     // ggml type id; see io/ggml_type.h
  std::vector<int64_t> dims;  // ne0 first (the contiguous dimension), as ggml orders them
  uint64_t offset = 0;        // from the start of the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws fak::Error naming the file on any malformed content.
  static GgufFile open(const std::filesystem::path& path);
  // Parses bytes owned by the caller, which must outlive the GgufFile; `name` is used in errors.
  static GgufFile from_memory(std::span<const uint8_t> bytes, std::string name);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  const std::string& name() const { return name_; }      // the path or the from_memory name

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  // Typed getters throw fak::Error naming file and key when the key is missing or the value does
  // not convert: get_u32/get_u64/get_i64 accept any integer type whose value fits, get_f32 accepts
  // f32 and f64.
  const std::string& get_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  float get_f32_or(std::string_view key, float fallback) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;  // nullptr when absent

  // Frees the elements of every metadata array (each then reads as empty): for a file kept only
  // for its tensors once its metadata has been read (a model's: the tokenizer's token, merge and
  // score arrays are 10-20 MB for a 150-250k vocabulary, held as long as the weights otherwise).
  void release_arrays();

 private:
  void parse(std::span<const uint8_t> bytes);
  const GgufValue& require(std::string_view key) const;
  [[noreturn]] void fail_key(std::string_view key, const std::string& what) const;

  MappedFile map_;  // empty for from_memory
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace fak
