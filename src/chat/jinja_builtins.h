// Jinja's built-in library as chat templates use it: filters (tojson, trim, join, map, ...), tests
// (defined, none, string, ...), Python methods on str/dict/list (startswith, get, items, ...) and
// globals (range, namespace, raise_exception, strftime_now).
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace fak::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);

// obj.name as jinja2's sandbox resolves it: Python attributes (methods) first, then dict keys.
// A missing attribute is Undefined, never an error (using it may be).
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: item first, then attribute for string keys. Out of range is Undefined.
Value get_item(const Value& obj, const Value& key);

// The globals every template sees.
void add_globals(Dict& globals);

}  // namespace fak::jinja
