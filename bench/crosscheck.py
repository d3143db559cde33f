#!/usr/bin/env python3
"""GGUF files across engines: fak-written GGUFs run in llama.cpp, llama.cpp-written GGUFs run in fak,
and both engines' greedy tokens are compared with each other (and, for the bundled model, with HF's).
Free run: leading greedy tokens that agree (one flip changes everything after it). Teacher-forced:
positions where fak, given llama.cpp's own history, picks llama.cpp's next token.

llama.cpp here is the prebuilt library of the npm package node-llama-cpp (bench/llamacpp; run
`npm ci` there once); its own quantizer (llama_model_quantize) is reached through
bench/llamacpp/quantize.c, compiled on the fly. Not a test: a record for bench/RESULTS.md.

  bench/crosscheck.py [--work DIR] [-n 48]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FAK = os.environ.get("FAK", os.path.join(ROOT, "build", "fak"))
LIB = os.path.join(HERE, "llamacpp", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
LLAMA_FTYPES = {"q8_0": 7, "q4_k_m": 15, "q6_k": 18, "q4_0": 2}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()[-400:]}")
    return r.stdout


def fak_greedy(model, ids, n):
    out = run([FAK, "run", "-m", model, "--ids", ",".join(map(str, ids)), "-n", str(n), "--temp", "0",
               "--ignore-eos", "--json"])
    return json.loads(out)["ids"]


def llama_greedy(model, ids, n):
    out = run(["node", os.path.join(HERE, "llamacpp", "greedy.mjs"), "-m", model, "--ids",
               ",".join(map(str, ids)), "-n", str(n)])
    return json.loads(out.strip().splitlines()[-1])["ids"]


def teacher_forced(model, ids, ref):
    """Positions where fak's greedy choice, given ref's own history, is ref's next token."""
    hits = 0
    for k in range(len(ref)):
        hits += fak_greedy(model, ids + ref[:k], 1)[0] == ref[k]
    return hits


def agree(a, b):
    """Leading tokens that agree."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=None)
    ap.add_argument("-n", type=int, default=48)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="fak-crosscheck-")
    os.makedirs(work, exist_ok=True)
    quantize = os.path.join(work, "llama-quantize")
    run(["cc", "-O2", os.path.join(HERE, "llamacpp", "quantize.c"), "-o", quantize, f"-L{LIB}",
         "-l:libllama.v0.4.0.so", f"-Wl,-rpath,{LIB}"])

    pycoder = os.path.join(ROOT, "models", "pycoder-6m")
    cases = json.load(open(os.path.join(pycoder, "reference.json")))["cases"]
    files = []  # (label, path, writer)
    for t in ["f16", "bf16", "q8_0", "q6_k", "q4_k_m"]:
        p = os.path.join(work, f"pycoder-fak-{t}.gguf")
        run([FAK, "convert", "-m", pycoder, "-o", p, "--type", t])
        files.append((f"pycoder-6m {t}", p, "fak convert"))
    for t, ft in LLAMA_FTYPES.items():
        p = os.path.join(work, f"pycoder-llama-{t}.gguf")
        run([quantize, os.path.join(work, "pycoder-fak-f16.gguf"), p, str(ft)])
        files.append((f"pycoder-6m {t}", p, "llama.cpp quantize"))

    rows = []
    for label, path, writer in files:
        n_tok = n_same = n_hf_fak = n_hf_llama = n_forced = 0
        for c in cases:
            ids, hf = c["input_ids"], c["greedy_ids"][: a.n]
            f = fak_greedy(path, ids, a.n)
            l = llama_greedy(path, ids, a.n)
            n_tok += a.n
            n_same += agree(f, l)
            n_hf_fak += agree(f, hf)
            n_hf_llama += agree(l, hf)
            n_forced += teacher_forced(path, ids, l) if agree(f, l) < a.n else a.n
        rows.append((label, writer, n_tok, n_same, n_forced, n_hf_fak, n_hf_llama))
        print(f"{label:24} {writer:20} fak=llama.cpp {n_same}/{n_tok} (teacher-forced {n_forced})  "
              f"fak=HF {n_hf_fak}/{n_tok}  llama.cpp=HF {n_hf_llama}/{n_tok}", file=sys.stderr)

    print("| model | file written by | fak = llama.cpp, free run | fak = llama.cpp, teacher-forced | "
          "fak = HF, free run | llama.cpp = HF, free run |")
    print("|---|---|---|---|---|---|")
    for label, writer, n_tok, n_same, n_forced, n_hf_fak, n_hf_llama in rows:
        print(f"| {label} | {writer} | {n_same}/{n_tok} | {n_forced}/{n_tok} | {n_hf_fak}/{n_tok} | "
              f"{n_hf_llama}/{n_tok} |")


if __name__ == "__main__":
    main()
