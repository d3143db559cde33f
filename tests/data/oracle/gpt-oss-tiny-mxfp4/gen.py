#!/usr/bin/env python3
"""gpt-oss-tiny with its experts stored as OpenAI's checkpoints store them (MXFP4 blocks + scales).

Reads ../gpt-oss-tiny (F32, transformers' dense layout: gate_up_proj [E, H, 2I], down_proj [E, I, H]),
writes here:
  model.safetensors  the same model with mlp.experts.{gate_up,down}_proj_{blocks,scales} (U8) in
                     transformers' Mxfp4GptOssExperts layout: [E, out, in/32, 16] and [E, out, in/32],
                     byte j of a block holding elements 2j (low nibble) and 2j+1 (high nibble);
  config.json        the fixture's config plus quantization_config {quant_method: mxfp4};
  tokenizer*.json    the fixture's, copied;
  dequantized.safetensors  the experts those blocks stand for, in the dense layout, computed as
                     transformers' convert_moe_packed_tensors does (lut[nibble] * 2^(scale - 127),
                     low nibbles to even columns, high to odd; transposed back to [E, in, out]).
The quantiser here is deliberately not ggml's (the shared exponent is the smallest whose 6 covers
the block's largest magnitude, OCP's rule; values round to the nearest FP4 magnitude): any valid
encoding must load as the values it encodes. Pure Python, no dependencies.
"""
import array, json, math, os, shutil, struct

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "gpt-oss-tiny")
FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32"
        v = array.array("f")
        v.frombytes(raw[8 + n + a:8 + n + b])
        out[name] = (info["shape"], v)
    return out


def write(path, tensors):
    head, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def quantise_block(x):
    amax = max(abs(v) for v in x)
    e = 127 if amax == 0 else max(0, min(254, 127 + math.ceil(math.log2(amax / 6.0))))
    scale = 2.0 ** (e - 127)
    codes = []
    for v in x:
        best = min(range(16), key=lambda k: (abs(FP4[k] * scale - v), k))
        codes.append(best)
    packed = bytes(codes[2 * j] | (codes[2 * j + 1] << 4) for j in range(16))
    return e, packed


def dequantise_block(e, packed):
    out = []
    for b in packed:
        out.append(FP4[b & 15] * 2.0 ** (e - 127))
        out.append(FP4[b >> 4] * 2.0 ** (e - 127))
    return out


def main():
    src = read(os.path.join(SRC, "model.safetensors"))
    tensors, dense = {}, {}
    for name, (shape, v) in src.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            E, IN, OUT = shape  # x @ W: [E, in, out]
            G = IN // 32
            blocks, scales = bytearray(), bytearray()
            deq = [0.0] * (E * IN * OUT)
            for e in range(E):
                for o in range(OUT):  # stored [E, out, in]
                    row = [v[(e * IN + i) * OUT + o] for i in range(IN)]
                    for g in range(G):
                        s, packed = quantise_block(row[32 * g:32 * g + 32])
                        scales.append(s)
                        blocks += packed
                        for i, x in enumerate(dequantise_block(s, packed)):
                            deq[(e * IN + 32 * g + i) * OUT + o] = x
            tensors[name + "_blocks"] = ("U8", [E, OUT, G, 16], bytes(blocks))
            tensors[name + "_scales"] = ("U8", [E, OUT, G], bytes(scales))
            dense[name] = ("F32", shape, array.array("f", deq).tobytes())
        else:
            tensors[name] = ("F32", shape, v.tobytes())
    write(os.path.join(HERE, "model.safetensors"), tensors)
    write(os.path.join(HERE, "dequantized.safetensors"), dense)
    config = json.load(open(os.path.join(SRC, "config.json")))
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    json.dump(config, open(os.path.join(HERE, "config.json"), "w"), indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(SRC, name), os.path.join(HERE, name))


if __name__ == "__main__":
    main()
