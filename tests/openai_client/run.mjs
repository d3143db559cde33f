// Drives a real `fak serve` with the official openai npm client, as an agent would: chat
// (non-stream + stream), tools, completions and multi-turn prefix caching; and the Responses API
// as Codex-style agents use it (create, streamed events, the stream helper, function calls and a
// function_call_output turn, text.format json_schema through the SDK's parse helper).
// Usage: node run.mjs /path/to/fak   (ctest passes the built binary). Exits non-zero on failure;
// a missing `openai` package is a failure, not a skip (run .ci/install-deps).
import { startServer, makeChecker } from "../lib/fak_server.mjs";
import assert from "node:assert/strict";

let OpenAI;
try {
  ({ default: OpenAI } = await import("openai"));
} catch (e) {
  console.error("FAIL: the openai package is missing (npm ci in tests/openai_client): " + e.message);
  process.exit(1);
}

const fak = process.argv[2];
if (!fak) {
  console.error("usage: node run.mjs FAK_BINARY");
  process.exit(2);
}


const { proc, url } = await startServer(fak, "sk-test-one,sk-test-two", ["--ctx", "1024"]);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "sk-test-one", maxRetries: 0 });
const other = new OpenAI({ baseURL: url + "/v1", apiKey: "sk-test-two", maxRetries: 0 });
const checker = makeChecker();
const check = checker.check;

const system = "You are a careful Python assistant. Reply with short code only. " +
               "Prefer the standard library. Never explain. Use four spaces for indentation.";

await check("models.list", async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, "pycoder-6m");
});

await check("chat non-stream", async () => {
  const r = await client.chat.completions.create({
    model: "pycoder-6m", max_tokens: 12, temperature: 0,
    messages: [{ role: "system", content: system }, { role: "user", content: "add two numbers" }],
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await check("chat stream equals non-stream (greedy)", async () => {
  const req = { model: "pycoder-6m", max_tokens: 16, temperature: 0, ignore_eos: true,
                messages: [{ role: "user", content: "print hello world" }] };
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    chunks++;
    text += c.choices[0].delta.content ?? "";
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  // Streamed, and adding up to the whole reply; how many chunks depends on how fast the client
  // reads (the server coalesces what is ready), so only that there are some is asserted.
  assert.ok(chunks >= 1, "no chunks");
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 16);
});

await check("tools round trip", async () => {
  const tools = [{ type: "function", function: { name: "get_weather", description: "weather in a city",
                   parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const r = await client.chat.completions.create({
    model: "pycoder-6m", max_tokens: 8, tools, tool_choice: "auto",
    messages: [
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp_c\": 21}" },
    ],
  });
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
});

await check("completions", async () => {
  const r = await client.completions.create({ model: "pycoder-6m", prompt: "def fib(n):", max_tokens: 10, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  const s = await client.completions.create({ model: "pycoder-6m", prompt: "def fib(n):", max_tokens: 10, temperature: 0, stream: true });
  let text = "";
  for await (const c of s) text += c.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

await check("multi-turn reuses the cached prefix; other keys do not", async () => {
  const messages = [{ role: "system", content: system }, { role: "user", content: "write a function that reverses a string" }];
  const first = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 12, messages });
  messages.push({ role: "assistant", content: first.choices[0].message.content });
  messages.push({ role: "user", content: "now make it reverse words instead" });
  const second = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 12, messages });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
  const stranger = await other.chat.completions.create({ model: "pycoder-6m", max_tokens: 4, messages });
  assert.equal(stranger.usage.prompt_tokens_details.cached_tokens, 0);
});

await check("errors are OpenAI errors", async () => {
  await assert.rejects(client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
                       (e) => e.status === 404 && e.code === "model_not_found");
  await assert.rejects(client.chat.completions.create({ model: "pycoder-6m", messages: [] }),
                       (e) => e.status === 400 && e.param === "messages");
  const bad = new OpenAI({ baseURL: url + "/v1", apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

const weatherTool = {
  type: "function", name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } },
                required: ["city"], additionalProperties: false },
  strict: true,
};

await check("responses.create", async () => {
  const r = await client.responses.create({
    model: "pycoder-6m", instructions: system, input: "add two numbers", max_output_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, "response");
  assert.match(r.id, /^resp_/);
  assert.ok(["completed", "incomplete"].includes(r.status), r.status);
  assert.equal(r.output[0].type, "message");
  assert.equal(r.output[0].content[0].type, "output_text");
  assert.equal(r.output_text, r.output[0].content[0].text);  // the SDK's convenience field
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

await check("responses stream: events equal the whole response (greedy)", async () => {
  const req = { model: "pycoder-6m", input: "print hello world", max_output_tokens: 16, temperature: 0 };
  const whole = await client.responses.create(req);
  const stream = await client.responses.create({ ...req, stream: true });
  let text = "", last = null, seq = -1;
  const types = [];
  for await (const e of stream) {
    types.push(e.type);
    assert.equal(e.sequence_number, seq + 1);
    seq = e.sequence_number;
    if (e.type === "response.output_text.delta") text += e.delta;
    last = e;
  }
  assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress", "response.output_item.added",
                                       "response.content_part.added"]);
  assert.ok(types.includes("response.output_text.done") && types.includes("response.output_item.done"), types.join());
  assert.equal(text, whole.output_text);
  assert.ok(["response.completed", "response.incomplete"].includes(last.type), last.type);
  assert.equal(last.response.output[0].content[0].text, whole.output_text);
  // The SDK's stream helper accumulates the same.
  const helper = client.responses.stream(req);
  let helped = "";
  helper.on("response.output_text.delta", (e) => { helped += e.delta; });
  await helper.done();
  assert.equal(helped, whole.output_text);
});

await check("responses function call and function_call_output turn", async () => {
  const input = [{ role: "user", content: "What is the weather in Paris? Use the tool." }];
  const first = await client.responses.create({
    model: "pycoder-6m", instructions: system, input, tools: [weatherTool], tool_choice: "required",
    parallel_tool_calls: false, max_output_tokens: 60,
  });
  const call = first.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, "get_weather");
  assert.match(call.call_id, /^call_/);
  const args = JSON.parse(call.arguments);
  assert.deepEqual(Object.keys(args), ["city"]);
  assert.ok(typeof args.city === "string" && args.city.length <= 12);
  input.push(call, { type: "function_call_output", call_id: call.call_id, output: "21 degrees, sunny" });
  const second = await client.responses.create({
    model: "pycoder-6m", instructions: system, input, tools: [weatherTool], max_output_tokens: 8,
  });
  assert.ok(second.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
  // Streamed, a forced call arrives as function_call_arguments events.
  const stream = await client.responses.create({
    model: "pycoder-6m", input: "Weather in Oslo?", tools: [weatherTool],
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 60, stream: true,
  });
  let argsDelta = "", argsDone = null;
  for await (const e of stream) {
    if (e.type === "response.function_call_arguments.delta") argsDelta += e.delta;
    if (e.type === "response.function_call_arguments.done") argsDone = e.arguments;
  }
  assert.equal(argsDelta, argsDone);
  assert.equal(typeof JSON.parse(argsDone).city, "string");
});

await check("responses.parse with text.format json_schema", async () => {
  const schema = { type: "object", properties: { name: { type: "string", maxLength: 10 }, count: { type: "integer" } },
                   required: ["name", "count"], additionalProperties: false };
  const r = await client.responses.parse({
    model: "pycoder-6m", input: "Describe the list as JSON.", max_output_tokens: 300,
    text: { format: { type: "json_schema", name: "summary", schema, strict: true } },
  });
  assert.equal(r.status, "completed");
  assert.equal(typeof r.output_parsed.name, "string");
  assert.ok(Number.isInteger(r.output_parsed.count));
  assert.deepEqual(Object.keys(r.output_parsed).sort(), ["count", "name"]);
});

await check("responses: stored state and unknown tools are refused, hosted tools left out", async () => {
  await assert.rejects(client.responses.create({ model: "pycoder-6m", input: "x", previous_response_id: "resp_1" }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === "previous_response_id");
  await assert.rejects(client.responses.create({ model: "pycoder-6m", input: "x", tools: [{ type: "made_up" }] }),
                       (e) => e.status === 400 && e.param === "tools[0].type");
  // A hosted tool fak cannot run (Codex sends web_search by default) does not fail the turn: it
  // is left out, and a Fak-Warning header says so.
  const { data, response } = await client.responses
    .create({ model: "pycoder-6m", input: "x", max_output_tokens: 4,
              tools: [{ type: "web_search", external_web_access: false }] })
    .withResponse();
  assert.equal(data.status, "incomplete");
  assert.match(response.headers.get("fak-warning") ?? "", /web_search/);
});

await check("models.retrieve", async () => {
  const m = await client.models.retrieve("pycoder-6m");
  assert.equal(m.id, "pycoder-6m");
  assert.equal(m.context_length, 1024);
  await assert.rejects(client.models.retrieve("gpt-4o"), (e) => e instanceof OpenAI.NotFoundError);
});

await check("chat response_format json_schema (strict), parsed by the client", async () => {
  const schema = { type: "object", additionalProperties: false, required: ["language", "lines"],
                   properties: { language: { enum: ["python", "c"] }, lines: { type: "integer", minimum: 1, maximum: 400 } } };
  const r = await client.chat.completions.parse({
    model: "pycoder-6m", max_tokens: 200, messages: [{ role: "user", content: "Summarise the file." }],
    response_format: { type: "json_schema", json_schema: { name: "summary", schema, strict: true } },
  });
  const v = r.choices[0].message.parsed;
  assert.ok(["python", "c"].includes(v.language));
  assert.ok(Number.isInteger(v.lines) && v.lines >= 1 && v.lines <= 400);
});

await check("chat tool_choice required and a named function", async () => {
  const tools = [
    { type: "function", function: { name: "get_weather", parameters: { type: "object", required: ["city"], properties: { city: { type: "string", maxLength: 12 } } } } },
    { type: "function", function: { name: "get_time", parameters: { type: "object", required: ["zone"], properties: { zone: { type: "integer", minimum: -12, maximum: 14 } } } } },
  ];
  const r = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 80, tools, tool_choice: "required",
                                                   parallel_tool_calls: false, messages: [{ role: "user", content: "Weather?" }] });
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  const call = r.choices[0].message.tool_calls[0];
  assert.ok(["get_weather", "get_time"].includes(call.function.name));
  JSON.parse(call.function.arguments);
  const named = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 80, tools,
    tool_choice: { type: "function", function: { name: "get_time" } }, messages: [{ role: "user", content: "Time?" }] });
  const args = JSON.parse(named.choices[0].message.tool_calls[0].function.arguments);
  assert.equal(named.choices[0].message.tool_calls[0].function.name, "get_time");
  assert.ok(Number.isInteger(args.zone) && args.zone >= -12 && args.zone <= 14);
});

await check("streamed tool calls arrive as argument deltas the SDK accumulates", async () => {
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object",
    required: ["city", "days"], properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer" } } } } }];
  const req = { model: "pycoder-6m", max_tokens: 80, temperature: 0, tools, tool_choice: "required",
                parallel_tool_calls: false, messages: [{ role: "user", content: "Weather in Paris this week?" }] };
  const whole = await client.chat.completions.create(req);
  const stream = client.chat.completions.stream(req);
  const deltas = [];
  stream.on("tool_calls.function.arguments.delta", (e) => deltas.push(e.arguments_delta));
  const final = await stream.finalChatCompletion();
  // What a client can rely on: the arguments come as deltas that add up to the whole call. How
  // many pieces depends on how fast the client reads (the server coalesces what is ready), so it
  // is not asserted: a loaded 2-core box once saw 2.
  assert.ok(deltas.length >= 1, "no argument deltas");
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(deltas.join(""), call.function.arguments);
  assert.equal(call.function.name, "get_weather");
  assert.equal(call.function.arguments, whole.choices[0].message.tool_calls[0].function.arguments);
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  // Cut off by max_tokens inside the call: "length", and no half call as text or as a call.
  const cut = await client.chat.completions.create({ ...req, max_tokens: 10 });
  assert.equal(cut.choices[0].finish_reason, "length");
  assert.equal(cut.choices[0].message.tool_calls, undefined);
  assert.ok(!(cut.choices[0].message.content ?? "").includes("tool_call"), cut.choices[0].message.content);
});

await check("chat n, logprobs and top_logprobs", async () => {
  const r = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 8, n: 2, temperature: 1, seed: 3,
                                                   logprobs: true, top_logprobs: 2, messages: [{ role: "user", content: "hi" }] });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.ok(c.logprobs.content.length > 0);
    for (const t of c.logprobs.content) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 2);
    }
  }
});

await check("more choices than batch slots is a 400 naming n", async () => {
  const e = await client.chat.completions.create({ model: "pycoder-6m", messages: [{ role: "user", content: "x" }], n: 99 })
    .then(() => null, (err) => err);
  assert.ok(e instanceof OpenAI.BadRequestError && e.param === "n", String(e));
});

await check("an agent's long prefix survives a side request (cached_tokens)", async () => {
  const longSystem = system + "\n" + Array.from({ length: 60 }, (_, i) => `# rule ${i}: keep functions short and pure.`).join("\n");
  const turn = [{ role: "system", content: longSystem }, { role: "user", content: "write a parser" }];
  const first = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 8, messages: turn });
  await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 8, messages: [{ role: "user", content: "a side question" }] });
  turn.push({ role: "assistant", content: first.choices[0].message.content }, { role: "user", content: "and a test" });
  const second = await client.chat.completions.create({ model: "pycoder-6m", max_tokens: 8, messages: turn });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 32,
            JSON.stringify([first.usage, second.usage]));  // all of turn 1 but its last partial block
});

await check("completions best_of returns the most likely of its choices", async () => {
  const req = { model: "pycoder-6m", prompt: "class Tree:", max_tokens: 10, temperature: 1.2, seed: 7 };
  const all = await client.completions.create({ ...req, n: 3, logprobs: 0 });
  const sums = all.choices.map((c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0));
  const best = all.choices[sums.indexOf(Math.max(...sums))].text;
  const r = await client.completions.create({ ...req, best_of: 3 });
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, best);
});

// A second server with one batch slot and no queue: a 429 the client sees with Retry-After, and a
// stream that waits (SSE keep-alive comments) parses cleanly.
await check("a full queue is a RateLimitError with Retry-After", async () => {
  const small = await startServer(fak, "sk-test-one", ["--ctx", "512", "--parallel", "1", "--max-queue", "0"]);
  try {
    const c = new OpenAI({ baseURL: small.url + "/v1", apiKey: "sk-test-one", maxRetries: 0 });
    const long = await c.completions.create({ model: "pycoder-6m", prompt: "def f():", max_tokens: 400,
                                              ignore_eos: true, stream: true });
    const it = long[Symbol.asyncIterator]();
    await it.next();  // the slot is taken
    const e = await c.completions.create({ model: "pycoder-6m", prompt: "x", max_tokens: 2 }).then(() => null, (err) => err);
    assert.ok(e instanceof OpenAI.RateLimitError, String(e));
    assert.equal(e.headers.get("retry-after"), "1");
    long.controller.abort();
  } finally {
    small.proc.kill("SIGTERM");
  }
});

await check("a stream waiting in the queue (keep-alive comments) parses cleanly", async () => {
  const small = await startServer(fak, "sk-test-one", ["--ctx", "512", "--parallel", "1", "--sse-keepalive", "0.05"]);
  try {
    const c = new OpenAI({ baseURL: small.url + "/v1", apiKey: "sk-test-one", maxRetries: 0 });
    const long = await c.completions.create({ model: "pycoder-6m", prompt: "def f():", max_tokens: 400,
                                              ignore_eos: true, stream: true });
    const it = long[Symbol.asyncIterator]();
    await it.next();
    const waiting = await c.chat.completions.create({ model: "pycoder-6m", max_tokens: 4, stream: true,
                                                      messages: [{ role: "user", content: "hi" }] });
    let chunks = 0;
    for await (const chunk of waiting) chunks += chunk.choices.length;
    assert.ok(chunks >= 2);
    for (let r = await it.next(); !r.done; r = await it.next()) {}
  } finally {
    small.proc.kill("SIGTERM");
  }
});

proc.kill("SIGTERM");
console.log(checker.failed ? `${checker.failed} check(s) failed` : "all checks passed");
process.exit(checker.failed ? 1 : 0);
