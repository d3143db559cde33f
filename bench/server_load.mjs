// Load generator for `fak serve`: N concurrent clients send a bounded number of /v1/completions
// requests (distinct prompts, fixed max_tokens, ignore_eos so every reply has the same length) and
// it prints throughput and latency percentiles as one JSON line.
// Usage: node bench/server_load.mjs URL [--clients 16] [--requests 256] [--max-tokens 32]
//        [--stream] [--key KEY] [--model pycoder-6m]
const args = process.argv.slice(2);
const url = args[0];
if (!url) {
  console.error("usage: node bench/server_load.mjs URL [--clients N] [--requests N] [--max-tokens N] [--stream]");
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = args.indexOf("--" + name);
  return i < 0 ? dflt : args[i + 1];
};
const clients = Number(opt("clients", 16));
const requests = Number(opt("requests", 256));
const maxTokens = Number(opt("max-tokens", 32));
const stream = args.includes("--stream");
const key = opt("key", "");
const model = opt("model", "pycoder-6m");

const latencies = [], ttfts = [];
let next = 0, errors = 0, tokens = 0;

async function one(i) {
  const body = { model, prompt: `def function_${i}(x):\n    `, max_tokens: maxTokens, ignore_eos: true, stream,
                 stream_options: stream ? { include_usage: true } : undefined };
  const t0 = performance.now();
  const res = await fetch(url + "/v1/completions", {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", ...(key ? { Authorization: "Bearer " + key } : {}) },
  });
  if (!stream) {
    const j = await res.json();
    if (res.status !== 200) throw new Error(JSON.stringify(j));
    tokens += j.usage.completion_tokens;
  } else {
    const reader = res.body.getReader();
    let first = true, text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (first) { ttfts.push(performance.now() - t0); first = false; }
      text += new TextDecoder().decode(value);
    }
    const m = text.match(/"completion_tokens":(\d+)/);
    tokens += m ? Number(m[1]) : 0;
  }
  latencies.push(performance.now() - t0);
}

async function worker() {
  while (next < requests) {
    const i = next++;
    try { await one(i); } catch (e) { errors++; }
  }
}

const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, worker));
const seconds = (performance.now() - t0) / 1000;
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]) : null;
};
console.log(JSON.stringify({
  clients, requests, max_tokens: maxTokens, stream, errors, seconds: +seconds.toFixed(2),
  req_per_s: +(requests / seconds).toFixed(1), gen_tok_per_s: +(tokens / seconds).toFixed(0),
  p50_ms: pct(latencies, 0.5), p99_ms: pct(latencies, 0.99),
  ...(stream ? { ttft_p50_ms: pct(ttfts, 0.5), ttft_p99_ms: pct(ttfts, 0.99) } : {}),
}));
process.exit(errors ? 1 : 0);
