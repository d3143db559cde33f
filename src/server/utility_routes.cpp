// llama-server's utility routes, which editors and agent tooling call, with its request and
// response shapes (tools/server/server-context.cpp at llama.cpp 34af94cd):
//
//   POST /tokenize        {content, add_special=false, parse_special=true, with_pieces=false}
//                         -> {tokens: [id...]} or {tokens: [{id, piece}...]} (a piece that is not
//                         valid UTF-8 as its byte values)
//   POST /detokenize      {tokens} -> {content}
//   POST /apply-template  a chat completion request -> {prompt}: the text the server would run
//   GET  /props           the model, context, slots, chat template, modalities, special tokens
#include <string>

#include "chat/chat_prompt.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fak::server {

namespace {

const Tokenizer& tokenizer_of(ServerContext& ctx) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (!tok) throw ApiError(501, "the model has no tokenizer", "", "not_supported");
  return *tok;
}

ojson parse_body(const HttpRequest& req) {
  ojson body = ojson::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) bad_request("the body must be a JSON object");
  return body;
}

bool flag(const ojson& body, const char* key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad_request(std::string("`") + key + "` must be a boolean", key);
  return it->get<bool>();
}

int32_t checked_id(const ojson& v, const Tokenizer& tok, const char* param) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size())
    bad_request(std::string("`") + param + "` holds " + v.dump() +
                    ", which is not a token id of this model (0 to " +
                    std::to_string(tok.vocab_size() - 1) + ")",
                param);
  return int32_t(v.get<int64_t>());
}

void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const Tokenizer& tok = tokenizer_of(ctx);
  const ojson body = parse_body(req);
  const bool add_special = flag(body, "add_special", false);
  const bool parse_special = flag(body, "parse_special", true);
  const bool with_pieces = flag(body, "with_pieces", false);
  std::vector<int32_t> ids;
  if (const auto c = body.find("content"); c != body.end()) {
    if (add_special && tok.spec().add_bos && tok.spec().bos_id) ids.push_back(*tok.spec().bos_id);
    // A string, or llama-server's mixed form: strings and token ids in one array.
    const ojson parts = c->is_array() ? *c : ojson::array({*c});
    for (const ojson& part : parts) {
      if (part.is_string()) {
        const std::string& text = part.get_ref<const std::string&>();
        if (const size_t bad = find_invalid_utf8(text); bad != std::string::npos)
          bad_request("`content` is not valid UTF-8 (byte offset " + std::to_string(bad) + ")",
                      "content");
        const std::vector<int32_t> more = tok.encode(text, parse_special);
        ids.insert(ids.end(), more.begin(), more.end());
      } else {
        ids.push_back(checked_id(part, tok, "content"));
      }
    }
  }
  ojson tokens = ojson::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.token_bytes(id);
    ojson p;
    if (find_invalid_utf8(piece) == std::string::npos) {
      p = piece;
    } else {
      p = ojson::array();
      for (unsigned char b : piece) p.push_back(int(b));
    }
    tokens.push_back({{"id", id}, {"piece", std::move(p)}});
  }
  reply_json(res, 200, {{"tokens", std::move(tokens)}});
}

void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const Tokenizer& tok = tokenizer_of(ctx);
  const ojson body = parse_body(req);
  std::vector<int32_t> ids;
  if (const auto t = body.find("tokens"); t != body.end()) {
    if (!t->is_array()) bad_request("`tokens` must be an array of token ids", "tokens");
    for (const ojson& v : *t) ids.push_back(checked_id(v, tok, "tokens"));
  }
  std::string bytes = tok.decode(ids);
  reply_json(res, 200, {{"content", take_complete_utf8(bytes, true)}});
}

void handle_apply_template(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  if (!ctx.chat) throw ApiError(501, "the model has no tokenizer: chat needs one", "", "");
  // The chat request as /v1/chat/completions reads it; `model` may be left out here.
  ojson body = parse_body(req);
  if (!body.contains("model")) body["model"] = ctx.model_id;
  const CompletionRequest r = parse_completion_request(body.dump(), true, ctx.sampling_defaults);
  RenderBounds bounds;
  bounds.max_output_bytes = ctx.chat->max_prompt_bytes(ctx.scheduler->ctx());
  bounds.cancel = req.gone.get();
  const std::string text =
      ctx.chat->render(r.messages, r.tools, true, r.chat_template_kwargs, r.content_tokens, bounds);
  reply_json(res, 200, {{"prompt", strip_literal_marks(text)}});
}

void handle_props(ServerContext& ctx, HttpResponse& res) {
  const Tokenizer* tok = ctx.model->tokenizer();
  auto token_text = [&](std::optional<int32_t> id) {
    return tok && id ? tok->token_bytes(*id) : std::string();
  };
  const SamplingOptions& s = ctx.sampling_defaults;
  ojson params = {{"temperature", s.temperature},
                  {"top_k", s.top_k},
                  {"top_p", s.top_p},
                  {"min_p", s.min_p},
                  {"n_predict", ctx.options.max_tokens > 0 ? ctx.options.max_tokens : -1}};
  reply_json(res, 200,
             {{"default_generation_settings",
               {{"params", std::move(params)}, {"n_ctx", ctx.scheduler->ctx()}}},
              {"total_slots", ctx.options.parallel},
              {"model_alias", ctx.model_id},
              {"model_path", ctx.model->path().string()},
              {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
              {"chat_template", tok ? tok->spec().chat_template : std::string()},
              {"chat_template_is_models", ctx.chat ? ctx.chat->has_model_template() : false},
              {"bos_token", token_text(tok ? tok->spec().bos_id : std::nullopt)},
              {"eos_token", token_text(tok ? tok->spec().eos_id : std::nullopt)},
              {"build_info", "fak"},
              {"is_sleeping", false},
              {"endpoint_slots", false},
              {"endpoint_props", false},
              {"endpoint_metrics", true}});
}

}  // namespace

void add_utility_routes(Router& router, ServerContext& ctx) {
  router.add("POST", "/tokenize", guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_tokenize(ctx, req, res);
             }));
  router.add("POST", "/detokenize", guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_detokenize(ctx, req, res);
             }));
  router.add("POST", "/apply-template", guarded([&](const HttpRequest& req, HttpResponse& res) {
               handle_apply_template(ctx, req, res);
             }));
  router.add("GET", "/props",
             guarded([&](const HttpRequest&, HttpResponse& res) { handle_props(ctx, res); }));
}

}  // namespace fak::server
