// Anthropic Messages response bodies: the message object and its content blocks, usage, the
// stream's events, and errors in Anthropic's shape ({"type": "error", "error": {type, message}})
// with the statuses Anthropic uses, so its SDKs raise their own typed errors.
#pragma once

#include <string>

#include "server/generation.h"
#include "server/http_message.h"
#include "server/reply_blocks.h"

namespace fak::server {

// end_turn, max_tokens, stop_sequence or tool_use.
std::string anthropic_stop_reason(const Generation::Choice& c);
// Anthropic counts the prompt in parts: input_tokens are the ones read afresh, cached ones are
// cache_read_input_tokens (their sum is the prompt; clients add them up to size the context).
// Nothing is ever written to a cache on request, so cache_creation_input_tokens is 0.
ojson anthropic_usage(const Usage& u);
// A content block: whole, or as content_block_start announces it (empty).
ojson anthropic_block(const ReplyBlock& b, bool start = false);
// The message object; stop_reason empty: still going (null).
ojson anthropic_message(const std::string& id, const std::string& model, const ojson& content,
                        const std::string& stop_reason, const std::string& stop_sequence,
                        const Usage& usage);

// Error type for an HTTP status (invalid_request_error, authentication_error, ...), and the
// status Anthropic would send (an overloaded server is 529, not 503).
std::string anthropic_error_type(int status);
int anthropic_status(int status);
ojson anthropic_error_body(const std::string& type, const std::string& message);
void reply_anthropic_error(HttpResponse& res, int status, const std::string& message);

// As guarded() (context.h), with the error body in Anthropic's shape.
HttpHandler anthropic_guarded(HttpHandler fn);

}  // namespace fak::server
