"""bpe: byte-level BPE (GPT-2 style) trained on a corpus, and the encoder llama.cpp applies.

Pre-tokenization is GPT-2's regex (tokenizer.ggml.pre = "gpt-2"); the corpus is ASCII, where the
ASCII classes below split exactly as the Unicode ones do.
"""
import collections
import re

PRETOK = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's reversible map from bytes to printable code points."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = byte_chars()


def to_symbols(word):
    return tuple(BYTE_CHARS[b] for b in word.encode("utf-8"))


def train(texts, vocab_size, n_special, progress=None):
    """Returns the merges [(left, right), ...] so that 256 + merges + specials = vocab_size."""
    counts = collections.Counter()
    for t in texts:
        counts.update(PRETOK.findall(t))
    words = [list(to_symbols(w)) for w in counts]
    freq = list(counts.values())
    pairs, where = collections.Counter(), collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[a, b] += freq[i]
            where[a, b].add(i)
    merges, n_merges = [], vocab_size - 256 - n_special
    while len(merges) < n_merges and pairs:
        # Highest count; ties go to the smallest pair, so the result does not depend on hashing.
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for i in list(where[best]):
            w, f = words[i], freq[i]
            for a, b in zip(w, w[1:]):
                pairs[a, b] -= f
                if pairs[a, b] <= 0:
                    del pairs[a, b]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pairs[a, b] += f
                where[a, b].add(i)
        del where[best]
        if progress and len(merges) % 200 == 0:
            progress(len(merges), n_merges)
    return merges


class Encoder:
    """Greedy lowest-rank merging within each pre-token, as llama.cpp's BPE tokenizer does."""

    def __init__(self, merges, specials):
        self.rank = {m: r for r, m in enumerate(merges)}
        self.tokens = [BYTE_CHARS[b] for b in range(256)] + [a + b for a, b in merges] + specials
        self.id = {t: i for i, t in enumerate(self.tokens)}
        self.specials = specials
        self.split = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")")
        self.cache = {}

    def word(self, w):
        hit = self.cache.get(w)
        if hit is not None:
            return hit
        sym = list(to_symbols(w))
        while len(sym) > 1:
            ranked = [(self.rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(sym, sym[1:]))]
            r, i = min(ranked)
            if r == 1 << 30:
                break
            sym[i:i + 2] = [sym[i] + sym[i + 1]]
        ids = [self.id[s] for s in sym]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        ids = []
        for part in self.split.split(text):
            if part in self.specials:
                ids.append(self.id[part])
            elif part:
                for w in PRETOK.findall(part):
                    ids.extend(self.word(w))
        return ids

    def decode(self, ids):
        inv = {c: b for b, c in BYTE_CHARS.items()}
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in self.specials:
                out += t.encode()
            else:
                out += bytes(inv[c] for c in t)
        return out.decode("utf-8", errors="replace")
