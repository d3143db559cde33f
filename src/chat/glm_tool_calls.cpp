// GLM-4.5's tool calls (chat_format.h): a block names the function, then gives one
// <arg_key>/<arg_value> pair per argument, as its template writes them:
//
//   <tool_call>get_weather
//   <arg_key>city</arg_key>
//   <arg_value>Paris</arg_value>
//   <arg_key>days</arg_key>
//   <arg_value>3</arg_value>
//   </tool_call>
//
// (GLM-4.7 writes the same without the newlines.) The template writes a string value as its text
// and anything else as JSON (`v | tojson if v is not string else v`), so a value is text when the
// tool's schema takes only strings (a string type, an enum or const of strings), else JSON; with
// no schema to tell, JSON where it parses, text where it does not.
// A call is announced whole when its block closes: its arguments are not one JSON text the model
// writes, so there is nothing to stream byte by byte.
#include <optional>

#include "chat/chat_format.h"
#include "core/object_id.h"

namespace fak::chat {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>", kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>", kValueClose = "</arg_value>";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The schema of parameter `key` of tool `name` in an OpenAI tools array (null when unknown).
ojson parameter_schema(const ojson& tools, std::string_view name, const std::string& key) {
  if (!tools.is_array()) return nullptr;
  for (const ojson& t : tools) {
    const ojson* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!f || !f->is_object() || !f->contains("name") || (*f)["name"] != name) continue;
    const ojson& params = f->contains("parameters") ? (*f)["parameters"] : ojson();
    if (!params.is_object() || !params.contains("properties")) return nullptr;
    const ojson& props = params["properties"];
    if (!props.is_object() || !props.contains(key)) return nullptr;
    return props[key];
  }
  return nullptr;
}

// One block's body (between the tags) as an OpenAI call, or nullopt when it is not a call: no
// name, a key without its value, or text between the pairs.
std::optional<ojson> parse_body(std::string_view body, const ojson& tools) {
  const size_t first_key = body.find(kKeyOpen);
  const std::string_view name = trim(body.substr(0, first_key));
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (is_space(c) || c == '<' || c == '>') return std::nullopt;
  ojson args = ojson::object();
  std::string_view rest = first_key == std::string_view::npos ? "" : body.substr(first_key);
  while (!trim(rest).empty()) {
    rest = trim(rest);
    if (!rest.starts_with(kKeyOpen)) return std::nullopt;
    rest.remove_prefix(kKeyOpen.size());
    const size_t key_end = rest.find(kKeyClose);
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(rest.substr(0, key_end)));
    rest = trim(rest.substr(key_end + kKeyClose.size()));
    if (key.empty() || !rest.starts_with(kValueOpen)) return std::nullopt;
    rest.remove_prefix(kValueOpen.size());
    const size_t value_end = rest.find(kValueClose);
    if (value_end == std::string_view::npos) return std::nullopt;
    const std::string_view text = rest.substr(0, value_end);
    rest = rest.substr(value_end + kValueClose.size());
    ojson value = std::string(text);
    if (!grammar::schema_takes_only_strings(parameter_schema(tools, name, key)) &&
        json_depth(text) <= kMaxJsonDepth) {
      ojson parsed = ojson::parse(text, nullptr, false);
      if (!parsed.is_discarded()) value = std::move(parsed);
    }
    args[key] = std::move(value);
  }
  ojson call = ojson::object();
  call["id"] = new_object_id("call_");
  call["type"] = "function";
  call["function"] = {{"name", std::string(name)}, {"arguments", args.dump()}};
  return call;
}

class GlmToolCallReader final : public ToolCallReader {
 public:
  explicit GlmToolCallReader(ojson tools) : tools_(std::move(tools)) {}

  std::vector<ToolCallDelta> push(std::string_view text) override {
    buf_ += text;
    std::vector<ToolCallDelta> out;
    for (;;) {
      if (!in_block_) {
        const size_t at = buf_.find(kOpen);
        if (at == std::string::npos) {
          // Keep what could still become the marker.
          const size_t keep = std::min(buf_.size(), kOpen.size() - 1);
          size_t cut = buf_.size() - keep;
          while (cut < buf_.size() && !std::string_view(kOpen).starts_with(buf_.substr(cut))) ++cut;
          outside_ += buf_.substr(0, cut);
          buf_.erase(0, cut);
          return out;
        }
        outside_ += buf_.substr(0, at);
        buf_.erase(0, at + kOpen.size());
        in_block_ = true;
      }
      const size_t end = buf_.find(kClose);
      if (end == std::string::npos) return out;
      close_block(buf_.substr(0, end), out);
      buf_.erase(0, end + kClose.size());
      in_block_ = false;
    }
  }

  ToolCallsFinal finish(bool cut) override {
    ToolCallsFinal f;
    if (in_block_) {
      // Stopped inside a block: a call whose pairs are whole is kept unless max_tokens cut it; a
      // half call is never text.
      std::optional<ojson> call = cut ? std::nullopt : parse_body(buf_, tools_);
      if (call) {
        add(std::move(*call), f.deltas);
      } else {
        f.dropped = true;
      }
    } else {
      outside_ += buf_;
    }
    buf_.clear();
    f.tool_calls = calls_;
    f.content = std::string(trim(outside_));
    return f;
  }

 private:
  void close_block(std::string_view body, std::vector<ToolCallDelta>& out) {
    if (std::optional<ojson> call = parse_body(body, tools_)) {
      add(std::move(*call), out);
      return;
    }
    // Not a call: the block stays text.
    outside_ += std::string(kOpen) + std::string(body) + std::string(kClose);
  }

  void add(ojson call, std::vector<ToolCallDelta>& out) {
    ToolCallDelta d;
    d.index = int(calls_.size());
    d.id = call["id"].get<std::string>();
    d.name = call["function"]["name"].get<std::string>();
    d.arguments = call["function"]["arguments"].get<std::string>();
    out.push_back(std::move(d));
    calls_.push_back(std::move(call));
  }

  ojson tools_;
  std::string buf_, outside_;
  bool in_block_ = false;
  ojson calls_ = ojson::array();
};

}  // namespace

std::unique_ptr<ToolCallReader> glm_tool_call_reader(const ojson& tools) {
  return std::make_unique<GlmToolCallReader>(tools);
}

}  // namespace fak::chat
