// Drives a real `fak serve` with the official @anthropic-ai/sdk npm client, as a Claude-Code-style
// agent would: messages.create, messages.stream with its helper events and finalMessage, forced
// tool use and a tool_result turn, countTokens, the prefix cache across turns, and errors raised
// as the SDK's own typed errors.
// Usage: node run.mjs /path/to/fak   (ctest passes the built binary). Exits non-zero on failure;
// a missing package is a failure, not a skip (run .ci/install-deps).
import { startServer, makeChecker } from "../lib/fak_server.mjs";
import assert from "node:assert/strict";

let Anthropic;
try {
  ({ default: Anthropic } = await import("@anthropic-ai/sdk"));
} catch (e) {
  console.error("FAIL: @anthropic-ai/sdk is missing (npm ci in tests/anthropic_client): " + e.message);
  process.exit(1);
}

const fak = process.argv[2];
if (!fak) {
  console.error("usage: node run.mjs FAK_BINARY");
  process.exit(2);
}


const { proc, url } = await startServer(fak, "sk-ant-one,sk-ant-two", ["--ctx", "1024"]);
// The SDK sends the key as x-api-key, Anthropic's way.
const client = new Anthropic({ baseURL: url, apiKey: "sk-ant-one", maxRetries: 0 });
const other = new Anthropic({ baseURL: url, apiKey: "sk-ant-two", maxRetries: 0 });
const checker = makeChecker();
const check = checker.check;

const model = "pycoder-6m";
const system = "You are a careful Python assistant. Reply with short code only. " +
               "Prefer the standard library. Never explain. Use four spaces for indentation.";
const tools = [{
  name: "get_weather", description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 12 } },
                  required: ["city"], additionalProperties: false },
}];

await check("messages.create", async () => {
  const m = await client.messages.create({
    model, max_tokens: 12, temperature: 0, system,
    messages: [{ role: "user", content: "add two numbers" }],
  });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, "text");
  assert.equal(typeof m.content[0].text, "string");
  assert.ok(["end_turn", "max_tokens"].includes(m.stop_reason), m.stop_reason);
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, JSON.stringify(m.usage));
  assert.ok(m.usage.output_tokens <= 12);
});

await check("messages.stream: helper events and finalMessage equal messages.create (greedy)", async () => {
  const req = { model, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: "print hello world" }] };
  const whole = await client.messages.create(req);
  let text = "", events = 0, sawStart = false;
  const stream = client.messages.stream(req);
  stream.on("text", (delta) => { text += delta; });
  stream.on("streamEvent", (e) => { events++; if (e.type === "message_start") sawStart = true; });
  const final = await stream.finalMessage();
  assert.ok(sawStart && events > 4, "events: " + events);
  assert.equal(text, whole.content[0].text);
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(await stream.finalText(), whole.content[0].text);
});

await check("raw stream: create({stream: true}) yields Anthropic's event order", async () => {
  const stream = await client.messages.create({
    model, max_tokens: 6, temperature: 0, stream: true, messages: [{ role: "user", content: "sort a list" }],
  });
  const types = [];
  for await (const e of stream) types.push(e.type);
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  assert.ok(types.includes("content_block_start") && types.includes("content_block_stop"), types.join(","));
});

await check("stop_sequences end the reply and are named", async () => {
  const free = await client.messages.create({
    model, max_tokens: 40, temperature: 0, messages: [{ role: "user", content: "write a class for a stack" }],
  });
  const text = free.content[0].text;
  const stop = text.slice(10, 14);
  const m = await client.messages.create({
    model, max_tokens: 40, temperature: 0, stop_sequences: [stop],
    messages: [{ role: "user", content: "write a class for a stack" }],
  });
  assert.equal(m.stop_reason, "stop_sequence");
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
});

await check("tool_choice any forces a tool_use; the tool_result turn reuses the cached prefix", async () => {
  const messages = [{ role: "user", content: "What is the weather in Paris? Use the tool." }];
  // One call (parallel calls would run past max_tokens: a call cut off there is max_tokens).
  const first = await client.messages.create({
    model, max_tokens: 60, system, tools, tool_choice: { type: "any", disable_parallel_tool_use: true }, messages,
  });
  assert.equal(first.stop_reason, "tool_use");
  const use = first.content.find((b) => b.type === "tool_use");
  assert.ok(use, JSON.stringify(first.content));
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, "get_weather");
  assert.equal(typeof use.input.city, "string");
  assert.ok(use.input.city.length <= 12);
  assert.deepEqual(Object.keys(use.input), ["city"]);
  messages.push({ role: "assistant", content: first.content });
  messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "21 degrees, sunny" }] });
  const second = await client.messages.create({ model, max_tokens: 12, system, tools, messages });
  assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));
  const counted = await client.messages.countTokens({ model, system, tools, messages });
  assert.equal(counted.input_tokens, second.usage.input_tokens + second.usage.cache_read_input_tokens);
  // Another key is another tenant: nothing of this conversation is cached for it.
  const stranger = await other.messages.create({ model, max_tokens: 2, system, tools, messages });
  assert.equal(stranger.usage.cache_read_input_tokens, 0);
});

await check("streamed tool_use: inputJson events and a parsed input in finalMessage", async () => {
  let json = "";
  const stream = client.messages.stream({
    model, max_tokens: 60, tools, tool_choice: { type: "tool", name: "get_weather" },
    messages: [{ role: "user", content: "Weather in Oslo?" }],
  });
  let pieces = 0;
  stream.on("inputJson", (partial) => { json += partial; pieces++; });
  const final = await stream.finalMessage();
  const use = final.content.find((b) => b.type === "tool_use");
  assert.ok(use, JSON.stringify(final.content));
  assert.deepEqual(use.input, JSON.parse(json));
  assert.equal(final.stop_reason, "tool_use");
  assert.ok(pieces >= 3, "input in " + pieces + " piece(s): a tool call streams as it is generated");
});

await check("countTokens", async () => {
  const plain = await client.messages.countTokens({ model, messages: [{ role: "user", content: "hi" }] });
  const withSystem = await client.messages.countTokens({ model, system, messages: [{ role: "user", content: "hi" }] });
  assert.ok(plain.input_tokens > 0);
  assert.ok(withSystem.input_tokens > plain.input_tokens + 10, JSON.stringify([plain, withSystem]));
});

await check("errors are the SDK's typed errors", async () => {
  await assert.rejects(client.messages.create({ model: "claude-no-such-model", max_tokens: 4, messages: [{ role: "user", content: "x" }] }),
                       (e) => e instanceof Anthropic.NotFoundError && e.status === 404 && e.type === "not_found_error");
  await assert.rejects(client.messages.create({ model, max_tokens: 4, messages: [] }),
                       (e) => e instanceof Anthropic.BadRequestError && e.type === "invalid_request_error" &&
                              /messages/.test(e.message));
  await assert.rejects(client.messages.create({
    model, max_tokens: 4,
    messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }],
  }), (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.message));
  const bad = new Anthropic({ baseURL: url, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: "x" }] }),
                       (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  // A bearer token works as well as x-api-key (authToken sends Authorization: Bearer).
  const bearer = new Anthropic({ baseURL: url, apiKey: null, authToken: "sk-ant-one", maxRetries: 0 });
  const m = await bearer.messages.create({ model, max_tokens: 2, messages: [{ role: "user", content: "x" }] });
  assert.equal(m.type, "message");
});

proc.kill("SIGTERM");
console.log(checker.failed ? `${checker.failed} check(s) failed` : "all checks passed");
process.exit(checker.failed ? 1 : 0);
