// Python str methods with Python's semantics (code points, not bytes; split() on whitespace runs;
// strip with a character set), shared by the filters and the bound methods of jinja_builtins.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace fak::jinja {

// Positional-or-keyword argument access for builtins: get(0, "indent") is args[0] or indent=.
class ArgReader {
 public:
  ArgReader(const CallArgs& args, std::string fn) : args_(args), fn_(std::move(fn)) {}
  bool has(size_t i, const char* name) const;
  Value get(size_t i, const char* name, Value dflt = Value()) const;
  std::string get_string(size_t i, const char* name, std::string dflt = "") const;
  int64_t get_int(size_t i, const char* name, int64_t dflt) const;
  bool get_bool(size_t i, const char* name, bool dflt) const;
  const std::string& fn() const { return fn_; }

 private:
  const CallArgs& args_;
  std::string fn_;
};

bool is_py_space(char32_t c);
// str.strip / lstrip / rstrip; chars unset = whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split(sep=None, maxsplit=-1)
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count, size_t max_size);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
// str.format with {} / {0} / {name} fields (no format specs beyond an empty one).
std::string py_format(const std::string& fmt, const CallArgs& args, size_t max_size);

}  // namespace fak::jinja
