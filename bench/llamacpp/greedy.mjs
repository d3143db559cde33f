// llama.cpp's greedy continuation of a prompt given as token ids, through the prebuilt llama.cpp of
// the npm package node-llama-cpp: the outside referee for GGUF files in both directions (fak-written
// files run in llama.cpp; llama.cpp-written files run in fak). Used by bench/crosscheck.sh.
//
//   node bench/llamacpp/greedy.mjs -m MODEL.gguf --ids 1,2,3 [-n 32]
// Prints {"ids": [...]}: n greedy tokens (no stop at end-of-text, no penalties).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const modelPath = arg("-m");
const ids = (arg("--ids", "") || "").split(",").filter((s) => s.length).map(Number);
const n = Number(arg("-n", "32"));
if (!modelPath || ids.length === 0) {
  console.error("usage: greedy.mjs -m MODEL.gguf --ids 1,2,3 [-n 32]");
  process.exit(2);
}
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({ contextSize: Math.max(256, ids.length + n + 8), threads: 2 });
const seq = context.getSequence();
const out = [];
const it = seq.evaluate(ids, { temperature: 0, yieldEogToken: true });
for (let i = 0; i < n; ++i) {
  const r = await it.next();
  if (r.done) break;
  out.push(r.value);
}
await it.return();
console.log(JSON.stringify({ ids: out }));
await context.dispose();
await model.dispose();
