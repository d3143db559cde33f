#!/usr/bin/env python3
"""The multi-agent reuse workload of issue 26, fak serve against llama.cpp on the same GGUF: A agents
at once, T turns each; a turn resends the agent's whole context (its first prompt, every reply,
every new message) as token ids and decodes R greedy tokens. fak serve gets the turns as
/v1/completions requests (its prefix cache finds the previous context); llama.cpp (the prebuilt
library of node-llama-cpp, bench/llamacpp/agents.mjs) keeps each agent's sequence and evaluates only
what is past it, as llama-server does; engine `server` is llama-server itself (--llama-server PATH,
on its defaults: one slot per agent, its RAM prompt cache), sent the same turns on /completion.
With --shared N every agent's first prompt starts with the same N tokens (a long system prompt and
tool list, as the agent CLIs send). Prints a markdown row per engine and the ratios, and the
cached tokens of every fak turn (the previous context in full, on a hybrid too, is the aim).

  python3 bench/hybrid_agents.py -m MODEL.gguf [--agents 4] [--turns 6] [--shared 0] [--first 1000]
      [--message 56] [--reply 24] [-t 2] [--passes 1] [--engines fak,llama,server]
      [--llama-server PATH] [--whole-utf8] [--json OUT] [-- fak serve flags]
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import fak_serve
import gguf_vocab

here = os.path.dirname(os.path.abspath(__file__))


def context_tokens(args):
    """The longest context one agent reaches, with room to spare."""
    return args.shared + args.first + (args.turns - 1) * (args.message + args.reply) + args.reply + 64


def post(port, body, path="/v1/completions"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's own words, not just its status
        raise RuntimeError(f"{path}: HTTP {e.code}: {e.read().decode(errors='replace')[:500]}")


def workload(args):
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(100, 32100) for _ in range(n)]  # clear of special tokens
    shared = ids(args.shared) if args.shared else []
    return {"first": [shared + ids(args.first) for _ in range(args.agents)],
            "messages": [[ids(args.message) for _ in range(args.turns - 1)] for _ in range(args.agents)],
            "reply": args.reply}


def run_agents(args, work, ask):
    """Runs every agent's turns at once through ask(context) -> (reply ids, cached tokens)."""
    turns, replies = [], [None] * args.agents

    def agent(a):
        ctx, mine = list(work["first"][a]), []
        for t in range(args.turns):
            if t > 0:
                ctx += mine[-1] + work["messages"][a][t - 1]
            s = time.monotonic()
            reply, cached = ask(ctx)
            mine.append(reply)
            turns.append({"agent": a, "turn": t, "prompt": len(ctx), "cached": cached,
                          "seconds": time.monotonic() - s})
        replies[a] = mine

    s = time.monotonic()
    ths = [threading.Thread(target=agent, args=(a,)) for a in range(args.agents)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return time.monotonic() - s, turns, replies


def run_fak(args, work):
    cmd = [args.fak, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads),
           "--parallel", str(args.agents), "--ctx", str(max(4096, context_tokens(args)))] + args.fak_args
    p, port = fak_serve.start(cmd)
    name = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read())
    name = name["data"][0]["id"]

    def ask(ctx):
        body = {"model": name, "prompt": ctx, "max_tokens": work["reply"], "temperature": 0,
                "ignore_eos": True, "return_token_ids": True}
        if work["banned"]:
            body["logit_bias"] = {str(i): -100 for i in work["banned"]}
        r = post(port, body)
        return r["choices"][0]["token_ids"], r["usage"]["prompt_tokens_details"]["cached_tokens"]

    seconds, turns, replies = run_agents(args, work, ask)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    p.terminate()
    p.wait()
    keep = [l for l in metrics.splitlines() if l.startswith("fak_prefix_cache_checkpoint")]
    return {"engine": "fak serve", "seconds": seconds,
            "prefilled": sum(t["prompt"] - t["cached"] for t in turns), "turns": turns,
            "replies": replies, "metrics": keep}


def run_server(args, work):
    """llama-server on its defaults but for the slots and context the workload needs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    per_agent = context_tokens(args)
    cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-t", str(args.threads),
           "-np", str(args.agents), "-c", str(args.agents * per_agent)]
    log = open(args.server_log, "w") if args.server_log else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 300
    while True:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200:
                break
        except Exception:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            sys.exit("llama-server did not start: " + " ".join(cmd))
        time.sleep(0.5)

    def ask(ctx):
        body = {"prompt": ctx, "n_predict": work["reply"], "temperature": 0, "ignore_eos": True,
                "cache_prompt": True, "return_tokens": True}
        if work["banned"]:
            body["logit_bias"] = [[i, False] for i in work["banned"]]
        r = post(port, body, "/completion")
        return r["tokens"], r["timings"]["cache_n"]

    seconds, turns, replies = run_agents(args, work, ask)
    p.terminate()
    p.wait()
    return {"engine": "llama-server", "seconds": seconds,
            "prefilled": sum(t["prompt"] - t["cached"] for t in turns), "turns": turns, "replies": replies}


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
    ap.add_argument("--shared", type=int, default=0, help="tokens every agent's first prompt starts with")
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--message", type=int, default=56)
    ap.add_argument("--reply", type=int, default=24)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--engines", default="fak,llama")
    ap.add_argument("--llama-server", default="llama-server")
    ap.add_argument("--server-log", help="llama-server's log to this file")
    ap.add_argument("--whole-utf8", action="store_true",
                    help="ban the tokens that are not whole UTF-8 alone, in every engine (llama-server "
                         "answers HTTP 500 to a reply that is not valid UTF-8)")
    ap.add_argument("--json")
    ap.add_argument("fak_args", nargs="*", help="after --: more fak serve flags")
    args = ap.parse_args()
    work = workload(args)
    work["banned"] = gguf_vocab.partial_utf8_ids(args.model) if args.whole_utf8 else []
    if work["banned"] and "llama" in args.engines.split(","):
        sys.exit("--whole-utf8: engine llama (node-llama-cpp) takes no logit_bias here")
    runs = {"fak": [], "llama": [], "server": []}
    engines = {"fak": run_fak, "llama": run_llama, "server": run_server}
    for _ in range(args.passes):  # interleaved, so every engine sees the same machine
        for e in args.engines.split(","):
            runs[e].append(engines[e](args, work))
    print("| engine | seconds (each pass) | tokens prefilled |")
    print("|---|---|---|")
    best = {}
    for e, rs in runs.items():
        if rs:
            best[e] = min(r["seconds"] for r in rs)
            secs = " / ".join("%.1f" % r["seconds"] for r in rs)
            print(f"| {rs[0]['engine']} | {secs} | {rs[0]['prefilled']} |")
    for e in ("llama", "server"):
        if e in best and "fak" in best:
            print(f"\nratio {runs[e][0]['engine']} / fak (best pass each): {best[e] / best['fak']:.2f}x")
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
    for e in ("llama", "server"):
        if runs["fak"] and runs[e]:
            same = runs["fak"][0]["replies"] == runs[e][0]["replies"]
            print(f"replies identical, fak and {runs[e][0]['engine']}:", same)
    if args.json:
        json.dump(runs, open(args.json, "w"))


if __name__ == "__main__":
    main()
