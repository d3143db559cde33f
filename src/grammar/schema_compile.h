// JSON schema -> grammar nodes (internal; the policy is written at the top of schema_compile.cpp).
// One SchemaCompiler per schema document: $refs resolve against that document, and every node it
// makes goes into a shared Grammar, so several documents (tool parameter schemas) can share one.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/nodes.h"
#include "grammar/number_bounds.h"

namespace fak::grammar {

class SchemaCompiler {
 public:
  // `label` prefixes error messages ("response_format schema", "tool 'get_weather'").
  SchemaCompiler(Grammar& grammar, const fak::ojson& document, const SchemaOptions& options,
                 std::string label);
  uint32_t compile_document();  // the whole document as one value

 private:
  uint32_t compile(const fak::ojson& schema, const std::string& where, int depth);
  uint32_t compile_type(const fak::ojson& schema, const std::string& type, const std::string& where,
                        int depth);
  uint32_t compile_object(const fak::ojson& schema, const std::string& where, int depth);
  uint32_t compile_array(const fak::ojson& schema, const std::string& where, int depth);
  uint32_t compile_literals(const fak::ojson& schema, const std::string& where);
  uint32_t resolve_ref(const std::string& ref, const std::string& where, int depth);
  uint32_t count_keyword(const fak::ojson& schema, const char* keyword, uint32_t fallback,
                         const std::string& where) const;
  // The numeric bounds present; `text` says them as written ("minimum 0 and maximum 10").
  NumberBounds number_bounds(const fak::ojson& schema, const std::string& where,
                             std::string& text) const;
  // The schema's pattern as a string automaton; nullptr when lenient mode skips a refused one.
  std::shared_ptr<const ByteDfa> pattern_automaton(const fak::ojson& schema, uint32_t min_length,
                                                   uint32_t max_length,
                                                   const std::string& where) const;
  [[noreturn]] void fail_at(const std::string& where, const std::string& what) const;

  Grammar& grammar_;
  const fak::ojson& document_;
  SchemaOptions options_;
  std::string label_;
  std::map<std::string, uint32_t> refs_;  // JSON pointer -> node (reserved before compiling)
};

// Shared building blocks (made once per grammar on first need).
uint32_t any_value_node(Grammar& grammar);
uint32_t any_object_node(Grammar& grammar);
uint32_t key_string_node(Grammar& grammar);
uint32_t literals_node(Grammar& grammar, const std::vector<std::string>& literals);
// An object of listed properties, all required, in this order.
uint32_t fixed_object_node(Grammar& grammar,
                           const std::vector<std::pair<std::string, uint32_t>>& properties);

}  // namespace fak::grammar
