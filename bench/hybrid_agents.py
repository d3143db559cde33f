#!/usr/bin/env python3
"""The multi-agent reuse workload of issue 26, fak serve against llama.cpp on the same GGUF: A agents
at once, T turns each; a turn resends the agent's whole context (its first prompt, every reply,
every new message) as token ids and decodes R greedy tokens. fak serve gets the turns as
/v1/completions requests (its prefix cache finds the previous context); llama.cpp (the prebuilt
library of node-llama-cpp, bench/llamacpp/agents.mjs) keeps each agent's sequence and evaluates only
what is past it, as llama-server does. Prints a markdown row per engine and the ratio, and the
cached tokens of every fak turn (the previous context in full, on a hybrid too, is the aim).

  python3 bench/hybrid_agents.py -m MODEL.gguf [--agents 4] [--turns 6] [--first 1000]
      [--message 56] [--reply 24] [-t 2] [--passes 1] [--engines fak,llama] [--json OUT]
"""
import argparse
import json
import os
import random
import subprocess
import tempfile
import threading
import time
import urllib.request

import fak_serve

here = os.path.dirname(os.path.abspath(__file__))


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def workload(args):
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(100, 32100) for _ in range(n)]  # clear of special tokens
    return {"first": [ids(args.first) for _ in range(args.agents)],
            "messages": [[ids(args.message) for _ in range(args.turns - 1)] for _ in range(args.agents)],
            "reply": args.reply}


def run_fak(args, work):
    cmd = [args.fak, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads),
           "--parallel", str(args.agents), "--ctx", "4096"] + args.fak_args
    p, port = fak_serve.start(cmd)
    name = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read())
    name = name["data"][0]["id"]
    turns, replies = [], [None] * args.agents

    def agent(a):
        ctx, mine = list(work["first"][a]), []
        for t in range(args.turns):
            if t > 0:
                ctx += mine[-1] + work["messages"][a][t - 1]
            s = time.monotonic()
            r = post(port, {"model": name, "prompt": ctx, "max_tokens": work["reply"], "temperature": 0,
                            "ignore_eos": True, "return_token_ids": True})
            mine.append(r["choices"][0]["token_ids"])
            turns.append({"agent": a, "turn": t, "prompt": len(ctx),
                          "cached": r["usage"]["prompt_tokens_details"]["cached_tokens"],
                          "seconds": time.monotonic() - s})
        replies[a] = mine

    s = time.monotonic()
    ths = [threading.Thread(target=agent, args=(a,)) for a in range(args.agents)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    seconds = time.monotonic() - s
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    p.terminate()
    p.wait()
    keep = [l for l in metrics.splitlines() if l.startswith("fak_prefix_cache_checkpoint")]
    return {"engine": "fak serve", "seconds": seconds,
            "prefilled": sum(t["prompt"] - t["cached"] for t in turns), "turns": turns,
            "replies": replies, "metrics": keep}


def run_llama(args, work):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(work, f)
    out = subprocess.run(["node", os.path.join(here, "llamacpp", "agents.mjs"), "-m", args.model,
                          "--work", f.name, "-t", str(args.threads)],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(f.name)
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--fak", default=os.path.join(here, "..", "build", "fak"))
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--message", type=int, default=56)
    ap.add_argument("--reply", type=int, default=24)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--engines", default="fak,llama")
    ap.add_argument("--json")
    ap.add_argument("fak_args", nargs="*", help="after --: more fak serve flags")
    args = ap.parse_args()
    work = workload(args)
    runs = {"fak": [], "llama": []}
    for _ in range(args.passes):  # interleaved, so both see the same machine
        for e in args.engines.split(","):
            runs[e].append(run_fak(args, work) if e == "fak" else run_llama(args, work))
    print("| engine | seconds (each pass) | tokens prefilled |")
    print("|---|---|---|")
    best = {}
    for e, rs in runs.items():
        if rs:
            best[e] = min(r["seconds"] for r in rs)
            secs = " / ".join("%.1f" % r["seconds"] for r in rs)
            print(f"| {rs[0]['engine']} | {secs} | {rs[0]['prefilled']} |")
    if len(best) == 2:
        print(f"\nratio llama.cpp / fak (best pass each): {best['llama'] / best['fak']:.2f}x")
    if runs["fak"]:
        f = runs["fak"][0]
        later = [t for t in f["turns"] if t["turn"] > 0]
        prev = {}
        for t in sorted(f["turns"], key=lambda t: (t["agent"], t["turn"])):
            if t["turn"] > 0:
                t["previous"] = prev[t["agent"]]
            prev[t["agent"]] = t["prompt"] + args.reply
        full = sum(1 for t in later if t["cached"] == t["previous"])
        print(f"fak turns after the first whose cached_tokens == the whole previous context: "
              f"{full} / {len(later)}")
        print("fak cached_tokens by turn:", [(t["agent"], t["turn"], t["prompt"], t["cached"])
                                             for t in sorted(f["turns"], key=lambda t: (t["agent"], t["turn"]))])
        print("\n".join(f["metrics"]))
    if runs["fak"] and runs["llama"]:
        same = runs["fak"][0]["replies"] == runs["llama"][0]["replies"]
        print("replies identical across engines:", same)
    if args.json:
        json.dump(runs, open(args.json, "w"))


if __name__ == "__main__":
    main()
