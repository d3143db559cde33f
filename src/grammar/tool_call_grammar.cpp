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
                                             const ToolCallOptions& options,
                                             const char* separator = "\n") {
  const uint32_t any_call = grammar->add(std::move(calls));
  Node block;
  block.kind = NodeKind::kSequence;
  // note: an empty open or close (Llama's bare JSON) is no entry at all: an entry of neither text
  // nor node is not nothing to the matcher.
  if (*open) block.sequence.push_back({open, kNoNode});
  block.sequence.push_back({"", any_call});
  if (*close) block.sequence.push_back({close, kNoNode});
  block.max_repeat = uint32_t(options.max_calls);
  block.separator = separator;
  grammar->root = grammar->add(std::move(block));
  grammar->finish();
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace

std::shared_ptr<const Grammar> compile_json_tool_calls(const ojson& tools,
                                                       const ToolCallOptions& options,
                                                       const char* open, const char* close,
                                                       const std::string& arguments_key,
                                                       const char* separator) {
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
        fixed_object_node(*grammar, {{"name", name_node}, {arguments_key, arguments}}));
  }
  return calls_grammar(std::move(grammar), std::move(calls), open, close, options, separator);
}

std::shared_ptr<const Grammar> compile_tool_calls(const ojson& tools,
                                                  const ToolCallOptions& options) {
  return compile_json_tool_calls(tools, options, "<tool_call>\n", "\n</tool_call>", "arguments",
                                 "\n");
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

// Text up to and including the first `stop` (the closing markup after a value): a KMP automaton
// over the bytes of stop that accepts only once it has read all of it. Values may hold anything
// else, '<' and newlines included (code), and the value's end is where the markup is, with no
// choice left to the matcher.
std::shared_ptr<const ByteDfa> text_then(const std::string& stop) {
  return shared_automaton("text then " + stop, [&] {
    std::vector<uint32_t> failure(stop.size() + 1, 0);
    for (size_t i = 1, k = 0; i < stop.size(); ++i) {
      while (k > 0 && stop[i] != stop[k]) k = failure[k];
      if (stop[i] == stop[k]) ++k;
      failure[i + 1] = uint32_t(k);
    }
    DfaDraft d;
    for (size_t i = 0; i <= stop.size(); ++i) d.add_state(i == stop.size());  // i bytes read
    for (size_t state = 0; state < stop.size(); ++state) {
      auto next = [&](unsigned char b) {
        size_t k = state;
        while (k > 0 && b != static_cast<unsigned char>(stop[k])) k = failure[k];
        if (b == static_cast<unsigned char>(stop[k])) ++k;
        return k;
      };
      // Consecutive bytes with the same target make one edge.
      int lo = 0;
      size_t target = next(0);
      for (int b = 1; b <= 256; ++b) {
        const size_t t = b < 256 ? next(static_cast<unsigned char>(b)) : SIZE_MAX;
        if (t == target) continue;
        d.add_edge(uint32_t(state), uint8_t(lo), uint8_t(b - 1), uint32_t(target));
        lo = b;
        target = t;
      }
    }
    return finish_dfa(d, "text then " + stop);
  });
}

// One Qwen XML parameter value and its closing "\n</parameter>": text for a string type (or no
// schema to say), true/false (either case, as Python's str() writes them) for a boolean, else JSON
// under its schema.
uint32_t xml_value_node(Grammar& grammar, const ojson& schema, const ListedTool& tool,
                        const std::string& key, const ToolCallOptions& options) {
  const std::string type =
      schema.is_object() && schema.contains("type") && schema["type"].is_string()
          ? schema["type"].get<std::string>()
          : "";
  if (schema.is_object() && (schema.contains("enum") || schema.contains("const")) &&
      schema_takes_only_strings(schema)) {
    std::vector<std::string> values;
    if (schema.contains("const")) values.push_back(schema["const"].get<std::string>());
    if (schema.contains("enum"))
      for (const ojson& v : schema["enum"]) values.push_back(v.get<std::string>());
    for (std::string& v : values) v += "\n</parameter>";
    return literals_node(grammar, values);
  }
  if (!schema.is_object() || schema_takes_only_strings(schema)) {
    Node raw;
    raw.kind = NodeKind::kAutomaton;
    raw.automaton = text_then("\n</parameter>");
    return grammar.add(std::move(raw));
  }
  Node value;
  value.kind = NodeKind::kSequence;
  if (type == "boolean") {
    value.sequence.push_back({"", literals_node(grammar, {"true", "false", "True", "False"})});
  } else {
    SchemaCompiler compiler(grammar, schema, options.schema,
                            "tool '" + tool.name + "' parameter '" + key + "'");
    value.sequence.push_back({"", compiler.compile_document()});
  }
  value.sequence.push_back({"\n</parameter>", kNoNode});
  return grammar.add(std::move(value));
}

}  // namespace

std::shared_ptr<const Grammar> compile_qwen_xml_tool_calls(const ojson& tools,
                                                           const ToolCallOptions& options) {
  auto grammar = std::make_unique<Grammar>();
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  for (const ListedTool& tool : listed_tools(tools, options)) {
    for (char c : tool.name)
      check(c != '\n' && c != '>' && c != '<',
            tool.where + ": a Qwen XML tool name cannot hold '<', '>' or a newline");
    // The function, then each required parameter in the schema's order.
    Node call;
    call.kind = NodeKind::kSequence;
    call.sequence.push_back({"<function=" + tool.name + ">\n", kNoNode});
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
        check(key.find('>') == std::string::npos && key.find('\n') == std::string::npos,
              tool.where + ": a Qwen XML parameter name cannot hold '>' or a newline");
        call.sequence.push_back({"<parameter=" + key + ">\n", kNoNode});
        call.sequence.push_back({"", xml_value_node(*grammar, schema, tool, key, options)});
        call.sequence.push_back({"\n", kNoNode});
      }
    }
    call.sequence.push_back({"</function>\n", kNoNode});
    calls.alternatives.push_back(grammar->add(std::move(call)));
  }
  return calls_grammar(std::move(grammar), std::move(calls), "<tool_call>\n", "</tool_call>",
                       options);
}

std::shared_ptr<const Grammar> compile_harmony_tool_calls(const ojson& tools,
                                                          const ToolCallOptions& options) {
  auto grammar = std::make_unique<Grammar>();
  const std::string constrain = grammar->special_token("<|constrain|>");
  const std::string message = grammar->special_token("<|message|>");
  const std::string header_end = " " + constrain + "json" + message;
  Node calls;
  calls.kind = NodeKind::kAnyOf;
  for (const ListedTool& tool : listed_tools(tools, options)) {
    for (char c : tool.name)
      check(c != ' ' && c != '<' && c != '\n',
            tool.where + ": a harmony recipient cannot hold a space, '<' or a newline");
    uint32_t arguments;
    if (!tool.parameters) {
      arguments = fixed_object_node(*grammar, {});
    } else {
      SchemaCompiler compiler(*grammar, *tool.parameters, options.schema,
                              "tool '" + tool.name + "' parameters");
      arguments = compiler.compile_document();
    }
    Node call;
    call.kind = NodeKind::kSequence;
    call.sequence.push_back({tool.name + header_end, kNoNode});
    call.sequence.push_back({"", arguments});
    calls.alternatives.push_back(grammar->add(std::move(call)));
  }
  // One call per reply: <|call|> (a stop id) ends the turn after it.
  ToolCallOptions one = options;
  one.max_calls = 1;
  return calls_grammar(std::move(grammar), std::move(calls), "", "", one);
}

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
