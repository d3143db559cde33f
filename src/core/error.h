// Errors: every failure the user can cause (bad file, wrong shape, unknown architecture, over-long
// prompt) is a fak::Error with one message naming the thing. Thrown inside the library, caught once
// at the CLI/server edge.
#pragma once

#include <stdexcept>
#include <string>

namespace fak {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

inline void check(bool ok, const std::string& message) {
  if (!ok) fail(message);
}

}  // namespace fak
