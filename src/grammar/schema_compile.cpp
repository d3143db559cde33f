// JSON schema -> grammar. The policy, which is also what the output of a constrained model looks
// like:
//
// - Supported: type (a name or a list), properties, required, additionalProperties, items,
//   minItems, maxItems, minLength, maxLength (code points), enum, const, anyOf, oneOf, allOf with
//   one subschema, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed, up to
//   kMaxDepth nesting), boolean schemas.
// - Ignored as annotations: title, description, default, examples, example, format (an annotation
//   in JSON Schema 2019-09 and later), $schema, $id, $comment, deprecated, readOnly, writeOnly,
//   contentMediaType, contentEncoding, and $defs/definitions themselves.
// - Refused (fak::Error naming the keyword and where it is), unless
//   SchemaOptions::ignore_unsupported_keywords: every other keyword, e.g. pattern, minimum,
//   maximum, multipleOf, uniqueItems, patternProperties, prefixItems, not, if/then/else; allOf
//   with several subschemas; items as a list; $ref or enum/const next to other validation
//   keywords (type aside for enum/const).
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
//   kMaxFracDigits / kMaxExpDigits digits per part. Strings: any valid UTF-8 except control
//   characters, `"` and `\` unescaped; escapes \" \\ \/ \b \f \n \r \t \uXXXX (surrogates only in
//   pairs). Keys and enum/const values are written in one canonical way (nlohmann's compact dump).
// - Whitespace: see kMaxIndent in nodes.h (none, one space, or a newline and up to 20 spaces/tabs
//   between tokens); none before the root value or after it.
#include "grammar/schema_compile.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fak::grammar {

using ojson = nlohmann::ordered_json;

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

bool is_supported(const std::string& key) {
  static const char* const kSupported[] = {
      "type",     "enum",      "const",     "anyOf",      "oneOf",
      "allOf",    "$ref",      "required",  "items",      "minItems",
      "maxItems", "minLength", "maxLength", "properties", "additionalProperties"};
  return std::find(std::begin(kSupported), std::end(kSupported), key) != std::end(kSupported);
}

const char* type_family(const std::string& key) {
  if (key == "properties" || key == "required" || key == "additionalProperties") return "object";
  if (key == "items" || key == "minItems" || key == "maxItems") return "array";
  if (key == "minLength" || key == "maxLength") return "string";
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
    for (const auto& key : validation)
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }) ==
          allowed.end())
        fail_at(where, std::string("'") + main + "' together with '" + key + "' is not supported");
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
    if (is_supported(key) && key != "enum" && key != "const" && key != "type")
      fail_at(where, std::string("'") + (is_const ? "const" : "enum") + "' together with '" + key +
                         "' is not supported");
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
  for (const auto& value : values) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](auto& t) {
                         return value_has_type(value, t);
                       });
    if (typed) literals.push_back(json_text(value));
  }
  if (literals.empty()) fail_at(where, "no enum/const value has the schema's type");
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
    return grammar_.add(std::move(node));
  }
  if (type == "number" || type == "integer") {
    Node node;
    node.kind = type == "number" ? NodeKind::kNumber : NodeKind::kInteger;
    return grammar_.add(std::move(node));
  }
  if (type == "boolean") return literals_node(grammar_, {"true", "false"});
  if (type == "null") return literals_node(grammar_, {"null"});
  if (type == "object") return compile_object(schema, where, depth);
  if (type == "array") return compile_array(schema, where, depth);
  fail_at(where, "unknown type '" + type + "'");
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
