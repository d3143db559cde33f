// One turn of an @openai/agents (JS SDK) agent against an OpenAI-compatible server.
// usage: node agents_sdk_turn.mjs <responses|chat> <history.json> <turn 1|2>
// env: FAK_BASE_URL (http://127.0.0.1:P/v1), FAK_API_KEY, FAK_MODEL. Tracing is off, so nothing
// but FAK_BASE_URL is contacted. Turn 1 runs without streaming, turn 2 streams and continues
// turn 1's history (read from history.json). Prints one JSON line: {ok, error, ...}.
import fs from 'node:fs';
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';

const [api = 'responses', histFile = 'history.json', turn = '1'] = process.argv.slice(2);
setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.FAK_BASE_URL, apiKey: process.env.FAK_API_KEY }));
setOpenAIAPI(api === 'chat' ? 'chat_completions' : 'responses');
const getTime = tool({
  name: 'get_time', description: 'Current time of day', strict: true,
  parameters: { type: 'object', properties: {}, required: [], additionalProperties: false },
  execute: async () => 'noon',
});
const agent = new Agent({ name: 'coder', instructions: 'You write Python.', tools: [getTime],
  model: process.env.FAK_MODEL || 'pycoder-6m', modelSettings: { maxTokens: 128 } });
const out = { api, turn: Number(turn) };
try {
  let result;
  if (turn === '1') {
    result = await run(agent, 'write a python function that reverses a string', { maxTurns: 4 });
  } else {
    // turn 1's history, or (when turn 1 failed) a stand-in of the same shape
    const history = fs.existsSync(histFile) ? JSON.parse(fs.readFileSync(histFile, 'utf8')) : [
      { role: 'user', content: 'write a python function that reverses a string' },
      { role: 'assistant', status: 'completed',
        content: [{ type: 'output_text', text: 'def rev(s):\n    return s[::-1]\n' }] }];
    out.history = fs.existsSync(histFile) ? 'turn 1' : 'stand-in (turn 1 failed)';
    result = await run(agent, [...history, { role: 'user', content: 'now add a docstring to it' }],
                       { stream: true, maxTurns: 4 });
    for await (const _ of result.toStream()) { /* drain the stream */ }
    await result.completed;
  }
  fs.writeFileSync(histFile, JSON.stringify(result.history));
  out.ok = true;
  out.items = result.history.length;
  out.final = String(result.finalOutput ?? '').slice(0, 80);
  out.usage = result.state?._context?.usage ?? null;
} catch (e) {
  out.ok = false;
  out.error = `${e?.constructor?.name}: ${e?.message}`.slice(0, 600);
}
console.log(JSON.stringify(out));
process.exit(out.ok ? 0 : 1);
