// The official openai npm client against sol-router + sim workers: completions and chat, plain and
// streamed (with stream_options.include_usage); checks object shapes, text and usage counts.
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.argv[3] || "none", maxRetries: 0 });
let failures = 0;
function check(cond, what) {
  if (!cond) { failures++; console.error(`FAIL: ${what}`); } else console.log(`ok   ${what}`);
}
const words = (s) => s.trim().split(/\s+/).filter(Boolean).length;

const c = await client.completions.create({ model: "demo", prompt: "one two three", max_tokens: 5 });
check(c.object === "text_completion" && c.id.startsWith("cmpl-"), "completion object and id");
check(words(c.choices[0].text) === 5 && c.choices[0].finish_reason === "length", "completion text and finish_reason");
check(c.usage.prompt_tokens === 3 && c.usage.completion_tokens === 5 && c.usage.total_tokens === 8, "completion usage");

let text = "", usage = null, finish = null, n = 0;
const cs = await client.completions.create({ model: "demo", prompt: "one two three", max_tokens: 5, stream: true,
                                             stream_options: { include_usage: true } });
for await (const ch of cs) {
  n++;
  if (ch.choices.length) { text += ch.choices[0].text; finish = ch.choices[0].finish_reason || finish; }
  if (ch.usage) usage = ch.usage;
}
check(text === c.choices[0].text, "streamed completion text equals the plain one");
check(finish === "length" && usage && usage.completion_tokens === 5 && n >= 2, "streamed completion finish and usage");

const m = [{ role: "system", content: "be brief" }, { role: "user", content: "hello there" }];
const chat = await client.chat.completions.create({ model: "demo", messages: m, max_tokens: 4 });
check(chat.object === "chat.completion" && chat.choices[0].message.role === "assistant", "chat object and role");
check(words(chat.choices[0].message.content) === 4 && chat.usage.completion_tokens === 4, "chat text and usage");
check(chat.usage.total_tokens === chat.usage.prompt_tokens + 4, "chat total_tokens");

text = ""; usage = null; let role = null;
const st = await client.chat.completions.create({ model: "demo", messages: m, max_tokens: 4, stream: true,
                                                  stream_options: { include_usage: true } });
for await (const ch of st) {
  if (ch.choices.length) { text += ch.choices[0].delta.content || ""; role = role || ch.choices[0].delta.role; }
  if (ch.usage) usage = ch.usage;
}
check(role === "assistant" && text === chat.choices[0].message.content, "streamed chat role and text");
check(usage && usage.completion_tokens === 4 && usage.prompt_tokens === chat.usage.prompt_tokens, "streamed chat usage");

try {
  await client.completions.create({ model: "demo", prompt: "x", max_tokens: 0 });
  check(false, "max_tokens 0 is refused");
} catch (e) { check(e.status === 400, "max_tokens 0 is refused with 400"); }

const models = await client.models.list();
check(models.data.some((x) => x.id === "fast") && models.data.some((x) => x.id === "precise"), "models list has the pools");
process.exit(failures ? 1 : 0);
