#!/usr/bin/env python3
"""The agent case of issue #18 against a running `fak serve` of our own: an agent's first turn with
a long system prompt, a side request with another prompt (a title, a summary), then the agent's
next turn. Prints each request's prompt tokens, cached tokens and wall time, as a table or JSON.

  python3 bench/agent_side_request.py --fak build/fak --system-tokens 14900 -- \
      -m bench/models/qwen2.5-0.5b --quant q8_0 --parallel 4

Everything after `--` goes to `fak serve` (which this script starts on a free port and stops).
The system prompt is Python source (tool stubs) sized to about --system-tokens with the model's
own tokenizer (from the first ten stubs: later ones have longer numbers, so it runs long, 17.2k
tokens for 14900 with pycoder's); the side request's prompt shares nothing with it beyond the chat
template.
"""
import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    return out, time.monotonic() - t0


def tool_stubs(n):
    return "".join(
        f"def tool_{i}(path, mode='r'):\n    \"\"\"Open {i} and count.\"\"\"\n"
        f"    return len(open(path, mode).read()) + {i}\n"
        for i in range(n)
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fak", default="build/fak")
    ap.add_argument("--system-tokens", type=int, default=14900)
    ap.add_argument("--side-lines", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--tokenizer", help="directory with the model's tokenizer.json (default: -m)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    serve_args = [x for x in a.serve_args if x != "--"]

    # Size the system prompt with the model's tokenizer (~37 tokens a stub with pycoder's).
    model = a.tokenizer or (serve_args[serve_args.index("-m") + 1] if "-m" in serve_args else None)
    per_stub = 37
    if model:
        probe = subprocess.run(
            [a.fak, "tokenize", "-m", model, tool_stubs(10), "--json"],
            capture_output=True, text=True, check=True)
        per_stub = max(1, len(json.loads(probe.stdout)) // 10)
    system = "You are a coding agent. These are the tools of this repository:\n" + tool_stubs(
        a.system_tokens // per_stub)

    proc = subprocess.Popen([a.fak, "serve", "--port", "0"] + serve_args,
                            stderr=subprocess.PIPE, text=True)
    startup = []
    port = None
    for line in proc.stderr:
        startup.append(line.rstrip())
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("fak serve did not start:\n" + "\n".join(startup))
    model_id = post_get(port)

    def chat(messages, max_tokens):
        return post(port, "/v1/chat/completions", {
            "model": model_id, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True})

    rows = []
    try:
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": "write tool_9999"}]
        r, t = chat(msgs, a.max_tokens)
        rows.append(("turn 1", r, t))
        side_text = "Summarise in one line:\n" + "".join(
            f"alpha item {i} = alpha\n" for i in range(a.side_lines))
        r2, t2 = chat([{"role": "system", "content": "You write short titles."},
                       {"role": "user", "content": side_text}], 8)
        rows.append(("side request", r2, t2))
        msgs += [{"role": "assistant", "content": r["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "now write tool_10000"}]
        r3, t3 = chat(msgs, a.max_tokens)
        rows.append(("turn 2", r3, t3))
    finally:
        proc.terminate()
        proc.wait()

    out = {"startup": startup[:-1], "requests": [
        {"request": name, "prompt_tokens": r["usage"]["prompt_tokens"],
         "cached_tokens": r["usage"]["prompt_tokens_details"]["cached_tokens"],
         "seconds": round(t, 3)} for name, r, t in rows]}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for line in out["startup"]:
        print(line)
    print("| request | prompt tokens | cached tokens | seconds |")
    print("|---|---|---|---|")
    for q in out["requests"]:
        print(f"| {q['request']} | {q['prompt_tokens']} | {q['cached_tokens']} | {q['seconds']} |")


def post_get(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=60) as r:
        return json.loads(r.read())["data"][0]["id"]


if __name__ == "__main__":
    main()
