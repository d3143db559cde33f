#!/usr/bin/env python3
"""Resuming a long /v1/fak/ session on a replica that never saw it (issue 25): from the shared store
(`fak serve --store`) vs a re-prefill. Starts a redis-server (deploy/redis.conf, on a free port),
then in turn:

  1. a server without --store: creates the session from N token ids (a cold prefill) and
     generates one token: what a replica without the store must do;
  2. replica A with --store: creates the same session (prefill + publish), then stops (SIGTERM);
  3. replica B with --store, which never saw it: generates one token on it, reading the session and
     its KV blocks from the store and prefilling only the last partial block.

Prints each step's wall time, B's store counters and the ratio, as a table or JSON; the token B
generates must equal the one the single server generated (it exits 1 otherwise).

  python3 bench/store_resume.py --fak build/fak --tokens 16384 -- \\
      -m /work/bm/q05-q8_0.gguf -t 2 --ctx 16640 --kv-mem 2048

Everything after `--` goes to every `fak serve`.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def call(port, path, body=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read()) if path != "/metrics" else r.read().decode()


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


class Server:
    def __init__(self, fak, args, log):
        self.log = open(log, "w+")
        self.proc = subprocess.Popen([fak, "serve", "--port", "0"] + args, stderr=self.log)
        self.port = None
        for _ in range(600):
            time.sleep(0.1)
            text = open(log).read()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            sys.exit("fak serve did not start:\n" + open(log).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fak", default="build/fak")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--vocab", type=int, default=8000, help="ids drawn from [0, vocab)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh replicas B (median reported)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    serve = [x for x in a.serve_args if x != "--"]
    ids = random.Random(25).choices(range(a.vocab), k=a.tokens)
    tmp = tempfile.mkdtemp(prefix="fak-store-resume-")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rport = free_port()
    def start_redis():
        p = subprocess.Popen(["redis-server", os.path.join(repo, "deploy/redis.conf"), "--port",
                              str(rport), "--dir", tmp, "--appendonly", "no", "--maxmemory",
                              "8gb", "--logfile", os.path.join(tmp, "redis.log")])
        for _ in range(600):  # until it answers (it may be loading a snapshot)
            time.sleep(0.1)
            r = subprocess.run(["redis-cli", "-p", str(rport), "PING"], capture_output=True,
                               text=True)
            if r.stdout.strip() == "PONG":
                return p
        sys.exit("redis-server did not start")

    redis = start_redis()
    store = ["--store", f"redis://127.0.0.1:{rport}"]
    out = {"tokens": a.tokens}
    try:
        # 1. No store: a cold prefill.
        s = Server(a.fak, serve, os.path.join(tmp, "single.log"))
        t0 = time.monotonic()
        call(s.port, "/v1/fak/sessions", {"id": "long", "ids": ids})
        t1 = time.monotonic()
        want = call(s.port, "/v1/fak/sessions/long/generate", {"max_tokens": 1})
        t2 = time.monotonic()
        s.stop()
        out["reprefill_create_s"] = t1 - t0
        out["reprefill_s"] = t2 - t0
        # 2. Replica A: create and publish, then go away.
        ra = Server(a.fak, serve + store, os.path.join(tmp, "a.log"))
        t0 = time.monotonic()
        call(ra.port, "/v1/fak/sessions", {"id": "long", "ids": ids})
        out["a_create_and_publish_s"] = time.monotonic() - t0
        ra.stop()
        out["store_used_bytes"] = int(
            subprocess.run(["redis-cli", "-p", str(rport), "INFO", "memory"], capture_output=True,
                           text=True).stdout.split("used_memory:")[1].split()[0])
        # 3. Replica B, which never saw it: resume from the store. B's generate publishes the
        # longer session, so each repeat starts from a snapshot of the store as A left it.
        subprocess.run(["redis-cli", "-p", str(rport), "SAVE"], capture_output=True, check=True)
        shutil.copy(os.path.join(tmp, "dump.rdb"), os.path.join(tmp, "as-a-left-it.rdb"))
        times, tokens = [], []
        for r in range(a.repeats):
            if r > 0:
                subprocess.run(["redis-cli", "-p", str(rport), "SHUTDOWN", "NOSAVE"],
                               capture_output=True)
                redis.wait()
                shutil.copy(os.path.join(tmp, "as-a-left-it.rdb"), os.path.join(tmp, "dump.rdb"))
                redis = start_redis()
            rb = Server(a.fak, serve + store, os.path.join(tmp, "b.log"))
            t0 = time.monotonic()
            got = call(rb.port, "/v1/fak/sessions/long/generate", {"max_tokens": 1})
            times.append(time.monotonic() - t0)
            tokens.append(got["ids"])
            m = call(rb.port, "/metrics")
            rb.stop()
        out["store_resume_runs_s"] = times
        out["store_resume_s"] = sorted(times)[len(times) // 2]
        out["store_resume_min_s"] = min(times)
        out["b_blocks_from_store"] = metric(m, "fak_store_hit_blocks_total")
        out["b_bytes_in"] = metric(m, "fak_store_bytes_in_total")
        out["b_store_call_seconds"] = metric(m, "fak_store_call_seconds_sum")
        out["b_store_calls"] = metric(m, "fak_store_call_seconds_count")
        got = {"ids": tokens[0]} if all(t == tokens[0] for t in tokens) else {"ids": None}
        out["same_token"] = got["ids"] == want["ids"]
        out["speedup"] = out["reprefill_s"] / out["store_resume_s"]
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"| session of {a.tokens} tokens | wall time |\n|---|---|")
        print(f"| re-prefill (no store): create + generate 1 | {out['reprefill_s']:.2f} s |")
        print(f"| replica A: create + publish to the store | {out['a_create_and_publish_s']:.2f} s |")
        print(f"| replica B, never saw it: generate 1 from the store (median of "
              f"{len(out['store_resume_runs_s'])}; min {out['store_resume_min_s']:.2f} s) | "
              f"**{out['store_resume_s']:.2f} s** |")
        print(f"\nspeedup {out['speedup']:.1f}x; B read {out['b_blocks_from_store']:.0f} blocks, "
              f"{out['b_bytes_in'] / 2**20:.1f} MiB in {out['b_store_calls']:.0f} store calls "
              f"({out['b_store_call_seconds']:.2f} s); Redis used "
              f"{out['store_used_bytes'] / 2**20:.1f} MiB; same token: {out['same_token']}")
    sys.exit(0 if out.get("same_token") else 1)


if __name__ == "__main__":
    main()
