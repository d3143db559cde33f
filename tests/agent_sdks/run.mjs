// Drives a real `fak serve` with the agent frameworks people point at OpenAI-compatible servers:
// the Vercel AI SDK (@ai-sdk/openai-compatible: generateText, streamText, structured output with a
// zod schema, tools with toolChoice "required" and a named tool, an agent loop through a tool
// result) and LangChain JS (@langchain/openai ChatOpenAI: invoke, stream, withStructuredOutput,
// bindTools with tool_choice). Each check asserts what the SDK hands back, parsed and validated
// by the SDK itself (zod), so a server that answered 200 while ignoring a field fails here.
// Usage: node run.mjs /path/to/fak (ctest passes the built binary). Exits non-zero on failure; a
// missing package is a failure, not a skip (run .ci/install-deps).
import { startServer, makeChecker } from "../lib/fak_server.mjs";
import assert from "node:assert/strict";

let ai, compat, z, lcOpenAI, lcTools;
try {
  ai = await import("ai");
  compat = await import("@ai-sdk/openai-compatible");
  ({ z } = await import("zod"));
  lcOpenAI = await import("@langchain/openai");
  lcTools = await import("@langchain/core/tools");
} catch (e) {
  console.error("FAIL: an SDK package is missing (npm ci in tests/agent_sdks): " + e.message);
  process.exit(1);
}

const fak = process.argv[2];
if (!fak) {
  console.error("usage: node run.mjs FAK_BINARY");
  process.exit(2);
}


const { proc, url } = await startServer(fak, "sk-sdk", ["--ctx", "2048", "--parallel", "4"]);
const checker = makeChecker();
const check = checker.check;

const MODEL = "pycoder-6m";
const weatherSchema = z.object({ city: z.string().max(12), unit: z.enum(["celsius", "fahrenheit"]) });
const timeSchema = z.object({ zone: z.number().int() });

// ---- Vercel AI SDK -------------------------------------------------------------------------
const provider = compat.createOpenAICompatible({
  name: "fak", baseURL: url + "/v1", apiKey: "sk-sdk", supportsStructuredOutputs: true, includeUsage: true,
});
const model = provider(MODEL);

await check("ai-sdk generateText", async () => {
  const r = await ai.generateText({ model, prompt: "def fibonacci(n):", maxOutputTokens: 16, temperature: 0 });
  assert.ok(r.text.length > 0);
  assert.ok(r.usage.outputTokens > 0 && r.usage.outputTokens <= 16);
  assert.ok(["stop", "length"].includes(r.finishReason), r.finishReason);
});

await check("ai-sdk streamText equals generateText", async () => {
  const opts = { model, prompt: "import os\n", maxOutputTokens: 20, temperature: 0 };
  const whole = await ai.generateText(opts);
  const s = ai.streamText(opts);
  let text = "";
  for await (const piece of s.textStream) text += piece;
  assert.equal(text, whole.text);
  assert.equal((await s.usage).outputTokens, whole.usage.outputTokens);
});

await check("ai-sdk structured output (zod schema -> json_schema)", async () => {
  const schema = z.object({ name: z.string().max(10), count: z.number().int(), ok: z.boolean() });
  const r = await ai.generateObject({ model, schema, prompt: "Describe the file as JSON.", maxOutputTokens: 300 });
  schema.parse(r.object);  // the SDK parsed it; parse again so a loose object fails here
  assert.equal(Object.keys(r.object).join(","), "name,count,ok");
});

await check("ai-sdk toolChoice required and a named tool", async () => {
  const tools = {
    get_weather: ai.tool({ description: "Weather in a city", inputSchema: weatherSchema }),
    get_time: ai.tool({ description: "Time in a zone", inputSchema: timeSchema }),
  };
  const r = await ai.generateText({ model, tools, toolChoice: "required", prompt: "Weather in Paris?", maxOutputTokens: 80 });
  assert.equal(r.toolCalls.length >= 1, true, "no tool call");
  const call = r.toolCalls[0];
  (call.toolName === "get_weather" ? weatherSchema : timeSchema).parse(call.input);
  const named = await ai.generateText({ model, tools, toolChoice: { type: "tool", toolName: "get_time" },
                                         prompt: "What time is it?", maxOutputTokens: 80 });
  assert.equal(named.toolCalls[0].toolName, "get_time");
  timeSchema.parse(named.toolCalls[0].input);
});

await check("ai-sdk streamText streams a tool call's input as it is generated", async () => {
  const tools = { get_weather: ai.tool({ description: "Weather in a city", inputSchema: weatherSchema }) };
  const s = ai.streamText({ model, tools, toolChoice: "required", prompt: "Weather in Paris?",
                            maxOutputTokens: 80, temperature: 0 });
  const deltas = [];
  let started = false, call = null;
  for await (const part of s.fullStream) {
    if (part.type === "tool-input-start") started = true;
    if (part.type === "tool-input-delta") { assert.ok(started); deltas.push(part.delta); }
    if (part.type === "tool-call") call = part;
    if (part.type === "error") throw part.error;
  }
  // Deltas that add up to the call; their count depends on how fast the client reads.
  assert.ok(deltas.length >= 1, "no tool-input deltas");
  assert.ok(call, "no tool-call part");
  assert.deepEqual(JSON.parse(deltas.join("")), call.input);
  weatherSchema.parse(call.input);
  assert.equal(await s.finishReason, "tool-calls");
});

await check("ai-sdk agent loop through a tool result", async () => {
  let executed = 0;
  const tools = {
    get_weather: ai.tool({ description: "Weather in a city", inputSchema: weatherSchema,
                           execute: async ({ city }) => { executed++; return { city, sky: "sunny" }; } }),
  };
  const r = await ai.generateText({ model, tools, prompt: "Weather in Paris?", maxOutputTokens: 60,
                                    stopWhen: ai.stepCountIs(2),
                                    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }) });
  assert.equal(executed, 1);
  assert.equal(r.steps.length, 2);
  assert.ok(r.steps[1].usage.inputTokens > r.steps[0].usage.inputTokens);  // the tool result went in
});

// ---- LangChain JS --------------------------------------------------------------------------
const chat = new lcOpenAI.ChatOpenAI({ model: MODEL, apiKey: "sk-sdk", temperature: 0, maxTokens: 24,
                                       configuration: { baseURL: url + "/v1" } });

await check("langchain invoke and stream agree", async () => {
  const whole = await chat.invoke("Write a function that reverses a string.");
  assert.ok(typeof whole.content === "string" && whole.content.length > 0);
  let streamed = "";
  for await (const chunk of await chat.stream("Write a function that reverses a string.")) streamed += chunk.content;
  assert.equal(streamed, whole.content);
  assert.ok(whole.usage_metadata.output_tokens > 0);
});

await check("langchain withStructuredOutput (json_schema, strict)", async () => {
  const schema = z.object({ language: z.enum(["python", "c", "rust"]), lines: z.number().int() });
  const structured = new lcOpenAI.ChatOpenAI({ model: MODEL, apiKey: "sk-sdk", temperature: 0, maxTokens: 200,
                                               configuration: { baseURL: url + "/v1" } })
    .withStructuredOutput(schema, { method: "jsonSchema", strict: true, name: "summary" });
  const out = await structured.invoke("Summarise the snippet.");
  schema.parse(out);
});

await check("langchain bindTools with tool_choice", async () => {
  const weather = lcTools.tool(async ({ city }) => `sunny in ${city}`, { name: "get_weather", description: "Weather", schema: weatherSchema });
  const clock = lcTools.tool(async () => "noon", { name: "get_time", description: "Time", schema: timeSchema });
  const bound = new lcOpenAI.ChatOpenAI({ model: MODEL, apiKey: "sk-sdk", temperature: 0, maxTokens: 80,
                                          configuration: { baseURL: url + "/v1" } })
    .bindTools([weather, clock], { tool_choice: "get_time" });
  const msg = await bound.invoke("What time is it in zone 3?");
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, "get_time");
  timeSchema.parse(msg.tool_calls[0].args);
  const any = await new lcOpenAI.ChatOpenAI({ model: MODEL, apiKey: "sk-sdk", temperature: 0, maxTokens: 80,
                                              configuration: { baseURL: url + "/v1" } })
    .bindTools([weather, clock], { tool_choice: "required" }).invoke("Weather?");
  assert.ok(any.tool_calls.length >= 1);
});

proc.kill("SIGTERM");
console.log(checker.failed ? `${checker.failed} failed` : "all passed");
process.exit(checker.failed ? 1 : 0);
