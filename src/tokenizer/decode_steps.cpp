// Decoder steps; see decode_steps.h.
#include "tokenizer/decode_steps.h"

#include "tokenizer/byte_unicode.h"
#include "tokenizer/utf8.h"

namespace fak {

namespace {

using Kind = DecoderStep::Kind;

// "<0xXX>" -> the byte, as HF's ByteFallback reads it (any case of hex digits).
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
    out.append(s, at, hit - at).append(to);
  out.append(s, at, std::string::npos);
  return out;
}

// Characters of s; a byte that does not start a complete UTF-8 sequence (raw bytes from a
// byte-level or byte-fallback step) is kept as itself, coded above U+10FFFF.
std::u32string chars_of(const std::string& s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    const size_t len = c < 0x80             ? 1
                       : (c & 0xE0) == 0xC0 ? 2
                       : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4
                                            : 0;
    bool whole = len > 0 && size_t(end - p) >= len;
    for (size_t i = 1; whole && i < len; ++i) whole = (p[i] & 0xC0) == 0x80;
    if (!whole) {
      out.push_back(char32_t(0x110000 + c));
      ++p;
      continue;
    }
    out.push_back(next_code_point(p));
  }
  return out;
}

std::string bytes_of(const std::u32string& cps) {
  std::string out;
  for (char32_t c : cps) {
    if (c >= 0x110000)
      out += char(c - 0x110000);
    else
      append_utf8(out, c);
  }
  return out;
}

void apply(const DecoderStep& step, const RegexSplitter& regex, std::vector<std::string>& tokens,
           bool first_is_front) {
  switch (step.kind) {
    case Kind::ByteLevel: {
      // HF joins every token's bytes into one string.
      std::string all;
      for (const std::string& t : tokens) all += byte_level_to_bytes(t).value_or(t);
      tokens.assign(1, std::move(all));
      break;
    }
    case Kind::Replace:
      for (std::string& t : tokens) {
        if (!step.regex) {
          t = replace_all(t, step.pattern, step.content);
          continue;
        }
        std::vector<RegexSplitter::Part> parts;
        regex.find_matches(t, parts);
        std::string out;
        for (const auto& p : parts)
          out += p.match ? step.content : t.substr(p.begin, p.end - p.begin);
        t = std::move(out);
      }
      break;
    case Kind::ByteFallback: {
      std::vector<std::string> out;
      std::string run;
      for (std::string& t : tokens) {
        if (const int b = fallback_byte(t); b >= 0) {
          run += char(b);
          continue;
        }
        if (!run.empty()) out.push_back(std::move(run)), run.clear();
        out.push_back(std::move(t));
      }
      if (!run.empty()) out.push_back(std::move(run));
      tokens = std::move(out);
      break;
    }
    case Kind::Fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case Kind::Strip: {
      const char32_t content = chars_of(step.content).empty() ? 0 : chars_of(step.content)[0];
      for (std::string& t : tokens) {
        const std::u32string cps = chars_of(t);
        size_t start = 0, stop = cps.size();
        for (size_t i = 0; i < size_t(step.start) && i < cps.size() && cps[i] == content; ++i)
          start = i + 1;
        for (size_t i = 0; i < size_t(step.stop) && i < cps.size(); ++i) {
          const size_t at = cps.size() - i - 1;
          if (cps[at] != content) break;
          stop = at;
        }
        // note: HF panics where the cuts cross (a token of only `content`); nothing is left then.
        t = start < stop ? bytes_of(cps.substr(start, stop - start)) : std::string();
      }
      break;
    }
    case Kind::Metaspace: {
      const std::u32string rep = chars_of(step.content);
      for (size_t i = 0; i < tokens.size(); ++i) {
        const bool drop =
            i == 0 && first_is_front && step.prepend != PreTokenizerStep::Prepend::Never;
        std::u32string cps = chars_of(tokens[i]), out;
        for (char32_t c : cps) {
          if (!rep.empty() && c == rep[0]) {
            if (!drop) out.push_back(' ');
          } else {
            out.push_back(c);
          }
        }
        tokens[i] = bytes_of(out);
      }
      break;
    }
  }
}

}  // namespace

DecoderPipeline::DecoderPipeline(std::vector<DecoderStep> steps) : steps_(std::move(steps)) {
  for (const DecoderStep& s : steps_)
    patterns_.emplace_back(s.kind == Kind::Replace && s.regex ? s.pattern : std::string("x"));
}

std::string DecoderPipeline::decode(std::vector<std::string> tokens) const {
  for (size_t i = 0; i < steps_.size(); ++i) apply(steps_[i], patterns_[i], tokens, true);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string DecoderPipeline::token(const std::string& token) const {
  std::vector<std::string> tokens{token};
  bool fused = false;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const DecoderStep& step = steps_[i];
    // A Strip after the tokens were joined cuts the front of the whole text, not this token's.
    if (step.kind == Kind::Strip && fused) continue;
    fused = fused || step.kind == Kind::Fuse || step.kind == Kind::ByteLevel;
    apply(step, patterns_[i], tokens, false);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace fak
