#include "server/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"

namespace fak::server {

namespace {

// Message content: a string, null, or an array of {type: "text", text} parts (joined).
std::string content_text(const ojson& m, size_t index, bool allow_null) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (allow_null) return "";
    bad_request("`" + param + "` is required", param);
  }
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string text;
    for (const ojson& part : *it) {
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string())
        bad_request("`" + param + "` parts must be {\"type\": \"text\", \"text\": string}", param);
      text += part["text"].get<std::string>();
    }
    return text;
  }
  bad_request(
      "`" + param + "` must be a string or an array of text parts, not " + json_type_name(*it),
      param);
}

ojson parse_tool_calls(const ojson& calls, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].tool_calls";
  if (!calls.is_array()) bad_request("`" + param + "` must be an array", param);
  ojson out = ojson::array();
  for (const ojson& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad_request("`" + param + "` entries must be objects with a `function` object", param);
    const ojson& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      bad_request("`" + param + "[].function.name` must be a string", param);
    ojson args = ojson::object();
    if (auto a = f.find("arguments"); a != f.end()) {
      if (a->is_string()) {
        // Templates render arguments with tojson: a JSON string argument would come out quoted.
        if (json_depth(a->get<std::string>()) > kMaxJsonDepth)
          bad_request("`" + param + "[].function.arguments` nests deeper than " +
                          std::to_string(kMaxJsonDepth) + " levels",
                      param);
        args = ojson::parse(a->get<std::string>(), nullptr, false);
        if (args.is_discarded()) args = *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        bad_request("`" + param + "[].function.arguments` must be a JSON string", param);
      }
    }
    ojson call;
    const auto id = c.find("id");
    call["id"] = id != c.end() && id->is_string() ? *id : ojson("");
    call["type"] = "function";
    call["function"] = {{"name", f["name"]}, {"arguments", args}};
    out.push_back(std::move(call));
  }
  return out;
}

ojson parse_messages(const ojson& body) {
  auto it = body.find("messages");
  if (it == body.end()) bad_request("`messages` is required", "messages");
  if (!it->is_array())
    bad_request("`messages` must be an array, not " + json_type_name(*it), "messages");
  if (it->empty()) bad_request("`messages` must not be empty", "messages");
  ojson out = ojson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_request("`" + p + "` must be an object", p);
    if (!m.contains("role") || !m["role"].is_string())
      bad_request("`" + p + ".role` must be a string", p + ".role");
    std::string role = m["role"];
    if (role == "developer") role = "system";  // newer OpenAI name for the same thing
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request("`" + p + ".role` must be system, user, assistant or tool, not '" + role + "'",
                  p + ".role");
    ojson msg;
    msg["role"] = role;
    const bool has_calls =
        role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    msg["content"] = content_text(m, i, role == "assistant");
    if (has_calls) msg["tool_calls"] = parse_tool_calls(m["tool_calls"], i);
    if (role == "tool") {
      if (auto id = m.find("tool_call_id"); id != m.end()) {
        if (!id->is_string())
          bad_request("`" + p + ".tool_call_id` must be a string", p + ".tool_call_id");
        msg["tool_call_id"] = *id;
      }
    }
    if (auto n = m.find("name"); n != m.end() && n->is_string()) msg["name"] = *n;
    // The reasoning an assistant turn came with, sent back by the client under any of the names
    // clients use (reasoning_content: DeepSeek/Qwen/vLLM; reasoning: OpenRouter and others;
    // thinking: gpt-oss's own). The chat layer gives it to the template under the name it reads.
    for (const char* name : {"reasoning_content", "reasoning", "thinking"})
      if (auto r = m.find(name);
          r != m.end() && r->is_string() && !msg.contains("reasoning_content"))
        msg["reasoning_content"] = *r;
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_tools(const ojson& body, CompletionRequest& r) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad_request("`tools` must be an array", "tools");
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& t = (*it)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || (t.contains("type") && t["type"] != "function") ||
          !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad_request("`" + p + "` must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    p);
    }
    if (!it->empty()) r.tools = *it;
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      r.tool_choice = it->get<std::string>();
      if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
        bad_request("`tool_choice` must be none, auto, required or a function object",
                    "tool_choice");
    } else if (it->is_object()) {
      // {"type": "function", "function": {"name": ...}}: that one tool must be called.
      const auto f = it->find("function");
      if (f == it->end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
        bad_request("`tool_choice` must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tool_choice");
      r.tool_choice = "function";
      r.tool_choice_name = (*f)["name"].get<std::string>();
      bool listed = false;
      if (r.tools.is_array())
        for (const ojson& t : r.tools)
          listed = listed || t["function"]["name"] == r.tool_choice_name;
      if (!listed)
        bad_request("`tool_choice` names '" + r.tool_choice_name + "', which is not in `tools`",
                    "tool_choice");
    } else {
      bad_request("`tool_choice` must be a string or an object", "tool_choice");
    }
  }
}

void parse_prompt(const ojson& body, CompletionRequest& r) {
  auto it = body.find("prompt");
  if (it == body.end()) bad_request("`prompt` is required", "prompt");
  if (it->is_string()) {
    r.prompt = it->get<std::string>();
    return;
  }
  if (it->is_array()) {
    if (it->size() == 1 && (*it)[0].is_string()) {
      r.prompt = (*it)[0].get<std::string>();
      return;
    }
    std::vector<int32_t> ids;
    for (const ojson& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        bad_request(
            "`prompt` must be a string, one string in an array, or an array of token ids "
            "(several prompts in one request are not supported)",
            "prompt");
      ids.push_back(v.get<int32_t>());
    }
    r.prompt_ids = std::move(ids);
    return;
  }
  bad_request("`prompt` must be a string or an array of token ids, not " + json_type_name(*it),
              "prompt");
}

}  // namespace

SamplingOptions parse_sampling(const ojson& j, const SamplingOptions& defaults) {
  SamplingOptions o = defaults;
  // Types and the API's documented ranges here; what the sampler itself accepts is checked by
  // SamplingOptions::validate, the one rule the CLI and the scheduler share.
  if (auto v = get_number(j, "temperature", 0.0, 2.0)) o.temperature = float(*v);
  if (auto v = get_number(j, "top_p", 0.0, 1.0)) o.top_p = float(*v);
  if (auto v = get_int(j, "top_k", 0, INT32_MAX)) o.top_k = int(*v);
  if (auto v = get_number(j, "min_p", 0.0, 1.0)) o.min_p = float(*v);
  if (auto v = get_number(j, "repetition_penalty", 0.0, 10.0)) o.repetition_penalty = float(*v);
  if (auto v = get_number(j, "presence_penalty", -2.0, 2.0)) o.presence_penalty = float(*v);
  if (auto v = get_number(j, "frequency_penalty", -2.0, 2.0)) o.frequency_penalty = float(*v);
  if (auto v = get_int(j, "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max()))
    o.seed = uint64_t(*v);
  try {
    o.validate();
  } catch (const Error& e) {
    // The message starts with the field's name.
    const std::string message = e.what();
    bad_request(message, message.substr(0, message.find(' ')));
  }
  return o;
}

constexpr size_t kMaxLogitBias = 16384;

void parse_logit_bias(const ojson& j, SamplingOptions& s) {
  // OpenAI's logit_bias: {"token id": bias in [-100, 100]}, added to that token's logit before
  // sampling (-100 bans it). check_logit_bias checks the ids against the vocabulary.
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      bad_request("`logit_bias` must be an object of token ids to biases", "logit_bias");
    // Far above OpenAI's 300: a client may ban whole classes of tokens (every piece that is not
    // whole UTF-8 on a byte-level vocabulary is ~1.4k on Qwen's); the cap bounds the per-token
    // cost.
    if (it->size() > kMaxLogitBias)
      bad_request("`logit_bias` may name at most " + std::to_string(kMaxLogitBias) + " tokens",
                  "logit_bias");
    for (const auto& [key, value] : it->items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > INT32_MAX)
        bad_request("`logit_bias` keys must be token ids, got '" + key.substr(0, 32) + "'",
                    "logit_bias");
      if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
        bad_request("`logit_bias` values must be numbers from -100 to 100 (token " + key + ")",
                    "logit_bias");
      s.logit_bias.push_back({int32_t(id), value.get<float>()});
    }
  }
}

void check_logit_bias(const SamplingOptions& s, int vocab) {
  for (const auto& [id, bias] : s.logit_bias)
    if (id >= vocab)
      bad_request("`logit_bias` names token " + std::to_string(id) +
                      ", outside the vocabulary of " + std::to_string(vocab),
                  "logit_bias");
}

std::vector<std::string> parse_stop(const ojson& j) {
  std::vector<std::string> stop;
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16) {
      for (const ojson& s : *it) {
        if (!s.is_string()) bad_request("`stop` must be a string or an array of strings", "stop");
        stop.push_back(s.get<std::string>());
      }
    } else {
      bad_request("`stop` must be a string or an array of at most 16 strings", "stop");
    }
    std::erase_if(stop, [](const std::string& s) { return s.empty(); });
  }
  return stop;
}

ContentTokens parse_content_tokens(const ojson& j) {
  return get_bool(j, "special_tokens_in_content").value_or(false) ? ContentTokens::Special
                                                                  : ContentTokens::Text;
}

CompletionRequest parse_completion_request(const std::string& body, bool chat,
                                           const SamplingOptions& defaults) {
  const ojson j = parse_json_object(body);
  CompletionRequest r;
  r.chat = chat;
  auto model = get_string(j, "model");
  if (!model) bad_request("`model` is required", "model");
  r.model = *model;
  if (chat) {
    r.messages = parse_messages(j);
    parse_tools(j, r);
    r.content_tokens = parse_content_tokens(j);
  } else {
    parse_prompt(j, r);
  }
  if (auto v = get_int(j, "n", 1, 128)) r.n = int(*v);
  if (auto v = get_int(j, "best_of", 1, 128)) {
    if (chat) bad_request("`best_of` is a completions field, not a chat one", "best_of");
    if (*v < r.n) bad_request("`best_of` must be at least `n`", "best_of");
    r.best_of = int(*v);
  }
  // Fields fak does not implement are refused rather than silently ignored.
  if (get_bool(j, "echo").value_or(false))
    bad_request("`echo` is not supported: the prompt is not repeated in the reply", "echo");
  if (auto v = get_string(j, "suffix"); v && !v->empty())
    bad_request("`suffix` is not supported (no fill-in-the-middle)", "suffix");
  // max_completion_tokens is the newer name; either is accepted, the newer wins.
  if (auto v = get_int(j, "max_tokens", 1, INT32_MAX)) r.max_tokens = int(*v);
  if (auto v = get_int(j, "max_completion_tokens", 1, INT32_MAX)) r.max_tokens = int(*v);
  r.sampling = parse_sampling(j, defaults);
  parse_logit_bias(j, r.sampling);
  if (auto v = get_bool(j, "stream")) r.stream = *v;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("`stream_options` must be an object", "stream_options");
    if (auto v = get_bool(*it, "include_usage")) r.include_usage = *v;
  }
  r.stop = parse_stop(j);
  if (auto v = get_string(j, "cache_salt")) r.cache_salt = *v;
  if (auto v = get_bool(j, "ignore_eos")) r.ignore_eos = *v;
  if (auto v = get_bool(j, "return_token_ids")) r.return_token_ids = *v;
  // Chat asks for logprobs with a boolean and top_logprobs (0-20), completions with a count (0-5).
  if (chat) {
    if (get_bool(j, "logprobs").value_or(false)) r.top_logprobs = 0;
    if (auto v = get_int(j, "top_logprobs", 0, 20)) {
      if (r.top_logprobs < 0) bad_request("`top_logprobs` needs `logprobs: true`", "top_logprobs");
      r.top_logprobs = int(*v);
    }
  } else if (auto v = get_int(j, "logprobs", 0, 5)) {
    r.top_logprobs = int(*v);
  }
  if (r.best_of > 1 && r.stream) bad_request("`best_of` cannot be used with `stream`", "best_of");
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      bad_request("`response_format` must be an object with a string `type`", "response_format");
    const std::string type = (*it)["type"];
    if (type != "text" && type != "json_object" && type != "json_schema")
      bad_request("`response_format.type` must be text, json_object or json_schema",
                  "response_format");
    if (type == "json_schema" &&
        (!it->contains("json_schema") || !(*it)["json_schema"].is_object() ||
         !(*it)["json_schema"].contains("schema") || !(*it)["json_schema"]["schema"].is_object()))
      bad_request("`response_format.json_schema.schema` must be a JSON schema object",
                  "response_format");
    if (type != "text") r.response_format = *it;
  }
  if (auto it = j.find("chat_template_kwargs"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      bad_request("`chat_template_kwargs` must be an object", "chat_template_kwargs");
    r.chat_template_kwargs = *it;
  }
  // OpenAI's reasoning_effort reaches the template as the variable gpt-oss's reads (its system
  // message's "Reasoning: low"); templates without it ignore it. chat_template_kwargs wins.
  if (auto e = get_string(j, "reasoning_effort")) {
    if (*e != "minimal" && *e != "low" && *e != "medium" && *e != "high" && *e != "none")
      bad_request("`reasoning_effort` must be none, minimal, low, medium or high",
                  "reasoning_effort");
    if (*e != "none" && *e != "minimal") {
      if (!r.chat_template_kwargs.is_object()) r.chat_template_kwargs = ojson::object();
      if (!r.chat_template_kwargs.contains("reasoning_effort"))
        r.chat_template_kwargs["reasoning_effort"] = *e;
    }
  }
  if (auto v = get_bool(j, "parallel_tool_calls")) r.parallel_tool_calls = *v;
  return r;
}

}  // namespace fak::server
