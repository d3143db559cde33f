// JSON schema -> grammar. The policy, which is also what the output of a constrained model looks
// like:
//
// - Supported: type (a name or a list), properties, required, additionalProperties, items,
//   minItems, maxItems, minLength, maxLength (code points), enum, const, anyOf, oneOf, allOf with
//   one subschema, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed, up to
//   kMaxDepth nesting), boolean schemas; minimum, maximum, exclusiveMinimum, exclusiveMaximum
//   (numbers, or draft 4's booleans next to minimum/maximum), exact for any decimal bound, see
//   number_bounds.h; pattern (ECMA-262, the subset in regex.h), with minLength/maxLength too.
// - Ignored as annotations: title, description, default, examples, example, format (an annotation
//   in JSON Schema 2019-09 and later), $schema, $id, $comment, deprecated, readOnly, writeOnly,
//   contentMediaType, contentEncoding, and $defs/definitions themselves.
// - Refused (fak::Error naming the keyword and where it is), unless
//   SchemaOptions::ignore_unsupported_keywords: every other keyword, e.g. multipleOf,
//   uniqueItems, patternProperties, prefixItems, not, if/then/else; allOf with several
//   subschemas; items as a list; $ref or enum/const next to other validation keywords (type
//   aside for enum/const; bounds and pattern next to enum/const drop the values that break them);
//   patterns with what regex.h refuses (backreferences, lookbehinds, ...). Bounds or a pattern
//   that nothing can satisfy ("no integer satisfies minimum 5 and maximum 3") are refused always.
// - Objects with `properties`: only the listed properties, in the schema's order (the order the
//   caller wrote, so pass ordered_json). Required ones always appear; an optional one may appear
//   or be skipped, at most once, and still in order. This holds with or without "strict" and
//   whatever additionalProperties says: extra keys are never generated (every output is still
//   valid when the schema allows them). Objects without `properties` take any keys, with values
//   of additionalProperties (any JSON when absent or true; `{}` only when false).
// - No type: inferred from the keywords present (properties/required/additionalProperties:
//   object, items/minItems/maxItems: array, minLength/maxLength: string); with none of them, any
//   JSON value.
// - oneOf is compiled as anyOf: with overlapping alternatives the output can match several.
// - Numbers are JSON number syntax (integer: no fraction or exponent), at most kMaxIntDigits /
//   kMaxFracDigits / kMaxExpDigits digits per part; with bounds, no exponent and at most 15
//   significant digits (number_bounds.h), and bounds beyond what that can write leave their side
//   free (integer bounds of +-2^53 - 1, as zod writes for .int(), constrain nothing). Strings: any
//   valid UTF-8 except control characters, `"` and `\` unescaped; escapes \" \\ \/ \b \f \n \r \t
//   \uXXXX (surrogates only in pairs); with a pattern, each character in one spelling (regex.h).
//   Keys and enum/const values are written in one canonical way (nlohmann's compact dump).
// - Whitespace: see kMaxIndent in nodes.h (none, one space, or a newline and up to 20 spaces/tabs
//   between tokens); none before the root value or after it.
#include "grammar/schema_compile.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json.h"
#include "grammar/automaton.h"
#include "grammar/number_bounds.h"
#include "grammar/regex.h"

namespace fak::grammar {

using ojson = fak::ojson;

namespace {

constexpr int kMaxSchemaNesting = 64;

bool is_annotation(const std::string& key) {
  static const char* const kAnnotations[] = {"title",
                                             "description",
                                             "default",
                                             "examples",
                                             "example",
                                             "format",
                                             "$schema",
                                             "$id",
                                             "$comment",
                                             "deprecated",
                                             "readOnly",
                                             "writeOnly",
                                             "contentMediaType",
                                             "contentEncoding",
                                             "$defs",
                                             "definitions"};
  return std::find(std::begin(kAnnotations), std::end(kAnnotations), key) != std::end(kAnnotations);
}

// Keywords on a value of one type that enum/const values are checked against, and that lenient
// mode skips where they cannot be enforced (next to $ref, anyOf, allOf), as it did before they
// were supported.
bool is_value_keyword(const std::string& key) {
  return key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
         key == "exclusiveMaximum" || key == "pattern";
}

bool is_supported(const std::string& key) {
  static const char* const kSupported[] = {
      "type",     "enum",      "const",     "anyOf",      "oneOf",
      "allOf",    "$ref",      "required",  "items",      "minItems",
      "maxItems", "minLength", "maxLength", "properties", "additionalProperties"};
  return is_value_keyword(key) ||
         std::find(std::begin(kSupported), std::end(kSupported), key) != std::end(kSupported);
}

const char* type_family(const std::string& key) {
  if (key == "properties" || key == "required" || key == "additionalProperties") return "object";
  if (key == "items" || key == "minItems" || key == "maxItems") return "array";
  if (key == "minLength" || key == "maxLength" || key == "pattern") return "string";
  if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" ||
      key == "exclusiveMaximum")
    return "number";
  return nullptr;
}

// JSON pointer escaping of one reference token, for error locations.
std::string pointer_token(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_text(const ojson& value) {
  try {
    return value.dump();
  } catch (const nlohmann::json::exception&) {
    fail("JSON schema: a key or value is not valid UTF-8");
  }
}

bool value_has_type(const ojson& value, const std::string& type) {
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double x = value.get<double>();
    return std::isfinite(x) && std::floor(x) == x;
  }
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  return false;
}

uint32_t listed_object_node(Grammar& grammar, std::vector<Property> properties) {
  Node node;
  node.kind = NodeKind::kObject;
  node.listed = true;
  node.properties = std::move(properties);
  const size_t n = node.properties.size();
  node.next_required.assign(n + 1, uint32_t(n));
  for (size_t i = n; i-- > 0;)
    node.next_required[i] = node.properties[i].required ? uint32_t(i) : node.next_required[i + 1];
  for (size_t i = 0; i < n; ++i) node.keys.add(json_text(ojson(node.properties[i].name)), i);
  return grammar.add(std::move(node));
}

}  // namespace

uint32_t key_string_node(Grammar& grammar) {
  if (grammar.key_string == kNoNode) grammar.key_string = grammar.add(Node{});
  return grammar.key_string;
}

uint32_t literals_node(Grammar& grammar, const std::vector<std::string>& literals) {
  Node node;
  node.kind = NodeKind::kLiterals;
  for (size_t i = 0; i < literals.size(); ++i) node.literals.add(literals[i], uint32_t(i));
  return grammar.add(std::move(node));
}

uint32_t any_value_node(Grammar& grammar) {
  if (grammar.any_value != kNoNode) return grammar.any_value;
  Node any;
  any.kind = NodeKind::kAnyOf;
  const uint32_t id = grammar.any_value = grammar.add(std::move(any));
  Node object;
  object.kind = NodeKind::kObject;
  object.listed = false;
  object.extra_value = id;
  const uint32_t object_id = grammar.add(std::move(object));
  Node array;
  array.kind = NodeKind::kArray;
  array.items = id;
  const uint32_t array_id = grammar.add(std::move(array));
  Node number;
  number.kind = NodeKind::kNumber;
  const uint32_t number_id = grammar.add(std::move(number));
  const uint32_t words = literals_node(grammar, {"true", "false", "null"});
  grammar.nodes[id].alternatives = {object_id, array_id, key_string_node(grammar), number_id,
                                    words};
  return id;
}

uint32_t any_object_node(Grammar& grammar) {
  return grammar.nodes[any_value_node(grammar)].alternatives[0];
}

uint32_t fixed_object_node(Grammar& grammar,
                           const std::vector<std::pair<std::string, uint32_t>>& properties) {
  std::vector<Property> listed;
  for (const auto& [name, value] : properties) listed.push_back({name, value, true});
  return listed_object_node(grammar, std::move(listed));
}

SchemaCompiler::SchemaCompiler(Grammar& grammar, const ojson& document,
                               const SchemaOptions& options, std::string label)
    : grammar_(grammar), document_(document), options_(options), label_(std::move(label)) {}

void SchemaCompiler::fail_at(const std::string& where, const std::string& what) const {
  fail(label_ + ": " + what + " (at " + where + ")");
}

uint32_t SchemaCompiler::compile_document() {
  return resolve_ref("#", "#", 0);
}

uint32_t SchemaCompiler::count_keyword(const ojson& schema, const char* keyword, uint32_t fallback,
                                       const std::string& where) const {
  auto it = schema.find(keyword);
  if (it == schema.end()) return fallback;
  if (!it->is_number_unsigned() || it->get<uint64_t>() >= kUnbounded)
    fail_at(where, std::string("'") + keyword + "' must be a non-negative integer");
  return uint32_t(it->get<uint64_t>());
}

uint32_t SchemaCompiler::resolve_ref(const std::string& ref, const std::string& where, int depth) {
  if (ref != "#" && ref.rfind("#/", 0) != 0)
    fail_at(where, "$ref '" + ref + "' is not supported: only local references (#/$defs/...)");
  const std::string pointer = ref.substr(1);
  if (auto it = refs_.find(pointer); it != refs_.end()) return it->second;
  const ojson* target = nullptr;
  try {
    const ojson::json_pointer ptr(pointer);
    if (document_.contains(ptr)) target = &document_.at(ptr);
  } catch (const nlohmann::json::exception&) {
    fail_at(where, "$ref '" + ref + "' is not a valid JSON pointer");
  }
  if (!target) fail_at(where, "$ref '" + ref + "' points to nothing");
  // Reserve the node first so that recursive references find it; it forwards to the target
  // (an anyOf of one, flattened away by Grammar::finish).
  Node forward;
  forward.kind = NodeKind::kAnyOf;
  const uint32_t id = grammar_.add(std::move(forward));
  refs_[pointer] = id;
  const uint32_t body = compile(*target, ref, depth + 1);
  grammar_.nodes[id].alternatives = {body};
  return id;
}

uint32_t SchemaCompiler::compile(const ojson& schema, const std::string& where, int depth) {
  if (depth > kMaxSchemaNesting) fail_at(where, "schema nested too deeply");
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) fail_at(where, "schema false admits no value");
    return any_value_node(grammar_);
  }
  if (!schema.is_object()) fail_at(where, "a schema must be an object or a boolean");

  std::vector<std::string> validation;  // supported keywords present
  for (const auto& [key, value] : schema.items()) {
    if (is_annotation(key)) continue;
    if (is_supported(key)) {
      validation.push_back(key);
      continue;
    }
    if (!options_.ignore_unsupported_keywords) fail_at(where, "unsupported keyword '" + key + "'");
  }
  const auto has = [&](const char* key) {
    return std::find(validation.begin(), validation.end(), key) != validation.end();
  };
  const auto only = [&](std::initializer_list<const char*> allowed, const char* main) {
    for (const auto& key : validation) {
      if (options_.ignore_unsupported_keywords && is_value_keyword(key)) continue;
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }) ==
          allowed.end())
        fail_at(where, std::string("'") + main + "' together with '" + key + "' is not supported");
    }
  };

  if (has("$ref")) {
    only({"$ref"}, "$ref");
    const ojson& ref = schema["$ref"];
    if (!ref.is_string()) fail_at(where, "'$ref' must be a string");
    return resolve_ref(ref.get<std::string>(), where, depth);
  }
  if (has("allOf")) {
    only({"allOf"}, "allOf");
    const ojson& all = schema["allOf"];
    if (!all.is_array() || all.size() != 1)
      fail_at(where, "'allOf' is supported with exactly one subschema");
    return compile(all[0], where + "/allOf/0", depth + 1);
  }
  if (has("anyOf") || has("oneOf")) {
    const char* keyword = has("anyOf") ? "anyOf" : "oneOf";
    only({keyword}, keyword);
    const ojson& list = schema[keyword];
    if (!list.is_array() || list.empty())
      fail_at(where, std::string("'") + keyword + "' must be a non-empty array");
    Node any;
    any.kind = NodeKind::kAnyOf;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // admits nothing: drop it
      any.alternatives.push_back(
          compile(list[i], where + "/" + keyword + "/" + std::to_string(i), depth + 1));
    }
    if (any.alternatives.empty()) fail_at(where, std::string("'") + keyword + "' admits no value");
    return grammar_.add(std::move(any));
  }
  if (has("enum") || has("const")) return compile_literals(schema, where);

  std::vector<std::string> types;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const auto& t : *it) {
        if (!t.is_string()) fail_at(where, "'type' must be a string or a list of strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      fail_at(where, "'type' must be a string or a list of strings");
    }
  } else {
    for (const auto& key : validation)
      if (const char* family = type_family(key);
          family && std::find(types.begin(), types.end(), family) == types.end())
        types.push_back(family);
    if (types.empty()) return any_value_node(grammar_);
  }
  if (types.size() == 1) return compile_type(schema, types[0], where, depth);
  Node any;
  any.kind = NodeKind::kAnyOf;
  for (const auto& type : types)
    any.alternatives.push_back(compile_type(schema, type, where, depth));
  return grammar_.add(std::move(any));
}

uint32_t SchemaCompiler::compile_literals(const ojson& schema, const std::string& where) {
  const bool is_const = schema.contains("const");
  if (is_const && schema.contains("enum")) fail_at(where, "'enum' together with 'const'");
  for (const auto& [key, value] : schema.items())
    if (is_supported(key) && key != "enum" && key != "const" && key != "type" &&
        !is_value_keyword(key))
      fail_at(where, std::string("'") + (is_const ? "const" : "enum") + "' together with '" + key +
                         "' is not supported");
  std::string bounds_text;
  const NumberBounds bounds = number_bounds(schema, where, bounds_text);
  std::shared_ptr<const ByteDfa> pattern;
  if (schema.contains("pattern")) pattern = pattern_automaton(schema, 0, kUnbounded, where);
  std::vector<std::string> types;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& t : *it)
        if (t.is_string()) types.push_back(t.get<std::string>());
    }
  }
  ojson values = is_const ? ojson::array({schema["const"]}) : schema["enum"];
  if (!values.is_array() || values.empty()) fail_at(where, "'enum' must be a non-empty array");
  std::vector<std::string> literals;
  bool typed_any = false;
  for (const auto& value : values) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](auto& t) {
                         return value_has_type(value, t);
                       });
    if (!typed) continue;
    typed_any = true;
    if (value.is_number() && !within(bounds, Decimal::from_json(value))) continue;
    const std::string text = json_text(value);
    // nlohmann's dump spells strings the way pattern automata read them (regex.h)
    if (value.is_string() && pattern && !dfa_matches(*pattern, text)) continue;
    literals.push_back(text);
  }
  if (!typed_any) fail_at(where, "no enum/const value has the schema's type");
  if (literals.empty())
    fail_at(where, "no enum/const value satisfies the schema's bounds or pattern");
  return literals_node(grammar_, literals);
}

uint32_t SchemaCompiler::compile_type(const ojson& schema, const std::string& type,
                                      const std::string& where, int depth) {
  if (type == "string") {
    Node node;
    node.kind = NodeKind::kString;
    node.min_length = count_keyword(schema, "minLength", 0, where);
    node.max_length = count_keyword(schema, "maxLength", kUnbounded, where);
    if (node.min_length > node.max_length) fail_at(where, "minLength is above maxLength");
    if (schema.contains("pattern")) {
      node.automaton = pattern_automaton(schema, node.min_length, node.max_length, where);
      if (node.automaton) node.kind = NodeKind::kAutomaton;  // else lenient: pattern skipped
    }
    return grammar_.add(std::move(node));
  }
  if (type == "number" || type == "integer") {
    const bool integer = type == "integer";
    Node node;
    node.kind = integer ? NodeKind::kInteger : NodeKind::kNumber;
    std::string bounds_text;
    const NumberBounds bounds = number_bounds(schema, where, bounds_text);
    if ((!bounds.lower && !bounds.upper) || bounds_vacuous(bounds, integer))
      return grammar_.add(std::move(node));
    node.automaton = shared_automaton(type + " " + bounds_text,
                                      [&] { return bounded_number_automaton(bounds, integer); });
    if (!node.automaton)
      fail_at(where, integer ? "no integer satisfies " + bounds_text + " (with at most " +
                                   std::to_string(kMaxIntDigits) + " digits)"
                             : "no number satisfies " + bounds_text +
                                   " (with at most 15 significant digits, no exponent)");
    node.kind = NodeKind::kAutomaton;
    return grammar_.add(std::move(node));
  }
  if (type == "boolean") return literals_node(grammar_, {"true", "false"});
  if (type == "null") return literals_node(grammar_, {"null"});
  if (type == "object") return compile_object(schema, where, depth);
  if (type == "array") return compile_array(schema, where, depth);
  fail_at(where, "unknown type '" + type + "'");
}

NumberBounds SchemaCompiler::number_bounds(const ojson& schema, const std::string& where,
                                           std::string& text) const {
  NumberBounds bounds;
  text.clear();
  const auto add = [&](std::optional<NumberBound>& slot, NumberBound bound, bool lower,
                       const std::string& said) {
    text += (text.empty() ? "" : " and ") + said;
    if (slot) {  // both minimum and exclusiveMinimum: the stricter one counts
      int c = compare(bound.value, slot->value);
      if (!lower) c = -c;
      if (c < 0 || (c == 0 && !bound.exclusive)) return;
    }
    slot = std::move(bound);
  };
  for (const bool lower : {true, false}) {
    const std::string key = lower ? "minimum" : "maximum";
    const std::string exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    auto& slot = lower ? bounds.lower : bounds.upper;
    const auto inclusive = schema.find(key), exclusive = schema.find(exclusive_key);
    // Draft 4: a boolean exclusiveMinimum says whether minimum itself is excluded.
    bool draft4_exclusive = false;
    if (exclusive != schema.end() && exclusive->is_boolean()) {
      draft4_exclusive = exclusive->get<bool>();
      if (draft4_exclusive && inclusive == schema.end())
        fail_at(where, "'" + exclusive_key + "': true needs '" + key + "' next to it");
    }
    if (inclusive != schema.end()) {
      if (!inclusive->is_number()) fail_at(where, "'" + key + "' must be a number");
      add(slot, {Decimal::from_json(*inclusive), draft4_exclusive}, lower,
          (draft4_exclusive ? exclusive_key + " " : key + " ") + inclusive->dump());
    }
    if (exclusive != schema.end() && !exclusive->is_boolean()) {
      if (!exclusive->is_number())
        fail_at(where, "'" + exclusive_key + "' must be a number (or, in draft 4, a boolean)");
      add(slot, {Decimal::from_json(*exclusive), true}, lower,
          exclusive_key + " " + exclusive->dump());
    }
  }
  return bounds;
}

std::shared_ptr<const ByteDfa> SchemaCompiler::pattern_automaton(const ojson& schema,
                                                                 uint32_t min_length,
                                                                 uint32_t max_length,
                                                                 const std::string& where) const {
  const ojson& pattern = schema["pattern"];
  if (!pattern.is_string()) fail_at(where, "'pattern' must be a string");
  const std::string text = pattern.get<std::string>();
  try {
    return shared_automaton(
        "pattern " + std::to_string(min_length) + " " + std::to_string(max_length) + " " + text,
        [&] { return pattern_string_automaton(text, min_length, max_length); });
  } catch (const Error& e) {
    if (options_.ignore_unsupported_keywords) return nullptr;  // lenient: the pattern is skipped
    fail_at(where, e.what());
  }
}

uint32_t SchemaCompiler::compile_object(const ojson& schema, const std::string& where, int depth) {
  std::vector<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) fail_at(where, "'required' must be an array of strings");
    for (const auto& name : *it) {
      if (!name.is_string()) fail_at(where, "'required' must be an array of strings");
      required.push_back(name.get<std::string>());
    }
  }
  const auto additional = schema.find("additionalProperties");
  const auto properties = schema.find("properties");
  if (properties == schema.end()) {
    if (!required.empty())
      fail_at(where, "required property '" + required[0] + "' is not in 'properties'");
    if (additional != schema.end() && additional->is_boolean() && !additional->get<bool>())
      return listed_object_node(grammar_, {});
    Node node;
    node.kind = NodeKind::kObject;
    node.listed = false;
    key_string_node(grammar_);
    node.extra_value = additional == schema.end()
                           ? any_value_node(grammar_)
                           : compile(*additional, where + "/additionalProperties", depth + 1);
    return grammar_.add(std::move(node));
  }
  if (!properties->is_object()) fail_at(where, "'properties' must be an object");
  for (const auto& name : required)
    if (!properties->contains(name))
      fail_at(where, "required property '" + name + "' is not in 'properties'");
  std::vector<Property> listed;
  for (const auto& [name, sub] : properties->items()) {
    const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
    const std::string sub_where = where + "/properties/" + pointer_token(name);
    if (sub.is_boolean() && !sub.get<bool>()) {
      if (is_required) fail_at(sub_where, "required property admits no value");
      continue;  // may never appear
    }
    listed.push_back({name, compile(sub, sub_where, depth + 1), is_required});
  }
  return listed_object_node(grammar_, std::move(listed));
}

uint32_t SchemaCompiler::compile_array(const ojson& schema, const std::string& where, int depth) {
  Node node;
  node.kind = NodeKind::kArray;
  node.min_items = count_keyword(schema, "minItems", 0, where);
  node.max_items = count_keyword(schema, "maxItems", kUnbounded, where);
  if (node.min_items > node.max_items) fail_at(where, "minItems is above maxItems");
  const auto items = schema.find("items");
  if (items == schema.end()) {
    node.items = any_value_node(grammar_);
  } else if (items->is_array()) {
    fail_at(where, "'items' as a list (tuple validation) is not supported");
  } else if (items->is_boolean() && !items->get<bool>()) {
    if (node.min_items > 0) fail_at(where, "minItems above 0 with 'items': false");
    node.max_items = 0;
    node.items = any_value_node(grammar_);  // never pushed
  } else {
    node.items = compile(*items, where + "/items", depth + 1);
  }
  return grammar_.add(std::move(node));
}

// ---- public entry points ---------------------------------------------------------------------

namespace {

std::shared_ptr<const Grammar> finished(std::unique_ptr<Grammar> grammar) {
  grammar->finish();
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const ojson& schema,
                                                   const SchemaOptions& options) {
  auto grammar = std::make_unique<Grammar>();
  SchemaCompiler compiler(*grammar, schema, options, "JSON schema");
  grammar->root = compiler.compile_document();
  return finished(std::move(grammar));
}

std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_text,
                                                        const SchemaOptions& options) {
  ojson schema;
  try {
    schema = ojson::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("JSON schema is not valid JSON: ") + e.what());
  }
  return compile_json_schema(schema, options);
}

std::shared_ptr<const Grammar> any_json_object_grammar() {
  auto grammar = std::make_unique<Grammar>();
  grammar->root = any_object_node(*grammar);
  return finished(std::move(grammar));
}

std::shared_ptr<const Grammar> compile_response_format(const ojson& format,
                                                       const SchemaOptions& options) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    fail("response_format must be an object with a string 'type'");
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return any_json_object_grammar();
  if (type != "json_schema") fail("response_format type '" + type + "' is not supported");
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object() || !spec->contains("schema"))
    fail("response_format json_schema needs json_schema.schema");
  return compile_json_schema((*spec)["schema"], options);
}

}  // namespace fak::grammar
