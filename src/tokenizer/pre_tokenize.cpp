// Pre-tokenizer steps; see pre_tokenize.h.
#include "tokenizer/pre_tokenize.h"

#include <algorithm>

#include "core/error.h"

namespace fak {

std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<RegexSplitter::Part> parts,
                                                            SplitBehavior behavior, bool invert) {
  if (invert)
    for (auto& p : parts) p.match = !p.match;
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& p : parts) out.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::Removed:
      for (const auto& p : parts)
        if (!p.match) out.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::Contiguous:
      // note: as HF folds it, a part continues the last one when its match flag equals the one
      // before (the first part compares with "no match").
      for (const auto& p : parts) {
        if (p.match == previous_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        previous_match = p.match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& p : parts) {
        if (p.match && !previous_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        previous_match = p.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !out.empty())
          out.back().first = it->begin;
        else
          out.emplace_back(it->begin, it->end);
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

namespace {

struct Piece {
  std::string text;
  bool at_start;
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
    out.append(s, at, hit - at).append(to);
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

void split_into(const PreTokenizer& splitter, const Piece& piece, SplitBehavior behavior,
                bool invert, std::vector<Piece>& out, const SplitBudget* budget) {
  std::vector<RegexSplitter::Part> parts;
  splitter.find_matches(piece.text, parts, budget);
  for (const auto& [b, e] : apply_split_behavior(std::move(parts), behavior, invert))
    if (e > b) out.push_back({piece.text.substr(b, e - b), piece.at_start && b == 0});
}

}  // namespace

PreTokenizerPipeline::PreTokenizerPipeline(std::vector<PreTokenizerStep> steps) {
  using Kind = PreTokenizerStep::Kind;
  for (PreTokenizerStep& step : steps) {
    Stage stage{std::move(step), nullptr};
    if (stage.step.kind == Kind::Split)
      stage.splitter = std::make_unique<PreTokenizer>(stage.step.pattern);
    else if (stage.step.kind == Kind::ByteLevel && stage.step.use_regex)
      stage.splitter = std::make_unique<PreTokenizer>(kGpt2Pattern);
    else if (stage.step.kind == Kind::Metaspace && stage.step.split)
      stage.splitter = std::make_unique<PreTokenizer>(regex_escape(stage.step.replacement));
    byte_level_ |= stage.step.kind == Kind::ByteLevel;
    stages_.push_back(std::move(stage));
  }
  // The common shape: an Isolated split (or ByteLevel's own) and a ByteLevel that adds nothing.
  const auto plain_byte_level = [](const PreTokenizerStep& s) {
    return s.kind == Kind::ByteLevel && !s.add_prefix_space;
  };
  const auto isolated = [](const PreTokenizerStep& s) {
    return s.kind == Kind::Split && s.behavior == SplitBehavior::Isolated && !s.invert;
  };
  if (stages_.size() == 2 && isolated(stages_[0].step) && plain_byte_level(stages_[1].step) &&
      !stages_[1].step.use_regex)
    fast_ = std::make_unique<PreTokenizer>(stages_[0].step.pattern);
  else if (stages_.size() == 1 && plain_byte_level(stages_[0].step))
    fast_ = std::make_unique<PreTokenizer>(stages_[0].step.use_regex ? kGpt2Pattern : "(?s).+");
}

void PreTokenizerPipeline::split(std::string_view text, std::vector<std::string_view>& pieces,
                                 const SplitBudget* budget) const {
  if (!fast_) fail("internal: PreTokenizerPipeline::split on views of a general pipeline");
  if (!text.empty()) fast_->split(text, pieces, budget);
}

void PreTokenizerPipeline::split(std::string_view text, bool at_start,
                                 std::vector<std::string>& pieces,
                                 const SplitBudget* budget) const {
  using Kind = PreTokenizerStep::Kind;
  std::vector<Piece> current;
  if (!text.empty()) current.push_back({std::string(text), at_start});
  std::vector<Piece> next;
  for (const Stage& stage : stages_) {
    const PreTokenizerStep& s = stage.step;
    next.clear();
    for (Piece& piece : current) {
      switch (s.kind) {
        case Kind::Split:
          split_into(*stage.splitter, piece, s.behavior, s.invert, next, budget);
          break;
        case Kind::ByteLevel:
          if (s.add_prefix_space && !piece.text.starts_with(' ')) piece.text.insert(0, " ");
          if (stage.splitter)
            split_into(*stage.splitter, piece, SplitBehavior::Isolated, false, next, budget);
          else
            next.push_back(std::move(piece));
          break;
        case Kind::Metaspace: {
          replace_all(piece.text, " ", s.replacement);
          const bool prepend = s.prepend == PreTokenizerStep::Prepend::Always ||
                               (s.prepend == PreTokenizerStep::Prepend::First && piece.at_start);
          if (prepend && !piece.text.starts_with(s.replacement))
            piece.text.insert(0, s.replacement);
          if (stage.splitter)
            split_into(*stage.splitter, piece, SplitBehavior::MergedWithNext, false, next, budget);
          else
            next.push_back(std::move(piece));
          break;
        }
      }
    }
    current.swap(next);
  }
  for (Piece& p : current)
    if (!p.text.empty()) pieces.push_back(std::move(p.text));
}

}  // namespace fak
