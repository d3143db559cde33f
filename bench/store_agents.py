#!/usr/bin/env python3
"""The multi-agent workload through HAProxy (deploy/haproxy.cfg) in front of 1 or 2 replicas of
`fak serve --store` sharing one redis-server (issue 25), beside one server without a store.

Each agent resends its whole conversation every turn (a shared system prompt, its task, every reply
and a tool result per turn), streaming, with `stream_options.include_usage` so each turn reports
prompt_tokens and cached_tokens. Agents run concurrently, each sending an X-Fak-Affinity header (its
name), so HAProxy's consistent hashing spreads them over the replicas. Per arm: wall time, requests,
prompt tokens, the share served from cache (local or store), the store's hits, bytes in/out and
call time per request, summed over the replicas' /metrics. Every arm must give every agent the
same replies as the single server (exits 1 otherwise).

  python3 bench/store_agents.py --fak build/fak --arms single,1,2 --agents 4 --turns 6 -- \\
      -m /work/bm/q05-q8_0.gguf --ctx 8192

Everything after `--` goes to every `fak serve`. Threads: `-t` is set per arm so the replicas
together use --cores cores (2 replicas on 2 cores: one thread each).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    return c.getresponse().read().decode()


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Server:
    def __init__(self, fak, args, log):
        self.log_path = log
        self.log = open(log, "w+")
        self.proc = subprocess.Popen([fak, "serve", "--port", "0"] + args, stderr=self.log)
        self.port = None
        for _ in range(1200):
            time.sleep(0.1)
            m = re.search(r"listening on http://[^:]+:(\d+)", open(log).read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
        sys.exit("fak serve did not start:\n" + open(log).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def system_prompt(chars):
    text = "You are a coding agent working in a Python repository. These are its tools:\n"
    i = 0
    while len(text) < chars:
        text += (f"def tool_{i}(path, mode='r'):\n    \"\"\"Open {path_name(i)} and count its "
                 f"lines.\"\"\"\n    with open(path, mode) as f:\n        return sum(1 for _ in f) "
                 f"+ {i}\n")
        i += 1
    return text


def path_name(i):
    return f"src/module_{i % 17}/file_{i}.py"


def model_id(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/v1/models", headers={"Authorization": "Bearer bench"})
    return json.loads(c.getresponse().read())["data"][0]["id"]


def stream_turn(port, model, messages, agent, max_tokens):
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body,
              {"Content-Type": "application/json", "Authorization": "Bearer bench",
               "X-Fak-Affinity": agent})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{agent}: HTTP {r.status}: {r.read()[:300]}")
    text, usage = "", None
    raw = r.read().decode()
    if "data: [DONE]" not in raw:
        raise RuntimeError(f"{agent}: the stream ended early")
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        e = json.loads(line[6:])
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices") or []:
            text += (ch.get("delta") or {}).get("content") or ""
    if usage is None:
        raise RuntimeError(f"{agent}: no usage in the stream")
    return text, usage


def run_agents(port, n_agents, turns, max_tokens, system, stagger, on_turns=None):
    """on_turns: (count, fn): fn() runs once when count turns are done (a replica killed)."""
    replies = [[] for _ in range(n_agents)]
    usage = []
    lock = threading.Lock()
    errors = []
    retries = [0]
    model = model_id(port)

    def one_turn(msgs, name):
        # A turn whose stream broke (its replica died) is sent again, as agent SDKs do.
        for attempt in range(40):
            try:
                return stream_turn(port, model, msgs, name, max_tokens)
            except (OSError, RuntimeError, http.client.HTTPException, json.JSONDecodeError):
                if on_turns is None or attempt == 39:
                    raise
                with lock:
                    retries[0] += 1
                time.sleep(0.25)

    def agent(i):
        time.sleep(i * stagger)  # agents arrive one after another, as a team's do
        name = f"agent-{i}"
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": f"Task {i}: fix the failing test in {path_name(i)}."}]
        try:
            for t in range(turns):
                text, u = one_turn(msgs, name)
                replies[i].append(text)
                with lock:
                    usage.append(u)
                    if on_turns and len(usage) == on_turns[0]:
                        on_turns[1]()
                msgs.append({"role": "assistant", "content": text})
                msgs.append({"role": "user", "content":
                             f"Tool result (turn {t}): {path_name(i * 31 + t)} has "
                             f"{100 + 7 * t} lines; test_{i}_{t} failed with AssertionError."})
        except Exception as e:  # noqa: BLE001 - reported, the arm fails
            errors.append(str(e))

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(n_agents)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        sys.exit("agents failed: " + "; ".join(errors[:3]))
    return wall, replies, usage, retries[0]


STORE_COUNTERS = ["fak_store_hit_blocks_total", "fak_store_lookups_total",
                  "fak_store_misses_total", "fak_store_published_blocks_total",
                  "fak_store_bytes_in_total", "fak_store_bytes_out_total",
                  "fak_store_call_seconds_sum", "fak_store_call_seconds_count"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fak", default="build/fak")
    ap.add_argument("--arms", default="single,1,2,2k",
                    help="single (no store, no proxy), 1, 2 replicas; 2k: 2, the busier one "
                         "SIGKILLed a third of the way through")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--system-chars", type=int, default=6000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--stagger", type=float, default=1.0, help="seconds between agents' starts")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    serve = [x for x in a.serve_args if x != "--"]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    system = system_prompt(a.system_chars)
    results, reference = [], None
    for arm in a.arms.split(","):
        tmp = tempfile.mkdtemp(prefix="fak-store-agents-")
        procs, servers = [], []
        try:
            if arm == "single":
                s = Server(a.fak, serve + ["-t", str(a.cores), "--parallel", str(a.agents)],
                           os.path.join(tmp, "single.log"))
                servers.append(s)
                port = s.port
            else:
                n = int(arm.rstrip("k"))
                rport = free_port()
                procs.append(subprocess.Popen(
                    ["redis-server", os.path.join(repo, "deploy/redis.conf"), "--port", str(rport),
                     "--dir", tmp, "--appendonly", "no", "--logfile",
                     os.path.join(tmp, "redis.log")]))
                time.sleep(0.5)
                for r in range(n):
                    servers.append(Server(
                        a.fak, serve + ["-t", str(max(1, a.cores // n)), "--parallel",
                                        str(a.agents), "--store", f"redis://127.0.0.1:{rport}"],
                        os.path.join(tmp, f"r{r}.log")))
                port = free_port()
                env = dict(os.environ, FAK_LB_BIND=f"127.0.0.1:{port}")
                # One replica: the second server line points at a port nobody listens on (its
                # health check takes it out of the rotation before the agents start).
                env["FAK_REPLICA_1"] = f"127.0.0.1:{servers[0].port}"
                env["FAK_REPLICA_2"] = (f"127.0.0.1:{servers[1].port}" if n > 1
                                        else f"127.0.0.1:{free_port()}")
                procs.append(subprocess.Popen(
                    ["haproxy", "-db", "-f", os.path.join(repo, "deploy/haproxy.cfg")], env=env,
                    stdout=open(os.path.join(tmp, "haproxy.log"), "w"), stderr=subprocess.STDOUT))
                time.sleep(2.0)
            on_turns, killed = None, []
            if arm.endswith("k"):
                # A third of the way through, the replica that served the most is SIGKILLed.
                def kill():
                    served = [metric(metrics(s.port), 'fak_requests_total{route='
                                     '"/v1/chat/completions",status="200"}') for s in servers]
                    victim = servers[served.index(max(served))]
                    victim.proc.kill()
                    victim.proc.wait()
                    killed.append(victim)
                on_turns = (a.agents * a.turns // 3, kill)
            wall, replies, usage, retries = run_agents(port, a.agents, a.turns, a.max_tokens,
                                                       system, a.stagger, on_turns)
            servers = [s for s in servers if s not in killed]
            out = {"arm": arm, "replicas": 0 if arm == "single" else int(arm.rstrip("k")),
                   "wall_s": wall, "requests": len(usage), "retries": retries,
                   "killed": len(killed)}
            out["prompt_tokens"] = sum(u["prompt_tokens"] for u in usage)
            out["cached_tokens"] = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
            out["cached_share"] = out["cached_tokens"] / out["prompt_tokens"]
            texts = [metrics(s.port) for s in servers]
            for name in STORE_COUNTERS:
                out[name] = sum(metric(t, name) for t in texts)
            out["per_replica_requests"] = [
                metric(t, 'fak_requests_total{route="/v1/chat/completions",status="200"}')
                for t in texts]
            if reference is None:
                reference = replies
            out["same_replies"] = replies == reference
            results.append(out)
        finally:
            for s in servers:
                s.stop()
            for p in procs:
                p.kill()
                p.wait()
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"{a.agents} agents x {a.turns} turns, {a.max_tokens} tokens a reply, a "
              f"{a.system_chars}-char shared system prompt, agents starting {a.stagger} s apart; "
              f"{a.cores} cores in all\n")
        print("| arm | wall s | requests | prompt tok | cached (local + store) | from store "
              "| store in / out per request | store time per request | same replies |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in results:
            n = max(1, r["requests"])
            name = "1 server, no store" if r["arm"] == "single" else \
                f"HAProxy + {r['replicas']} replica(s) + Redis" + \
                (", one SIGKILLed" if r["killed"] else "")
            print(f"| {name} | {r['wall_s']:.1f} | {r['requests']} | {r['prompt_tokens']} | "
                  f"{100 * r['cached_share']:.1f}% | "
                  f"{r['fak_store_hit_blocks_total']:.0f} blocks | "
                  f"{r['fak_store_bytes_in_total'] / n / 2**20:.2f} / "
                  f"{r['fak_store_bytes_out_total'] / n / 2**20:.2f} MiB | "
                  f"{1000 * r['fak_store_call_seconds_sum'] / n:.1f} ms "
                  f"({r['fak_store_call_seconds_count'] / n:.1f} calls) | {r['same_replies']} |")
        for r in results:
            if r["replicas"]:
                print(f"\narm {r['arm']}: requests per (surviving) replica "
                      f"{r['per_replica_requests']}, turns retried {r['retries']}, "
                      f"store lookups {r['fak_store_lookups_total']:.0f}, misses "
                      f"{r['fak_store_misses_total']:.0f}, blocks published "
                      f"{r['fak_store_published_blocks_total']:.0f}")
    sys.exit(0 if all(r["same_replies"] for r in results) else 1)


if __name__ == "__main__":
    main()
