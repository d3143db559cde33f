#include "server/prompt_builder.h"

#include "server/api_error.h"
#include "server/context.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

std::vector<int32_t> completion_prompt(ServerContext& ctx, const CompletionRequest& r) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (r.prompt_ids) {
    for (int32_t id : *r.prompt_ids)
      if (id >= ctx.model->config().vocab)
        bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(ctx.model->config().vocab),
                    "prompt");
    return *r.prompt_ids;
  }
  if (!tok) bad_request("the model has no tokenizer: send the prompt as token ids", "prompt");
  // A raw prompt is the client's own text: its added tokens are tokens, as they always were.
  return tok->encode(r.prompt);
}

void check_prompt_fits(const std::vector<int32_t>& ids, int n_ctx, const std::string& param) {
  if (ids.empty()) bad_request("the prompt is empty", param);
  if (int(ids.size()) < n_ctx) return;
  const std::string what = param == "prompt" ? "prompt" : "messages";
  throw ApiError(400,
                 "This model's maximum context length is " + std::to_string(n_ctx) +
                     " tokens. However, your " + what + " resulted in " +
                     std::to_string(ids.size()) + " tokens, and at least one must be left to " +
                     "generate. Please reduce the length of the " + what + ".",
                 param, "context_length_exceeded");
}

}  // namespace fak::server
