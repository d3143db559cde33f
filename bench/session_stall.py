#!/usr/bin/env python3
"""How long other streams stall while one API key creates a long /v1/fak/ session (issue 23).

Starts `fak serve` (everything after `--` goes to it), opens a streamed completion as key B that
decodes all along, then creates a session of --tokens token ids as key A, and reports the create's
wall time, the longest gap between two of B's tokens while the create ran, and how many tokens B
received meanwhile. Before issue 23 the create prefilled all its tokens in one job on the
scheduler thread, so B's longest gap was the whole create; now the create is read in
--prefill-chunk pieces between decode steps. With --quarantine, an exact quarantine of the
session's first token (which replays everything after it) is measured the same way.

  python3 bench/session_stall.py --fak build/fak --tokens 8192 -- -m /tmp/qwen2.5-0.5b-4l --ctx 9000

Prints a table, or JSON with --json.
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

import fak_serve


def request(port, method, path, body, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    conn.request(method, path, json.dumps(body) if body is not None else None,
                 {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else None


class Stream(threading.Thread):
    """A streamed completion; records when each token arrived."""

    def __init__(self, port, model, key, max_tokens):
        super().__init__(daemon=True)
        self.port, self.model, self.key, self.max_tokens = port, model, key, max_tokens
        self.times = []
        self.conn = None

    def run(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        body = {"model": self.model, "prompt": [1, 2, 3, 4], "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": True, "temperature": 0}
        self.conn.request("POST", "/v1/completions", json.dumps(body),
                          {"Authorization": "Bearer " + self.key,
                           "Content-Type": "application/json"})
        resp = self.conn.getresponse()
        for line in resp:
            if line.startswith(b"data: {"):
                self.times.append(time.monotonic())

    def window(self, t0, t1):
        inside = [t for t in self.times if t0 <= t <= t1]
        before = [t for t in self.times if t < t0]
        after = [t for t in self.times if t > t1]
        points = ([before[-1]] if before else [t0]) + inside + ([after[0]] if after else [t1])
        gaps = [b - a for a, b in zip(points, points[1:])]
        return len(inside), max(gaps) if gaps else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fak", default="build/fak")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--quarantine", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()

    env = dict(os.environ, FAK_BENCH_KEYS="key-a,key-b", OMP_WAIT_POLICY="PASSIVE")
    proc, port = fak_serve.start(
        [a.fak, "serve", "--port", "0", "--api-key-env", "FAK_BENCH_KEYS"] + a.serve_args, env)
    try:
        status, models = request(port, "GET", "/v1/models", None, "key-a")
        model = models["data"][0]["id"]
        vocab = models["data"][0]["meta"]["vocab"]
        stream = Stream(port, model, "key-b", 1 << 20)
        stream.start()
        while len(stream.times) < 5:
            time.sleep(0.01)
        rng = random.Random(0)
        # Clear of special tokens and of the padding rows past the tokenizer's ids (the server
        # refuses those): the bundled model's embedding has 8192 rows for 8128 ids.
        ids = [rng.randrange(100, min(vocab - 64, 32100)) for _ in range(a.tokens)]
        rows = []
        t0 = time.monotonic()
        status, body = request(port, "POST", "/v1/fak/sessions", {"ids": ids}, "key-a")
        t1 = time.monotonic()
        if status != 201:
            sys.exit("create failed: %s %s" % (status, body))
        time.sleep(0.5)
        n, gap = stream.window(t0, t1)
        rows.append({"call": "create %d tokens" % a.tokens, "seconds": t1 - t0,
                     "other_stream_tokens": n, "other_stream_longest_gap_s": gap})
        if a.quarantine:
            sid = body["id"]
            t0 = time.monotonic()
            status, q = request(port, "POST", "/v1/fak/sessions/%s/quarantine" % sid,
                                {"begin": 0, "end": 1}, "key-a")
            t1 = time.monotonic()
            if status != 200:
                sys.exit("quarantine failed: %s %s" % (status, q))
            time.sleep(0.5)
            n, gap = stream.window(t0, t1)
            rows.append({"call": "quarantine [0, 1) exact (replays %d)" % q["tokens_recomputed"],
                         "seconds": t1 - t0, "other_stream_tokens": n,
                         "other_stream_longest_gap_s": gap})
        # The stream's usual gap, with nothing else running.
        time.sleep(1.0)
        t0 = time.monotonic()
        time.sleep(1.0)
        n, gap = stream.window(t0, time.monotonic())
        rows.append({"call": "(idle: the stream alone)", "seconds": 1.0,
                     "other_stream_tokens": n, "other_stream_longest_gap_s": gap})
    finally:
        proc.terminate()
        proc.wait()
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| call | wall s | other stream: tokens meanwhile | longest gap s |")
    print("|---|---|---|---|")
    for r in rows:
        print("| %s | %.2f | %d | %.3f |" % (r["call"], r["seconds"], r["other_stream_tokens"],
                                           r["other_stream_longest_gap_s"]))


if __name__ == "__main__":
    main()
