// llama.cpp's pp/tg on the same GGUF, through the prebuilt llama.cpp that the npm package
// node-llama-cpp ships (its CPU backends include zen4/AVX-512 variants, chosen at load). It is the
// peer for `fak bench`, run in the same session so the ratio compares like with like (see
// bench/RESULTS.md and bench/compare.sh). Not a test; nothing in the engine uses it.
//
//   (cd bench/llamacpp && npm ci)   # once
//   node bench/llamacpp/bench.mjs -m MODEL.gguf [-p 256] [-n 32] [-d 0] [-b 1] [-t 2] [-r 3] [--mmap] [--fa]
//
// pp: a fresh sequence prefilled with p random token ids in one batch (batch size >= p), as
// llama-bench's ppN. tg: n tokens decoded one at a time after one prompt token, as tgN. With -d D,
// both start after D context tokens (prefilled once, untimed; each repetition erases what the
// previous one appended), named as llama-bench's "ppN @ dD". -b B decodes B sequences of one context
// at once ("tgN xB": every step's B pending tokens go to llama.cpp in one batch, as node-llama-cpp
// batches sequences evaluated together; tok_s counts all of them); each sequence holds its own copy
// of the depth's context (no shared prefix). --fa turns on flash attention. Prints one
// JSON object: {model, threads, weights, tests: [{test, tok_s, stddev, samples}], peak_rss_mib}.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { readFileSync } from "node:fs";

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const modelPath = arg("-m");
if (!modelPath) {
  console.error("usage: bench.mjs -m MODEL.gguf [-p 256] [-n 32] [-d 0] [-b 1] [-t 2] [-r 3] [--mmap] [--fa]");
  process.exit(2);
}
const pp = Number(arg("-p", "256"));
const tg = Number(arg("-n", "32"));
const threads = Number(arg("-t", "2"));
const reps = Number(arg("-r", "3"));
const depth = Number(arg("-d", "0"));
const batch = Number(arg("-b", "1"));
const useMmap = process.argv.includes("--mmap");
const flash = process.argv.includes("--fa");

const llama = await getLlama({ gpu: false, build: "never", logLevel: process.env.LLAMA_LOG ? LlamaLogLevel.debug : LlamaLogLevel.error, maxThreads: threads });
const t0 = performance.now();
const model = await llama.loadModel({ modelPath, useMmap, gpuLayers: 0 });
const loadS = (performance.now() - t0) / 1000;
const ctxSize = Math.max(512, depth + pp + tg + 16);
const context = await model.createContext({
  contextSize: ctxSize,
  batchSize: Math.max(512, pp),
  threads: { ideal: threads, min: threads },
  flashAttention: flash,
  sequences: batch,
});
const seqs = [];
for (let i = 0; i < batch; ++i) seqs.push(context.getSequence());
const seq = seqs[0];
let seed = 12345;
function rand() {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed;
}
// Ids in [100, 32100): inside every Qwen/Llama vocab, clear of special tokens.
function randomTokens(n) {
  const out = [];
  for (let i = 0; i < n; ++i) out.push(rand() % 32000 + 100);
  return out;
}

function stats(xs) {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mean) * (b - mean), 0) / Math.max(1, xs.length - 1));
  return { mean, sd };
}

const tests = [];
const at = depth > 0 ? ` @ d${depth}` : "";
// Warm-up (page faults, thread start), not counted: as long as the prompt test (up to 512, as fak
// bench does), so that a MoE model's experts are all touched before the first timed repetition.
await seq.clearHistory();
await seq.evaluateWithoutGeneratingNewTokens(randomTokens(Math.min(pp || 16, 512)));
// The depth's context, prefilled once (in every sequence); reset() brings them back to it.
for (const q of seqs) {
  await q.clearHistory();
  if (depth > 0) await q.evaluateWithoutGeneratingNewTokens(randomTokens(depth));
}
async function reset() {
  for (const q of seqs) {
    if (depth === 0) await q.clearHistory();
    else if (q.nextTokenIndex > depth)
      await q.eraseContextTokenRanges([{ start: depth, end: q.nextTokenIndex }]);
  }
}
if (pp > 0) {
  const samples = [];
  for (let r = 0; r < reps; ++r) {
    await reset();
    const toks = randomTokens(pp);
    const s = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(toks);
    samples.push(pp / ((performance.now() - s) / 1000));
  }
  const { mean, sd } = stats(samples);
  tests.push({ test: `pp${pp}${at}`, tok_s: mean, stddev: sd, samples });
}
if (tg > 0) {
  const samples = [];
  for (let r = 0; r < reps; ++r) {
    await reset();
    const its = seqs.map((q) => q.evaluate(randomTokens(1), { temperature: 0 }));
    await Promise.all(its.map((it) => it.next())); // the prompt tokens and the first sampled ones
    const s = performance.now();
    for (let i = 0; i < tg; ++i) await Promise.all(its.map((it) => it.next()));
    samples.push((tg * batch) / ((performance.now() - s) / 1000));
    await Promise.all(its.map((it) => it.return()));
  }
  const { mean, sd } = stats(samples);
  tests.push({ test: `tg${tg}${batch > 1 ? ` x${batch}` : ""}${at}`, tok_s: mean, stddev: sd, samples });
}
let rss = 0;
for (const line of readFileSync("/proc/self/status", "utf8").split("\n"))
  if (line.startsWith("VmHWM:")) rss = Number(line.split(/\s+/)[1]) / 1024;
console.log(JSON.stringify({ engine: "llama.cpp (node-llama-cpp prebuilt)", model: modelPath, threads,
  depth, batch, flash_attention: flash,
  weights: useMmap ? "mmap" : "anonymous", load_s: loadS, tests, peak_rss_mib: rss }));
await context.dispose();
await model.dispose();
