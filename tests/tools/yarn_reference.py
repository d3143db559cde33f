#!/usr/bin/env python3
"""Golden YaRN RoPE tables for tests/rope_yarn_test.cpp, in float64 with the standard library only.

Written from the definitions in transformers' modeling_rope_utils.py (_compute_yarn_parameters,
main branch): rope_theta / partial_rotary_factor / head_dim from the config, then

  dim        = int(head_dim * partial_rotary_factor)             (the rotary dims)
  factor     = rope_scaling["factor"], else max_position_embeddings / original_max_position_embeddings
  original   = rope_scaling["original_max_position_embeddings"], else max_position_embeddings
  attention  = attention_factor, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
               when both are set (non-zero), else get_mscale(factor);
               get_mscale(s, m) = 1 if s <= 1 else 0.1 * m * ln(s) + 1
  corr(r)    = dim * ln(original / (r * 2 pi)) / (2 ln theta)
  low, high  = corr(beta_fast), corr(beta_slow); floor / ceil unless truncate is false;
               low = max(low, 0), high = min(high, dim - 1); high += 0.001 if equal
  ramp_i     = clamp((i - low) / (high - low), 0, 1)                for i < dim / 2
  inv_freq_i = (1 - ramp_i) * theta^(-2i/dim) + ramp_i * theta^(-2i/dim) / factor
  cos, sin   = attention * cos(pos * inv_freq_i), attention * sin(pos * inv_freq_i)

(HF writes the blend as extrapolation * e + interpolation * (1 - e) with e = 1 - ramp.)
Unlike HF, nothing here rounds to float32: the C++ test's tolerance accounts for fak doing
what HF does (float32 inv_freq and float32 angles).

Run: python3 tests/tools/yarn_reference.py tests/data/rope   (writes yarn_<case>.json)
"""
import json
import math
import sys
from pathlib import Path

POSITIONS = [0, 1, 5, 1000, 4095, 4096, 32767, 32768, 65535, 100000, 131071]


def base_config(head_dim, max_pos):
    # A Qwen2 config whose head_dim is hidden_size / num_attention_heads (Qwen2 has no head_dim key).
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 2 * head_dim,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "vocab_size": 64,
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }


def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_table(config):
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or params
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    dim = int(head_dim * partial)
    original = scaling.get("original_max_position_embeddings", config["max_position_embeddings"])
    factor = scaling.get("factor")
    if factor is None:
        factor = config["max_position_embeddings"] / original
    attention = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention is None:
        if mscale and mscale_all_dim:
            attention = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention = get_mscale(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1
    truncate = scaling.get("truncate", True)

    def corr(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    inv_freq = []
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolation = theta ** (-2.0 * i / dim)
        inv_freq.append((1 - ramp) * extrapolation + ramp * extrapolation / factor)
    table = []
    for pos in POSITIONS:
        angles = [pos * f for f in inv_freq]
        table.append({
            "pos": pos,
            "angle": angles,
            "cos": [attention * math.cos(a) for a in angles],
            "sin": [attention * math.sin(a) for a in angles],
        })
    return {
        "rotary_dim": dim,
        "low": low,
        "high": high,
        "attention_factor": attention,
        "inv_freq": inv_freq,
        "positions": table,
    }


def case(head_dim, max_pos, theta, scaling, partial=None, nested=False):
    config = base_config(head_dim, max_pos)
    if nested:  # newer transformers: rope_theta and the scaling both in rope_parameters
        config["rope_parameters"] = dict(scaling, rope_theta=theta)
    else:
        config["rope_theta"] = theta
        config["rope_scaling"] = scaling
    if partial is not None:
        config["partial_rotary_factor"] = partial
    return config


CASES = {
    # Qwen2.5 / Qwen3's documented 32k -> 128k.
    "qwen_128": case(128, 32768, 1e6, {"rope_type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 32768}),
    # head_dim 64, the legacy "type" key and the trained length from max_position_embeddings.
    "legacy_64": case(64, 4096, 10000.0, {"type": "yarn", "factor": 8.0}),
    # gpt-oss: truncate false keeps the fractional correction range.
    "gptoss_64": case(64, 131072, 150000.0, {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 4096}, nested=True),
    # Partial rotary: a quarter of head_dim 128 rotates.
    "partial_128": case(128, 131072, 1e7, {"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 32768},
                        partial=0.25, nested=True),
    # DeepSeek style mscale / mscale_all_dim ratio.
    "mscale_64": case(64, 163840, 10000.0, {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                            "mscale_all_dim": 0.8,
                                            "original_max_position_embeddings": 4096}),
    # An explicit attention_factor, other betas, no truncation.
    "attention_128": case(128, 65536, 500000.0, {"rope_type": "yarn", "factor": 2.0,
                                                 "attention_factor": 1.25, "beta_fast": 16.0,
                                                 "beta_slow": 2.0, "truncate": False,
                                                 "original_max_position_embeddings": 32768}),
    # No factor: max_position_embeddings / original_max_position_embeddings.
    "derived_factor_64": case(64, 16384, 10000.0, {"rope_type": "yarn",
                                                   "original_max_position_embeddings": 2048}),
}


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/rope")
    out.mkdir(parents=True, exist_ok=True)
    for name, config in CASES.items():
        doc = {"name": name, "config": config, **yarn_table(config)}
        (out / f"yarn_{name}.json").write_text(json.dumps(doc, indent=None, sort_keys=True) + "\n")
        print(f"{name}: rotary_dim {doc['rotary_dim']} range [{doc['low']}, {doc['high']}] "
              f"attention {doc['attention_factor']:.9f}")


if __name__ == "__main__":
    main()
