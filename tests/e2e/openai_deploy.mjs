// The official openai npm client against a deployed cluster (real workers, an API key): completions
// and chat in both pools, plain and streamed; greedy streams equal their plain answers, usage adds
// up, and a wrong key is refused with the SDK's AuthenticationError.
// usage: node openai_deploy.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
let failures = 0;
function check(cond, what) {
  if (!cond) { failures++; console.error(`FAIL: ${what}`); } else console.log(`ok   ${what}`);
}

for (const pool of ["fast", "precise"]) {
  const req = { model: pool, prompt: "deployed and serving", max_tokens: 8, temperature: 0 };
  const c = await client.completions.create(req);
  check(c.object === "text_completion" && c.choices[0].text.length > 0, `${pool}: completion`);
  check(c.usage.completion_tokens === 8 && c.usage.total_tokens === c.usage.prompt_tokens + 8,
        `${pool}: completion usage`);
  let text = "";
  for await (const ch of await client.completions.create({ ...req, stream: true }))
    if (ch.choices.length) text += ch.choices[0].text;
  check(text === c.choices[0].text, `${pool}: streamed completion equals the plain one`);
  const m = [{ role: "user", content: "hello from a container" }];
  const chat = await client.chat.completions.create({ model: pool, messages: m, max_tokens: 6, temperature: 0 });
  check(chat.object === "chat.completion" && chat.choices[0].message.role === "assistant" &&
        typeof chat.choices[0].message.content === "string", `${pool}: chat`);
  let ctext = "";
  for await (const ch of await client.chat.completions.create({ model: pool, messages: m, max_tokens: 6,
                                                                temperature: 0, stream: true }))
    if (ch.choices.length) ctext += ch.choices[0].delta.content || "";
  check(ctext === chat.choices[0].message.content, `${pool}: streamed chat equals the plain one`);
}
const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-not-the-key", maxRetries: 0 });
try {
  await wrong.models.list();
  check(false, "a wrong API key is refused");
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, "a wrong API key: 401 AuthenticationError");
}
process.exit(failures ? 1 : 0);
