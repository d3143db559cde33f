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

namespace {

struct ListedTool {
  std::string name;
  const ojson* parameters = nullptr;  // null: the tool takes none
  std::string where;                  // "tools[3]", for errors
};

// The tools a forced call may name (every listed one, or options.only_function), checked.
std::vector<ListedTool> listed_tools(const ojson& tools, const ToolCallOptions& options) {
  check(tools.is_array(), "tools must be an array");
  check(options.max_calls >= 1 && options.max_calls <= 255, "tool calls: max_calls must be 1-255");
  std::vector<ListedTool> out;
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
    const auto parameters = function->find("parameters");
    out.push_back({tool_name,
                   parameters == function->end() || parameters->is_null() ? nullptr : &*parameters,
                   where});
  }
  if (!options.only_function.empty())
    check(!out.empty(),
          "tool_choice names function '" + options.only_function + "', which is not in tools");
  check(!out.empty(), "tool calls need at least one tool");
  return out;
}

// The grammar's root: up to max_calls blocks of `open`, one of the calls, `close`, "\n" between.
std::shared_ptr<const Grammar> calls_grammar(std::unique_ptr<Grammar> grammar, Node calls,
                                             const char* open, const char* close,
                                             const ToolCallOptions& options) {
  const uint32_t any_call = grammar->add(std::move(calls));
  Node block;
  block.kind = NodeKind::kSequence;
  block.sequence = {{open, kNoNode}, {"", any_call}, {close, kNoNode}};
  block.max_repeat = uint32_t(options.max_calls);
  block.separator = "\n";
  grammar->root = grammar->add(std::move(block));
  grammar->finish();
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace

std::shared_ptr<const Grammar> compile_tool_calls(const ojson& tools,
                                                  const ToolCallOptions& options) {
  auto grammar = std::make_unique<Grammar>();
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  for (const ListedTool& tool : listed_tools(tools, options)) {
    uint32_t arguments;
    if (!tool.parameters) {
      arguments = fixed_object_node(*grammar, {});  // no parameters: {}
    } else {
      SchemaCompiler compiler(*grammar, *tool.parameters, options.schema,
                              "tool '" + tool.name + "' parameters");
      arguments = compiler.compile_document();
    }
    const uint32_t name_node = literals_node(*grammar, {ojson(tool.name).dump()});
    calls.alternatives.push_back(
        fixed_object_node(*grammar, {{"name", name_node}, {"arguments", arguments}}));
  }
  return calls_grammar(std::move(grammar), std::move(calls), "<tool_call>\n", "\n</tool_call>",
                       options);
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

// One GLM argument's value: strings as text (an enum or const of them: those strings), anything
// else as JSON under its schema.
uint32_t glm_value_node(Grammar& grammar, const ojson& schema, const ListedTool& tool,
                        const std::string& key, const ToolCallOptions& options) {
  if (schema.is_object() && (schema.contains("enum") || schema.contains("const")) &&
      schema_takes_only_strings(schema)) {
    std::vector<std::string> values;
    if (schema.contains("const")) values.push_back(schema["const"].get<std::string>());
    if (schema.contains("enum"))
      for (const ojson& v : schema["enum"]) values.push_back(v.get<std::string>());
    for (const std::string& v : values)
      check(v.find('<') == std::string::npos,
            tool.where + ": a GLM string value cannot hold '<' ('" + key + "')");
    return literals_node(grammar, values);
  }
  if (schema_takes_only_strings(schema)) {
    Node raw;
    raw.kind = NodeKind::kAutomaton;
    raw.automaton = raw_text_automaton(length_of(schema, "minLength", 0),
                                       length_of(schema, "maxLength", kUnbounded));
    return grammar.add(std::move(raw));
  }
  SchemaCompiler compiler(grammar, schema, options.schema,
                          "tool '" + tool.name + "' parameter '" + key + "'");
  return compiler.compile_document();
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
  auto grammar = std::make_unique<Grammar>();
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  for (const ListedTool& tool : listed_tools(tools, options)) {
    for (char c : tool.name)
      check(c != '\n' && c != '<', tool.where + ": a GLM tool name cannot hold '<' or a newline");
    // The name, then each required parameter as a key / value pair, in the schema's order.
    Node call;
    call.kind = NodeKind::kSequence;
    call.sequence.push_back({tool.name + "\n", kNoNode});
    if (tool.parameters && tool.parameters->is_object() &&
        tool.parameters->contains("properties")) {
      const ojson& params = *tool.parameters;
      const ojson& props = params["properties"];
      const ojson required = params.contains("required") ? params["required"] : ojson::array();
      check(props.is_object(), tool.where + ": parameters.properties must be an object");
      for (const auto& [key, schema] : props.items()) {
        bool is_required = false;
        for (const ojson& r : required) is_required = is_required || r == key;
        if (!is_required) continue;
        call.sequence.push_back({"<arg_key>" + key + "</arg_key>\n<arg_value>", kNoNode});
        call.sequence.push_back({"", glm_value_node(*grammar, schema, tool, key, options)});
        call.sequence.push_back({"</arg_value>\n", kNoNode});
      }
    }
    calls.alternatives.push_back(grammar->add(std::move(call)));
  }
  return calls_grammar(std::move(grammar), std::move(calls), "<tool_call>", "</tool_call>",
                       options);
}

}  // namespace fak::grammar
