#!/usr/bin/python3
"""train: Sol's demo models, trained here on the King James Bible (public domain, from Debian's
bible-kjv packages): a byte-level BPE tokenizer, a ~5.8M-parameter Llama target and a separately
trained ~0.9M-parameter draft sharing it, exported as GGUF F16 with a ChatML template.

  tools/train/train.py [--out models/demo] [--steps 1500] [--draft-steps 1500] [--threads N]
                       [--only tokenizer|target|draft] [--seed 1]

Needs Debian's python3-torch, python3-numpy and bible-kjv (scripts/setup --train installs them).
Deterministic for a given seed and thread count; progress with loss goes to stderr; each model's
command, wall time and final train and held-out losses go to OUT/train-log.json.
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # a clear message, not a traceback
    sys.exit(f"train.py: {e.name} is missing: run scripts/setup --train (Debian's python3-torch, "
             "python3-numpy), and run this file with /usr/bin/python3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import gguf_write as gw  # noqa: E402
from model import Config, Llama  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SHAPES = {  # dim, layers, heads, kv_heads, ffn
    "target": (256, 6, 8, 4, 768),  # ffn a multiple of 256, as K-quants need
    "draft": (128, 2, 4, 2, 384),
}
CTX = 256


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def tokenizer(out, chapters, vocab):
    path = os.path.join(out, "tokenizer.json")
    if os.path.exists(path):
        with open(path) as f:
            merges = [tuple(m) for m in json.load(f)["merges"]]
    else:
        texts = [corpus.chapter_text(h, v) for i, (h, v) in enumerate(chapters)
                 if not corpus.is_held_out(i)]
        log(f"tokenizer: training {vocab - 256 - len(SPECIALS)} merges")
        merges = bpe.train(texts, vocab, len(SPECIALS),
                           lambda n, total: log(f"tokenizer: {n}/{total} merges"))
        with open(path, "w") as f:
            json.dump({"pre": "gpt2", "specials": SPECIALS, "merges": merges}, f)
    return bpe.Encoder(merges, SPECIALS)


def streams(enc, chapters, seed):
    """Training documents: every training chapter as text, and one verse pair in four as a chat
    turn (ChatML); shuffled, joined by <|endoftext|>. Held out: the held-out chapters as text."""
    docs, held = [], []
    for i, (h, verses) in enumerate(chapters):
        text = corpus.chapter_text(h, verses)
        if corpus.is_held_out(i):
            held.append(text)
            continue
        docs.append(text)
        for j, (a, b) in enumerate(corpus.chat_pairs(verses)):
            if j % 4 == i % 4:
                docs.append(f"<|im_start|>user\n{a}<|im_end|>\n<|im_start|>assistant\n{b}<|im_end|>\n")
    random.Random(seed).shuffle(docs)
    eot = enc.id["<|endoftext|>"]
    train = []
    for d in docs:
        train.extend(enc.encode(d) + [eot])
    held_ids = []
    for d in held:
        held_ids.extend(enc.encode(d) + [eot])
    return torch.tensor(train), torch.tensor(held_ids), held


@torch.no_grad()
def held_out_loss(model, ids):
    model.eval()
    total, n = 0.0, 0
    for s in range(0, len(ids) - 1, CTX):
        x = ids[s:s + CTX + 1]
        if len(x) < 2:
            break
        logits = model(x[None, :-1])
        total += F.cross_entropy(logits[0], x[1:], reduction="sum").item()
        n += len(x) - 1
    model.train()
    return total / n


def train_model(name, cfg, train_ids, held_ids, steps, batch, lr, seed):
    torch.manual_seed(seed)
    model = Llama(cfg)
    log(f"{name}: {model.n_params() / 1e6:.2f}M parameters, {steps} steps of {batch}x{CTX} tokens"
        f" ({len(train_ids) / 1e6:.2f}M training tokens)")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    warm, t0, recent = min(100, steps // 10), time.time(), []
    for step in range(1, steps + 1):
        f = step / warm if step <= warm else 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / (steps - warm)))
        for g in opt.param_groups:
            g["lr"] = lr * f
        starts = torch.randint(0, len(train_ids) - CTX - 1, (batch,), generator=gen)
        x = torch.stack([train_ids[s:s + CTX + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, cfg.vocab), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-50:]
        if step % 25 == 0 or step == steps:
            el = time.time() - t0
            log(f"{name}: step {step}/{steps} loss {sum(recent) / len(recent):.3f} "
                f"{step * batch * CTX / el:.0f} tok/s, {el / 60:.1f} min, eta {(steps - step) * el / step / 60:.1f} min")
    wall = time.time() - t0
    held = held_out_loss(model, held_ids)
    log(f"{name}: train loss {sum(recent) / len(recent):.3f}, held-out loss {held:.3f} "
        f"(perplexity {math.exp(held):.1f}), {wall / 60:.1f} min")
    return model, {"params": model.n_params(), "steps": steps, "batch": batch, "ctx": CTX,
                   "lr": lr, "train_loss_last50": round(sum(recent) / len(recent), 4),
                   "held_out_loss": round(held, 4), "held_out_ppl": round(math.exp(held), 2),
                   "wall_s": round(wall, 1), "threads": torch.get_num_threads()}


def export(path, name, cfg, model, enc):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    h16 = lambda a: a.astype(np.float16)  # noqa: E731
    tensors = [("token_embd.weight", h16(sd["embed.weight"]))]
    names = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
             "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        tensors.append((f"blk.{i}.attn_norm.weight", sd[p + "attn_norm.weight"]))
        for k, v in names.items():
            tensors.append((f"blk.{i}.{v}.weight", h16(sd[p + k + ".weight"])))
        tensors.append((f"blk.{i}.ffn_norm.weight", sd[p + "ffn_norm.weight"]))
    tensors += [("output_norm.weight", sd["norm.weight"]), ("output.weight", h16(sd["output.weight"]))]
    sid = lambda s: enc.id[s]  # noqa: E731
    kvs = [("general.architecture", gw.STR, "llama"), ("general.name", gw.STR, name),
           ("general.license", gw.STR, "public-domain text (KJV); weights CC0"),
           ("general.file_type", gw.U32, 1), ("llama.context_length", gw.U32, CTX),
           ("llama.embedding_length", gw.U32, cfg.dim), ("llama.block_count", gw.U32, cfg.layers),
           ("llama.feed_forward_length", gw.U32, cfg.ffn),
           ("llama.attention.head_count", gw.U32, cfg.heads),
           ("llama.attention.head_count_kv", gw.U32, cfg.kv_heads),
           ("llama.rope.dimension_count", gw.U32, cfg.head_dim),
           ("llama.rope.freq_base", gw.F32, cfg.rope_base),
           ("llama.attention.layer_norm_rms_epsilon", gw.F32, cfg.eps),
           ("llama.vocab_size", gw.U32, cfg.vocab),
           ("tokenizer.ggml.model", gw.STR, "gpt2"), ("tokenizer.ggml.pre", gw.STR, "gpt-2"),
           ("tokenizer.ggml.tokens", (gw.ARR, gw.STR), enc.tokens),
           ("tokenizer.ggml.token_type", (gw.ARR, gw.I32),
            [3 if t in SPECIALS else 1 for t in enc.tokens]),
           ("tokenizer.ggml.merges", (gw.ARR, gw.STR),
            [a + " " + b for (a, b) in sorted(enc.rank, key=enc.rank.get)]),
           ("tokenizer.ggml.bos_token_id", gw.U32, sid("<|endoftext|>")),
           ("tokenizer.ggml.eos_token_id", gw.U32, sid("<|im_end|>")),
           ("tokenizer.ggml.eot_token_id", gw.U32, sid("<|im_end|>")),
           ("tokenizer.ggml.padding_token_id", gw.U32, sid("<|endoftext|>")),
           ("tokenizer.ggml.add_bos_token", gw.BOOL, False),
           ("tokenizer.chat_template", gw.STR, CHATML)]
    gw.write(path + ".tmp", kvs, tensors)
    os.replace(path + ".tmp", path)
    log(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/demo")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=1500, help="target training steps")
    ap.add_argument("--draft-steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["tokenizer", "target", "draft"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    chapters = corpus.read_chapters()
    enc = tokenizer(a.out, chapters, a.vocab)
    train_ids, held_ids, held_text = streams(enc, chapters, a.seed)
    with open(os.path.join(a.out, "heldout.txt"), "w") as f:
        f.write("".join(held_text))
    # The words the models were trained on: tests check that an answer is made of them.
    words = {w for i, (h, v) in enumerate(chapters) if not corpus.is_held_out(i)
             for w in re.findall(r"[A-Za-z]+", corpus.chapter_text(h, v))}
    with open(os.path.join(a.out, "words.txt"), "w") as f:
        f.write("\n".join(sorted(words)) + "\n")
    if a.only == "tokenizer":
        return
    log_path = os.path.join(a.out, "train-log.json")
    record = json.load(open(log_path)) if os.path.exists(log_path) else {}
    for name in ("target", "draft"):
        if a.only and a.only != name:
            continue
        dim, layers, heads, kvh, ffn = SHAPES[name]
        cfg = Config(a.vocab, dim, layers, heads, kvh, ffn, CTX)
        steps = a.steps if name == "target" else a.draft_steps
        lr = 2e-3 if name == "target" else 3e-3
        model, rec = train_model(name, cfg, train_ids, held_ids, steps, a.batch, lr, a.seed)
        export(os.path.join(a.out, f"demo-{name}-f16.gguf"), f"sol-demo-{name}", cfg, model, enc)
        rec["command"] = " ".join(["tools/train/train.py"] + sys.argv[1:])
        rec["corpus"] = "King James Bible (1611, public domain), Debian bible-kjv-text"
        rec["train_tokens"], rec["held_out_tokens"] = len(train_ids), len(held_ids)
        record[name] = rec
        with open(log_path, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
