// OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed and validated into one plain
// struct. Everything a client can get wrong is found here and reported as a 400 naming the field,
// before any work is queued.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "runtime/sampler.h"
#include "server/json_fields.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

using ojson = fak::ojson;

struct CompletionRequest {
  bool chat = false;
  std::string model;
  // /v1/completions: the prompt as text, or as token ids when given as an array of integers.
  std::string prompt;
  std::optional<std::vector<int32_t>> prompt_ids;
  // /v1/chat/completions: messages normalised for the template (content always a string; tool
  // call arguments parsed into objects, as HF templates expect).
  ojson messages = ojson::array();
  ojson tools;                       // null or a non-empty array of tool objects
  std::string tool_choice = "auto";  // "none", "auto", "required" or "function"
  std::string tool_choice_name;      // tool_choice "function": the tool that must be called
  bool parallel_tool_calls = true;
  ojson response_format;       // null, or a json_object / json_schema format
  ojson chat_template_kwargs;  // null or an object (e.g. {"enable_thinking": false})
  int n = 1;                   // choices
  int best_of = 1;             // completions: choices generated, the n most likely returned
  int top_logprobs = -1;       // -1: no logprobs; 0: the sampled token's; k: and k more
  std::optional<int> max_tokens;
  SamplingOptions sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string cache_salt;
  bool ignore_eos = false;  // extension (llama.cpp's name): generate through end tokens
  // Extension (vLLM's name): each choice of a whole (not streamed) reply also carries the ids of
  // its generated tokens, so an agent can resend its history as ids, exactly as it was decoded.
  bool return_token_ids = false;
  // Extension: special_tokens_in_content: true lets added tokens spelled in message content
  // become their ids, as before issue 23 (chat_prompt.h). Off: content is text.
  ContentTokens content_tokens = ContentTokens::Text;
};

// body: the raw request body. Throws ApiError(400) naming the offending field. defaults: the
// sampling the request starts from (the model's generation_config.json), each field it gives
// replacing the default.
CompletionRequest parse_completion_request(const std::string& body, bool chat,
                                           const SamplingOptions& defaults = {});

// The sampling fields of a request body (temperature, top_p, top_k, min_p, repetition_penalty,
// presence_penalty, frequency_penalty, seed), typed, ranged and validated as the Sampler needs.
SamplingOptions parse_sampling(const ojson& j, const SamplingOptions& defaults = {});
// OpenAI's logit_bias ({"token id": bias in [-100, 100]}) into s; check_logit_bias then refuses
// ids outside the model's vocabulary (400 naming the field).
void parse_logit_bias(const ojson& j, SamplingOptions& s);
void check_logit_bias(const SamplingOptions& s, int vocab);
// OpenAI's `stop`: a string or up to 16 strings (empty ones dropped).
std::vector<std::string> parse_stop(const ojson& j);

// The special_tokens_in_content field of a chat request (any API): Text unless it is true.
ContentTokens parse_content_tokens(const ojson& j);

}  // namespace fak::server
