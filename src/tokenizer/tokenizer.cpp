// Tokenizer: builds the runtime tables from a TokenizerSpec and runs the encode pipeline
// (added tokens -> NFC -> pre-tokenize -> byte-level BPE) and decode; see tokenizer.h.
#include "tokenizer/tokenizer.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/decode_steps.h"
#include "tokenizer/normalize.h"
#include "tokenizer/pre_tokenize.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace fak {

namespace {

// Per-call memo of pre-token -> ids. Text repeats words (code more than prose), and a hash lookup
// is much cheaper than re-running the merges. It lives for one encode() call only, so a shared
// Tokenizer needs no locking.
struct PieceCache {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> spans;
  std::vector<int32_t> ids;              // spans index into this
  std::vector<std::string_view> pieces;  // scratch for the splitter
  std::vector<std::string> owned;        // the same when the pre-tokenizer rewrites pieces
  SplitBudget budget;                    // the whole encode's
};

}  // namespace

struct Tokenizer::Impl {
  TokenizerSpec spec;
  std::vector<std::string> bytes;                    // id -> raw bytes it decodes to
  std::vector<uint8_t> special;                      // id -> special added token
  std::unordered_map<std::string, int32_t> by_text;  // token text as spelled in spec.tokens
  std::unordered_map<std::string, int32_t> whole;    // raw bytes -> id, only for ignore_merges
  AddedTokenMatcher raw_added;                       // matched on the text as given
  AddedTokenMatcher normalized_added;  // matched after the normalizer (normalized = true)
  Normalizer normalizer;
  bool nfc_only = false;  // the normalizer is NFC alone (most text passes it unchanged)
  std::unique_ptr<PreTokenizerPipeline> pre;
  DecoderPipeline decoder;
  bool has_decoder = true;  // without one, HF joins the tokens with spaces
  bool byte_level = true;   // the BPE starts from bytes (a ByteLevel pre-tokenizer), not characters
  Bpe bpe;
  std::array<int32_t, 256> fallback_ids{};  // SentencePiece-style: byte b -> "<0xXX>", or -1

  // Which added tokens a call matches: all, all but the special ones, or none (plain text).
  enum class Added { All, NonSpecial, None };

  explicit Impl(TokenizerSpec s);
  // strip_marks: the text came through mark_literal; the marks go after the added tokens were
  // found (they broke the marked ones) and before the BPE sees the text.
  void encode(std::string_view text, Added added, bool strip_marks,
              std::vector<int32_t>& ids) const;
  // at_start: the text begins the input (a Metaspace "first" prefix goes there only).
  void encode_text(std::string_view text, Added added, bool strip_marks, bool at_start,
                   PieceCache& cache, std::vector<int32_t>& ids) const;
  void encode_normalized(std::string_view text, bool strip_marks, bool at_start, PieceCache& cache,
                         std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& ids) const;
  void encode_characters(std::string_view piece, std::vector<int32_t>& ids) const;
};

namespace {

// The pipeline a TokenizerSpec without one (a GGUF's vocabulary) stands for, from its flat fields.
void derive_pipeline(const TokenizerSpec& spec, std::vector<NormalizerStep>& normalizers,
                     std::vector<PreTokenizerStep>& pre, std::vector<DecoderStep>& decoders) {
  if (spec.nfc) normalizers.push_back({NormalizerStep::Kind::NFC});
  if (!spec.space.empty()) {
    NormalizerStep replace{NormalizerStep::Kind::Replace};
    replace.pattern = " ";
    replace.content = spec.space;
    normalizers.push_back(replace);
    if (!spec.prepend.empty()) {
      NormalizerStep prepend{NormalizerStep::Kind::Prepend};
      prepend.content = spec.prepend;
      normalizers.push_back(prepend);
    }
    DecoderStep d{DecoderStep::Kind::Replace};
    d.pattern = spec.space;
    d.content = " ";
    decoders.push_back(d);
    decoders.push_back({DecoderStep::Kind::ByteFallback});
    decoders.push_back({DecoderStep::Kind::Fuse});
    if (spec.strip_leading > 0) {
      DecoderStep strip{DecoderStep::Kind::Strip};
      strip.content = " ";
      strip.start = spec.strip_leading;
      decoders.push_back(strip);
    }
    return;  // one piece: the whole normalized text
  }
  PreTokenizerStep split;
  split.pattern = spec.pre_regex.empty() ? std::string(kQwen2Pattern) : spec.pre_regex;
  PreTokenizerStep byte_level{PreTokenizerStep::Kind::ByteLevel};
  byte_level.use_regex = false;
  if (spec.add_prefix_space) {
    // A space in front of the text, then the split: ByteLevel's own order when it splits.
    byte_level.add_prefix_space = true;
    byte_level.use_regex = split.pattern == kGpt2Pattern;
    if (!byte_level.use_regex) pre.push_back(split);
    pre.push_back(byte_level);
  } else {
    pre.push_back(split);
    pre.push_back(byte_level);
  }
  decoders.push_back({DecoderStep::Kind::ByteLevel});
}

std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string() + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail(path.string() + ": read error");
  return std::move(buffer).str();
}

}  // namespace

Tokenizer::Impl::Impl(TokenizerSpec s) : spec(std::move(s)) {
  {
    std::vector<NormalizerStep> normalizers = spec.normalizers;
    std::vector<PreTokenizerStep> pre_steps = spec.pre_tokenizers;
    std::vector<DecoderStep> decoders = spec.decoders;
    if (!spec.pipeline) derive_pipeline(spec, normalizers, pre_steps, decoders);
    nfc_only = normalizers.size() == 1 && normalizers[0].kind == NormalizerStep::Kind::NFC;
    byte_level = false;
    for (const PreTokenizerStep& p : pre_steps)
      byte_level = byte_level || p.kind == PreTokenizerStep::Kind::ByteLevel;
    has_decoder = !decoders.empty();
    normalizer = Normalizer(std::move(normalizers));
    pre = std::make_unique<PreTokenizerPipeline>(std::move(pre_steps));
    decoder = DecoderPipeline(std::move(decoders));
  }
  // Added tokens may lie past the vocab (Qwen's start right after it): make room for them. Far
  // beyond it is a broken file (and would make us allocate for the gap).
  const size_t id_limit = spec.tokens.size() + spec.added.size() + 1024;
  for (const auto& a : spec.added) {
    check(a.id >= 0 && static_cast<size_t>(a.id) < id_limit,
          "tokenizer: added token id " + std::to_string(a.id) + " out of range");
    if (static_cast<size_t>(a.id) >= spec.tokens.size()) spec.tokens.resize(a.id + 1);
    check_utf8(a.content, "added token " + std::to_string(a.id));
    spec.tokens[a.id] = a.content;
  }
  size_t n = spec.tokens.size();
  check(n > 0, "tokenizer: empty vocabulary");
  bytes.resize(n);
  special.assign(n, 0);
  by_text.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = spec.tokens[id];
    if (text.empty()) continue;                       // a hole in the id space
    by_text.emplace(text, static_cast<int32_t>(id));  // first id wins for a duplicate spelling
    // A token whose text is not in the byte-level alphabet stands for its own UTF-8.
    bytes[id] = has_decoder ? decoder.token(text) : text;
  }
  for (const auto& a : spec.added) {
    bytes[a.id] = has_decoder ? decoder.token(a.content) : a.content;
    special[a.id] = a.special;
    by_text[a.content] = a.id;
    AddedTokenMatcher::Token t{a.id, a.content, a.special, a.lstrip, a.rstrip, a.single_word};
    if (a.normalized) {
      // note: as HF's AddedVocabulary, the whole normalizer (a Prepend included) runs on it, and
      // the token stands for that normalized text (id_to_token, and so decode).
      t.content = normalizer.apply(t.content);
      if (spec.pipeline && !t.content.empty()) {
        spec.tokens[a.id] = t.content;
        bytes[a.id] = has_decoder ? decoder.token(t.content) : t.content;
      }
      if (!t.content.empty()) normalized_added.add(std::move(t));
    } else {
      raw_added.add(std::move(t));
    }
  }
  for (auto id : {spec.bos_id, spec.eos_id, spec.pad_id}) {
    check(!id || (*id >= 0 && static_cast<size_t>(*id) < n),
          "tokenizer: special token id " + std::to_string(id.value_or(0)) + " out of range");
  }

  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    auto it = by_text.find(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
    byte_ids[b] = byte_level && it != by_text.end() ? it->second : -1;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto fb = by_text.find(name);
    fallback_ids[size_t(b)] = spec.byte_fallback && fb != by_text.end() ? fb->second : -1;
  }
  std::vector<Bpe::Merge> merges;
  merges.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    auto l = by_text.find(left), r = by_text.find(right), m = by_text.find(left + right);
    if (l == by_text.end() || r == by_text.end() || m == by_text.end()) {
      fail("tokenizer: merge " + std::to_string(rank) + " (\"" + left + "\" \"" + right +
           "\") uses a token that is not in the vocabulary");
    }
    merges.push_back({l->second, r->second, m->second});
  }
  bpe = Bpe(byte_ids, merges);

  if (spec.ignore_merges) {
    // HF looks the pre-token up in the model vocab, which holds no added tokens: by its bytes
    // (byte-level) or its characters as the vocabulary spells them.
    for (size_t id = 0; id < n; ++id) {
      if (!spec.tokens[id].empty() && !special[id])
        whole.emplace(byte_level ? bytes[id] : spec.tokens[id], int32_t(id));
    }
    for (const auto& a : spec.added) whole.erase(a.content);
  }
}

void Tokenizer::Impl::encode_piece(std::string_view piece, PieceCache& cache,
                                   std::vector<int32_t>& ids) const {
  if (piece.size() == 1 && byte_level) {  // one byte: no merge can apply, no need to remember it
    bpe.encode(piece, ids);
    return;
  }
  auto hit = cache.spans.find(piece);
  if (hit != cache.spans.end()) {
    auto [begin, size] = hit->second;
    ids.insert(ids.end(), cache.ids.begin() + begin, cache.ids.begin() + begin + size);
    return;
  }
  size_t before = ids.size();
  auto whole_hit = whole.empty() ? whole.end() : whole.find(std::string(piece));
  if (whole_hit != whole.end()) {
    ids.push_back(whole_hit->second);
  } else if (byte_level) {
    bpe.encode(piece, ids);
  } else {
    encode_characters(piece, ids);
  }
  auto begin = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), ids.begin() + before, ids.end());
  cache.spans.emplace(piece, std::make_pair(begin, static_cast<uint32_t>(ids.size() - before)));
}

void Tokenizer::Impl::encode_normalized(std::string_view text, bool strip_marks, bool at_start,
                                        PieceCache& cache, std::vector<int32_t>& ids) const {
  std::string unmarked;
  if (strip_marks && text.find(kLiteralMark) != std::string_view::npos) {
    unmarked = strip_literal_marks(text);
    text = unmarked;
  }
  if (pre->views()) {
    cache.pieces.clear();
    pre->split(text, cache.pieces, &cache.budget);
    for (std::string_view piece : cache.pieces) encode_piece(piece, cache, ids);
    return;
  }
  cache.owned.clear();
  pre->split(text, at_start, cache.owned, &cache.budget);
  for (const std::string& piece : cache.owned) encode_piece(piece, cache, ids);
}

// SentencePiece-style BPE of one piece: one symbol per character (its vocabulary entry, else its
// bytes' <0xXX> tokens, else unk, consecutive unks fused as HF's fuse_unk), then the merges.
void Tokenizer::Impl::encode_characters(std::string_view piece, std::vector<int32_t>& ids) const {
  const size_t start = ids.size();
  std::string ch;
  for (size_t i = 0; i < piece.size();) {
    // The text is valid UTF-8 (encode checked it): one character at a time.
    const auto* at = reinterpret_cast<const unsigned char*>(piece.data()) + i;
    const auto* next = at;
    next_code_point(next);
    ch.assign(piece.substr(i, std::min(size_t(next - at), piece.size() - i)));
    i += ch.size();
    if (auto it = by_text.find(ch); it != by_text.end() && !special[size_t(it->second)]) {
      ids.push_back(it->second);
      continue;
    }
    bool bytes_known = spec.byte_fallback;
    for (unsigned char b : ch) bytes_known = bytes_known && fallback_ids[b] >= 0;
    if (bytes_known) {
      for (unsigned char b : ch) ids.push_back(fallback_ids[b]);
    } else if (spec.unk_id &&
               (!spec.fuse_unk || ids.size() == start || ids.back() != *spec.unk_id)) {
      ids.push_back(*spec.unk_id);
    }
  }
  bpe.merge(ids, start);
}

void Tokenizer::Impl::encode_text(std::string_view text, Added added, bool strip_marks,
                                  bool at_start, PieceCache& cache,
                                  std::vector<int32_t>& ids) const {
  std::string normalized;
  if (nfc_only) {
    if (!nfc_is_trivial(text)) text = normalized = nfc(text);
  } else if (!normalizer.empty()) {
    text = normalized = normalizer.apply(text, &cache.budget);
  }
  if (normalized_added.empty() || added == Added::None) {
    encode_normalized(text, strip_marks, at_start, cache, ids);
    return;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  normalized_added.split(text, added == Added::NonSpecial, segments);
  for (const auto& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_normalized(text.substr(s.begin, s.end - s.begin), strip_marks,
                        at_start && s.begin == 0, cache, ids);
    }
  }
}

void Tokenizer::Impl::encode(std::string_view text, Added added, bool strip_marks,
                             std::vector<int32_t>& ids) const {
  check_utf8(text, "text to encode");
  ids.reserve(ids.size() + text.size() / 3 + 4);
  PieceCache cache;
  cache.budget = SplitBudget::for_text(text.size());
  if (raw_added.empty() || added == Added::None) {
    encode_text(text, added, strip_marks, true, cache, ids);
    return;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_added.split(text, added == Added::NonSpecial, segments);
  for (const auto& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_text(text.substr(s.begin, s.end - s.begin), added, strip_marks, s.begin == 0, cache,
                  ids);
    }
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    fail(dir.string() + ": tokenizer directory does not exist");
  }
  auto json_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(json_path, ec)) fail(json_path.string() + ": no such file");
  std::string json = read_whole_file(json_path);
  auto config_path = dir / "tokenizer_config.json";
  std::string config;
  if (std::filesystem::exists(config_path, ec)) config = read_whole_file(config_path);
  TokenizerSpec spec = parse_tokenizer_json(json, config, json_path.string(), config_path.string());
  // Current checkpoints (gpt-oss, Qwen3.5/3.6, GLM-4.6) publish the template as a file of its own,
  // which transformers prefers over tokenizer_config.json's: chat_template.jinja, then the
  // processor's chat_template.json.
  if (const auto jinja = dir / "chat_template.jinja"; std::filesystem::exists(jinja, ec)) {
    spec.chat_template = read_whole_file(jinja);
    check_utf8(spec.chat_template, jinja.string());
  } else if (const auto cj = dir / "chat_template.json"; std::filesystem::exists(cj, ec)) {
    spec.chat_template = chat_template_from_json(read_whole_file(cj), cj.string());
  }
  try {
    return from_spec(std::move(spec));
  } catch (const Error& e) {
    fail(json_path.string() + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  TokenizerSpec spec =
      parse_tokenizer_json(tokenizer_json, config_json, "tokenizer.json", "tokenizer_config.json");
  try {
    return from_spec(std::move(spec));
  } catch (const Error& e) {
    fail(std::string("tokenizer.json: ") + e.what());
  }
}

Tokenizer Tokenizer::from_spec(TokenizerSpec spec) {
  return Tokenizer(std::make_unique<Impl>(std::move(spec)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  impl_->encode(text, parse_special ? Impl::Added::All : Impl::Added::NonSpecial, false, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_literal(std::string_view text) const {
  std::vector<int32_t> ids;
  impl_->encode(text, Impl::Added::None, false, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_marked(std::string_view text) const {
  std::vector<int32_t> ids;
  impl_->encode(text, Impl::Added::All, true, ids);
  return ids;
}

std::string Tokenizer::mark_literal(std::string_view text) const {
  std::string out;
  out.reserve(text.size() + 16);
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, kLiteralMark.size(), kLiteralMark) == 0) {
      // A mark the text held itself: doubled, so stripping gives it back.
      out.append(kLiteralMark).append(kLiteralMark);
      pos += kLiteralMark.size();
      continue;
    }
    size_t len = 1;
    while (pos + len < text.size() && (static_cast<unsigned char>(text[pos + len]) & 0xC0) == 0x80)
      ++len;
    out.append(text.substr(pos, len));
    // note: every place an added token starts gets a mark after its first character, so no
    // occurrence survives, even one that overlaps another (a shorter token inside a longer one).
    if (impl_->raw_added.starts_at(text, pos) || impl_->normalized_added.starts_at(text, pos))
      out.append(kLiteralMark);
    pos += len;
  }
  return out;
}

std::string strip_literal_marks(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (;;) {
    const size_t at = text.find(kLiteralMark, pos);
    if (at == std::string_view::npos) break;
    out.append(text.substr(pos, at - pos));
    pos = at + kLiteralMark.size();
    if (text.compare(pos, kLiteralMark.size(), kLiteralMark) == 0) {
      out.append(kLiteralMark);
      pos += kLiteralMark.size();
    }
  }
  out.append(text.substr(pos));
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      fail("decode: token id " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(vocab_size()) + " ids)");
    }
    if (skip_special && impl_->special[id]) continue;
    tokens.push_back(impl_->spec.tokens[id]);
  }
  if (impl_->has_decoder) return impl_->decoder.decode(std::move(tokens));
  std::string out;  // HF without a decoder: the tokens joined with spaces
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    fail("token id " + std::to_string(id) + " is outside the vocabulary (" +
         std::to_string(vocab_size()) + " ids)");
  }
  return impl_->bytes[id];
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->bytes.size());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  auto it = impl_->by_text.find(std::string(token_text));
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

const TokenizerSpec& Tokenizer::spec() const {
  return impl_->spec;
}

}  // namespace fak
