#!/usr/bin/env python3
"""Makes tests/data/tokenizer/spm-bpe/: a SentencePiece-style BPE tokenizer.json of Gemma's kind
(normalizer Replace " " -> "▁", no pre-tokenizer, byte fallback, decoder Replace + ByteFallback +
Fuse), and spm-bpe-llama/, the same vocabulary the Llama 2 / Mistral way (Prepend "▁", Strip), with 600 merges trained here on the Qwen corpus, and cases.json: texts with the ids and the
decoded text that Hugging Face's own tokenizers library (npm `tokenizers`, its Rust core through
NAPI) gives for them. Run: python3 gen_spm_bpe.py /path/to/node_modules_parent
"""
import collections, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "spm-bpe")
SP = "\u2581"

corpus = json.load(open(os.path.join(HERE, "qwen-corpus.json")))["text"]
text = corpus.replace(" ", SP)
chars = collections.Counter(text)
# Characters seen at least 3 times are symbols; the rest go through byte fallback.
alphabet = sorted(c for c, n in chars.items() if n >= 3)
specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
vocab = {}
for s in specials:
    vocab[s] = len(vocab)
for b in range(256):
    vocab["<0x%02X>" % b] = len(vocab)
for c in alphabet:
    if c not in vocab:
        vocab[c] = len(vocab)
# BPE training over words split before each "▁" (a training convenience; encoding sees no split).
words = collections.Counter()
cur = ""
for ch in text:
    if ch == SP and cur:
        words[cur] += 1
        cur = ""
    cur += ch
if cur:
    words[cur] += 1
seqs = {w: [c if c in vocab else None for c in w] for w in words}
seqs = {w: s for w, s in seqs.items() if None not in s}
merges = []
for _ in range(600):
    pairs = collections.Counter()
    for w, s in seqs.items():
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += words[w]
    if not pairs:
        break
    (a, b), n = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
    if n < 2:
        break
    merges.append((a, b))
    new = a + b
    if new not in vocab:
        vocab[new] = len(vocab)
    for w, s in seqs.items():
        i, out = 0, []
        while i < len(s):
            if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                out.append(new)
                i += 2
            else:
                out.append(s[i])
                i += 1
        seqs[w] = out

tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True} for s in specials],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
    "pre_tokenizer": None,
    "post_processor": None,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
              "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
              "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
              "merges": [[a, b] for a, b in merges]},
}
os.makedirs(OUT, exist_ok=True)
json.dump(tok, open(os.path.join(OUT, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
json.dump({"add_bos_token": True, "bos_token": "<bos>", "eos_token": "<eos>",
           "pad_token": "<pad>", "unk_token": "<unk>"},
          open(os.path.join(OUT, "tokenizer_config.json"), "w"), indent=1)

texts = [
    "Hello world", " leading space", "two  spaces and\ttab", "line one\nline two\n\n",
    "def load_config(path):\n    return json.load(open(path))\n",
    "caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m", "\u4f60\u597d\uff0c\u4e16\u754c", "emoji \U0001F600 \U0001F9D1\u200D\U0001F4BB!",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "ends with space ", "", " ", "\u2581already a metaspace", "x" * 50,
    corpus[:2000], corpus[5000:9000],
]
node = (
    "const {Tokenizer}=require('tokenizers');"
    "(async()=>{const t=Tokenizer.fromFile(process.argv[1]);"
    "const texts=JSON.parse(require('fs').readFileSync(0,'utf8'));const out=[];"
    "for(const x of texts){const e=await t.encode(x,null,{addSpecialTokens:false});const ids=e.getIds();"
    "out.push({text:x,ids:Array.from(ids),decoded:await t.decode(Array.from(ids),false)});}"
    "process.stdout.write(JSON.stringify(out));})();")
def reference(directory):
    res = subprocess.run(["node", "-e", node, os.path.join(directory, "tokenizer.json")],
                         input=json.dumps(texts).encode(), capture_output=True,
                         cwd=sys.argv[1] if len(sys.argv) > 1 else None, check=True)
    cases = json.loads(res.stdout)
    json.dump({"made_with": "npm tokenizers 0.23.2 (Hugging Face tokenizers, Rust, through NAPI)",
               "cases": cases}, open(os.path.join(directory, "cases.json"), "w"),
              ensure_ascii=False, indent=1)
    return cases


cases = reference(OUT)
# The Llama 2 / Mistral variant of the same vocabulary: "▁" prepended to every piece of text
# between added tokens, and one leading space stripped from decoded text.
LLAMA = os.path.join(HERE, "spm-bpe-llama")
os.makedirs(LLAMA, exist_ok=True)
tok["normalizer"] = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": SP},
    {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
tok["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
json.dump(tok, open(os.path.join(LLAMA, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
json.dump({"add_bos_token": True, "bos_token": "<bos>", "eos_token": "<eos>",
           "pad_token": "<pad>", "unk_token": "<unk>"},
          open(os.path.join(LLAMA, "tokenizer_config.json"), "w"), indent=1)
llama_cases = reference(LLAMA)
print("vocab", len(vocab), "merges", len(merges), "cases", len(cases), len(llama_cases))
