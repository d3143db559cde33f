// A read-only memory map of a whole file. Model weights are used in place from the map (never
// copied unless repacked), so a MappedFile must outlive every view into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace fak {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws fak::Error naming the path when it cannot be opened or mapped. An empty file maps to
  // data() == nullptr, size() == 0.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace fak
