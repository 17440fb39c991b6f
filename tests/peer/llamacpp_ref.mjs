// llamacpp_ref.mjs: llama.cpp (the prebuilt CPU build inside node-llama-cpp) as Sol's reference.
// One process runs a list of jobs so the library loads once:
//   node llamacpp_ref.mjs JOBS.json
// JOBS.json: [{"model": "m.gguf", "tokens": [1,5,9], "n": 32, "out": "ids.txt", "logits": "l.json"}]
// ("cpu": "haswell" names the llama.cpp CPU build a job is for: SOL_PEER_CPU below)
// For each job: greedy-decodes n tokens after the given ids (used verbatim, EOS does not stop it),
// writes the ids one per line to `out`, and the last prompt position's logits (JSON array) to
// `logits` when given; "timing": "t.json" records prompt and decode times and the CPU build
// llama.cpp ran (cpu_build), "mmap": false reads the
// weights into memory, "threads": N (default 2), "stepwise": true feeds the prompt one token per
// evaluation (llama.cpp's decode kernels only: its batched prompt kernels round differently for
// some weight types, see docs/benchmarks.md). Or {"model": "v.gguf", "tokenize": ["text", ...], "out": "ids.txt"}:
// writes each text's ids (no BOS, special tokens not parsed) as one comma-separated line.
import {existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, unlinkSync,
    writeFileSync} from "node:fs";
import {execFileSync} from "node:child_process";
import {dirname, join} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";

// SOL_PEER_CPU=VARIANT pins llama.cpp's CPU build (haswell, skylakex, ...): its loader otherwise
// takes the best of its 14 x86 builds for this host, and their float orders differ (the AVX-512
// builds' 16-lane F32 dots, sapphirerapids' AMX tiles). The pinned tree is a hard-linked copy of
// node_modules holding only that variant's libggml-cpu (tests/peer/.pin/VARIANT), made once.
const variant = process.env.SOL_PEER_CPU ?? "";
const bins = "@node-llama-cpp/linux-x64/bins/linux-x64";
function pinned(v) {
    const root = join(here, ".pin", v, "node_modules");
    if (existsSync(root)) return root;
    if (!existsSync(join(here, "node_modules", bins, `libggml-cpu-${v}.so`))) {
        console.error(`SOL_PEER_CPU=${v}: llama.cpp has no CPU build of that name`);
        process.exit(2);
    }
    const tmp = join(here, ".pin", `${v}.${process.pid}`);
    rmSync(tmp, {recursive: true, force: true});
    mkdirSync(tmp, {recursive: true});
    execFileSync("cp", ["-al", join(here, "node_modules"), tmp]);
    for (const f of readdirSync(join(tmp, "node_modules", bins)))
        if (/^libggml-cpu-.*\.so$/.test(f) && f !== `libggml-cpu-${v}.so`)
            unlinkSync(join(tmp, "node_modules", bins, f));
    try { renameSync(tmp, join(here, ".pin", v)); } catch { rmSync(tmp, {recursive: true, force: true}); }
    return root;
}
const modules = variant ? pinned(variant) : join(here, "node_modules");
const lib = await import(pathToFileURL(join(modules, "node-llama-cpp/dist/index.js")).href);

const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await lib.getLlama({gpu: false, build: "never", usePrebuiltBinaries: true,
    skipDownload: true, progressLogs: false, logLevel: lib.LlamaLogLevel.error, maxThreads: 2});
// Which build the loader took (its file is mapped now); a pin it did not honour is an error.
const loaded = [...new Set(readFileSync("/proc/self/maps", "utf8").match(/libggml-cpu-[\w.]+?\.so/g) ?? [])];
const took = loaded.map((f) => f.slice(12, -3)).join(",");
if (variant && took !== variant) {
    console.error(`SOL_PEER_CPU=${variant}: llama.cpp loaded ${took || "no CPU build"}`);
    process.exit(1);
}

async function greedy(model, job) {
    const ctxSize = Math.max(256, Math.ceil((job.tokens.length + job.n + 8) / 256) * 256);
    const ctx = await model.createContext({contextSize: ctxSize, batchSize: Math.min(ctxSize, 512),
        sequences: 1, flashAttention: false, threads: {ideal: job.threads ?? 2, min: 1}});
    const seq = ctx.getSequence();
    const opts = {temperature: 0};
    const last = job.tokens.length - 1;
    const t0 = performance.now();
    const want = (t) => [t, {generateNext: {token: true, logits: !!job.logits, options: opts}}];
    let r;
    if (job.stepwise) {
        for (let i = 0; i < last; i++) await seq.controlledEvaluate([job.tokens[i]]);
        r = (await seq.controlledEvaluate([want(job.tokens[last])]))[0].next;
    } else {
        const first = await seq.controlledEvaluate(job.tokens.map((t, i) => i === last
            ? want(t) : t));
        r = first[last].next;
    }
    const t1 = performance.now();
    if (job.logits) {
        const arr = new Array(model.tokens.getTokenCount?.() ?? r.logits.size).fill(null);
        for (const [tok, val] of r.logits) arr[tok] = val;
        writeFileSync(job.logits, JSON.stringify(arr) + "\n");
    }
    const ids = [r.token];
    while (ids.length < job.n) {
        const rr = await seq.controlledEvaluate([[ids[ids.length - 1],
            {generateNext: {token: true, options: opts}}]]);
        ids.push(rr[0].next.token);
    }
    const t2 = performance.now();
    writeFileSync(job.out, ids.join("\n") + "\n");
    if (job.timing)
        writeFileSync(job.timing, JSON.stringify({prompt_tokens: job.tokens.length,
            prompt_ms: t1 - t0, gen_tokens: ids.length - 1, gen_ms: t2 - t1, cpu_build: took})
            + "\n");
    await ctx.dispose();
}

// Under a pin only the jobs for that build run ("cpu", haswell when absent: compare.sh runs one
// process per build over the same list).
for (const job of jobs.filter((j) => !variant || (j.cpu ?? "haswell") === variant)) {
    const model = await llama.loadModel({modelPath: job.model, gpuLayers: 0,
        useMmap: job.mmap ?? true,
        vocabOnly: !!job.tokenize});
    if (job.tokenize) {
        const lines = job.tokenize.map((t) => Array.from(model.tokenize(t, false)).join(","));
        writeFileSync(job.out, lines.join("\n") + "\n");
    } else {
        await greedy(model, job);
    }
    await model.dispose();
}
await llama.dispose();
