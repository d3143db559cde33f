// Qwen/Hermes tool calls as a grammar: the OpenAI `tools` list becomes
//   <tool_call>\n{"name": "<name>", "arguments": <parameters>}\n</tool_call>
// with "name" first and "arguments" second (the order Qwen's chat template shows the model),
// each name tied to its own parameters schema (an anyOf of one object per tool, told apart by
// the name's bytes). The JSON between the tags follows the usual whitespace policy (nodes.h); the
// tags and the newlines around the JSON are exact. With max_calls > 1, further blocks follow
// after one "\n".
#include "core/error.h"
#include "core/json.h"
#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/nodes.h"
#include "grammar/schema_compile.h"

namespace fak::grammar {

using ojson = fak::ojson;

std::shared_ptr<const Grammar> compile_tool_calls(const ojson& tools,
                                                  const ToolCallOptions& options) {
  check(tools.is_array(), "tools must be an array");
  check(options.max_calls >= 1 && options.max_calls <= 255, "tool calls: max_calls must be 1-255");
  auto grammar = std::make_unique<Grammar>();
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  bool found_only = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const ojson& tool = tools[i];
    check(tool.is_object(), where + " must be an object");
    if (tool.contains("type"))
      check(tool["type"] == "function", where + ": only type \"function\" is supported");
    const auto function = tool.find("function");
    check(function != tool.end() && function->is_object(), where + " has no 'function' object");
    const auto name = function->find("name");
    check(name != function->end() && name->is_string() && !name->get<std::string>().empty(),
          where + ".function has no name");
    const std::string tool_name = name->get<std::string>();
    if (!options.only_function.empty() && tool_name != options.only_function) continue;
    found_only = true;

    uint32_t arguments;
    const auto parameters = function->find("parameters");
    if (parameters == function->end() || parameters->is_null()) {
      arguments = fixed_object_node(*grammar, {});  // no parameters: {}
    } else {
      SchemaCompiler compiler(*grammar, *parameters, options.schema,
                              "tool '" + tool_name + "' parameters");
      arguments = compiler.compile_document();
    }
    const uint32_t name_node = literals_node(*grammar, {ojson(tool_name).dump()});
    calls.alternatives.push_back(
        fixed_object_node(*grammar, {{"name", name_node}, {"arguments", arguments}}));
  }
  if (!options.only_function.empty())
    check(found_only,
          "tool_choice names function '" + options.only_function + "', which is not in tools");
  check(!calls.alternatives.empty(), "tool calls need at least one tool");
  const uint32_t any_call = grammar->add(std::move(calls));

  Node block;
  block.kind = NodeKind::kSequence;
  block.sequence = {{"<tool_call>\n", kNoNode}, {"", any_call}, {"\n</tool_call>", kNoNode}};
  block.max_repeat = uint32_t(options.max_calls);
  block.separator = "\n";
  grammar->root = grammar->add(std::move(block));
  grammar->finish();
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

namespace {

// A GLM argument value written as text: any bytes but '<' (so it cannot run into the closing
// </arg_value>), between the schema's minLength and maxLength bytes (at most 1000 counted; longer
// or no maxLength: unbounded).
std::shared_ptr<const ByteDfa> raw_text_automaton(uint32_t min_length, uint32_t max_length) {
  if (max_length > 1000) max_length = kUnbounded;
  if (min_length > 1000) min_length = 1000;
  const std::string key =
      "glm raw argument text " + std::to_string(min_length) + ".." + std::to_string(max_length);
  return shared_automaton(key, [&] {
    DfaDraft d;
    auto text_edges = [&](uint32_t from, uint32_t to) {
      d.add_edge(from, '\t', '\n', to);
      d.add_edge(from, '\r', '\r', to);
      d.add_edge(from, 0x20, '<' - 1, to);
      d.add_edge(from, '<' + 1, 0xFF, to);
    };
    const uint32_t states = max_length == kUnbounded ? min_length + 1 : max_length + 1;
    for (uint32_t i = 0; i < states; ++i) d.add_state(i >= min_length);
    for (uint32_t i = 0; i + 1 < states; ++i) text_edges(i, i + 1);
    if (max_length == kUnbounded) text_edges(states - 1, states - 1);
    return finish_dfa(d, "GLM argument text");
  });
}

uint32_t length_of(const ojson& schema, const char* key, uint32_t fallback) {
  if (!schema.contains(key) || !schema[key].is_number_unsigned()) return fallback;
  const uint64_t v = schema[key].get<uint64_t>();
  return v > 1000000 ? fallback : uint32_t(v);
}

}  // namespace

bool schema_takes_only_strings(const ojson& schema) {
  if (!schema.is_object()) return false;
  auto all_strings = [](const ojson& list) {
    if (!list.is_array() || list.empty()) return false;
    for (const ojson& v : list)
      if (!v.is_string()) return false;
    return true;
  };
  if (schema.contains("const")) return schema["const"].is_string();
  if (schema.contains("enum")) return all_strings(schema["enum"]);
  return schema.contains("type") && schema["type"] == "string";
}

std::shared_ptr<const Grammar> compile_glm_tool_calls(const ojson& tools,
                                                      const ToolCallOptions& options) {
  check(tools.is_array(), "tools must be an array");
  check(options.max_calls >= 1 && options.max_calls <= 255, "tool calls: max_calls must be 1-255");
  auto grammar = std::make_unique<Grammar>();
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  bool found_only = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const ojson& tool = tools[i];
    check(tool.is_object(), where + " must be an object");
    if (tool.contains("type"))
      check(tool["type"] == "function", where + ": only type \"function\" is supported");
    const auto function = tool.find("function");
    check(function != tool.end() && function->is_object(), where + " has no 'function' object");
    const auto name = function->find("name");
    check(name != function->end() && name->is_string() && !name->get<std::string>().empty(),
          where + ".function has no name");
    const std::string tool_name = name->get<std::string>();
    for (char c : tool_name)
      check(c != '\n' && c != '<', where + ": a GLM tool name cannot hold '<' or a newline");
    if (!options.only_function.empty() && tool_name != options.only_function) continue;
    found_only = true;
    // The name, then each required parameter as a key / value pair, in the schema's order.
    Node call;
    call.kind = NodeKind::kSequence;
    call.sequence.push_back({tool_name + "\n", kNoNode});
    const auto parameters = function->find("parameters");
    if (parameters != function->end() && parameters->is_object() &&
        parameters->contains("properties")) {
      const ojson& props = (*parameters)["properties"];
      const ojson required =
          parameters->contains("required") ? (*parameters)["required"] : ojson::array();
      check(props.is_object(), where + ": parameters.properties must be an object");
      for (const auto& [key, schema] : props.items()) {
        bool is_required = false;
        for (const ojson& r : required) is_required = is_required || r == key;
        if (!is_required) continue;
        uint32_t value;
        if (schema.is_object() && (schema.contains("enum") || schema.contains("const")) &&
            schema_takes_only_strings(schema)) {
          // The strings themselves, written as text.
          std::vector<std::string> values;
          if (schema.contains("const")) values.push_back(schema["const"].get<std::string>());
          if (schema.contains("enum"))
            for (const ojson& v : schema["enum"]) values.push_back(v.get<std::string>());
          for (const std::string& v : values)
            check(v.find('<') == std::string::npos,
                  where + ": a GLM string value cannot hold '<' ('" + key + "')");
          value = literals_node(*grammar, values);
        } else if (schema_takes_only_strings(schema)) {
          Node raw;
          raw.kind = NodeKind::kAutomaton;
          raw.automaton = raw_text_automaton(length_of(schema, "minLength", 0),
                                             length_of(schema, "maxLength", kUnbounded));
          value = grammar->add(std::move(raw));
        } else {
          SchemaCompiler compiler(*grammar, schema, options.schema,
                                  "tool '" + tool_name + "' parameter '" + key + "'");
          value = compiler.compile_document();
        }
        call.sequence.push_back({"<arg_key>" + key + "</arg_key>\n<arg_value>", kNoNode});
        call.sequence.push_back({"", value});
        call.sequence.push_back({"</arg_value>\n", kNoNode});
      }
    }
    calls.alternatives.push_back(grammar->add(std::move(call)));
  }
  if (!options.only_function.empty())
    check(found_only,
          "tool_choice names function '" + options.only_function + "', which is not in tools");
  check(!calls.alternatives.empty(), "tool calls need at least one tool");
  const uint32_t any_call = grammar->add(std::move(calls));
  Node block;
  block.kind = NodeKind::kSequence;
  block.sequence = {{"<tool_call>", kNoNode}, {"", any_call}, {"</tool_call>", kNoNode}};
  block.max_repeat = uint32_t(options.max_calls);
  block.separator = "\n";
  grammar->root = grammar->add(std::move(block));
  grammar->finish();
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace fak::grammar
