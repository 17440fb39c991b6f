// plot_spec: draws docs/spec_speedup.svg from bench/spec.sh's output: the batch-1 table
// ("target drafter k base spec ratio acceptance ...") and the batched lines ("target k ratio
// acceptance% ..." after the "# N sequences" header), one series per target and drafter.
// No dependencies.   node bench/plot_spec.mjs SPEC_SH_OUTPUT > docs/spec_speedup.svg
import { readFileSync } from "node:fs";

const [specFile] = process.argv.slice(2);
if (!specFile) {
  console.error("usage: node bench/plot_spec.mjs SPEC_SH_OUTPUT");
  process.exit(2);
}

// series name -> [{k, ratio, acc}]
const series = new Map();
const add = (name, k, ratio, acc) => {
  if (!series.has(name)) series.set(name, []);
  series.get(name).push({ k, ratio, acc });
};
let batched = null; // "8 sequences" once the batched header is seen
for (const line of readFileSync(specFile, "utf8").split("\n")) {
  const h = line.match(/^# (\d+) sequences/);
  if (h) batched = `${h[1]} sequences`;
  const f = line.trim().split(/\s+/);
  if (!batched && f.length >= 7 && /^(draft|ngram)$/.test(f[1]))
    add(`${f[0].toUpperCase()} target, ${f[1] === "draft" ? "draft model" : "n-gram"}, batch 1`,
        +f[2], +f[5], parseFloat(f[6]));
  else if (batched && f.length >= 4 && /^\d+$/.test(f[1]) && !line.startsWith("#"))
    add(`${f[0].toUpperCase()} target, draft model, ${batched}`, +f[1], +f[2], parseFloat(f[3]));
}

const W = 760, H = 330, pad = { l: 52, r: 16, t: 34, b: 44 }, gap = 60;
const pw = (W - pad.l - pad.r - gap) / 2, ph = H - pad.t - pad.b;
const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
const out = [];
const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");
out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`);
out.push(`<rect width="${W}" height="${H}" fill="white"/>`);

function panel(x0, title, key, yMax, yTicks, fmt) {
  const X = (k) => x0 + ((k - 1) / 7) * pw, Y = (v) => pad.t + ph - (v / yMax) * ph;
  out.push(`<text x="${x0 + pw / 2}" y="18" text-anchor="middle" font-size="13">${esc(title)}</text>`);
  for (const t of yTicks) {
    out.push(`<line x1="${x0}" x2="${x0 + pw}" y1="${Y(t)}" y2="${Y(t)}" stroke="#ddd"/>`);
    out.push(`<text x="${x0 - 6}" y="${Y(t) + 4}" text-anchor="end">${fmt(t)}</text>`);
  }
  for (let k = 1; k <= 8; k++)
    out.push(`<text x="${X(k)}" y="${pad.t + ph + 16}" text-anchor="middle">${k}</text>`);
  out.push(`<text x="${x0 + pw / 2}" y="${H - 8}" text-anchor="middle">k (draft tokens per step)</text>`);
  out.push(`<rect x="${x0}" y="${pad.t}" width="${pw}" height="${ph}" fill="none" stroke="#888"/>`);
  if (key === "ratio")
    out.push(`<line x1="${x0}" x2="${x0 + pw}" y1="${Y(1)}" y2="${Y(1)}" stroke="#444" stroke-dasharray="4 3"/>`);
  let i = 0;
  for (const [, pts] of series) {
    const c = colors[i++ % colors.length];
    const path = pts.map((p, j) => `${j ? "L" : "M"}${X(p.k).toFixed(1)},${Y(Math.min(p[key], yMax)).toFixed(1)}`);
    out.push(`<path d="${path.join(" ")}" fill="none" stroke="${c}" stroke-width="2"/>`);
    for (const p of pts)
      out.push(`<circle cx="${X(p.k).toFixed(1)}" cy="${Y(Math.min(p[key], yMax)).toFixed(1)}" r="3" fill="${c}"/>`);
  }
}
const maxRatio = Math.min(3, Math.max(2, ...[...series.values()].flat().map((p) => p.ratio)) * 1.1);
const ticks = [];
for (let t = 0; t <= maxRatio; t += 0.5) ticks.push(t);
panel(pad.l, "speedup vs no speculation (tok/s ratio)", "ratio", maxRatio, ticks, (t) => t.toFixed(1) + "x");
panel(pad.l + pw + gap, "acceptance (accepted / drafted)", "acc", 100, [0, 20, 40, 60, 80, 100], (t) => t + "%");
let i = 0, ly = pad.t + 10;
for (const [name] of series) {
  const c = colors[i++ % colors.length];
  out.push(`<rect x="${pad.l + 8}" y="${ly - 8}" width="10" height="10" fill="${c}"/>`);
  out.push(`<text x="${pad.l + 22}" y="${ly + 1}">${esc(name)}</text>`);
  ly += 14;
}
out.push("</svg>");
console.log(out.join("\n"));
