// Reference tokenizer for Sol's tests: llama.cpp (through node-llama-cpp, vocab-only load) prints
// the ids of each stdin line, space-separated, one output line per input line.
// usage: node tokenize.mjs --model VOCAB.gguf [--special] [--escapes] [--both DIR] < lines
// --both DIR: one model load, writes DIR/plain and DIR/special (without / with parse_special).
// Ids are llama.cpp's llama_tokenize with add_special = false (no BOS), like sol-tokenize --no-bos.
import {readFileSync, writeFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (name) => args.includes(name);
const modelPath = args[args.indexOf("--model") + 1];
if (!args.includes("--model") || !modelPath) {
    console.error("usage: node tokenize.mjs --model VOCAB.gguf [--special] [--escapes] < lines");
    process.exit(2);
}

// Same escapes as sol-tokenize --escapes: \n \t \r \\ ; any other backslash stays as written.
function unescape(s) {
    return s.replace(/\\([ntr\\])/g, (_, c) => ({n: "\n", t: "\t", r: "\r", "\\": "\\"})[c]);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.disabled});
const model = await llama.loadModel({modelPath, vocabOnly: true});
const input = readFileSync(0, "utf8");
const lines = input.split("\n");
if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
function run(special) {
    const out = [];
    for (const raw of lines) {
        const text = opt("--escapes") ? unescape(raw) : raw;
        out.push(Array.from(model.tokenize(text, special)).join(" "));
    }
    return out.join("\n") + (out.length ? "\n" : "");
}
if (opt("--both")) {
    const dir = args[args.indexOf("--both") + 1];
    writeFileSync(`${dir}/plain`, run(false));
    writeFileSync(`${dir}/special`, run(true));
} else {
    process.stdout.write(run(opt("--special")));
}
await model.dispose();
await llama.dispose();
