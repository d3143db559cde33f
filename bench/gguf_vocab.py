#!/usr/bin/env python3
"""The vocabulary of a GGUF file, read with the standard library only, and the ids of the tokens whose
bytes are not whole UTF-8 on their own (byte-level BPE pieces of a multi-byte character).

A random-weight model's greedy text is full of such pieces, and llama-server rejects a reply that is
not valid UTF-8 (HTTP 500, "does not match the expected Content-only format"). Banning them in both
engines (the same logit_bias) keeps a benchmark's work equal and every reply valid UTF-8.

  python3 bench/gguf_vocab.py MODEL.gguf     # prints how many tokens are partial UTF-8
"""
import struct
import sys

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def _gpt2_byte_decoder():
    """GPT-2's byte-to-printable-character table, inverted: the character a token text uses for a byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class _Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack("<" + fmt, data)[0]

    def string(self):
        n = self.take("Q")
        return self.f.read(n).decode("utf-8", errors="surrogateescape")

    def value(self, kind):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, n = self.take("I"), self.take("Q")
            return [self.value(item) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {kind}")


def read_metadata(path, wanted):
    """The metadata values of the keys in `wanted` (others are skipped)."""
    out = {}
    with open(path, "rb") as f:
        r = _Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        r.take("I")  # version
        r.take("Q")  # tensor count
        for _ in range(r.take("Q")):
            key, kind = r.string(), r.take("I")
            value = r.value(kind)
            if key in wanted:
                out[key] = value
    return out


def partial_utf8_ids(path):
    """Ids of the tokens whose bytes do not decode as UTF-8 by themselves (byte-level BPE vocabularies)."""
    meta = read_metadata(path, {"tokenizer.ggml.model", "tokenizer.ggml.tokens"})
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{path}: only byte-level BPE ('gpt2') vocabularies are handled here")
    table = _gpt2_byte_decoder()
    ids = []
    for i, text in enumerate(meta["tokenizer.ggml.tokens"]):
        if any(c not in table for c in text):
            continue  # a special token's own text (e.g. <|im_end|>), whole UTF-8
        try:
            bytes(table[c] for c in text).decode("utf-8")
        except UnicodeDecodeError:
            ids.append(i)
    return ids


if __name__ == "__main__":
    ids = partial_utf8_ids(sys.argv[1])
    print(f"{len(ids)} tokens are not whole UTF-8 on their own")
