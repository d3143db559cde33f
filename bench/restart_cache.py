#!/usr/bin/env python3
"""The first request after a restart of `fak serve`, with and without --cache-dir (issue #18): an
agent's turn with a long system prompt is sent to a fresh server with --cache-dir DIR, the server is
stopped with SIGTERM (it writes its prefix cache to DIR) and started again on DIR, and the same
turn is sent again; then a server without --cache-dir is started and sent the same turn (a cold
prefill, as every restart was before). Prints each server's start and stop times, each request's
prompt and cached tokens and wall time, and whether the replies are equal, as a table or JSON.

  python3 bench/restart_cache.py --fak build/fak --tokenizer models/pycoder-6m \
      --system-tokens 14900 --cache-dir /tmp/fak-cache -- -m bench/models/qwen2.5-0.5b-q8_0.gguf

Everything after `--` goes to `fak serve` (which this script starts on a free port and stops).
The prompt is bench/agent_side_request.py's: Python tool stubs sized with the model's tokenizer.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from agent_side_request import post, post_get, tool_stubs  # noqa: E402


class Server:
    def __init__(self, fak, args):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([fak, "serve", "--port", "0"] + args,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            sys.exit("fak serve did not start:\n" + "\n".join(self.lines))
        self.start_seconds = time.monotonic() - self.t0
        self.model_id = post_get(self.port)

    def stop(self):
        t0 = time.monotonic()
        self.proc.terminate()
        rest = self.proc.stderr.read()
        self.proc.wait()
        self.stop_seconds = time.monotonic() - t0
        self.lines += rest.splitlines()
        return self.proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fak", default="build/fak")
    ap.add_argument("--system-tokens", type=int, default=14900)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--tokenizer", help="directory with the model's tokenizer.json (default: -m)")
    ap.add_argument("--cache-dir", required=True, help="emptied first")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    serve_args = [x for x in a.serve_args if x != "--"]

    model = a.tokenizer or (serve_args[serve_args.index("-m") + 1] if "-m" in serve_args else None)
    per_stub = 37
    if model:
        probe = subprocess.run(
            [a.fak, "tokenize", "-m", model, tool_stubs(10), "--json"],
            capture_output=True, text=True, check=True)
        per_stub = max(1, len(json.loads(probe.stdout)) // 10)
    system = "You are a coding agent. These are the tools of this repository:\n" + tool_stubs(
        a.system_tokens // per_stub)
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "write tool_9999"}]
    shutil.rmtree(a.cache_dir, ignore_errors=True)

    rows = []

    def run(name, args):
        s = Server(a.fak, args)
        r, t = post(s.port, "/v1/chat/completions", {
            "model": s.model_id, "messages": messages, "max_tokens": a.max_tokens,
            "temperature": 0, "ignore_eos": True})
        code = s.stop()
        rows.append({"server": name, "start_seconds": round(s.start_seconds, 2),
                     "prompt_tokens": r["usage"]["prompt_tokens"],
                     "cached_tokens": r["usage"]["prompt_tokens_details"]["cached_tokens"],
                     "request_seconds": round(t, 3), "stop_seconds": round(s.stop_seconds, 2),
                     "exit_code": code,
                     "reply": r["choices"][0]["message"]["content"],
                     "log": [x for x in s.lines if "prefix cache:" in x or "warning" in x]})

    with_dir = serve_args + ["--cache-dir", a.cache_dir]
    run("first start, --cache-dir", with_dir)
    run("restart, --cache-dir", with_dir)
    run("restart, no --cache-dir", serve_args)
    same = all(r["reply"] == rows[0]["reply"] for r in rows)
    if a.json:
        print(json.dumps({"rows": rows, "replies_equal": same}, indent=1))
        return
    print("| server | start (s) | prompt tokens | cached tokens | first request (s) | stop (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['start_seconds']} | {r['prompt_tokens']} | "
              f"{r['cached_tokens']} | {r['request_seconds']} | {r['stop_seconds']} |")
    print("replies equal:", same)
    for r in rows:
        for line in r["log"]:
            print(line)


if __name__ == "__main__":
    main()
