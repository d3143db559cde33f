// How many prompt tokens one scheduler step reads, in all (fair_share.h then shares them out).
//
// Everything in a step waits for the whole step: the sequences decoding beside a long prompt get
// one token per step. So while others decode, a step's prompt tokens are worth --prefill-chunk
// tokens at depth 0. Deep in a long context each costs several times that, because its attention
// reads every earlier position (Qwen2.5-0.5B at depth 65536: 8.9x the work of a token at depth
// 0), and a fixed count of them slowed every decoding stream down as much. A prompt read alone
// takes whole chunks (fewer, larger products).
#pragma once

#include <cstdint>

#include "models/config.h"

namespace fak::server {

// Multiply-adds of one prompt token with `depth` positions before it: every matrix of every layer
// once (the attention or Gated DeltaNet projections, the dense FFN or the chosen and shared
// experts), and each attention layer's query against the keys and values it reads (at most its
// window). The output head is left out (a prompt's rows skip it but the last).
double prompt_token_work(const ModelConfig& c, int64_t depth);

// The step's prompt budget: `chunk` (--prefill-chunk) when no other sequence decodes this step or
// the deepest prompt still being read is at depth 0; else chunk scaled down by how much more a
// token at `deepest` costs than one at depth 0, never under kFewestPromptTokens (or chunk).
inline constexpr int kFewestPromptTokens = 16;
int prefill_budget(const ModelConfig& c, int chunk, int64_t deepest, bool others_decode);

}  // namespace fak::server
