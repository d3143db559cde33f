// Qwen/Hermes tool calls as a grammar: the OpenAI `tools` list becomes
//   <tool_call>\n{"name": "<name>", "arguments": <parameters>}\n</tool_call>
// with "name" first and "arguments" second (the order Qwen's chat template shows the model),
// each name tied to its own parameters schema (an anyOf of one object per tool, told apart by
// the name's bytes). The JSON between the tags follows the usual whitespace policy (nodes.h); the
// tags and the newlines around the JSON are exact. With max_calls > 1, further blocks follow
// after one "\n".
#include "core/error.h"
#include "core/json.h"
#include "grammar/grammar.h"
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

}  // namespace fak::grammar
