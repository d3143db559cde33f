// Added-token matching; see added_tokens.h.
#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fak {
namespace {

using Ptr = const unsigned char*;

// Rust regex's \w, which HF uses for single_word: alphabetic, marks, decimal digits, connector
// punctuation and the joiners.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Start of the character that ends just before `pos` (text is valid UTF-8, pos > 0).
size_t previous_char(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  return pos;
}

char32_t char_at(std::string_view text, size_t pos, size_t* len) {
  Ptr p = reinterpret_cast<Ptr>(text.data()) + pos;
  Ptr q = p;
  char32_t cp = next_code_point(q);
  *len = static_cast<size_t>(q - p);
  return cp;
}

}  // namespace

void AddedTokenMatcher::add(Token token) {
  if (token.content.empty()) return;  // would match everywhere; HF ignores such tokens too
  if (token.content.size() > kMaxTokenBytes)
    fail("added token " + std::to_string(token.id) + " is " + std::to_string(token.content.size()) +
         " bytes long (at most " + std::to_string(kMaxTokenBytes) + " are accepted)");
  if (!root_ready_) {
    root_next_.fill(kNone);
    root_ready_ = true;
  }
  uint32_t node = 0;
  for (unsigned char c : token.content) {
    uint32_t next = child(node, c);
    if (next == kNone) {
      next = uint32_t(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_next_[c] = next;
      } else {
        auto& edges = nodes_[node].next;
        edges.insert(std::lower_bound(edges.begin(), edges.end(), std::make_pair(c, uint32_t(0))),
                     {c, next});
      }
    }
    node = next;
  }
  // A duplicate content keeps its first id.
  if (nodes_[node].token != kNone) return;
  nodes_[node].token = uint32_t(tokens_.size());
  tokens_.push_back(std::move(token));
}

uint32_t AddedTokenMatcher::child(uint32_t node, unsigned char byte) const {
  if (node == 0) return root_ready_ ? root_next_[byte] : kNone;
  const auto& edges = nodes_[node].next;
  auto it = std::lower_bound(edges.begin(), edges.end(), std::make_pair(byte, uint32_t(0)));
  return it != edges.end() && it->first == byte ? it->second : kNone;
}

const AddedTokenMatcher::Token* AddedTokenMatcher::longest_at(std::string_view text,
                                                              size_t pos) const {
  const Token* hit = nullptr;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node == kNone) break;
    if (nodes_[node].token != kNone) hit = &tokens_[nodes_[node].token];
  }
  return hit;
}

bool AddedTokenMatcher::starts_at(std::string_view text, size_t pos) const {
  return pos < text.size() && longest_at(text, pos) != nullptr;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special,
                              std::vector<Segment>& out) const {
  size_t n = text.size(), done = 0, pos = 0;
  while (pos < n) {
    const Token* hit = longest_at(text, pos);
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;  // the search resumes after this match whether or not it is used
    if (skip_special && hit->special) continue;
    if (hit->single_word) {
      size_t len;
      bool word_before = start > 0 && is_word_char(char_at(text, previous_char(text, start), &len));
      bool word_after = stop < n && is_word_char(char_at(text, stop, &len));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      // Eat whitespace to the left, but not what an earlier token already took.
      while (start > done) {
        size_t prev = previous_char(text, start), len;
        if (!is_white_space(char_at(text, prev, &len))) break;
        start = prev;
      }
    }
    if (hit->rstrip) {
      size_t len;
      while (stop < n && is_white_space(char_at(text, stop, &len))) stop += len;
      pos = stop;
    }
    if (done < start) out.push_back({-1, done, start});
    out.push_back({hit->id, start, stop});
    done = stop;
  }
  if (done < n) out.push_back({-1, done, n});
}

}  // namespace fak
