#include "server/anthropic_request.h"

#include <set>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"

namespace fak::server {

namespace {

// What fak cannot take is refused by name, never dropped: a model that silently misses an image
// or a server tool's result answers as if it had seen it.
[[noreturn]] void refuse_block(const std::string& type, const std::string& p) {
  if (type == "image" || type == "document")
    bad_request("`" + p + "` is an " + type + " block: fak serves text-only models", p + ".type");
  bad_request("`" + p + "` is a '" + type + "' block, which fak does not support here",
              p + ".type");
}

std::string block_type(const ojson& block, const std::string& p) {
  if (!block.is_object()) bad_request("`" + p + "` must be a content block object", p);
  return required_string(block, "type", p);
}

// Separate text blocks are separate paragraphs (Claude Code sends a reminder block beside the
// prompt): joined so that they stay apart in the rendered prompt.
void join(std::string& into, const std::string& text) {
  if (!into.empty() && !text.empty()) into += "\n\n";
  into += text;
}

std::string tool_result_text(const ojson& block, const std::string& p) {
  auto it = block.find("content");
  if (it == block.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    bad_request("`" + p + ".content` must be a string or an array of text blocks", p + ".content");
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const std::string q = p + ".content[" + std::to_string(k) + "]";
    const std::string type = block_type((*it)[k], q);
    if (type != "text") refuse_block(type, q);
    join(text, required_string((*it)[k], "text", q));
  }
  return text;
}

std::string system_text(const ojson& v, const std::string& p) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    bad_request("`" + p + "` must be a string or an array of text blocks, not " + json_type_name(v),
                p);
  std::string text;
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string q = p + "[" + std::to_string(k) + "]";
    const std::string type = block_type(v[k], q);
    if (type != "text") refuse_block(type, q);
    join(text, required_string(v[k], "text", q));
  }
  return text;
}

// One Anthropic message, as one or more OpenAI-style messages appended to `out`.
void convert_message(const ojson& m, size_t i, ojson& out) {
  const std::string p = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) bad_request("`" + p + "` must be an object", p);
  const std::string role = required_string(m, "role", p);
  if (role != "user" && role != "assistant" && role != "system")
    bad_request("`" + p + ".role` must be user or assistant, not '" + role + "'", p + ".role");
  auto content = m.find("content");
  if (content == m.end()) bad_request("`" + p + ".content` is required", p + ".content");
  if (role == "system") {
    out.push_back({{"role", "system"}, {"content", system_text(*content, p + ".content")}});
    return;
  }
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array())
    bad_request("`" + p + ".content` must be a string or an array of content blocks, not " +
                    json_type_name(*content),
                p + ".content");
  std::string text, reasoning;
  ojson calls = ojson::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const ojson& block = (*content)[k];
    const std::string q = p + ".content[" + std::to_string(k) + "]";
    const std::string type = block_type(block, q);
    if (type == "text") {
      join(text, required_string(block, "text", q));
    } else if (role == "user" && type == "tool_result") {
      // The template wants tool results as tool messages, after the call and before the user's
      // next words: text that came before the results goes first, as its own user message.
      if (!text.empty()) out.push_back({{"role", "user"}, {"content", text}});
      text.clear();
      std::string result = tool_result_text(block, q);
      // note: a tool message has no error flag; the model learns of the failure from the text.
      if (auto e = block.find("is_error"); e != block.end() && !e->is_null()) {
        if (!e->is_boolean())
          bad_request("`" + q + ".is_error` must be a boolean", q + ".is_error");
        if (e->get<bool>()) result = "Error: " + result;
      }
      out.push_back({{"role", "tool"},
                     {"tool_call_id", required_string(block, "tool_use_id", q)},
                     {"content", result}});
    } else if (role == "assistant" && type == "tool_use") {
      auto input = block.find("input");
      if (input == block.end() || !input->is_object())
        bad_request("`" + q + ".input` must be an object", q + ".input");
      ojson call;
      call["id"] = required_string(block, "id", q);
      call["type"] = "function";
      // Arguments as an object: HF templates render them with tojson.
      call["function"] = {{"name", required_string(block, "name", q)}, {"arguments", *input}};
      calls.push_back(std::move(call));
    } else if (role == "assistant" && type == "thinking") {
      reasoning += required_string(block, "thinking", q);
    } else if (role == "assistant" && type == "redacted_thinking") {
      // Encrypted reasoning from another model: nothing fak's model can read.
    } else {
      refuse_block(type, q);
    }
  }
  if (role == "user") {
    // A user turn of tool results only leaves no user message; an empty one stays a message.
    if (!text.empty() || content->empty() || out.empty() || out.back()["role"] != "tool")
      out.push_back({{"role", "user"}, {"content", text}});
    return;
  }
  ojson msg = {{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  out.push_back(std::move(msg));
}

void parse_tools(const ojson& j, ChatTurn& t) {
  auto it = j.find("tools");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_array()) bad_request("`tools` must be an array", "tools");
  ojson tools = ojson::array();
  std::set<std::string> names;
  bool any_strict = false;
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& tool = (*it)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) bad_request("`" + p + "` must be an object", p);
    if (auto type = tool.find("type"); type != tool.end() && !type->is_null() && *type != "custom")
      bad_request("`" + p + "` is a server tool (" + type->dump() +
                      "), which fak does not run: give client tools as {name, description, "
                      "input_schema}",
                  p + ".type");
    const std::string& name = required_string(tool, "name", p);
    if (name.empty()) bad_request("`" + p + ".name` must not be empty", p + ".name");
    if (!names.insert(name).second)
      bad_request("`" + p + ".name`: tool names must be unique ('" + name + "' is repeated)",
                  p + ".name");
    auto schema = tool.find("input_schema");
    if (schema == tool.end() || !schema->is_object())
      bad_request("`" + p + ".input_schema` must be a JSON schema object", p + ".input_schema");
    ojson fn;
    fn["name"] = name;
    if (auto d = tool.find("description"); d != tool.end() && !d->is_null()) {
      if (!d->is_string())
        bad_request("`" + p + ".description` must be a string", p + ".description");
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    if (auto s = tool.find("strict"); s != tool.end() && s->is_boolean() && s->get<bool>())
      any_strict = true;
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!tools.empty()) t.tools = std::move(tools);
  // Tools written for an unconstrained model carry keywords the grammar cannot enforce; unless
  // the client asked for strict tools, a forced call honours the rest of the schema.
  t.strict_tool_schemas = any_strict;
}

void parse_tool_choice(const ojson& j, ChatTurn& t) {
  auto it = j.find("tool_choice");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
    bad_request("`tool_choice` must be an object with a `type`: auto, any, tool or none",
                "tool_choice");
  const std::string type = (*it)["type"];
  bool parallel = true;
  if (auto d = get_bool(*it, "disable_parallel_tool_use")) parallel = !*d;
  if (type == "auto" || type == "none") {
    t.tool_choice = type;
    return;
  }
  if (type != "any" && type != "tool")
    bad_request("`tool_choice.type` must be auto, any, tool or none, not '" + type + "'",
                "tool_choice.type");
  if (!t.tools.is_array()) bad_request("`tool_choice` '" + type + "' needs `tools`", "tool_choice");
  if (type == "any") {
    t.tool_choice = "required";
    t.max_tool_calls = parallel ? 8 : 1;
    return;
  }
  const std::string& name = required_string(*it, "name", "tool_choice");
  bool listed = false;
  for (const ojson& tool : t.tools) listed = listed || tool["function"]["name"] == name;
  if (!listed)
    bad_request("`tool_choice.name` is '" + name + "', which is not in `tools`",
                "tool_choice.name");
  t.tool_choice = "function";
  t.tool_choice_name = name;
}

void parse_thinking(const ojson& j, bool model_thinks, ChatTurn& t) {
  auto it = j.find("thinking");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
    bad_request("`thinking` must be an object with a `type`: enabled, disabled or adaptive",
                "thinking");
  const std::string type = (*it)["type"];
  if (type != "enabled" && type != "disabled" && type != "adaptive")
    bad_request("`thinking.type` must be enabled, disabled or adaptive, not '" + type + "'",
                "thinking.type");
  const std::optional<int> budget = get_int(*it, "budget_tokens", 1, INT32_MAX);
  if (type == "enabled" && !budget)
    bad_request("`thinking.budget_tokens` is required when thinking is enabled",
                "thinking.budget_tokens");
  // The scheduler closes the block once it holds budget_tokens tokens (scheduler.h).
  if (type == "enabled" && model_thinks) t.reasoning_budget = budget;
  // A model without a thinking block has nothing to switch: the field is accepted and ignored.
  if (model_thinks && type != "adaptive")
    t.template_kwargs = {{"enable_thinking", type == "enabled"}};
}

void parse_output_config(const ojson& j, ChatTurn& t) {
  auto it = j.find("output_config");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) bad_request("`output_config` must be an object", "output_config");
  get_string(*it, "effort");  // accepted: how hard to think is the model's own business
  auto f = it->find("format");
  if (f == it->end() || f->is_null()) return;
  if (!f->is_object() || !f->contains("type") || (*f)["type"] != "json_schema" ||
      !f->contains("schema") || !(*f)["schema"].is_object())
    bad_request("`output_config.format` must be {\"type\": \"json_schema\", \"schema\": {...}}",
                "output_config.format");
  t.response_format = {{"type", "json_schema"},
                       {"json_schema", {{"name", "output"}, {"schema", (*f)["schema"]}}}};
  t.response_format_param = "output_config.format";
}

}  // namespace

MessagesRequest parse_messages_request(const std::string& body, const SamplingOptions& defaults,
                                       bool model_thinks, bool count_tokens) {
  const ojson j = parse_json_object(body);
  MessagesRequest r;
  auto model = get_string(j, "model");
  if (!model) bad_request("`model` is required", "model");
  r.model = *model;
  ChatTurn& t = r.turn;
  if (!count_tokens) {
    auto max_tokens = get_int(j, "max_tokens", 1, INT32_MAX);
    if (!max_tokens) bad_request("`max_tokens` is required", "max_tokens");
    t.max_tokens = int(*max_tokens);
  }

  if (auto s = j.find("system"); s != j.end() && !s->is_null()) {
    const std::string text = system_text(*s, "system");
    if (!text.empty()) t.messages.push_back({{"role", "system"}, {"content", text}});
  }
  auto messages = j.find("messages");
  if (messages == j.end()) bad_request("`messages` is required", "messages");
  if (!messages->is_array())
    bad_request("`messages` must be an array, not " + json_type_name(*messages), "messages");
  if (messages->empty()) bad_request("`messages` must not be empty", "messages");
  for (size_t i = 0; i < messages->size(); ++i) convert_message((*messages)[i], i, t.messages);
  merge_leading_system(t.messages);
  // A conversation that ends with the assistant's words is a reply to continue (prefill).
  ojson& last = t.messages.back();
  if (last["role"] == "assistant") {
    if (last.contains("tool_calls"))
      bad_request("the last message is an assistant tool_use with no tool_result after it",
                  "messages");
    t.prefill = last["content"].get<std::string>();
    t.messages.erase(t.messages.size() - 1);
  }

  parse_tools(j, t);
  parse_tool_choice(j, t);
  parse_thinking(j, model_thinks, t);
  t.content_tokens = parse_content_tokens(j);
  parse_output_config(j, t);

  if (auto it = j.find("stop_sequences"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > 32)
      bad_request("`stop_sequences` must be an array of at most 32 strings", "stop_sequences");
    for (const ojson& s : *it) {
      if (!s.is_string())
        bad_request("`stop_sequences` must be an array of strings", "stop_sequences");
      if (!s.get_ref<const std::string&>().empty()) t.stop.push_back(s.get<std::string>());
    }
  }
  // Anthropic's ranges first (temperature up to 1), then the shared checks and fak's extensions.
  get_number(j, "temperature", 0.0, 1.0);
  t.sampling = parse_sampling(j, defaults);
  if (auto v = get_bool(j, "stream")) r.stream = *v;
  if (auto it = j.find("metadata"); it != j.end() && !it->is_null() && !it->is_object())
    bad_request("`metadata` must be an object", "metadata");
  if (auto it = j.find("mcp_servers"); it != j.end() && it->is_array() && !it->empty())
    bad_request("`mcp_servers` is not supported: fak runs no tools itself", "mcp_servers");
  if (auto it = j.find("container"); it != j.end() && !it->is_null())
    bad_request("`container` is not supported: fak runs no code itself", "container");
  return r;
}

}  // namespace fak::server
