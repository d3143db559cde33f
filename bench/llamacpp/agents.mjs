// The multi-agent workload of bench/hybrid_agents.py on llama.cpp (the prebuilt library of the npm
// package node-llama-cpp): A agents run at once, each for T turns; a turn sends the agent's whole
// context (its first prompt, every reply, every new message) and decodes R greedy tokens. Like
// llama-server, a sequence keeps its context between turns and evaluates only the tokens past it
// (here always an append: the previous context is a prefix of the next turn's), so a recurrent
// (hybrid) model resumes at the exact token. The turns' token ids come from the caller (--work, a
// JSON file: {first: [[ids] per agent], messages: [[[ids] per turn] per agent], reply: R}).
//
//   node bench/llamacpp/agents.mjs -m MODEL.gguf --work WORK.json [-t 2]
// Prints {seconds, prefilled, turns: [{agent, turn, prompt, cached, seconds}], replies}.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { readFileSync } from "node:fs";

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const modelPath = arg("-m");
const work = JSON.parse(readFileSync(arg("--work"), "utf8"));
const threads = Number(arg("-t", "2"));
const A = work.first.length;
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
let longest = 0;
for (let a = 0; a < A; ++a) {
  let n = work.first[a].length;
  for (const m of work.messages[a]) n += m.length + work.reply;
  longest = Math.max(longest, n + work.reply);
}
const context = await model.createContext({
  contextSize: A * (longest + 64),
  batchSize: 512,
  threads: { ideal: threads, min: threads },
  sequences: A,
});
const turns = [];
const replies = [];
let prefilled = 0;
async function agent(a) {
  const seq = context.getSequence();
  let ctx = [...work.first[a]];
  const mine = [];
  for (let t = 0; t < work.messages[a].length + 1; ++t) {
    if (t > 0) ctx = ctx.concat(mine[t - 1], work.messages[a][t - 1]);
    const s = performance.now();
    const have = seq.contextTokens;
    let same = 0;
    while (same < have.length && same < ctx.length && have[same] === ctx[same]) ++same;
    if (same < have.length) await seq.eraseContextTokenRanges([{ start: same, end: seq.nextTokenIndex }]);
    const fresh = ctx.slice(same);
    prefilled += fresh.length;
    const it = seq.evaluate(fresh, { temperature: 0, yieldEogToken: true });
    const out = [];
    for (let i = 0; i < work.reply; ++i) {
      const r = await it.next();
      if (r.done) break;
      out.push(r.value);
    }
    await it.return();
    mine.push(out);
    turns.push({ agent: a, turn: t, prompt: ctx.length, cached: same, seconds: (performance.now() - s) / 1000 });
  }
  replies[a] = mine;
}
const s = performance.now();
await Promise.all([...Array(A).keys()].map(agent));
const seconds = (performance.now() - s) / 1000;
console.log(JSON.stringify({ engine: "llama.cpp (node-llama-cpp prebuilt)", seconds, prefilled, turns, replies }));
await context.dispose();
await model.dispose();
