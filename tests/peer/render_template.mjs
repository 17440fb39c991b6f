// render_template.mjs: renders chat messages with a model's own Jinja chat template through
// @huggingface/jinja (the engine node-llama-cpp uses), as the reference for Sol's hand-written
// template families. BOS is rendered as "" (Sol's renderer leaves it to the tokenizer).
//   node render_template.mjs TEMPLATE.jinja MESSAGES.json [--no-gen-prompt] [--tools TOOLS.json]
//   -> text on stdout
import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const {Template} = await import(pathToFileURL(join(here, "node_modules/@huggingface/jinja/dist/index.js")).href);
const [src, msgs, ...flags] = process.argv.slice(2);
const template = new Template(readFileSync(src, "utf8"));
const ti = flags.indexOf("--tools");
const ctx = {
    messages: JSON.parse(readFileSync(msgs, "utf8")),
    add_generation_prompt: !flags.includes("--no-gen-prompt"),
    bos_token: "", eos_token: "</s>",
};
if (ti >= 0) ctx.tools = JSON.parse(readFileSync(flags[ti + 1], "utf8"));
process.stdout.write(template.render(ctx));
