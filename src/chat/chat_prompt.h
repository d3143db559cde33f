// A conversation to prompt tokens for one model: its own chat template (tokenizer_config.json's
// chat_template) or ChatML when it has none, the generation prompt, and the end-of-turn tokens that
// stop an assistant reply. Shared by `fak serve`, `fak chat` and the session API.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "chat/chat_template.h"
#include "core/json.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace fak::chat {

using ojson = fak::ojson;

class ChatPrompt {
 public:
  // Throws fak::Error when the model has no tokenizer or its template does not parse.
  explicit ChatPrompt(const Model& model);
  // The same over a tokenizer alone (it must outlive this); eos_ids: the model's end tokens.
  ChatPrompt(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids);

  // messages: normalised OpenAI messages (content strings). tools: null or an array. kwargs:
  // null or an object of extra template variables (chat_template_kwargs: enable_thinking, ...).
  // note: with ContentTokens::Text the rendered text carries the tokenizer's literal marks
  // inside content: turn it into ids with encode() below and the same mode, never with
  // Tokenizer::encode; strip_literal_marks gives the text a person would read.
  // bounds: the render's cancel flag and output bound (max_prompt_bytes).
  std::string render(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                     const ojson& kwargs = nullptr, ContentTokens content = ContentTokens::Text,
                     const RenderBounds& bounds = {}) const;
  // The most bytes a rendered prompt of n_ctx tokens can have: longer ones cannot fit the context
  // whatever they tokenize to, so a render stops there instead of tokenizing megabytes first.
  // note: a token stands for at most max_token_bytes of text; normalisation (NFC) and the
  // literal marks can shrink or grow text, hence a factor of 4 on top.
  size_t max_prompt_bytes(int n_ctx) const;
  std::vector<int32_t> encode(std::string_view rendered,
                              ContentTokens content = ContentTokens::Text) const;
  // Thinking models (a "<think>" token in the vocabulary): the ids of "<think>" and "</think>",
  // which opens and ends the reasoning block (a constrained reply waits for the end, a reasoning
  // budget counts between them); nullopt for other models.
  std::optional<int32_t> think_close_id() const { return think_close_; }
  std::optional<int32_t> think_open_id() const { return think_open_; }
  // End of an assistant turn: the model's eos ids plus end-of-turn specials (<|im_end|>, ...).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool template_handles_tools() const { return handles_tools_; }
  // False when the model brought no chat template (no chat_template.jinja, chat_template.json,
  // tokenizer_config.json template or GGUF tokenizer.chat_template) and ChatML stands in: the
  // callers say so at load (no_template_warning), never silently.
  bool has_model_template() const { return has_model_template_; }
  // How this model writes tool calls (chat_format.h), told by its template.
  const ChatFormat& format() const { return *format_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  const Tokenizer* tokenizer_;
  ChatTemplate template_;
  ojson extra_;
  std::vector<int32_t> stop_ids_;
  std::optional<int32_t> think_open_, think_close_;
  bool handles_tools_ = false;
  const ChatFormat* format_ = nullptr;
  size_t max_token_bytes_ = 1;
  bool has_model_template_ = true;
  bool reads_thinking_ = false;  // the template reads message.thinking (gpt-oss)
};

// The line a CLI or server prints when a model has no chat template of its own.
std::string no_template_warning(const std::string& model);

}  // namespace fak::chat
