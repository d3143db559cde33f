// tokenizer.json / tokenizer_config.json -> TokenizerSpec; see tokenizer_json.h.
#include "tokenizer/tokenizer_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/regex_split.h"

namespace fak {
namespace {

using nlohmann::json;

// Ids beyond this are refused: real vocabularies are below a few hundred thousand, and the id
// space is allocated densely (a hostile file must not make us allocate gigabytes).
constexpr int64_t kMaxId = 1 << 24;

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return it->get<bool>();
}

// Sequences nest; real files nest one level. The limit keeps a hostile file off the stack.
constexpr int kMaxNesting = 8;

// A Split-like pattern: {"String": s} (a literal) or {"Regex": r}.
std::string pattern_of(const json& p, const std::string& name, const std::string& what) {
  const auto it = p.find("pattern");
  if (it != p.end() && it->is_object()) {
    if (auto r = it->find("Regex"); r != it->end() && r->is_string()) return r->get<std::string>();
    if (auto l = it->find("String"); l != it->end() && l->is_string())
      return regex_escape(l->get<std::string>());
  }
  fail(name + ": " + what + " without a Regex or String pattern");
}

SplitBehavior behavior_of(const json& p, const std::string& name, const char* fallback) {
  const std::string b = p.value("behavior", std::string(fallback));
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail(name + ": unknown split behavior '" + b + "'");
}

// Metaspace's prepend_scheme, or the older add_prefix_space flag it replaced.
PreTokenizerStep::Prepend prepend_of(const json& p, const std::string& name) {
  if (auto s = p.find("prepend_scheme"); s != p.end() && s->is_string()) {
    const std::string v = s->get<std::string>();
    if (v == "always") return PreTokenizerStep::Prepend::Always;
    if (v == "first") return PreTokenizerStep::Prepend::First;
    if (v == "never") return PreTokenizerStep::Prepend::Never;
    fail(name + ": unknown Metaspace prepend_scheme '" + v + "'");
  }
  return flag(p, "add_prefix_space", true) ? PreTokenizerStep::Prepend::Always
                                           : PreTokenizerStep::Prepend::Never;
}

std::string replacement_of(const json& p) {
  const std::string r = p.value("replacement", std::string("\xE2\x96\x81"));
  return r.empty() ? std::string("\xE2\x96\x81") : r;
}

void read_normalizer(const json& n, const std::string& name, std::vector<NormalizerStep>& steps,
                     int depth = 0) {
  using Kind = NormalizerStep::Kind;
  if (n.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": normalizer Sequences nested too deeply");
  const std::string type = type_of(n);
  NormalizerStep step;
  if (type == "Sequence") {
    for (const json& inner : n.at("normalizers")) read_normalizer(inner, name, steps, depth + 1);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC"    ? Kind::NFC
                : type == "NFD"  ? Kind::NFD
                : type == "NFKC" ? Kind::NFKC
                                 : Kind::NFKD;
  } else if (type == "Lowercase") {
    step.kind = Kind::Lowercase;
  } else if (type == "Strip") {
    step.kind = Kind::Strip;
    step.left = flag(n, "strip_left", true);
    step.right = flag(n, "strip_right", true);
  } else if (type == "StripAccents") {
    step.kind = Kind::StripAccents;
  } else if (type == "Replace") {
    step.kind = Kind::Replace;
    const json& pattern = n.at("pattern");
    step.regex = pattern.contains("Regex");
    step.pattern = step.regex ? pattern.at("Regex").get<std::string>()
                              : pattern.at("String").get<std::string>();
    step.content = n.at("content").get<std::string>();
    if (step.pattern.empty()) fail(name + ": normalizer Replace with an empty pattern");
  } else if (type == "Prepend") {
    step.kind = Kind::Prepend;
    step.content = n.at("prepend").get<std::string>();
  } else {
    fail(name + ": normalizer '" + (type.empty() ? n.dump() : type) +
         "' is not supported (fak implements NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
         "StripAccents, Replace, Prepend and Sequence)");
  }
  steps.push_back(std::move(step));
}

void read_pre_tokenizer(const json& p, const std::string& name,
                        std::vector<PreTokenizerStep>& steps, int depth = 0) {
  using Kind = PreTokenizerStep::Kind;
  if (p.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": pre_tokenizer Sequences nested too deeply");
  const std::string type = type_of(p);
  PreTokenizerStep step;
  // The character-class pre-tokenizers as the Split they are (HF matches them a character at a
  // time; so do these patterns). \s becomes Unicode White_Space (regex_split.h).
  const auto split = [&](std::string pattern, SplitBehavior behavior, bool invert) {
    step.kind = Kind::Split;
    step.pattern = std::move(pattern);
    step.behavior = behavior;
    step.invert = invert;
    steps.push_back(step);
  };
  // Rust's char::is_ascii_punctuation or Unicode punctuation (HF's is_punc).
  constexpr const char* kPunctuation = "[\\p{P}!-/:-@\\[-`{-~]";
  if (type == "Sequence") {
    for (const json& inner : p.at("pretokenizers"))
      read_pre_tokenizer(inner, name, steps, depth + 1);
  } else if (type == "Split") {
    split(pattern_of(p, name, "Split pre-tokenizer"), behavior_of(p, name, "Isolated"),
          flag(p, "invert", false));
  } else if (type == "ByteLevel") {
    step.kind = Kind::ByteLevel;
    step.add_prefix_space = flag(p, "add_prefix_space", true);
    step.use_regex = flag(p, "use_regex", true);
    steps.push_back(step);
  } else if (type == "Metaspace") {
    step.kind = Kind::Metaspace;
    step.replacement = replacement_of(p);
    step.prepend = prepend_of(p, name);
    step.split = flag(p, "split", true);
    steps.push_back(step);
  } else if (type == "Digits") {
    split("\\p{N}",
          flag(p, "individual_digits", false) ? SplitBehavior::Isolated : SplitBehavior::Contiguous,
          false);
  } else if (type == "Punctuation") {
    split(kPunctuation, behavior_of(p, name, "Isolated"), false);
  } else if (type == "Whitespace") {
    // Rust regex's \w: letters, marks, decimal digits, connector punctuation, the joiners.
    split(
        "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+|"
        "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+",
        SplitBehavior::Removed, true);
  } else if (type == "WhitespaceSplit") {
    split("\\s", SplitBehavior::Removed, false);
  } else if (type == "CharDelimiterSplit") {
    split(regex_escape(p.at("delimiter").get<std::string>()), SplitBehavior::Removed, false);
  } else if (type == "BertPreTokenizer") {
    split("\\s", SplitBehavior::Removed, false);
    split(kPunctuation, SplitBehavior::Isolated, false);
  } else {
    fail(name + ": pre_tokenizer '" + (type.empty() ? p.dump() : type) +
         "' is not supported (fak implements Split, ByteLevel, Metaspace, Digits, Punctuation, "
         "Whitespace, WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer and Sequence)");
  }
}

void read_decoder(const json& d, const std::string& name, std::vector<DecoderStep>& steps,
                  int depth = 0) {
  using Kind = DecoderStep::Kind;
  if (d.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": decoder Sequences nested too deeply");
  const std::string type = type_of(d);
  DecoderStep step;
  if (type == "Sequence") {
    for (const json& inner : d.at("decoders")) read_decoder(inner, name, steps, depth + 1);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Kind::ByteLevel;
  } else if (type == "Replace") {
    step.kind = Kind::Replace;
    const json& pattern = d.at("pattern");
    step.regex = pattern.contains("Regex");
    step.pattern = step.regex ? pattern.at("Regex").get<std::string>()
                              : pattern.at("String").get<std::string>();
    step.content = d.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::Fuse;
  } else if (type == "Strip") {
    step.kind = Kind::Strip;
    step.content = d.at("content").get<std::string>();
    step.start = int(std::clamp<int64_t>(d.value("start", int64_t(0)), 0, 1 << 20));
    step.stop = int(std::clamp<int64_t>(d.value("stop", int64_t(0)), 0, 1 << 20));
  } else if (type == "Metaspace") {
    step.kind = Kind::Metaspace;
    step.content = replacement_of(d);
    step.prepend = prepend_of(d, name);
  } else {
    fail(name + ": decoder '" + (type.empty() ? d.dump() : type) +
         "' is not supported (fak implements ByteLevel, Replace, ByteFallback, Fuse, Strip, "
         "Metaspace and Sequence)");
  }
  steps.push_back(std::move(step));
}

// The fields the GGUF export reads (TokenizerSpec's older, flat form), where the pipeline has the
// shape they describe; the export refuses the rest by name.
void fill_flat_fields(TokenizerSpec& spec) {
  using NKind = NormalizerStep::Kind;
  using PKind = PreTokenizerStep::Kind;
  spec.nfc = false;
  for (const NormalizerStep& n : spec.normalizers) {
    if (n.kind == NKind::NFC) spec.nfc = true;
    if (n.kind == NKind::Replace && !n.regex && n.pattern == " ") spec.space = n.content;
    if (n.kind == NKind::Prepend) spec.prepend = n.content;
  }
  for (const PreTokenizerStep& p : spec.pre_tokenizers) {
    if (p.kind == PKind::Split && spec.pre_regex.empty()) spec.pre_regex = p.pattern;
    if (p.kind == PKind::ByteLevel) {
      spec.add_prefix_space = p.add_prefix_space;
      if (p.use_regex && spec.pre_regex.empty()) spec.pre_regex = std::string(kGpt2Pattern);
    }
    if (p.kind == PKind::Metaspace) {
      spec.space = p.replacement;
      if (p.prepend != PreTokenizerStep::Prepend::Never) spec.prepend = p.replacement;
    }
  }
  if (spec.pre_regex.empty()) spec.pre_regex = "(?s).+";  // no split: one piece
  bool fused = false;
  for (const DecoderStep& d : spec.decoders) {
    fused = fused || d.kind == DecoderStep::Kind::Fuse;
    if (d.kind == DecoderStep::Kind::Strip && fused && d.content == " ")
      spec.strip_leading = d.start;
  }
}

// The token a TemplateProcessing post-processor puts in front of a single sequence (Llama-3's
// <|begin_of_text|>), when there is one.
std::optional<std::string> read_bos_template(const json& pp, int depth = 0) {
  std::string type = type_of(pp);
  if (type == "Sequence" && depth < kMaxNesting) {
    for (const json& inner : pp.at("processors")) {
      if (auto bos = read_bos_template(inner, depth + 1)) return bos;
    }
  } else if (type == "TemplateProcessing") {
    const json& single = pp.at("single");
    if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
      return single[0]["SpecialToken"].at("id").get<std::string>();
    }
  }
  return std::nullopt;
}

// bos_token and friends are a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> token_content(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

json parse(std::string_view text, const std::string& name) {
  try {
    json j = json::parse(text.begin(), text.end());
    if (!j.is_object()) fail(name + ": expected a JSON object at the top level");
    return j;
  } catch (const json::exception& e) {  // note: a number too large is out_of_range, not parse_error
    fail(name + ": not valid JSON (" + e.what() + ")");
  }
}

void read_model(const json& j, const std::string& name, TokenizerSpec& spec) {
  auto it = j.find("model");
  if (it == j.end() || !it->is_object()) fail(name + ": no \"model\" object");
  const json& model = *it;
  std::string type = type_of(model);
  if (type.empty() && model.contains("merges")) type = "BPE";  // older files leave it implicit
  if (type != "BPE") {
    fail(name + ": model type '" + (type.empty() ? "(none)" : type) +
         "' is not supported (fak implements byte-level BPE)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto a = model.find(affix);
    if (a != model.end() && a->is_string() && !a->get<std::string>().empty()) {
      fail(name + ": BPE with a " + affix + " is not supported");
    }
  }
  spec.ignore_merges = flag(model, "ignore_merges", false);
  spec.byte_fallback = flag(model, "byte_fallback", false);
  spec.fuse_unk = flag(model, "fuse_unk", false);
  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) {
    if (auto v = model.find("vocab"); v != model.end() && v->is_object() && v->contains(*unk))
      spec.unk_id = (*v)[unk->get<std::string>()].get<int32_t>();
  }

  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object() || vocab->empty()) {
    fail(name + ": model.vocab is missing or empty");
  }
  for (auto v = vocab->begin(); v != vocab->end(); ++v) {
    int64_t id = v.value().get<int64_t>();
    if (id < 0 || id >= kMaxId) fail(name + ": token id " + std::to_string(id) + " out of range");
    if (static_cast<size_t>(id) >= spec.tokens.size()) spec.tokens.resize(id + 1);
    spec.tokens[id] = v.key();
  }
  // Ids are allocated densely; a file with a few huge ids must not make us allocate gigabytes.
  if (spec.tokens.size() > 2 * vocab->size() + 1024) {
    fail(name + ": model.vocab ids are sparse (" + std::to_string(vocab->size()) +
         " entries, largest id " + std::to_string(spec.tokens.size() - 1) + ")");
  }

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) fail(name + ": model.merges is missing");
  spec.merges.reserve(merges->size());
  for (const json& m : *merges) {
    if (m.is_string()) {  // older format: "left right"
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail(name + ": merge \"" + s + "\" is not two tokens separated by one space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(name + ": merge " + m.dump() + " is neither \"a b\" nor [a, b]");
    }
  }
}

// A config's chat_template: a string, or named templates of which "default" is the one
// transformers uses; "" when it has none.
std::string template_of(const json& config) {
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end() && tmpl->is_string()) return tmpl->get<std::string>();
  std::string out;
  if (tmpl != config.end() && tmpl->is_array()) {
    for (const json& t : *tmpl)
      if (out.empty() || t.value("name", std::string()) == "default")
        out = t.at("template").get<std::string>();
  }
  return out;
}

}  // namespace

std::string chat_template_from_json(std::string_view text, const std::string& name) {
  const json j = parse(text, name);
  std::string t;
  try {
    t = template_of(j);
  } catch (const json::exception& e) {
    fail(name + ": " + e.what());
  }
  if (t.empty()) fail(name + ": no chat_template in it");
  return t;
}

TokenizerSpec parse_tokenizer_json(std::string_view json_text, std::string_view config_text,
                                   const std::string& name, const std::string& config_name) {
  TokenizerSpec spec;
  json j = parse(json_text, name);
  try {
    read_model(j, name, spec);

    if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
      for (const json& a : *added) {
        TokenizerSpec::Added t;
        int64_t id = a.at("id").get<int64_t>();
        if (id < 0 || id >= kMaxId) {
          fail(name + ": added token id " + std::to_string(id) + " out of range");
        }
        t.id = static_cast<int32_t>(id);
        t.content = a.at("content").get<std::string>();
        t.special = flag(a, "special", false);
        t.lstrip = flag(a, "lstrip", false);
        t.rstrip = flag(a, "rstrip", false);
        t.normalized = flag(a, "normalized", !t.special);
        t.single_word = flag(a, "single_word", false);
        spec.added.push_back(std::move(t));
      }
    }

    spec.pipeline = true;
    read_normalizer(j.value("normalizer", json()), name, spec.normalizers);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), name, spec.pre_tokenizers);
    read_decoder(j.value("decoder", json()), name, spec.decoders);
    fill_flat_fields(spec);

    std::optional<std::string> bos_template = read_bos_template(j.value("post_processor", json()));
    if (bos_template) spec.add_bos = true;
    std::optional<std::string> bos = bos_template, eos, pad;

    if (!config_text.empty()) {
      json config = parse(config_text, config_name);
      try {
        if (auto b = token_content(config, "bos_token")) bos = b;
        eos = token_content(config, "eos_token");
        pad = token_content(config, "pad_token");
        if (config.contains("add_bos_token") && !config["add_bos_token"].is_null()) {
          spec.add_bos = config["add_bos_token"].get<bool>();
        }
        spec.chat_template = template_of(config);
      } catch (const json::exception& e) {
        fail(config_name + ": " + e.what());
      }
    }

    // Special tokens are named by content; an added token wins over a vocab entry.
    auto resolve = [&](const std::optional<std::string>& content) -> std::optional<int32_t> {
      if (!content) return std::nullopt;
      for (const auto& a : spec.added)
        if (a.content == *content) return a.id;
      for (size_t id = 0; id < spec.tokens.size(); ++id)
        if (spec.tokens[id] == *content) return static_cast<int32_t>(id);
      return std::nullopt;
    };
    spec.bos_id = resolve(bos);
    spec.eos_id = resolve(eos);
    spec.pad_id = resolve(pad);
    if (spec.add_bos && !spec.bos_id) spec.add_bos = false;  // nothing to add
  } catch (const json::exception& e) {
    fail(name + ": " + e.what());
  }
  return spec;
}

}  // namespace fak
