// safetensors: read (memory-mapped, validated) and write (atomic). Also a TensorStore over a model
// directory: one model.safetensors or shards listed in model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace fak {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapped file
  size_t nbytes = 0;
  std::string file;  // which file it came from, for error messages

  int64_t numel() const;
  std::string shape_string() const;  // "[896, 151936]"
};

class SafetensorsFile {
 public:
  // Maps and validates the whole header: JSON well-formed, every dtype known, every shape's byte
  // size equal to its data_offsets span, offsets inside the file and not overlapping.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Same checks over bytes the caller keeps alive (fuzzing, tests).
  static SafetensorsFile from_memory(std::string_view bytes, std::string label = "<memory>");

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return file_.path(); }  // empty from memory

 private:
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

class TensorStore {
 public:
  // dir/model.safetensors, or dir/model.safetensors.index.json and the shards it names.
  static TensorStore open_dir(const std::filesystem::path& dir);
  static TensorStore open_file(const std::filesystem::path& path);

  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& get(std::string_view name) const;  // throws "missing tensor NAME in DIR"
  std::vector<const TensorInfo*> all() const;
  const std::filesystem::path& source() const { return source_; }
  // The files the tensors come from, in the order they were opened.
  std::vector<std::filesystem::path> file_paths() const;

 private:
  std::filesystem::path source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Reads a tensor into f32 / i64 (any float dtype widened; ints for i64). For references and tests.
std::vector<float> read_f32(const TensorInfo& t);
std::vector<int64_t> read_i64(const TensorInfo& t);

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string_view bytes;  // exactly numel * dtype_size bytes
};
// Written through an AtomicFile (io/atomic_file.h): a crash never leaves a half file. Throws on any
// I/O error.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fak
