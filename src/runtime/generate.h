// The decode loop: sample from the session's logits, append, repeat until max_tokens, an end
// token, or the callback says stop. Used by `fak run`, chat and the server alike.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace fak {

struct GenerateOptions {
  int max_tokens = 64;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;  // end tokens (e.g. the model's eos ids); empty = never stop early
  // Append the final sampled token to the session too (so it holds the whole text). Benchmarks
  // turn it off: that last forward produces logits nobody reads.
  bool append_last = true;
};

struct GenerateResult {
  std::vector<int32_t> ids;
  std::string finish_reason;  // "length", "stop" (end token), "callback"
  double seconds = 0;
};

// on_token returns false to stop (the token it saw is kept). An end token is not appended.
GenerateResult generate(Session& session, const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token = {});

// End tokens a model declares: config eos ids plus the tokenizer's eos.
std::vector<int32_t> model_stop_ids(const Model& model);

}  // namespace fak
