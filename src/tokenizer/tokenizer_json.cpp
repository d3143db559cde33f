// tokenizer.json / tokenizer_config.json -> TokenizerSpec; see tokenizer_json.h.
#include "tokenizer/tokenizer_json.h"

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

struct NormalizerInfo {
  bool nfc = false;
  std::string space;    // Replace " " -> this (SentencePiece-style BPE)
  std::string prepend;  // Prepend (Llama 2)
};

// NFC and / or a Replace of the space (alone or in a Sequence, NFC first), or none.
void read_normalizer(const json& n, const std::string& name, NormalizerInfo& info, int depth = 0) {
  if (n.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": normalizer Sequences nested too deeply");
  std::string type = type_of(n);
  if (type == "NFC") {
    if (!info.space.empty()) fail(name + ": NFC after a Replace normalizer is not supported");
    info.nfc = true;
    return;
  }
  if (type == "Replace") {
    const json& pattern = n.at("pattern");
    if (!pattern.contains("String") || pattern.at("String") != " " || !n.at("content").is_string() ||
        n.at("content").get<std::string>().empty() || !info.space.empty())
      fail(name + ": normalizer Replace " + pattern.dump() +
           " is not supported (fak implements the replacement of \" \" by one string)");
    info.space = n.at("content").get<std::string>();
    return;
  }
  if (type == "Prepend") {
    const std::string p = n.value("prepend", std::string());
    if (p.empty() || p.find(' ') != std::string::npos || !info.prepend.empty())
      fail(name + ": normalizer Prepend " + n.dump() + " is not supported");
    info.prepend = p;
    return;
  }
  if (type == "Sequence") {
    for (const json& inner : n.at("normalizers")) read_normalizer(inner, name, info, depth + 1);
    return;
  }
  fail(name + ": normalizer '" + (type.empty() ? n.dump() : type) +
       "' is not supported (fak implements NFC, Replace of the space, Prepend, or none)");
}

// A SentencePiece-style decoder: Replace(space -> " "), ByteFallback and Fuse, in a Sequence. A
// Strip (Llama 2's leading-space removal) or anything else would decode other text: refused.
void check_spm_decoder(const json& d, const std::string& name, TokenizerSpec& spec,
                       int depth = 0) {
  if (d.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": decoder Sequences nested too deeply");
  const std::string type = type_of(d);
  const std::string& space = spec.space;
  if (type == "Sequence") {
    // Strip after Fuse cuts the whole text's front (before it, each token's: not implemented).
    bool fused = false;
    for (const json& inner : d.at("decoders")) {
      if (type_of(inner) == "Strip" && !fused)
        fail(name + ": a Strip decoder before Fuse is not supported");
      fused = fused || type_of(inner) == "Fuse";
      check_spm_decoder(inner, name, spec, depth + 1);
    }
    return;
  }
  if (type == "ByteFallback" || type == "Fuse") return;
  if (type == "Strip" && d.value("content", std::string()) == " " && d.value("stop", -1) == 0 &&
      d.value("start", -1) >= 0 && d.value("start", -1) <= 16) {
    spec.strip_leading = d.value("start", 0);
    return;
  }
  if (type == "Replace" && d.at("pattern").contains("String") &&
      d.at("pattern").at("String") == space && d.value("content", std::string()) == " ")
    return;
  fail(name + ": decoder '" + (type.empty() ? d.dump() : type) +
       "' is not supported with a character-level BPE (fak implements Replace of the space, "
       "ByteFallback, Fuse and a Strip of leading spaces after them)");
}

struct PreTokenizerInfo {
  std::vector<std::string> patterns;  // regex stages, in order
  bool byte_level = false;
  bool add_prefix_space = false;
};

void read_pre_tokenizer(const json& p, const std::string& name, PreTokenizerInfo& info,
                        int depth = 0) {
  if (p.is_null()) return;
  if (depth > kMaxNesting) fail(name + ": pre_tokenizer Sequences nested too deeply");
  std::string type = type_of(p);
  if (type == "Sequence") {
    for (const json& inner : p.at("pretokenizers"))
      read_pre_tokenizer(inner, name, info, depth + 1);
  } else if (type == "ByteLevel") {
    info.byte_level = true;
    info.add_prefix_space = flag(p, "add_prefix_space", false);
    if (flag(p, "use_regex", true)) info.patterns.emplace_back(kGpt2Pattern);
  } else if (type == "Split") {
    std::string behavior = p.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" || flag(p, "invert", false)) {
      fail(name + ": Split pre-tokenizer with behavior '" + behavior +
           "'/invert is not supported (fak implements Isolated, invert false)");
    }
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) {
      info.patterns.push_back(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      info.patterns.push_back(regex_escape(pattern.at("String").get<std::string>()));
    } else {
      fail(name + ": Split pre-tokenizer without a Regex or String pattern");
    }
  } else {
    fail(name + ": pre_tokenizer '" + (type.empty() ? p.dump() : type) +
         "' is not supported (fak implements Split and ByteLevel)");
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

}  // namespace

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

    NormalizerInfo norm;
    read_normalizer(j.value("normalizer", json()), name, norm);
    spec.nfc = norm.nfc;
    spec.space = norm.space;
    spec.prepend = norm.prepend;
    if (!spec.prepend.empty() && spec.space.empty())
      fail(name + ": a Prepend normalizer without the Replace of the space is not supported");
    PreTokenizerInfo pre;
    read_pre_tokenizer(j.value("pre_tokenizer", json()), name, pre);
    if (!spec.space.empty()) {
      // SentencePiece-style (Gemma): the whole normalised text is one piece.
      if (pre.byte_level || !pre.patterns.empty())
        fail(name + ": a Replace normalizer with a pre_tokenizer is not supported (fak implements "
                    "the SentencePiece-style BPE without one)");
      check_spm_decoder(j.value("decoder", json()), name, spec);
      if (spec.ignore_merges) fail(name + ": ignore_merges with a character-level BPE");
    } else if (!pre.byte_level) {
      fail(name +
           ": not a byte-level BPE (no ByteLevel pre-tokenizer) and no SentencePiece-style "
           "Replace normalizer; fak implements those two kinds of BPE");
    }
    if (pre.patterns.size() > 1) {
      fail(name + ": more than one split stage in the pre_tokenizer is not supported");
    }
    // A ByteLevel without regex and no Split: the whole text is one pre-token.
    spec.pre_regex = pre.patterns.empty() ? std::string("(?s).+") : pre.patterns[0];
    spec.add_prefix_space = pre.add_prefix_space;

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
        auto tmpl = config.find("chat_template");
        if (tmpl != config.end() && tmpl->is_string()) {
          spec.chat_template = tmpl->get<std::string>();
        } else if (tmpl != config.end() && tmpl->is_array()) {
          // Some files hold named templates; "default" is the one transformers uses.
          for (const json& t : *tmpl) {
            if (spec.chat_template.empty() || t.value("name", std::string()) == "default") {
              spec.chat_template = t.at("template").get<std::string>();
            }
          }
        }
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
