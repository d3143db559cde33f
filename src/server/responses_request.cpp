#include "server/responses_request.h"

#include <set>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"

namespace fak::server {

namespace {

// Message content: a string, or text parts (input_text, output_text; a refusal is text too).
// Images, files and audio are refused: fak serves text-only models.
std::string content_text(const ojson& content, const std::string& p) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad_request(
        "`" + p + "` must be a string or an array of content parts, not " + json_type_name(content),
        p);
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string q = p + "[" + std::to_string(k) + "]";
    const ojson& part = content[k];
    if (!part.is_object()) bad_request("`" + q + "` must be an object", q);
    const std::string& type = required_string(part, "type", q);
    if (type == "input_text" || type == "output_text" || type == "text")
      text += required_string(part, "text", q);
    else if (type == "refusal")
      text += required_string(part, "refusal", q);
    else if (type == "input_image" || type == "input_file" || type == "input_audio")
      bad_request("`" + q + "` is an " + type + " part: fak serves text-only models", q + ".type");
    else
      bad_request("`" + q + ".type` '" + type + "' is not a content part fak knows", q + ".type");
  }
  return text;
}

// The input items as chat messages. Consecutive function calls join the assistant message before
// them (one turn with several calls, as the template expects); a reasoning item goes with the
// assistant message that follows it.
void convert_input(const ojson& input, ojson& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array())
    bad_request("`input` must be a string or an array of items, not " + json_type_name(input),
                "input");
  std::string reasoning;
  auto assistant = [&]() -> ojson& {
    if (!reasoning.empty() || out.empty() || out.back()["role"] != "assistant") {
      out.push_back({{"role", "assistant"}, {"content", ""}});
      if (!reasoning.empty()) out.back()["reasoning_content"] = reasoning;
      reasoning.clear();
    }
    return out.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string p = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad_request("`" + p + "` must be an object", p);
    std::string type = "message";  // an item with a role and no type is a message
    if (auto t = item.find("type"); t != item.end() && !t->is_null())
      type = required_string(item, "type", p);
    if (type == "message") {
      std::string role = required_string(item, "role", p);
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant")
        bad_request(
            "`" + p + ".role` must be user, system, developer or assistant, not '" + role + "'",
            p + ".role");
      auto content = item.find("content");
      if (content == item.end()) bad_request("`" + p + ".content` is required", p + ".content");
      const std::string text = content_text(*content, p + ".content");
      if (role == "assistant") {
        // A new assistant message even after another: each output message was its own item.
        out.push_back({{"role", "assistant"}, {"content", text}});
        if (!reasoning.empty()) out.back()["reasoning_content"] = reasoning;
        reasoning.clear();
      } else {
        out.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "function_call") {
      const std::string& args = required_string(item, "arguments", p);
      if (json_depth(args) > kMaxJsonDepth)
        bad_request(
            "`" + p + ".arguments` nests deeper than " + std::to_string(kMaxJsonDepth) + " levels",
            p + ".arguments");
      // Templates render arguments with tojson: an object, not the JSON text as a string.
      ojson parsed = ojson::parse(args, nullptr, false);
      ojson call;
      call["id"] = required_string(item, "call_id", p);
      call["type"] = "function";
      std::string name = required_string(item, "name", p);
      if (auto ns = get_string(item, "namespace"); ns && !ns->empty())
        name = namespaced_tool_name(*ns, name);
      call["function"] = {{"name", name},
                          {"arguments", parsed.is_discarded() ? ojson(args) : parsed}};
      ojson& msg = assistant();
      if (!msg.contains("tool_calls")) msg["tool_calls"] = ojson::array();
      msg["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      auto output = item.find("output");
      if (output == item.end()) bad_request("`" + p + ".output` is required", p + ".output");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(item, "call_id", p)},
                     {"content", content_text(*output, p + ".output")}});
    } else if (type == "reasoning") {
      // The text fak gave (reasoning_text content) or, from elsewhere, its summary; encrypted
      // reasoning from another model is nothing fak's model can read.
      std::string text;
      for (const char* key : {"content", "summary"}) {
        auto parts = item.find(key);
        if (parts == item.end() || !parts->is_array() || !text.empty()) continue;
        for (const ojson& part : *parts)
          if (part.is_object() && part.contains("text") && part["text"].is_string())
            text += part["text"].get<std::string>();
      }
      reasoning += text;
    } else if (type == "item_reference") {
      bad_request("`" + p +
                      "` is an item_reference: fak keeps no responses or items on the "
                      "server, so send the items themselves",
                  p + ".type");
    } else {
      bad_request("`" + p + ".type` '" + type +
                      "' is not supported: fak takes message, function_call, "
                      "function_call_output and reasoning items",
                  p + ".type");
    }
  }
}

// One function tool (top level, or inside a namespace) in the chat tools' shape; returns whether
// it is strict. The responses API makes function tools strict unless told otherwise.
bool add_function_tool(const ojson& tool, const std::string& p, const std::string& model_name,
                       const std::string& ns_description, ojson& tools) {
  ojson fn;
  fn["name"] = model_name;
  std::string description = get_string(tool, "description").value_or("");
  if (!ns_description.empty())
    description = ns_description + (description.empty() ? "" : "\n" + description);
  if (!description.empty() || tool.contains("description")) fn["description"] = description;
  ojson params = ojson::object();
  if (auto ps = tool.find("parameters"); ps != tool.end() && !ps->is_null()) {
    if (!ps->is_object())
      bad_request("`" + p + ".parameters` must be a JSON schema object", p + ".parameters");
    params = *ps;
  }
  fn["parameters"] = params;
  const bool strict = get_bool(tool, "strict").value_or(true);
  fn["strict"] = strict;
  tools.push_back({{"type", "function"}, {"function", fn}});
  return strict;
}

// Tool types the OpenAI platform runs itself: fak runs none of them.
bool hosted_tool(const std::string& type) {
  static const std::set<std::string> kHosted = {"web_search",
                                                "web_search_preview",
                                                "web_search_preview_2025_03_11",
                                                "file_search",
                                                "code_interpreter",
                                                "computer_use_preview",
                                                "computer",
                                                "image_generation",
                                                "mcp",
                                                "local_shell",
                                                "shell",
                                                "apply_patch",
                                                "tool_search",
                                                "custom"};
  return kHosted.count(type) > 0;
}

// Returns the tools as the response object repeats them.
ojson parse_tools(const ojson& j, ResponsesRequest& r, bool refuse_hosted) {
  ChatTurn& t = r.turn;
  auto it = j.find("tools");
  ojson echo = ojson::array();
  if (it == j.end() || it->is_null()) return echo;
  if (!it->is_array()) bad_request("`tools` must be an array", "tools");
  ojson tools = ojson::array();
  std::set<std::string> names;
  bool all_strict = true;
  const auto unique = [&](const std::string& name, const std::string& p) {
    if (!names.insert(name).second)
      bad_request("`" + p + ".name`: tool names must be unique ('" + name + "' is repeated)",
                  p + ".name");
  };
  std::vector<std::string> left_out;
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& tool = (*it)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) bad_request("`" + p + "` must be an object", p);
    const std::string& type = required_string(tool, "type", p);
    if (type == "function") {
      const std::string& name = required_string(tool, "name", p);
      unique(name, p);
      const bool strict = add_function_tool(tool, p, name, "", tools);
      all_strict = all_strict && strict;
      ojson shown = {{"type", "function"}, {"name", name}};
      shown["description"] = tools.back()["function"].contains("description")
                                 ? tools.back()["function"]["description"]
                                 : ojson();
      shown["parameters"] = tools.back()["function"]["parameters"];
      shown["strict"] = strict;
      echo.push_back(std::move(shown));
    } else if (type == "namespace") {
      const std::string& ns = required_string(tool, "name", p);
      const std::string description = get_string(tool, "description").value_or("");
      auto inner = tool.find("tools");
      if (inner == tool.end() || !inner->is_array())
        bad_request("`" + p + ".tools` must be an array of the namespace's tools", p + ".tools");
      for (size_t k = 0; k < inner->size(); ++k) {
        const ojson& f = (*inner)[k];
        const std::string q = p + ".tools[" + std::to_string(k) + "]";
        if (!f.is_object()) bad_request("`" + q + "` must be an object", q);
        const std::string& ftype = required_string(f, "type", q);
        if (ftype != "function") {
          if (refuse_hosted)
            bad_request("`" + q + ".type` '" + ftype + "' is not supported: give function tools",
                        q + ".type");
          left_out.push_back(ns + "." + ftype);
          continue;
        }
        const std::string& name = required_string(f, "name", q);
        const std::string model_name = namespaced_tool_name(ns, name);
        unique(model_name, q);
        all_strict = add_function_tool(f, q, model_name, description, tools) && all_strict;
        r.namespaced[model_name] = {ns, name};
      }
      echo.push_back(tool);
    } else if (hosted_tool(type) && !refuse_hosted) {
      left_out.push_back(type);
    } else {
      bad_request("`" + p + ".type` '" + type +
                      "' is not supported: fak runs no tools itself; give function or "
                      "namespace tools",
                  p + ".type");
    }
  }
  if (!left_out.empty()) {
    std::string list;
    for (const std::string& s : left_out) list += (list.empty() ? "" : ", ") + s;
    r.warnings.push_back(
        "tools left out (fak runs no hosted tools; the model was not shown "
        "them): " +
        list);
  }
  if (!tools.empty()) t.tools = std::move(tools);
  t.strict_tool_schemas = all_strict;
  return echo;
}

// Returns the choice as the response object repeats it.
ojson parse_tool_choice(const ojson& j, ChatTurn& t) {
  auto it = j.find("tool_choice");
  if (it == j.end() || it->is_null()) return "auto";
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c != "auto" && c != "none" && c != "required")
      bad_request(
          "`tool_choice` must be auto, none, required or {\"type\": \"function\", "
          "\"name\": ...}",
          "tool_choice");
    if (c == "required" && !t.tools.is_array())
      bad_request("`tool_choice` required needs `tools`", "tool_choice");
    t.tool_choice = c;
    return c;
  }
  if (!it->is_object() || !it->contains("type") || (*it)["type"] != "function")
    bad_request(
        "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"name\": "
        "...}; other tool types are not supported",
        "tool_choice");
  std::string name = required_string(*it, "name", "tool_choice");
  if (auto ns = get_string(*it, "namespace"); ns && !ns->empty())
    name = namespaced_tool_name(*ns, name);
  bool listed = false;
  if (t.tools.is_array())
    for (const ojson& tool : t.tools) listed = listed || tool["function"]["name"] == name;
  if (!listed)
    bad_request("`tool_choice.name` is '" + name + "', which is not in `tools`",
                "tool_choice.name");
  t.tool_choice = "function";
  t.tool_choice_name = name;
  return *it;
}

// text.format: the same constraint as chat's response_format, spelled flat.
ojson parse_text(const ojson& j, ChatTurn& t) {
  ojson shown = {{"format", {{"type", "text"}}}};
  auto it = j.find("text");
  if (it == j.end() || it->is_null()) return shown;
  if (!it->is_object()) bad_request("`text` must be an object", "text");
  if (auto v = get_string(*it, "verbosity")) shown["verbosity"] = *v;
  auto f = it->find("format");
  if (f == it->end() || f->is_null()) return shown;
  if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
    bad_request("`text.format` must be an object with a `type`", "text.format");
  const std::string type = (*f)["type"];
  if (type == "json_object") {
    t.response_format = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    auto schema = f->find("schema");
    if (schema == f->end() || !schema->is_object())
      bad_request("`text.format.schema` must be a JSON schema object", "text.format.schema");
    ojson js;
    js["name"] = f->contains("name") ? (*f)["name"] : ojson("output");
    js["schema"] = *schema;
    if (auto s = get_bool(*f, "strict")) js["strict"] = *s;
    t.response_format = {{"type", "json_schema"}, {"json_schema", js}};
  } else if (type != "text") {
    bad_request("`text.format.type` must be text, json_object or json_schema, not '" + type + "'",
                "text.format.type");
  }
  t.response_format_param = "text.format";
  shown["format"] = *f;
  return shown;
}

}  // namespace

std::string namespaced_tool_name(const std::string& ns, const std::string& name) {
  return ns + "__" + name;
}

ResponsesRequest parse_responses_request(const std::string& body, const SamplingOptions& defaults,
                                         bool model_thinks, bool refuse_hosted_tools) {
  const ojson j = parse_json_object(body);
  ResponsesRequest r;
  ChatTurn& t = r.turn;
  auto model = get_string(j, "model");
  if (!model) bad_request("`model` is required", "model");
  r.model = *model;
  // Refused first: each would need server-side state fak does not keep.
  if (auto v = get_string(j, "previous_response_id"))
    bad_request(
        "`previous_response_id` is not supported: fak keeps no responses on the server; "
        "send the whole conversation in `input` (its prefix cache makes that cheap)",
        "previous_response_id");
  if (auto it = j.find("conversation"); it != j.end() && !it->is_null())
    bad_request("`conversation` is not supported: fak keeps no conversations on the server",
                "conversation");
  if (get_bool(j, "background").value_or(false))
    bad_request("`background` is not supported: fak answers while the client waits", "background");
  if (auto it = j.find("prompt"); it != j.end() && !it->is_null())
    bad_request("`prompt` (a stored prompt template) is not supported", "prompt");
  if (auto it = j.find("max_tool_calls"); it != j.end() && !it->is_null())
    bad_request("`max_tool_calls` is not supported", "max_tool_calls");
  if (get_int(j, "top_logprobs", 0, 20).value_or(0) > 0)
    bad_request("`top_logprobs` is not supported on /v1/responses", "top_logprobs");

  auto instructions = get_string(j, "instructions");
  if (instructions && !instructions->empty())
    t.messages.push_back({{"role", "system"}, {"content", *instructions}});
  auto input = j.find("input");
  if (input == j.end() || input->is_null()) bad_request("`input` is required", "input");
  convert_input(*input, t.messages);
  if (t.messages.empty() || (input->is_array() && input->empty()))
    bad_request("`input` must not be empty", "input");
  merge_leading_system(t.messages);

  ojson& echo = r.echo;
  echo["instructions"] = instructions ? ojson(*instructions) : ojson();
  if (auto v = get_int(j, "max_output_tokens", 1, INT32_MAX)) t.max_tokens = int(*v);
  echo["max_output_tokens"] = t.max_tokens ? ojson(*t.max_tokens) : ojson();
  bool parallel = get_bool(j, "parallel_tool_calls").value_or(true);
  t.max_tool_calls = parallel ? 8 : 1;
  echo["parallel_tool_calls"] = parallel;
  echo["previous_response_id"] = nullptr;
  ojson reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (auto it = j.find("reasoning"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("`reasoning` must be an object", "reasoning");
    if (auto e = get_string(*it, "effort")) {
      reasoning["effort"] = *e;
      // The one effort a thinking model's template can honour: none turns thinking off.
      if (*e == "none" && model_thinks) t.template_kwargs = {{"enable_thinking", false}};
      // gpt-oss's template reads reasoning_effort (low, medium, high); others ignore it.
      if (*e == "low" || *e == "medium" || *e == "high")
        t.template_kwargs = {{"reasoning_effort", *e}};
    }
    if (auto s = get_string(*it, "summary")) reasoning["summary"] = *s;
  }
  echo["reasoning"] = reasoning;
  get_bool(j, "store");  // accepted, but nothing is ever stored: the response says store false
  echo["store"] = false;
  t.sampling = parse_sampling(j, defaults);
  echo["temperature"] = t.sampling.temperature;
  echo["text"] = parse_text(j, t);
  ojson tools = parse_tools(j, r, refuse_hosted_tools);
  echo["tool_choice"] = parse_tool_choice(j, t);
  echo["tools"] = std::move(tools);
  echo["top_p"] = t.sampling.top_p;
  if (auto v = get_string(j, "truncation")) {
    if (*v != "auto" && *v != "disabled")
      bad_request("`truncation` must be auto or disabled", "truncation");
    // note: nothing is ever truncated; a prompt beyond the context is a 400 either way.
  }
  echo["truncation"] = "disabled";
  t.content_tokens = parse_content_tokens(j);
  if (auto it = j.find("metadata"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("`metadata` must be an object", "metadata");
    echo["metadata"] = *it;
  } else {
    echo["metadata"] = ojson::object();
  }
  if (auto v = get_bool(j, "stream")) r.stream = *v;
  return r;
}

}  // namespace fak::server
