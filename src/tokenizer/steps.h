// The stages of a Hugging Face `tokenizers` pipeline as data: what tokenizer.json's normalizer,
// pre_tokenizer and decoder say, in order (Sequences flattened). TokenizerSpec carries them; the
// tokenizer runs them (normalize.h, pre_tokenize.h, decode_steps.h) with HF's semantics.
#pragma once

#include <string>
#include <vector>

namespace fak {

struct NormalizerStep {
  enum class Kind {
    NFC,
    NFD,
    NFKC,
    NFKD,
    Lowercase,     // Rust's str::to_lowercase
    Strip,         // white space at the left and/or right end
    StripAccents,  // combining marks (Mn) dropped
    Replace,       // every match of `pattern` (a regex, or a literal when !regex) -> content
    Prepend,       // content before a non-empty text
  };
  NormalizerStep(Kind k = Kind::NFC) : kind(k) {}
  Kind kind;
  std::string pattern, content;
  bool regex = false;
  bool left = true, right = true;  // Strip
};

// How a Split's matches and the stretches between them become pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind {
    Split,      // pattern (PCRE2 syntax; String patterns escaped, char classes as regexes)
    ByteLevel,  // per piece: a space before it (add_prefix_space), then the GPT-2 split
    Metaspace,  // per piece: spaces -> replacement, the prefix by scheme, then split on it
  };
  enum class Prepend { Always, First, Never };
  PreTokenizerStep(Kind k = Kind::Split) : kind(k) {}
  Kind kind;
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false, use_regex = true;  // ByteLevel
  std::string replacement;                          // Metaspace
  Prepend prepend = Prepend::Always;
  bool split = true;
};

struct DecoderStep {
  enum class Kind {
    ByteLevel,     // byte-level spelling -> bytes
    Replace,       // pattern (a regex, or a literal when !regex) -> content in each token
    ByteFallback,  // <0xXX> tokens -> their bytes
    Fuse,          // all tokens into one
    Strip,         // up to `start` leading and `stop` trailing `content` characters per token
    Metaspace,     // replacement -> space, none in the first token unless prepend is Never
  };
  DecoderStep(Kind k = Kind::ByteLevel) : kind(k) {}
  Kind kind;
  std::string pattern, content;
  bool regex = false;
  int start = 0, stop = 0;
  PreTokenizerStep::Prepend prepend = PreTokenizerStep::Prepend::Always;
};

}  // namespace fak
