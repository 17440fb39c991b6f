// The official openai npm client and tool calling against sol-router + a CPU worker with random
// weights and a tool-capable template: tool_choice required and named (always parseable: the
// worker's grammar), the stream helper assembling delta.tool_calls, a tool result round trip;
// and embeddings.
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
let failures = 0;
function check(cond, what) {
  if (!cond) { failures++; console.error(`FAIL: ${what}`); } else console.log(`ok   ${what}`);
}
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Current weather",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 },
                  unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false },
  },
}];
const messages = [{ role: "user", content: "Weather in Oslo?" }];
const valid = (call) => {
  const a = JSON.parse(call.function.arguments);
  return call.type === "function" && call.id && call.function.name === "get_weather" &&
    typeof a.city === "string" && ["c", "f"].includes(a.unit);
};

// The same answers: an answer of calls only has content null (not the whitespace around the
// calls). One call per answer: with parallel calls allowed the random model rarely stops calling
// within max_tokens.
let stopped = 0, good = 0, callsOnly = 0, nulls = 0;
for (let seed = 1; seed <= 6; seed++) {
  const r = await client.chat.completions.create({ model: "precise", messages, tools, tool_choice: "required",
                                                   parallel_tool_calls: false, temperature: 1, seed,
                                                   max_tokens: 120 });
  const ch = r.choices[0];
  if (ch.finish_reason === "length") continue;
  stopped++;
  if (ch.finish_reason === "tool_calls" && ch.message.tool_calls?.length === 1 && valid(ch.message.tool_calls[0])) good++;
  if (ch.finish_reason === "tool_calls") callsOnly++, nulls += ch.message.content === null;
}
check(stopped >= 3 && good === stopped,
      `tool_choice required, parallel_tool_calls false: ${good} of ${stopped} finished answers are one valid call`);
check(callsOnly >= 3 && nulls === callsOnly, `calls only: content null in ${nulls} of ${callsOnly} answers`);
// Its stream sends no content delta (whitespace waits for text that never comes).
let contentDeltas = 0, callDeltas = 0, streamedFinish = null;
for await (const chunk of await client.chat.completions.create({ model: "precise", messages, tools,
    tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed: 3, max_tokens: 120,
    stream: true })) {
  const c = chunk.choices[0];
  if (c?.delta?.content) contentDeltas++;
  if (c?.delta?.tool_calls) callDeltas++;
  if (c?.finish_reason) streamedFinish = c.finish_reason;
}
check(streamedFinish === "tool_calls" && callDeltas === 1 && contentDeltas === 0,
      `calls only, streamed: ${callDeltas} tool_calls delta, ${contentDeltas} content deltas (${streamedFinish})`);

const named = await client.chat.completions.create({ model: "precise", messages, tools, seed: 2, max_tokens: 120,
  tool_choice: { type: "function", function: { name: "get_weather" } } });
check(named.choices[0].finish_reason === "length" ||
      (named.choices[0].message.tool_calls || []).every(valid), "named tool_choice");

// The stream helper assembles the delta.tool_calls pieces into the final message.
const runner = client.chat.completions.stream({ model: "precise", messages, tools, tool_choice: "required",
                                                temperature: 1, seed: 3, max_tokens: 120 });
const final = await runner.finalChatCompletion();
const plain = await client.chat.completions.create({ model: "precise", messages, tools, tool_choice: "required",
                                                     temperature: 1, seed: 3, max_tokens: 120 });
const fc = final.choices[0], pc = plain.choices[0];
check(fc.finish_reason === pc.finish_reason &&
      JSON.stringify((fc.message.tool_calls || []).map((c) => c.function)) ===
      JSON.stringify((pc.message.tool_calls || []).map((c) => c.function)),
      "stream helper: assembled tool_calls equal the non-streamed ones");

const call = pc.message.tool_calls?.[0] ?? { id: "call_0", type: "function",
  function: { name: "get_weather", arguments: "{\"city\": \"Oslo\", \"unit\": \"c\"}" } };
const next = await client.chat.completions.create({ model: "precise", max_tokens: 6, temperature: 0, tools,
  messages: [...messages, { role: "assistant", content: null, tool_calls: [call] },
             { role: "tool", tool_call_id: call.id, content: "{\"temp\": 3}" }] });
check(next.choices[0].message.role === "assistant", "tool result round trip answers");

// Embeddings through the client (it asks for base64 and decodes it itself).
const emb = await client.embeddings.create({ model: "precise", input: ["a cat", "a dog"] });
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
check(emb.data.length === 2 && emb.data.every((d, i) => d.index === i && d.embedding.length === 64 &&
      Math.abs(norm(d.embedding) - 1) < 1e-4) && emb.usage.prompt_tokens > 0,
      "embeddings: two normalized vectors of the model's width");
process.exit(failures ? 1 : 0);
