#!/usr/bin/env python3
"""The folders of src/ in their one allowed order: a folder may include only folders before it.

Data flows one way (io -> models -> runtime -> chat -> server/cli, ops underneath); an include that
points the other way is a cycle waiting to happen. Run by ctest (FolderOrder); exits non-zero
naming every file whose include breaks the order, and any folder the order does not list.
"""
import os
import re
import sys

ORDER = [
    "core",       # errors, dtypes, CPU features, hashing
    "io",         # mmap, safetensors, GGUF
    "tokenizer",  # BPE, pre-tokenizers, tokenizer.json
    "quant",      # ggml block formats: codecs and dot products
    "memory",     # KV storage and cells, recurrent state
    "ops",        # matmul, attention, DeltaNet kernels; op specs
    "grammar",    # constrained decoding
    "backend",    # the per-op seam, CPU backend, device selection
    "cuda",       # the CUDA backend (implements backend/)
    "models",     # configs, families, weights, the forward
    "runtime",    # sessions, sampling, the decode loop, prefix cache
    "chat",       # templates, chat formats, turns, reply readers
    "store",      # the shared block store (Redis)
    "server",     # fak serve
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')


def main(src):
    rank = {name: i for i, name in enumerate(ORDER)}
    problems = []
    for folder in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, folder)) and folder not in rank:
            problems.append(f"src/{folder}: not in the folder order ({__file__})")
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            here = os.path.relpath(path, src).split(os.sep)[0]
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) not in rank or here not in rank:
                        continue
                    there = m.group(1)
                    if rank[there] > rank[here]:
                        problems.append(f"{os.path.relpath(path, os.path.dirname(src))}:{n}: "
                                        f"{here}/ includes {there}/, which comes after it")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s); order: {' < '.join(ORDER)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")))
