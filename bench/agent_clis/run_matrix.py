#!/usr/bin/env python3
"""Coding-agent CLIs against `fak serve`: install them, run each for two turns, print the matrix.

    python3 bench/agent_clis/run_matrix.py [--fak build/fak] [--clis /tmp/clis] [--ctx 65536]
        [--port 18440] [--timeout 300] [--only claude,codex,...] [--json out.json] [--keep DIR]

What it does, bounded in time and killing everything it started on exit (the server and each
client's whole process group):
  1. npm-installs each package into its own folder under --clis (skipped when already there;
     one retry with --prefer-online, since a registry mirror can lag a package's own metadata)
     and records its version. npm 11 runs no install scripts; Claude Code and opencode work
     without theirs (their platform binaries come as optional dependencies).
  2. Copies the fak binary to the scratch folder (others may rebuild build/fak meanwhile) and
     starts `fak serve --parallel 2 --max-tokens 256 --api-key-env KEYS --log-requests` on the
     bundled models/pycoder-6m. Its trained context is 4096 and Claude Code's system prompt and
     tools alone are ~25k tokens, so with --ctx above 4096 the server reads a copy of the model
     folder (weights symlinked) whose config.json adds a YaRN rope_scaling stretching it to --ctx:
     the replies are nonsense either way; what is checked is the protocol.
  3. Runs each client twice in a scratch HOME and working folder (turn 2 continues turn 1's
     session where the client can: claude --continue, codex exec resume --last, qwen --continue,
     opencode run --continue, pi --continue; the @openai/agents SDK replays turn 1's history),
     every client pointed only at 127.0.0.1 with a dummy key and telemetry / update checks off.
  4. Per turn: the statuses the server logged, the server's prompt and cached-token counters
     (/metrics before and after), the seconds, the client's own verdict and error text.
Prints a markdown table and writes the rows as JSON.

"protocol ok": every request of the turn got a 2xx and the client finished the turn (exit, final
event) without a transport or parse error. "client ok": the client's own verdict (exit status /
is_error / turn.failed). The bundled 6M model never ends a reply by itself, so every reply is cut
at --max-tokens; clients that treat a cut reply as a failed turn say so there.
"""
import argparse, atexit, json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "dummy-key"
MODEL = "pycoder-6m"
PACKAGES = {  # client -> npm package
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "qwen": "@qwen-code/qwen-code",
    "opencode": "opencode-ai",
    "pi": "@mariozechner/pi-coding-agent",
    "agents": "@openai/agents",
}
PROMPT1 = "write a python function that reverses a string"
PROMPT2 = "now add a docstring to it"

procs = []  # Popen objects whose process groups we own


def cleanup(*_):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def on_signal(sig, _):
    cleanup()
    sys.exit(128 + sig)


def sh(cmd, timeout, **kw):
    """Run cmd in its own process group; kill the whole group at the timeout."""
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, **kw)
    procs.append(p)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = 124
    procs.remove(p)
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


def pkg_dir(clis, client):
    return os.path.join(clis, client)


def install(clis, client):
    d = pkg_dir(clis, client)
    pkg = PACKAGES[client]
    pj = os.path.join(d, "node_modules", pkg, "package.json")
    t0 = time.time()
    note = "already installed"
    if not os.path.exists(pj):
        os.makedirs(d, exist_ok=True)
        note = ""
        for extra in ([], ["--prefer-online"]):
            # run from d: a folder named like the package in the cwd would be taken for it
            rc, out, err = sh(["npm", "install", "--prefix", d, "--no-audit", "--no-fund", *extra,
                               pkg + "@latest"], 600, cwd=d)
            if rc == 0:
                break
            note = "npm: " + " ".join(l for l in err.splitlines() if "error" in l)[:300]
        if not os.path.exists(pj):
            return None, time.time() - t0, note
        note = f"installed in {time.time() - t0:.0f} s" + (" (after a retry)" if note else "")
    return json.load(open(pj))["version"], time.time() - t0, note


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = {}
    for line in text.splitlines():
        if line.startswith("fak_prompt_tokens_total "):
            m["prompt"] = int(float(line.split()[1]))
        elif line.startswith("fak_cached_prompt_tokens_total "):
            m["cached"] = int(float(line.split()[1]))
        elif line.startswith("fak_generated_tokens_total "):
            m["generated"] = int(float(line.split()[1]))
    return m


def stretched_model(src, ctx, scratch):
    cfg = json.load(open(os.path.join(src, "config.json")))
    trained = cfg.get("max_position_embeddings", 4096)
    if ctx <= trained:
        return src, None
    dst = os.path.join(scratch, "model", os.path.basename(src))
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(os.path.join(src, f), os.path.join(dst, f))
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    cfg["max_position_embeddings"] = ctx
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": ctx / trained,
                              "original_max_position_embeddings": trained, "rope_theta": theta}
    cfg.pop("rope_scaling", None)
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    return dst, f"YaRN x{ctx / trained:g} copy of {os.path.basename(src)}"


# ---- clients: each returns (env, argv) for a turn and a parser for its output --------------------

def base_env(home):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "USER", "SHELL")}
    env.update(HOME=home, NO_COLOR="1", CI="1", npm_config_update_notifier="false",
               XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_DATA_HOME=os.path.join(home, ".local/share"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"),
               XDG_STATE_HOME=os.path.join(home, ".local/state"))
    return env


def jsonl(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def setup_claude(c, url, home):
    env = base_env(home)
    env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY=KEY, ANTHROPIC_MODEL=MODEL,
               ANTHROPIC_SMALL_FAST_MODEL=MODEL, ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL,
               ANTHROPIC_DEFAULT_SONNET_MODEL=MODEL, ANTHROPIC_DEFAULT_OPUS_MODEL=MODEL,
               DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", DISABLE_BUG_COMMAND="1")
    exe = os.path.join(c["dir"], "node_modules/.bin/claude")
    return env, lambda turn: [exe, "-p", PROMPT1 if turn == 1 else PROMPT2, "--output-format", "json",
                              *(["--continue"] if turn == 2 else [])]


def parse_claude(out, err, rc):
    try:
        d = json.loads(out.strip().splitlines()[-1])
    except Exception:
        return False, (err or out)[-300:]
    ok = rc == 0 and not d.get("is_error")
    note = "" if ok else f"is_error: {d.get('result', '')[:240]} (api_error_status {d.get('api_error_status')})"
    return ok, note


def setup_codex(c, url, home):
    env = base_env(home)
    codex_home = os.path.join(home, ".codex")
    os.makedirs(codex_home, exist_ok=True)
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write(f'''model = "{MODEL}"
model_provider = "fak"
check_for_update_on_startup = false
[model_providers.fak]
name = "fak"
base_url = "{url}/v1"
env_key = "FAK_API_KEY"
wire_api = "responses"
[analytics]
enabled = false
[feedback]
enabled = false
[otel]
exporter = "none"
''')
    env.update(CODEX_HOME=codex_home, FAK_API_KEY=KEY)
    exe = os.path.join(c["dir"], "node_modules/.bin/codex")
    return env, lambda turn: ([exe, "exec", "--skip-git-repo-check", "--json", PROMPT1] if turn == 1 else
                              [exe, "exec", "--skip-git-repo-check", "--json", "resume", "--last", PROMPT2])


def parse_codex(out, err, rc):
    ev = jsonl(out)
    failed = [e for e in ev if e.get("type") == "turn.failed"]
    done = [e for e in ev if e.get("type") == "turn.completed"]
    if done and rc == 0:
        return True, ""
    if failed:
        return False, "turn.failed: " + failed[-1].get("error", {}).get("message", "")[:240]
    return False, (err or out)[-300:]


def setup_qwen(c, url, home):
    env = base_env(home)
    os.makedirs(os.path.join(home, ".qwen"), exist_ok=True)
    json.dump({"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
               "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
               "security": {"auth": {"selectedType": "openai"}}},
              open(os.path.join(home, ".qwen/settings.json"), "w"))
    env.update(OPENAI_BASE_URL=url + "/v1", OPENAI_API_KEY=KEY, OPENAI_MODEL=MODEL)
    exe = os.path.join(c["dir"], "node_modules/.bin/qwen")
    return env, lambda turn: [exe, "--auth-type", "openai", "-o", "json",
                              *(["--continue"] if turn == 2 else []), PROMPT1 if turn == 1 else PROMPT2]


def parse_qwen(out, err, rc):
    try:
        d = json.loads(out)
        res = [e for e in d if e.get("type") == "result"][-1]
    except Exception:
        return False, (err or out)[-300:]
    ok = rc == 0 and not res.get("is_error")
    api = res.get("stats", {}).get("models", {}).get(MODEL, {}).get("api", {})
    note = f"session total {api.get('totalRequests')} requests (main agent + memory extractor)"
    return ok, note if ok else f"is_error: {str(res.get('error') or res.get('result'))[:240]}"


def setup_opencode(c, url, home):
    env = base_env(home)
    cfg = os.path.join(home, "opencode.json")
    json.dump({"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
               "model": f"fak/{MODEL}", "small_model": f"fak/{MODEL}",
               "provider": {"fak": {"npm": "@ai-sdk/openai-compatible", "name": "fak",
                                    "options": {"baseURL": url + "/v1", "apiKey": KEY},
                                    "models": {MODEL: {"name": MODEL,
                                                       "limit": {"context": 65536, "output": 256}}}}}},
              open(cfg, "w"))
    models = os.path.join(home, "models.json")
    open(models, "w").write("{}")
    env.update(OPENCODE_CONFIG=cfg, OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_MODELS_PATH=models,
               OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_SHARE="1",
               OPENCODE_DISABLE_LSP_DOWNLOAD="1", OPENCODE_DISABLE_DEFAULT_PLUGINS="1")
    exe = os.path.join(c["dir"], "node_modules/.bin/opencode")
    return env, lambda turn: [exe, "run", "--format", "json", *(["--continue"] if turn == 2 else []),
                              PROMPT1 if turn == 1 else PROMPT2]


def parse_opencode(out, err, rc):
    ev = jsonl(out)
    errs = [e for e in ev if e.get("type") == "error"]
    fin = [e for e in ev if e.get("type") == "step_finish"]
    if rc == 0 and fin and not errs:
        return True, "finish reason " + str(fin[-1].get("part", {}).get("reason"))
    return False, (json.dumps(errs[-1])[:300] if errs else (err or out)[-300:])


def make_pi(api):
    def setup(c, url, home):
        env = base_env(home)
        agent = os.path.join(home, ".pi/agent")
        os.makedirs(agent, exist_ok=True)
        prov = {"api": api, "apiKey": KEY,
                "baseUrl": url if api == "anthropic-messages" else url + "/v1",
                "models": [{"id": MODEL, "contextWindow": 65536, "maxTokens": 256}]}
        if api == "openai-completions":
            prov["compat"] = {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
        json.dump({"providers": {"fak": prov}}, open(os.path.join(agent, "models.json"), "w"))
        json.dump({"enableInstallTelemetry": False}, open(os.path.join(agent, "settings.json"), "w"))
        env.update(PI_CODING_AGENT_DIR=agent, PI_OFFLINE="1", PI_TELEMETRY="0", PI_SKIP_VERSION_CHECK="1")
        exe = os.path.join(c["dir"], "node_modules/.bin/pi")
        return env, lambda turn: [exe, "--offline", "--provider", "fak", "--model", MODEL, "--mode", "json",
                                  *(["--continue"] if turn == 2 else []), "-p",
                                  PROMPT1 if turn == 1 else PROMPT2]
    return setup


def parse_pi(out, err, rc):
    ev = jsonl(out)
    end = [e for e in ev if e.get("type") == "agent_end"]
    if not end:
        return False, (err or out)[-300:]
    last = end[-1]["messages"][-1]
    stop, emsg = last.get("stopReason"), last.get("errorMessage")
    ok = rc == 0 and stop not in ("error", "aborted")
    u = last.get("usage", {})
    note = f"stopReason {stop}, usage input {u.get('input')} cacheRead {u.get('cacheRead')} output {u.get('output')}"
    return ok, note if ok else f"stopReason {stop}: {emsg}"[:300]


def make_agents(api):
    def setup(c, url, home):
        env = base_env(home)
        env.update(FAK_BASE_URL=url + "/v1", FAK_API_KEY=KEY, FAK_MODEL=MODEL,
                   OPENAI_AGENTS_DISABLE_TRACING="1")
        script = os.path.join(c["dir"], "agents_sdk_turn.mjs")  # resolves @openai/agents from there
        shutil.copy(os.path.join(HERE, "agents_sdk_turn.mjs"), script)
        hist = os.path.join(home, "history.json")
        return env, lambda turn: ["node", script, api, hist, str(turn)]
    return setup


def parse_agents(out, err, rc):
    try:
        d = json.loads(out.strip().splitlines()[-1])
    except Exception:
        return False, (err or out)[-300:]
    if d.get("ok"):
        return rc == 0, f"{d.get('items')} history items" + (f", history: {d['history']}" if d.get("history") else "")
    return False, d.get("error", "")[:300]


RUNS = [  # (row name, client package key, API, setup, parser)
    ("claude", "claude", "messages", setup_claude, parse_claude),
    ("codex", "codex", "responses", setup_codex, parse_codex),
    ("qwen", "qwen", "chat completions", setup_qwen, parse_qwen),
    ("opencode", "opencode", "chat completions", setup_opencode, parse_opencode),
    ("pi (openai-completions)", "pi", "chat completions", make_pi("openai-completions"), parse_pi),
    ("pi (openai-responses)", "pi", "responses", make_pi("openai-responses"), parse_pi),
    ("pi (anthropic-messages)", "pi", "messages", make_pi("anthropic-messages"), parse_pi),
    ("agents SDK (responses)", "agents", "responses", make_agents("responses"), parse_agents),
    ("agents SDK (chat)", "agents", "chat completions", make_agents("chat"), parse_agents),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fak", default=os.path.join(REPO, "build/fak"))
    ap.add_argument("--model", default=os.path.join(REPO, "models/pycoder-6m"))
    ap.add_argument("--clis", default="/tmp/clis", help="install folder (one npm prefix per client)")
    ap.add_argument("--port", type=int, default=18440)
    ap.add_argument("--ctx", type=int, default=65536)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=int, default=180, help="seconds per client turn")
    ap.add_argument("--only", default="", help="comma-separated client keys (claude,codex,qwen,opencode,pi,agents)")
    ap.add_argument("--json", default="agent_clis_matrix.json")
    ap.add_argument("--keep", default="", help="scratch folder to use and keep (default: a temporary one, removed)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    atexit.register(cleanup)
    only = set(filter(None, a.only.split(",")))
    runs = [r for r in RUNS if not only or r[1] in only]

    scratch = a.keep or tempfile.mkdtemp(prefix="fak_agent_clis_")
    os.makedirs(scratch, exist_ok=True)
    if not a.keep:
        atexit.register(shutil.rmtree, scratch, True)

    clients = {}
    for key in sorted({r[1] for r in runs}):
        ver, secs, note = install(a.clis, key)
        clients[key] = {"dir": pkg_dir(a.clis, key), "version": ver, "install_note": note}
        print(f"# {PACKAGES[key]} {ver or 'NOT INSTALLED'} ({note})", flush=True)

    fak = os.path.join(scratch, "fak")
    shutil.copy(a.fak, fak)
    model, model_note = stretched_model(a.model, a.ctx, scratch)
    log_path = os.path.join(scratch, "server.log")
    log = open(log_path, "w")
    cmd = [fak, "serve", "-m", model, "--model-name", MODEL, "--host", "127.0.0.1", "--port", str(a.port),
           "--parallel", "2", "--max-tokens", str(a.max_tokens), "--ctx", str(a.ctx),
           "--api-key-env", "KEYS", "--log-requests"]
    server = subprocess.Popen(cmd, start_new_session=True, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                              env={**os.environ, "KEYS": KEY, "OMP_WAIT_POLICY": "PASSIVE"})
    procs.append(server)
    for _ in range(300):
        if "listening on" in open(log_path).read() or server.poll() is not None:
            break
        time.sleep(0.1)
    if server.poll() is not None:
        sys.exit("fak serve did not start:\n" + open(log_path).read())
    url = f"http://127.0.0.1:{a.port}"
    print(f"# server: {' '.join(cmd[1:])}" + (f"  [{model_note}]" if model_note else ""), flush=True)

    rows = []
    for name, key, api, setup, parse in runs:
        c = clients[key]
        row = {"client": name, "package": PACKAGES[key], "version": c["version"], "api": api, "turns": []}
        rows.append(row)
        if not c["version"]:
            row["notes"] = "not installed: " + c["install_note"]
            continue
        home = os.path.join(scratch, re.sub(r"[^a-z0-9]+", "_", name.lower()))
        work = os.path.join(home, "work")
        os.makedirs(work, exist_ok=True)
        env, argv = setup(c, url, home)
        for turn in (1, 2):
            pos = os.path.getsize(log_path)
            m0 = metrics(a.port)
            t0 = time.time()
            rc, out, err = sh(argv(turn), a.timeout, cwd=work, env=env)
            secs = time.time() - t0
            time.sleep(0.2)  # the last log line
            m1 = metrics(a.port)
            with open(log_path) as f:
                f.seek(pos)
                new = f.read()
            statuses = {}
            for m in re.finditer(r"^fak serve: \S+ (GET|POST|DELETE|HEAD) (\S+) -> (\d+)", new, re.M):
                if m.group(2) == "/metrics":
                    continue
                k = f"{m.group(1)} {m.group(2)} {m.group(3)}"
                statuses[k] = statuses.get(k, 0) + 1
            warnings = sorted({l[len("fak serve: warning: "):] for l in new.splitlines()
                               if l.startswith("fak serve: warning: ")})
            client_ok, note = parse(out, err, rc) if rc != 124 else (False, f"timed out after {a.timeout} s")
            bad = [k for k in statuses if not k.split()[-1].startswith("2")]
            t = {"turn": turn, "rc": rc, "seconds": round(secs, 1), "statuses": statuses,
                 "prompt_tokens": m1["prompt"] - m0["prompt"], "cached_tokens": m1["cached"] - m0["cached"],
                 "generated_tokens": m1["generated"] - m0["generated"],
                 "protocol_ok": rc != 124 and not bad and bool(statuses) and
                                not re.search(r"ECONNREFUSED|ECONNRESET|socket hang up|Unexpected token|"
                                              r"stream disconnected|error decoding|SyntaxError", note),
                 "client_ok": client_ok, "note": note, "server_warnings": warnings,
                 "stderr_tail": err[-400:]}
            row["turns"].append(t)
            print(f"# {name} turn {turn}: rc {rc} {secs:.1f} s {statuses} cached {t['cached_tokens']}/"
                  f"{t['prompt_tokens']} client_ok {client_ok} {note[:160]}", flush=True)

    def fmt_statuses(row):
        agg = {}
        for t in row["turns"]:
            for k, v in t["statuses"].items():
                k = re.sub(r"^POST ", "", k)
                agg[k] = agg.get(k, 0) + v
        return ", ".join(f"{k} x{v}" for k, v in agg.items()) or "-"

    print()
    print(f"fak serve --ctx {a.ctx} --max-tokens {a.max_tokens} --parallel 2"
          + (f" ({model_note})" if model_note else ""))
    print()
    print("| client | version | API | protocol ok (turns) | client ok (turns) | server saw | turn 2 cached / prompt tokens | s turn 1 / 2 | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ts = row["turns"]
        if not ts:
            print(f"| {row['client']} | - | {row['api']} | 0/2 | 0/2 | - | - | - | {row.get('notes', '')} |")
            continue
        t2 = ts[-1]
        notes = "; ".join(dict.fromkeys(f"t{t['turn']}: {t['note']}" for t in ts if t["note"]))
        warns = sorted({w for t in ts for w in t["server_warnings"]})
        if warns:
            notes += "; server: " + "; ".join(warns)
        notes = notes.replace("|", "\\|").replace("\n", " ")
        print(f"| {row['client']} | {row['version']} | {row['api']} | "
              f"{sum(t['protocol_ok'] for t in ts)}/2 | {sum(t['client_ok'] for t in ts)}/2 | "
              f"{fmt_statuses(row)} | {t2['cached_tokens']} / {t2['prompt_tokens']} | "
              f"{' / '.join(str(t['seconds']) for t in ts)} | {notes[:400]} |")
    json.dump({"server": cmd[1:], "model_note": model_note, "ctx": a.ctx, "rows": rows},
              open(a.json, "w"), indent=1)
    print(f"\nJSON: {a.json}")


if __name__ == "__main__":
    main()
