// A fuzz target's scratch file or folder: a path in the temporary directory named for this process,
// removed with everything under it when the process exits. The targets run as replay tests in
// every CI run, and one file or folder of each was left behind per run before.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace fuzz {

class ScratchPath {
 public:
  ScratchPath(const std::string& stem, const std::string& suffix)
      : path_(std::filesystem::temp_directory_path() /
              (stem + "_" + std::to_string(::getpid()) + suffix)) {}
  ~ScratchPath() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchPath(const ScratchPath&) = delete;
  ScratchPath& operator=(const ScratchPath&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace fuzz
