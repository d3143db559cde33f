#!/usr/bin/env python3
"""Speculative decoding through `fak serve`: the agent-edit prompt of `fak specbench` (1,500
characters of models/pycoder-6m/eval.txt from its first `def`, an edit marker, the code's first
line again) sent to a plain server and a `--draft ngram` server, interleaved; checks the replies are
identical and prints the median request time of each and the draft counters from /metrics.

  build/fak serve --port 18101 -t 2 --ctx 2048 &
  build/fak serve --port 18102 -t 2 --ctx 2048 --draft ngram --draft-max 8 &
  python3 bench/server_spec.py [--plain 18101] [--draft 18102] [--reps 6] [--tokens 128]
"""
import argparse
import json
import os
import statistics
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--plain", type=int, default=18101)
ap.add_argument("--draft", type=int, default=18102)
ap.add_argument("--reps", type=int, default=6)
ap.add_argument("--tokens", type=int, default=128)
args = ap.parse_args()

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
text = open(os.path.join(root, "models/pycoder-6m/eval.txt")).read()
code = text[text.index("def "):][:1500]
prompt = code + "\n# Apply the requested edit and write the whole code again:\n" + code.split("\n")[0] + "\n"


def complete(port):
    body = json.dumps({"model": "pycoder-6m", "prompt": prompt, "max_tokens": args.tokens,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    reply = json.load(urllib.request.urlopen(req))
    return time.time() - t0, reply["choices"][0]["text"]


times = {args.plain: [], args.draft: []}
texts = {}
for _ in range(args.reps):
    for port in (args.plain, args.draft):
        dt, out = complete(port)
        times[port].append(dt)
        assert texts.setdefault(port, out) == out
metrics = urllib.request.urlopen(f"http://127.0.0.1:{args.draft}/metrics").read().decode()
spec = {l.split()[0]: int(l.split()[1]) for l in metrics.splitlines() if l.startswith("fak_spec")}
# The first request of each server reads the prompt cold; the rest hit the prefix cache.
plain, draft = statistics.median(times[args.plain][1:]), statistics.median(times[args.draft][1:])
print(json.dumps({"identical": texts[args.plain] == texts[args.draft], "plain_s": round(plain, 4),
                  "draft_s": round(draft, 4), "speedup": round(plain / draft, 3), **spec}))
