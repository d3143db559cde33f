// Constrained decoding, the public API: a JSON schema (or "any JSON object", or Qwen/Hermes tool
// calls) becomes a byte-level grammar, and a per-sequence matcher turns the grammar's state into
// the set of token ids the model may sample next.
//
//   auto index = fak::grammar::TokenIndex::build(tokenizer);            // once per tokenizer
//   auto grammar = fak::grammar::compile_json_schema(schema);           // per request (throws)
//   fak::grammar::GrammarMatcher matcher(grammar, index, {eos_id});     // per sequence
//   std::vector<uint32_t> mask;
//   for (;;) {                                     // each decoding step of this sequence:
//     matcher.allowed_tokens(mask);                //   before sampling
//     fak::grammar::apply_token_mask(logits, mask);  //  disallowed logits -> -inf
//     int32_t id = sampler.sample(logits);
//     matcher.advance_token(id);                   //   after sampling (true: it was allowed)
//     if (matcher.is_terminated()) break;          //   the stop id was taken: done
//     if (matcher.is_complete() && !matcher.can_continue()) break;  // only a stop id is left
//   }
//
// Masks cost microseconds per step once a state's innermost frame has been seen (by any sequence
// of the process: parts are cached in the TokenIndex); bench/RESULTS.md has the numbers.
//
// What the grammars accept (the whitespace and property-order policy) is written down at the top
// of schema_compile.cpp; the keywords refused are listed there too. Every failure a request can
// cause (an unsupported keyword, a bad $ref, an unsatisfiable schema) throws fak::Error with one
// message naming the keyword and where it is in the schema, meant for an HTTP 400.
//
// Threads: Grammar and TokenIndex are immutable (TokenIndex's mask cache is internally locked)
// and shared freely; a GrammarMatcher belongs to one sequence and one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace fak {
class Tokenizer;
}

namespace fak::grammar {

class Grammar;  // compiled, immutable; see nodes.h for what is inside

struct SchemaOptions {
  // Off (the default), a keyword the grammar cannot enforce (multipleOf, uniqueItems, a pattern
  // with a backreference, ...) or does not know is an error. On, it is skipped: the output then
  // honours everything else in the schema but may break that keyword. For tool schemas written
  // for models that were never constrained.
  bool ignore_unsupported_keywords = false;
};

// A JSON schema (the subset agents use). Property order is the schema's, so the schema must keep
// it: pass ordered_json, or text.
std::shared_ptr<const Grammar> compile_json_schema(const fak::ojson& schema,
                                                   const SchemaOptions& options = {});
std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_text,
                                                        const SchemaOptions& options = {});

// Any JSON object (response_format {"type": "json_object"}).
std::shared_ptr<const Grammar> any_json_object_grammar();

// An OpenAI response_format: {"type": "text"} gives nullptr (no constraint), "json_object" and
// "json_schema" (with json_schema.schema) a grammar.
std::shared_ptr<const Grammar> compile_response_format(const fak::ojson& format,
                                                       const SchemaOptions& options = {});

struct ToolCallOptions {
  std::string only_function;  // tool_choice naming one function; empty: any listed tool
  int max_calls = 1;          // > 1: up to that many blocks, separated by "\n" (parallel calls)
  SchemaOptions schema;
};

// Qwen/Hermes tool calls, for tool_choice "required" or a named function:
//   <tool_call>\n{"name": "<a listed name>", "arguments": <that tool's parameters>}\n</tool_call>
// `tools` is the OpenAI request's array ({"type": "function", "function": {"name", "parameters"}}).
// A tool without parameters takes only {} as arguments.
std::shared_ptr<const Grammar> compile_tool_calls(const fak::ojson& tools,
                                                  const ToolCallOptions& options = {});

// GLM-4.5 tool calls (chat/chat_format.h), for the same tool_choice:
//   <tool_call><name>\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...</tool_call>
// with the tool's required parameters in its schema's order; a parameter that takes only strings
// (schema_takes_only_strings) written as its text, without '<', any other value as JSON following
// its schema.
std::shared_ptr<const Grammar> compile_glm_tool_calls(const fak::ojson& tools,
                                                      const ToolCallOptions& options = {});

// JSON calls {"name": NAME, ARGUMENTS_KEY: {...}} between `open` and `close`, several separated
// by `separator`: Hermes is ("<tool_call>\n", "\n</tool_call>", "arguments", "\n"), Llama 3.x
// ("", "", "parameters", "; ").
std::shared_ptr<const Grammar> compile_json_tool_calls(const fak::ojson& tools,
                                                       const ToolCallOptions& options,
                                                       const char* open, const char* close,
                                                       const std::string& arguments_key,
                                                       const char* separator);

// Qwen3-Coder / Qwen3.5 / Qwen3.6 calls (chat_format.h): <tool_call>\n<function=NAME>\n, each
// required parameter as <parameter=KEY>\nVALUE\n</parameter>\n (a string value as text that never
// holds "\n</parameter>", a boolean as true/false in either case, anything else as JSON under its
// schema), then </function>\n</tool_call>.
std::shared_ptr<const Grammar> compile_qwen_xml_tool_calls(const fak::ojson& tools,
                                                           const ToolCallOptions& options = {});

// gpt-oss's harmony calls, after a prompt that ends "<|channel|>commentary to=functions.": the
// recipient's name, then " <|constrain|>json<|message|>" (two special tokens of the tokenizer)
// and that tool's arguments as JSON; one call (the stop id <|call|> follows).
std::shared_ptr<const Grammar> compile_harmony_tool_calls(const fak::ojson& tools,
                                                          const ToolCallOptions& options = {});

// Whether a parameter schema admits strings alone: type "string", or an enum / const of strings.
bool schema_takes_only_strings(const fak::ojson& schema);

// True when `text` is a whole sentence of the grammar (no tokenizer involved).
bool grammar_matches(const Grammar& grammar, std::string_view text);

// The token vocabulary as a byte trie, built once per tokenizer (about 0.1 s for Qwen's 151k
// tokens) and shared by every matcher; it also caches the parts of masks that depend only on the
// innermost grammar state. Special tokens are never allowed by a grammar (stop ids aside).
class TokenIndex {
 public:
  static std::shared_ptr<const TokenIndex> build(const Tokenizer& tokenizer);
  int32_t vocab_size() const;
  ~TokenIndex();

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit TokenIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Words of a token bitmask: bit (id % 32) of word (id / 32) set = id allowed.
inline size_t mask_words(int32_t vocab_size) {
  return (size_t(vocab_size) + 31) / 32;
}

class GrammarMatcher {
 public:
  // stop_ids: the end-of-sequence token(s), allowed exactly when the grammar is complete.
  // index may be null for byte-level use only (advance_bytes / is_complete, no masks).
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenIndex> index,
                 std::vector<int32_t> stop_ids);
  GrammarMatcher(const GrammarMatcher& other);  // same state, own scratch (for look-ahead)
  GrammarMatcher& operator=(const GrammarMatcher& other);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Fills `mask` (resized to mask_words(vocab)) with the tokens that keep the output a prefix of a
  // sentence of the grammar, plus the stop ids when the output is already a whole one. Never
  // empty before termination: every allowed token leads somewhere that can still finish.
  void allowed_tokens(std::vector<uint32_t>& mask) const;
  // Takes the token if allowed (true); otherwise returns false and leaves the state as it was.
  // Taking a stop id terminates the matcher.
  bool advance_token(int32_t id);
  // The same for raw bytes (a forced prefix, or tests): all or nothing.
  bool advance_bytes(std::string_view bytes);

  bool is_complete() const;    // what was taken is a whole sentence (a stop id may come next)
  bool can_continue() const;   // some non-stop token could still be taken
  bool is_terminated() const;  // a stop id was taken
  void reset();                // back to the start of the grammar

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// logits[i] = -inf where bit i of mask is clear; logits past the mask (a model's vocab padded
// beyond the tokenizer's) are disallowed too.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask);

}  // namespace fak::grammar
