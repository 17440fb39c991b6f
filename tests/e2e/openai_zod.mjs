// The official openai npm client's zod helpers against sol-router + a CPU worker whose model has a
// real 151,936-token Qwen vocabulary (random weights) and the Qwen chat template with tools.
// Every answer that ends is parsed by the SDK itself (zod), every length-cut one must be a valid
// JSON prefix; a 400 or an SDK parse error fails the run.
import OpenAI from "openai";
import { z } from "zod";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
let failures = 0;
function check(cond, what) {
  if (!cond) { failures++; console.error(`FAIL: ${what}`); } else console.log(`ok   ${what}`);
}
const messages = [{ role: "user", content: "Describe a person as JSON." }];

// A prefix of some JSON text: complete it with closers after an optional partial token; if no
// completion parses, the prefix was not JSON.
function jsonPrefix(text) {
  const stack = [];
  let inStr = false, esc = false;
  for (const ch of text) {
    if (inStr) {
      if (esc) esc = false; else if (ch === "\\") esc = true; else if (ch === "\"") inStr = false;
    } else if (ch === "\"") inStr = true;
    else if (ch === "{" || ch === "[") stack.push(ch === "{" ? "}" : "]");
    else if (ch === "}" || ch === "]") stack.pop();
  }
  const close = stack.reverse().join("");
  const tails = inStr ? ["\"", "\\\"", "0\""] : ["", "0", "\"\"", "null", "0}", "\"\":0", ":0", "e0"];
  for (const t of tails) {
    for (const fix of [close, "\"\":0" + close, ":0" + close]) {
      try { JSON.parse(text + t + fix); return true; } catch { /* next */ }
    }
  }
  return false;
}

// 1. parse + zodResponseFormat: the SDK converts the schema (zod 4 writes ±(2^53 - 1) bounds for
// .int(), format beside pattern for uuid/email/date-time) and validates the answer with zod.
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int(),
  score: z.number().min(0).max(1),
  ratio: z.number().gt(0.2).lte(0.8),
  level: z.number().int().min(1).max(5),
  role: z.enum(["admin", "user"]),
  tags: z.array(z.string().max(6)).max(3),
  home: z.object({ city: z.string().max(10), zip: z.string().regex(/^[0-9]{5}$/) }),
  nick: z.string().max(8).nullable(),
  id: z.uuid(),
  email: z.email().max(40),
  at: z.iso.datetime(),
});
// A random model has no reason to end a string (a trained one does): logit_bias favours the
// closers '"', '"}', '",' and the email's '@' and '.' (qwen2 ids 1, 9207, 497, 31, 13), so most
// answers end; the grammar still decides what is allowed.
const closers = { 1: 6, 9207: 6, 497: 6, 31: 8, 13: 5 };
let ended = 0, cut = 0;
for (let seed = 1; seed <= 8; seed++) {
  try {
    const r = await client.chat.completions.parse({ model: "precise", messages, temperature: 1, seed,
      max_tokens: 400, logit_bias: closers, response_format: zodResponseFormat(Person, "person") });
    const p = r.choices[0].message.parsed;
    if (p && Number.isSafeInteger(p.age) && p.level >= 1 && p.level <= 5 && p.score >= 0 && p.score <= 1 &&
        p.ratio > 0.2 && p.ratio <= 0.8 && p.email.length <= 40) ended++;
    else check(false, `parse seed ${seed}: ${JSON.stringify(r.choices[0].message)}`);
  } catch (e) {
    if (e.constructor.name !== "LengthFinishReasonError") { check(false, `parse seed ${seed}: ${e}`); continue; }
    const raw = await client.chat.completions.create({ model: "precise", messages, temperature: 1, seed,
      max_tokens: 400, logit_bias: closers, response_format: zodResponseFormat(Person, "person") });
    const text = raw.choices[0].message.content;
    if (jsonPrefix(text)) cut++; else check(false, `seed ${seed}: a cut answer is not a JSON prefix: ${text}`);
  }
}
check(ended >= 2, `parse + zodResponseFormat: ${ended} of 8 answers parsed by zod, ${cut} cut by max_tokens (valid prefixes)`);

// 2. runTools with zodFunction: the SDK parses each call's arguments with zod before calling.
let calls = 0, bad = 0;
const weather = zodFunction({
  name: "get_weather",
  parameters: z.object({ city: z.string().max(12), unit: z.enum(["c", "f"]), days: z.number().int().min(1).max(7) }),
  function: (args) => { calls++; if (!(args.days >= 1 && args.days <= 7)) bad++; return { temp: 3 }; },
});
const forced = client.chat.completions.runTools({ model: "precise", messages: [{ role: "user", content: "Weather?" }],
  tools: [weather], tool_choice: "required", temperature: 1, seed: 5, max_tokens: 120 }, { maxChatCompletions: 2 });
await forced.done().catch((e) => { if (!/maxChatCompletions|max/.test(String(e))) check(false, `runTools required: ${e}`); });
check(calls >= 1 && bad === 0, `runTools + zodFunction, tool_choice required: ${calls} calls run with zod-valid arguments`);
// under auto (strict tools: a lazy grammar) the SDK's standard pattern: text stays free until the
// model opens a call with <tool_call> (Qwen2.5's token 151657; logit_bias makes the random model
// write it, as a trained model does when it wants a tool). From that opening the grammar holds
// the call to the zod schema, the SDK runs it, and the second round answers with its result.
const before = calls;
const autoRun = client.chat.completions.runTools({ model: "precise", messages: [{ role: "user", content: "Weather?" }],
  tools: [weather], temperature: 1, seed: 6, max_tokens: 200, parallel_tool_calls: false,
  logit_bias: { 151657: 15 } }, { maxChatCompletions: 2 });
await autoRun.done().catch((e) => {
  if (!/maxChatCompletions|max|length/i.test(String(e))) check(false, `runTools auto: ${e}`);
});
const firstAuto = autoRun.messages.find((m) => m.role === "assistant");
check(firstAuto?.tool_calls?.length === 1 && calls > before && bad === 0 &&
      (firstAuto.content === null || !firstAuto.content.includes("<tool_call>")),
      `runTools + zodFunction under tool_choice auto: the model opened ${firstAuto?.tool_calls?.length ?? 0} call in the first round, ${calls - before} run in all with zod-valid arguments (${JSON.stringify(firstAuto?.tool_calls?.[0]?.function ?? null)})`);

// 3. the stream helper with tools assembles the call and parses it with zod
const stream = client.chat.completions.stream({ model: "precise", messages: [{ role: "user", content: "Weather?" }],
  tools: [weather], tool_choice: "required", parallel_tool_calls: false, temperature: 1, seed: 7, max_tokens: 120 });
const sf = await stream.finalChatCompletion();
const sc = sf.choices[0];
check(sc.finish_reason === "length" ||
      (sc.message.tool_calls?.length === 1 && sc.message.tool_calls[0].function.parsed_arguments?.unit !== undefined &&
       sc.message.content === null),
      `stream helper with a zodFunction: ${sc.finish_reason}, ${JSON.stringify(sc.message.tool_calls?.[0]?.function ?? null)}`);

// 4. tool_choice none: the tools are not offered, no call comes back
const none = await client.chat.completions.create({ model: "precise", messages, tools: [weather], tool_choice: "none",
  temperature: 1, seed: 8, max_tokens: 20 });
check(!none.choices[0].message.tool_calls && none.choices[0].finish_reason !== "tool_calls" &&
      typeof none.choices[0].message.content === "string", "tool_choice none: text, no calls");
process.exit(failures ? 1 : 0);
