// Running tokenizer.json's pre_tokenizer (tokenizer/steps.h) over a normalized text: the pieces the
// model then encodes one at a time, with HF `tokenizers`' semantics (each step over every piece the
// steps before it made; a Split's behaviors and invert; ByteLevel's and Metaspace's prefixes per
// piece; empty pieces dropped). The common shape (one Isolated split, then ByteLevel without a
// prefix) runs on views into the text with the hand-written splitters of pretokenizer.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/steps.h"

namespace fak {

class PreTokenizerPipeline {
 public:
  // Compiles the patterns; throws fak::Error naming one PCRE2 refuses.
  explicit PreTokenizerPipeline(std::vector<PreTokenizerStep> steps);

  // True when the steps are the common shape: split() then cuts views without copying.
  bool views() const { return fast_ != nullptr; }
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             const SplitBudget* budget) const;

  // Any shape. at_start: the text begins the input (Metaspace's prepend_scheme "first").
  void split(std::string_view text, bool at_start, std::vector<std::string>& pieces,
             const SplitBudget* budget) const;

  // A ByteLevel step is present: the pieces are raw bytes for a byte-level BPE.
  bool byte_level() const { return byte_level_; }

 private:
  struct Stage {
    PreTokenizerStep step;
    std::unique_ptr<PreTokenizer> splitter;  // Split: the pattern (hand-written when known)
  };
  std::vector<Stage> stages_;
  std::unique_ptr<PreTokenizer> fast_;
  bool byte_level_ = false;
};

// The pieces of `parts` (RegexSplitter::find_matches) a Split with this behavior keeps, as
// [begin, end) ranges, empty ones included (callers drop them, as HF does).
std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<RegexSplitter::Part> parts,
                                                            SplitBehavior behavior, bool invert);

}  // namespace fak
