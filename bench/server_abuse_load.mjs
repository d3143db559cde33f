// Load test of `fak serve` with abusive clients mixed in (issue 17). Starts the real binary, then:
//   1. alone:   each normal prompt once, one at a time: the reference greedy outputs and latency;
//   2. normal:  N normal clients looping over the prompts (no abuse): the latency to compare with;
//   3. abused:  the same N normal clients while A abusive ones run: slowloris heads, oversized
//               chunked bodies, huge Content-Lengths, deeply nested JSON, refused sampling
//               options, garbage bytes, connection floods, streams dropped mid-way and streams
//               read too slowly.
// Checks: every normal request succeeds with exactly the greedy output it had alone, the server
// never dies, /health answers throughout; reports p50/p99/max latency of normal requests in
// phases 2 and 3 as JSON. Exit status 1 on any failure, or when phase 3's p99 exceeds
// --max-p99-ratio times phase 2's (default 3) plus one second of slack.
//
//   node bench/server_abuse_load.mjs build/fak [--normal 16] [--abusive 48] [--rounds 3]
//        [--max-tokens 16] [--model DIR] [--json]
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";

const args = process.argv.slice(2);
const fak = args[0];
if (!fak) {
  console.error("usage: node server_abuse_load.mjs FAK_BINARY [--normal N] [--abusive A] [--rounds R]");
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = args.indexOf("--" + name);
  return i >= 0 ? args[i + 1] : dflt;
};
const N = Number(opt("normal", 16));
const A = Number(opt("abusive", 48));
const ROUNDS = Number(opt("rounds", 3));
const MAX_TOKENS = Number(opt("max-tokens", 16));
const MAX_P99_RATIO = Number(opt("max-p99-ratio", 3));
const MODEL = opt("model", "");
const JSON_OUT = args.includes("--json");

const PROMPTS = [
  "def fibonacci(n):", "import os\nimport sys\n", "class Stack:\n    def __init__(self):",
  "def read_lines(path):\n    with open(path) as f:", "for i in range(10):",
  "def is_prime(n):\n    if n < 2:", "x = [i * i for i in", "async def fetch(url):",
];

function startServer() {
  return new Promise((resolve, reject) => {
    const argv = ["serve", "--port", "0", "-t", "1", "--ctx", "512", "--parallel", "4",
                  "--max-queue", "64", "--max-body", "1", "--header-timeout", "2",
                  "--body-timeout", "4", "--max-connections", "256"];
    if (MODEL) argv.push("-m", MODEL);
    const proc = spawn(fak, argv, { env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" },
                                    stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    const timer = setTimeout(() => reject(new Error("fak serve did not start: " + err)), 30000);
    proc.stderr.on("data", (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/[0-9.]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]), stderr: () => err });
      }
    });
    proc.on("exit", (code, sig) => reject(new Error(`fak serve exited (${code ?? sig}): ${err}`)));
  });
}

const { proc, port, stderr } = await startServer();
let died = null;
proc.on("exit", (code, sig) => { died = `exit ${code ?? sig}`; });
const modelId = MODEL ? MODEL.replace(/\/+$/, "").split("/").pop() : "pycoder-6m";
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

function request(method, path, body, { timeoutMs = 120000 } = {}) {
  return new Promise((resolve) => {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request({ host: "127.0.0.1", port, method, path, agent,
                               headers: data ? { "content-type": "application/json",
                                                 "content-length": data.length } : {} },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
        res.on("error", (e) => resolve({ status: 0, body: String(e) }));
      });
    req.setTimeout(timeoutMs, () => req.destroy(new Error("timeout")));
    req.on("error", (e) => resolve({ status: 0, body: String(e) }));
    if (data) req.write(data);
    req.end();
  });
}

async function complete(prompt) {
  const t0 = performance.now();
  const r = await request("POST", "/v1/completions",
                          { model: modelId, prompt, max_tokens: MAX_TOKENS, ignore_eos: true });
  const ms = performance.now() - t0;
  let text = null;
  if (r.status === 200) text = JSON.parse(r.body).choices[0].text;
  return { status: r.status, text, ms, body: r.status === 200 ? "" : r.body };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const failures = [];

// Phase 1: the reference outputs.
const reference = {};
const aloneMs = [];
for (const p of PROMPTS) {
  const r = await complete(p);
  if (r.status !== 200) failures.push(`alone: ${r.status} ${r.body}`);
  reference[p] = r.text;
  aloneMs.push(r.ms);
}

async function normalClients() {
  const latencies = [];
  await Promise.all(Array.from({ length: N }, async (_, c) => {
    for (let round = 0; round < ROUNDS; round++) {
      const p = PROMPTS[(c + round) % PROMPTS.length];
      const r = await complete(p);
      latencies.push(r.ms);
      if (r.status !== 200) failures.push(`normal client ${c}: ${r.status} ${r.body}`);
      else if (r.text !== reference[p])
        failures.push(`normal client ${c}: output differs from alone for ${JSON.stringify(p)}`);
    }
  }));
  return latencies;
}

// Abusive clients: each runs its behaviour in a loop until told to stop.
let abusing = true;
const abuseCounts = {};
const count = (k) => { abuseCounts[k] = (abuseCounts[k] || 0) + 1; };

function rawSocket() {
  const s = net.connect(port, "127.0.0.1");
  s.on("error", () => {});
  return s;
}
function rawExchange(bytes, { keepOpenMs = 0 } = {}) {
  return new Promise((resolve) => {
    const s = rawSocket();
    let out = "";
    s.on("data", (d) => { out += d.toString("latin1"); });
    s.on("close", () => resolve(out));
    s.write(bytes);
    setTimeout(() => s.destroy(), keepOpenMs || 10000);
  });
}

const behaviours = {
  async slowloris() {
    const s = rawSocket();
    s.write("GET /health HTTP/1.1\r\nHo");
    while (abusing && !s.destroyed) { s.write("x"); await sleep(200); }
    s.destroy();
    count("slowloris");
  },
  async chunkedFlood() {
    const s = rawSocket();
    s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const piece = "x".repeat(1 << 16);
    for (let i = 0; i < 64 && !s.destroyed; i++) s.write((1 << 16).toString(16) + "\r\n" + piece + "\r\n");
    await sleep(200);
    s.destroy();
    count("chunked_flood");
  },
  async hugeLength() {
    const r = await rawExchange("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", { keepOpenMs: 3000 });
    if (!r.startsWith("HTTP/1.1 413")) failures.push("huge Content-Length: " + r.slice(0, 80));
    count("huge_length");
  },
  async deepJson() {
    const body = '{"a":' + "[".repeat(20000) + "]".repeat(20000) + "}";
    const r = await rawExchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    if (!r.startsWith("HTTP/1.1 400")) failures.push("deep JSON: " + r.slice(0, 80));
    count("deep_json");
  },
  async badSampling() {
    const bad = [{ repetition_penalty: 0 }, { min_p: 1 }, { top_p: 0 }, { presence_penalty: 9 }];
    const r = await request("POST", "/v1/completions",
                            { model: modelId, prompt: "x", max_tokens: 2, ...bad[Math.floor(Math.random() * bad.length)] });
    if (r.status !== 400) failures.push("refused sampling option: " + r.status);
    count("bad_sampling");
  },
  async garbage() {
    const bytes = Buffer.from(Array.from({ length: 512 }, () => Math.floor(Math.random() * 256)));
    await rawExchange(bytes, { keepOpenMs: 2500 });
    count("garbage");
  },
  async connectFlood() {
    for (let i = 0; i < 20; i++) rawSocket().destroy();
    await sleep(50);
    count("connect_flood");
  },
  async dropStream() {
    await new Promise((resolve) => {
      const data = JSON.stringify({ model: modelId, prompt: "def main():", max_tokens: 200, ignore_eos: true, stream: true, temperature: 1.0 });
      const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/v1/completions",
                                 headers: { "content-type": "application/json", "content-length": data.length } },
        (res) => { res.once("data", () => { req.destroy(); resolve(); }); res.on("error", resolve); });
      req.on("error", resolve);
      req.end(data);
    });
    count("drop_stream");
  },
  async slowReader() {
    await new Promise((resolve) => {
      const data = JSON.stringify({ model: modelId, prompt: "import", max_tokens: 64, ignore_eos: true, stream: true, temperature: 1.0 });
      const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/v1/completions",
                                 headers: { "content-type": "application/json", "content-length": data.length } },
        (res) => {
          res.pause();  // never reads: the server's writes back up behind this client
          setTimeout(() => { req.destroy(); resolve(); }, 1500);
        });
      req.on("error", resolve);
      req.end(data);
    });
    count("slow_reader");
  },
};
const names = Object.keys(behaviours);

async function abusiveClient(i) {
  const b = behaviours[names[i % names.length]];
  while (abusing) {
    try { await b(); } catch (e) { failures.push(`abusive ${names[i % names.length]} threw: ${e}`); }
  }
}

// /health must answer throughout.
let healthWorst = 0;
async function healthProbe() {
  while (abusing) {
    const t0 = performance.now();
    const r = await request("GET", "/health", undefined, { timeoutMs: 10000 });
    healthWorst = Math.max(healthWorst, performance.now() - t0);
    if (r.status !== 200) failures.push("health: " + r.status + " " + r.body);
    await sleep(100);
  }
}

const normalMs = await normalClients();
const abusers = Array.from({ length: A }, (_, i) => abusiveClient(i));
const prober = healthProbe();
await sleep(500);  // let the abuse get going
const abusedMs = await normalClients();
abusing = false;
await Promise.all(abusers);
await prober;
await sleep(300);
if (died) failures.push("the server died: " + died + "\n" + stderr().slice(-2000));
const after = await request("GET", "/health");
if (after.status !== 200) failures.push("health after the load: " + after.status);
proc.kill("SIGTERM");

const summary = (xs) => ({ n: xs.length, p50_ms: Math.round(pct(xs, 50)), p99_ms: Math.round(pct(xs, 99)),
                           max_ms: Math.round(Math.max(...xs)) });
const result = {
  clients: { normal: N, abusive: A }, rounds: ROUNDS, max_tokens: MAX_TOKENS,
  alone: summary(aloneMs), normal_only: summary(normalMs), with_abuse: summary(abusedMs),
  p99_ratio: +(pct(abusedMs, 99) / pct(normalMs, 99)).toFixed(2),
  health_worst_ms: Math.round(healthWorst), abuse_done: abuseCounts,
  outputs_identical: !failures.some((f) => f.includes("differs")), failures: failures.length,
};
if (pct(abusedMs, 99) > MAX_P99_RATIO * pct(normalMs, 99) + 1000)
  failures.push(`p99 with abuse ${result.with_abuse.p99_ms} ms > ${MAX_P99_RATIO} x ${result.normal_only.p99_ms} ms + 1 s`);
result.failures = failures.length;
console.log(JSON_OUT ? JSON.stringify(result, null, 1) : result);
for (const f of failures.slice(0, 20)) console.error("FAIL " + f);
process.exit(failures.length ? 1 : 0);
