// Errors: every failure the user can cause (bad file, wrong shape, unknown architecture, over-long
// prompt) is a fak::Error with one message naming the thing. Thrown inside the library, caught once
// at the CLI/server edge.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>

namespace fak {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file system failure under a write (a full disk, a quota, a file size limit, an I/O error):
// the fault of the machine, not of the request, so the server answers 507 or 500 rather than 400.
class StorageError : public Error {
 public:
  StorageError(const std::string& message, int errno_value)
      : Error(message), errno_value(errno_value) {}
  bool out_of_space() const {
    return errno_value == ENOSPC || errno_value == EDQUOT || errno_value == EFBIG;
  }
  int errno_value;
};

[[noreturn]] inline void fail(const std::string& message) {
  throw Error(message);
}

inline void check(bool ok, const std::string& message) {
  if (!ok) fail(message);
}

}  // namespace fak
