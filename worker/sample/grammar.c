/* grammar: the matcher (stacks of grammar positions), the vocabulary trie and the masks. */
#include "grammar.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "hash.h"

#define MAX_DEPTH 1024   /* nesting a stack may reach (deeper: that path is dropped) */
#define MAX_STACKS 4096  /* stacks in one state (an ambiguity bomb beyond) */
#define MAX_STEPS 200000 /* expansion steps for one byte */
#define CACHE_SLOTS 32   /* masks kept per grammar */
#define MAX_LEVEL 2000   /* nested rule references expanded for one stack */
#define WIDE_SHARE 16    /* grammar_wide: 1/16 of the vocabulary starts with an admitted byte */

/* ---- the vocabulary trie -------------------------------------------------------------- */

typedef struct tnode {
    uint32_t child0, n_child; /* children: nodes child0 .. +n_child, bytes in edge[] */
    uint32_t tok0, n_tok;     /* tokens whose bytes end here: toks[tok0 .. +n_tok] */
} tnode;

struct grammar_vocab {
    int32_t n_vocab;
    tnode *nodes;
    uint8_t *edge; /* edge[n]: the byte leading into node n */
    int32_t *toks;
    int32_t *eog;
    int n_nodes, n_eog;
    char **piece;
    size_t *len;
    uint8_t *kind;
    uint32_t first[256]; /* text tokens by first byte */
};

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const grammar_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t n = v->len[x] < v->len[y] ? v->len[x] : v->len[y];
    int c = memcmp(v->piece[x], v->piece[y], n);
    if (c) return c;
    return v->len[x] < v->len[y] ? -1 : v->len[x] > v->len[y] ? 1 : x - y;
}

/* Node `node` holds tokens ids[lo, hi), which share their first `depth` bytes (sorted). */
static void build(grammar_vocab *v, const int32_t *ids, int lo, int hi, size_t depth, int node,
                  int *next) {
    int k = lo;
    v->nodes[node].tok0 = (uint32_t)lo;
    while (k < hi && v->len[ids[k]] == depth)
        k++;
    v->nodes[node].n_tok = (uint32_t)(k - lo);
    int groups = 0;
    for (int i = k; i < hi; i++)
        groups += i == k || v->piece[ids[i]][depth] != v->piece[ids[i - 1]][depth];
    v->nodes[node].child0 = (uint32_t)*next;
    v->nodes[node].n_child = (uint32_t)groups;
    int first = *next;
    *next += groups;
    for (int i = k, c = 0; i < hi; c++) {
        int j = i;
        uint8_t byte = (uint8_t)v->piece[ids[i]][depth];
        while (j < hi && (uint8_t)v->piece[ids[j]][depth] == byte)
            j++;
        v->edge[first + c] = byte;
        build(v, ids, i, j, depth + 1, first + c, next);
        i = j;
    }
}

grammar_vocab *grammar_vocab_new(int32_t n_vocab, const char *const *piece, const size_t *len,
                                 const uint8_t *kind, sol_err *err) {
    grammar_vocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        total += kind[i] == 0 ? len[i] : 0;
    if (v) {
        v->n_vocab = n_vocab;
        v->piece = calloc((size_t)n_vocab, sizeof *v->piece);
        v->len = calloc((size_t)n_vocab, sizeof *v->len);
        v->kind = malloc((size_t)n_vocab);
        v->toks = malloc(sizeof *v->toks * (size_t)n_vocab);
        v->eog = malloc(sizeof *v->eog * (size_t)n_vocab);
        v->nodes = calloc(total + 1, sizeof *v->nodes);
        v->edge = calloc(total + 1, 1);
    }
    if (!v || !v->piece || !v->len || !v->kind || !v->toks || !v->eog || !v->nodes || !v->edge) {
        grammar_vocab_free(v);
        sol_err_set(err, -ENOMEM, "out of memory for the grammar vocabulary");
        return NULL;
    }
    int n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->kind[i] = kind[i] == 0 && len[i] == 0 ? 2 : kind[i];
        if (v->kind[i] == 1) v->eog[v->n_eog++] = i;
        if (v->kind[i] == 1 || len[i] == 0) continue;
        v->len[i] = len[i]; /* control tokens too: grammar_allow_control */
        if (!(v->piece[i] = malloc(len[i]))) {
            grammar_vocab_free(v);
            sol_err_set(err, -ENOMEM, "out of memory for the grammar vocabulary");
            return NULL;
        }
        memcpy(v->piece[i], piece[i], len[i]);
        if (v->kind[i] != 0) continue;
        v->toks[n++] = i;
        v->first[(uint8_t)piece[i][0]]++;
    }
    qsort_r(v->toks, (size_t)n, sizeof *v->toks, cmp_piece, v);
    int next = 1;
    build(v, v->toks, 0, n, 0, 0, &next);
    v->n_nodes = next;
    return v;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    for (int32_t i = 0; v->piece && i < v->n_vocab; i++)
        free(v->piece[i]);
    free(v->piece), free(v->len), free(v->kind), free(v->toks), free(v->eog), free(v->nodes);
    free(v->edge);
    free(v);
}

/* ---- states --------------------------------------------------------------------------- */

/* A state: stacks of element positions, each stored as [depth, pos_0 .. pos_depth-1] (the top
 * last; the entries below the top are where to continue when the rule above ends). Depth 0:
 * the grammar is complete. */
typedef struct gstate {
    uint32_t *w;
    uint32_t len, n_stacks;
} gstate;

typedef struct wbuf {
    uint32_t *w;
    size_t len, cap;
} wbuf;

static int wbuf_need(wbuf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t c = b->cap ? b->cap * 2 : 1024;
    while (c < b->len + more)
        c *= 2;
    uint32_t *w = realloc(b->w, c * sizeof *w);
    if (!w) return -ENOMEM;
    b->w = w, b->cap = c;
    return 0;
}

typedef struct mask_slot {
    uint64_t hash;
    uint32_t *key;
    uint32_t key_len;
    uint64_t *bits;
    uint64_t text;     /* shared cache: the grammar text's hash */
    uint64_t last_use; /* shared cache: for eviction */
} mask_slot;

#define SHARED_WAYS 4 /* a key may sit in any of 4 slots from its hash on */

struct grammar_cache {
    mask_slot *slots;
    size_t n_slots;
    size_t words; /* per mask */
    uint64_t clock;
};

struct grammar {
    gbnf *g;
    const grammar_vocab *v;
    wbuf cur; /* the current state's words */
    uint32_t cur_stacks;
    wbuf build;  /* a state being built by advance() */
    wbuf spare;  /* grammar_accept's state between bytes */
    wbuf marked; /* grammar_mark's copy of the state */
    wbuf tmp;    /* expansion scratch */
    wbuf arena;  /* states of the trie walk, last in first out */
    long steps;
    int overflow;
    uint64_t *mask; /* n_vocab bits: the last mask */
    mask_slot cache[CACHE_SLOTS];
    int next_slot;
    uint64_t computed, cached;
    int32_t control[GRAMMAR_MAX_CONTROL]; /* control tokens taken as their text */
    int n_control;
    grammar_cache *shared; /* NULL: the slots above */
    uint64_t text_hash;    /* of the GBNF text: the shared cache's key with the state */
};

static bool is_set(const gbnf *g, uint32_t pos, uint8_t byte) {
    const gelem *e = &g->elems[pos];
    return e->type == GE_SET && (g->sets[e->arg][byte >> 3] >> (byte & 7) & 1);
}

/* Whether the set at pos admits one byte only: a literal's character, not a class. */
static bool is_single(const gbnf *g, uint32_t pos) {
    const uint8_t *set = g->sets[g->elems[pos].arg];
    int n = 0;
    for (int k = 0; k < 32 && n < 2; k++)
        n += __builtin_popcount(set[k]);
    return n == 1;
}

/* Appends the stack to the state being built unless it is there already. */
static int add_stack(grammar *m, const uint32_t *stk, uint32_t depth, uint32_t *n_stacks,
                     size_t start) {
    for (size_t i = start; i < m->build.len; i += 1 + m->build.w[i])
        if (m->build.w[i] == depth && !memcmp(m->build.w + i + 1, stk, depth * sizeof *stk))
            return 0;
    if (*n_stacks >= MAX_STACKS || wbuf_need(&m->build, depth + 1)) return -E2BIG;
    m->build.w[m->build.len++] = depth;
    memcpy(m->build.w + m->build.len, stk, depth * sizeof *stk);
    m->build.len += depth;
    ++*n_stacks;
    return 0;
}

/* Expands the stack at m->tmp.w[off..] until its top is a byte set (or it is empty), into the
 * state being built: a rule reference becomes one stack per alternative (the reference's
 * continuation below, left out when the reference ends its alternative: tail calls keep
 * repetitions flat); an ended alternative pops. Only references write, into a copy: the
 * caller's stack stays intact. Offsets, not pointers: tmp may move as it grows. */
static int expand(grammar *m, size_t off, uint32_t depth, uint32_t *n_stacks, size_t start,
                  int level) {
    const gbnf *g = m->g;
    if (++m->steps > MAX_STEPS || level > MAX_LEVEL) return -E2BIG;
    const uint32_t *stk = m->tmp.w + off;
    while (depth > 0 && g->elems[stk[depth - 1]].type == GE_END)
        depth--; /* pop: below the top is where the finished rule continues */
    if (depth == 0 || g->elems[stk[depth - 1]].type == GE_SET)
        return add_stack(m, stk, depth, n_stacks, start);
    if (depth >= MAX_DEPTH) return 0; /* too deep: this path is dropped */
    uint32_t p = stk[depth - 1], rule = g->elems[p].arg;
    size_t at = m->tmp.len;
    if (wbuf_need(&m->tmp, depth + 1)) return -ENOMEM;
    stk = m->tmp.w + off;
    uint32_t *copy = m->tmp.w + at, d = depth - 1;
    memcpy(copy, stk, d * sizeof *stk);
    if (g->elems[p + 1].type != GE_END) copy[d++] = p + 1;
    m->tmp.len += d + 1;
    int rc = 0;
    for (uint32_t a = 0; a < g->rule_n_alts[rule] && !rc; a++) {
        m->tmp.w[at + d] = g->alt_start[g->rule_alt0[rule] + a];
        rc = expand(m, at, d + 1, n_stacks, start, level + 1);
    }
    m->tmp.len = at;
    return rc;
}

/* The state after `byte` from state (w, len words), built in m->build from `start`. Returns the
 * stack count (0: the byte is not allowed) or a negative code. w must not live in tmp or
 * build. */
static int advance_by(grammar *m, const uint32_t *w, uint32_t len, uint8_t byte, size_t start,
                      bool literal) {
    uint32_t n = 0;
    m->build.len = start;
    m->steps = 0;
    for (uint32_t i = 0; i < len; i += 1 + w[i]) {
        uint32_t depth = w[i];
        if (depth == 0 || !is_set(m->g, w[i + depth], byte)) continue;
        if (literal && !is_single(m->g, w[i + depth])) continue;
        size_t at = m->tmp.len;
        if (wbuf_need(&m->tmp, depth)) return -ENOMEM;
        memcpy(m->tmp.w + at, w + i + 1, depth * sizeof *w);
        m->tmp.w[at + depth - 1]++; /* past the matched set */
        m->tmp.len += depth;
        int rc = expand(m, at, depth, &n, start, 0);
        m->tmp.len = at;
        if (rc) return rc;
    }
    return (int)n;
}

static int advance(grammar *m, const uint32_t *w, uint32_t len, uint8_t byte, size_t start) {
    return advance_by(m, w, len, byte, start, false);
}

static bool complete(const uint32_t *w, uint32_t len) {
    for (uint32_t i = 0; i < len; i += 1 + w[i])
        if (w[i] == 0) return true;
    return false;
}

/* Advances a copy of the current state over n bytes into g->spare (the current state stays):
 * > 0 when every byte is taken, 0 when one is not, < 0 on an error. literal: only through
 * one-byte sets (a control token spells a literal of the grammar, never a class's text). */
static int run_bytes(grammar *g, const char *p, size_t n, bool literal) {
    const wbuf *src = &g->cur;
    for (size_t i = 0; i < n; i++) {
        int k = advance_by(g, src->w, (uint32_t)src->len, (uint8_t)p[i], 0, literal);
        if (k <= 0) return k;
        wbuf t = g->spare;
        g->spare = g->build, g->build = t;
        src = &g->spare;
    }
    return 1;
}

/* ---- masks ---------------------------------------------------------------------------- */

static void set_bit(uint64_t *bits, int32_t i) {
    bits[i >> 6] |= 1ull << (i & 63);
}

/* any = the bytes some stack of the state (w, len words) admits next. */
static void first_bytes(const gbnf *g, const uint32_t *w, uint32_t len, uint8_t any[32]) {
    memset(any, 0, 32);
    for (uint32_t i = 0; i < len; i += 1 + w[i])
        if (w[i] > 0) {
            const uint8_t *set = g->sets[g->elems[w[i + w[i]]].arg];
            for (int k = 0; k < 32; k++)
                any[k] |= set[k];
        }
}

/* Marks every token whose bytes the state at arena[off, off + len) can consume, walking the
 * trie below `node` and skipping children no stack's next byte set admits. */
static int walk(grammar *m, int node, size_t off, uint32_t len) {
    const grammar_vocab *v = m->v;
    const gbnf *g = m->g;
    uint8_t any[32];
    first_bytes(g, m->arena.w + off, len, any);
    const tnode *t = &v->nodes[node];
    for (uint32_t c = 0; c < t->n_child; c++) {
        uint32_t child = t->child0 + c;
        uint8_t byte = v->edge[child];
        if (!(any[byte >> 3] >> (byte & 7) & 1)) continue;
        int n = advance(m, m->arena.w + off, len, byte, 0);
        if (n < 0) return n;
        if (n == 0) continue;
        const tnode *ct = &v->nodes[child];
        for (uint32_t k = 0; k < ct->n_tok; k++)
            set_bit(m->mask, v->toks[ct->tok0 + k]);
        if (!ct->n_child) continue;
        size_t at = m->arena.len;
        if (wbuf_need(&m->arena, m->build.len)) return -ENOMEM;
        memcpy(m->arena.w + at, m->build.w, m->build.len * sizeof *m->build.w);
        m->arena.len += m->build.len;
        int rc = walk(m, (int)child, at, (uint32_t)m->build.len);
        m->arena.len = at;
        if (rc) return rc;
    }
    return 0;
}

static uint64_t hash_words(const uint32_t *w, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 1099511628211ull;
    return h;
}

static bool slot_holds(const mask_slot *s, uint64_t h, uint64_t text, const wbuf *state) {
    return s->bits && s->hash == h && s->text == text && s->key_len == state->len &&
           !memcmp(s->key, state->w, state->len * sizeof *s->key);
}

/* The slot that holds the state's mask, or NULL; with `victim`, also where to put it if none
 * does (the free or least recently used of its ways). */
static mask_slot *shared_find(grammar_cache *c, uint64_t h, uint64_t text, const wbuf *state,
                              mask_slot **victim) {
    mask_slot *old = NULL;
    for (size_t k = 0; k < SHARED_WAYS; k++) {
        mask_slot *s = &c->slots[(h + k) % c->n_slots];
        if (slot_holds(s, h, text, state)) return s;
        if (!old || !s->bits || (old->bits && s->last_use < old->last_use)) old = s;
    }
    if (victim) *victim = old;
    return NULL;
}

/* Where this grammar keeps the mask of a state (h: its hash): a cached copy, or NULL and in
 * *put the slot to fill. */
static mask_slot *cache_lookup(grammar *m, uint64_t h, mask_slot **put) {
    if (m->shared) {
        mask_slot *s = shared_find(m->shared, h, m->text_hash, &m->cur, put);
        if (s) s->last_use = ++m->shared->clock;
        return s;
    }
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (slot_holds(&m->cache[i], h, 0, &m->cur)) return &m->cache[i];
    *put = &m->cache[m->next_slot];
    m->next_slot = (m->next_slot + 1) % CACHE_SLOTS;
    return NULL;
}

/* m->mask for the current state: from the cache, else walked and cached. */
static int compute_mask(grammar *m) {
    size_t words = ((size_t)m->v->n_vocab + 63) / 64;
    uint64_t h = hash_words(m->cur.w, m->cur.len);
    mask_slot *s = NULL, *hit = cache_lookup(m, h, &s);
    if (hit) {
        memcpy(m->mask, hit->bits, words * sizeof *m->mask);
        m->cached++;
        return 0;
    }
    memset(m->mask, 0, words * sizeof *m->mask);
    m->arena.len = 0;
    if (wbuf_need(&m->arena, m->cur.len)) return -ENOMEM;
    memcpy(m->arena.w, m->cur.w, m->cur.len * sizeof *m->cur.w);
    m->arena.len = m->cur.len;
    int rc = walk(m, 0, 0, (uint32_t)m->cur.len);
    if (rc) return rc;
    if (complete(m->cur.w, (uint32_t)m->cur.len))
        for (int i = 0; i < m->v->n_eog; i++)
            set_bit(m->mask, m->v->eog[i]);
    for (int i = 0; i < m->n_control; i++) {
        int32_t t = m->control[i];
        if ((rc = run_bytes(m, m->v->piece[t], m->v->len[t], true)) < 0) return rc;
        if (rc) set_bit(m->mask, t);
    }
    m->computed++;
    uint32_t *key = realloc(s->key, (m->cur.len ? m->cur.len : 1) * sizeof *key);
    if (!key) return 0; /* not cached: still correct */
    s->key = key;
    if (!s->bits && !(s->bits = malloc(words * sizeof *s->bits))) return 0;
    memcpy(s->key, m->cur.w, m->cur.len * sizeof *key);
    memcpy(s->bits, m->mask, words * sizeof *s->bits);
    s->key_len = (uint32_t)m->cur.len, s->hash = h;
    s->text = m->shared ? m->text_hash : 0;
    s->last_use = m->shared ? ++m->shared->clock : 0;
    return 0;
}

grammar_cache *grammar_cache_new(const grammar_vocab *v, size_t max_bytes, sol_err *err) {
    grammar_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->words = ((size_t)v->n_vocab + 63) / 64;
        c->n_slots = max_bytes / (c->words * sizeof(uint64_t) + 64);
        if (c->n_slots < 64) c->n_slots = 64;
        c->slots = calloc(c->n_slots, sizeof *c->slots);
    }
    if (!c || !c->slots) {
        free(c);
        sol_err_set(err, -ENOMEM, "out of memory for the grammar mask cache");
        return NULL;
    }
    return c;
}

void grammar_cache_free(grammar_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_slots; i++)
        free(c->slots[i].key), free(c->slots[i].bits);
    free(c->slots);
    free(c);
}

void grammar_use_cache(grammar *g, grammar_cache *c) {
    g->shared = c;
}

static int mask_error(int rc, sol_err *err) {
    return sol_err_set(err, rc, "grammar: %s",
                       rc == -ENOMEM ? "out of memory"
                                     : "the grammar is too ambiguous or too deeply nested here");
}

const uint64_t *grammar_allowed(grammar *g, sol_err *err) {
    int rc = compute_mask(g);
    if (rc) return mask_error(rc, err), NULL;
    size_t words = ((size_t)g->v->n_vocab + 63) / 64;
    uint64_t any = 0;
    for (size_t k = 0; k < words; k++)
        any |= g->mask[k];
    if (!any)
        return sol_err_set(err, -ENOENT, "grammar: no token of the vocabulary can continue it"),
               NULL;
    return g->mask;
}

int grammar_apply(grammar *g, float *logits, sol_err *err) {
    const uint64_t *m = grammar_allowed(g, err);
    if (!m) return err->code;
    int32_t n = g->v->n_vocab;
    for (int32_t base = 0; base < n; base += 64) { /* a word at a time: most are all 1 or all 0 */
        uint64_t w = m[base >> 6];
        int32_t end = base + 64 < n ? base + 64 : n;
        if (w == ~0ull && end - base == 64) continue;
        for (int32_t i = base; i < end; i++)
            if (!(w >> (i - base) & 1)) logits[i] = -INFINITY;
    }
    return 0;
}

bool grammar_allows(grammar *g, int32_t token) {
    if (token < 0 || token >= g->v->n_vocab || compute_mask(g)) return false;
    return g->mask[token >> 6] >> (token & 63) & 1;
}

bool grammar_wide(const grammar *g) {
    uint8_t any[32];
    first_bytes(g->g, g->cur.w, (uint32_t)g->cur.len, any);
    uint64_t n = 0;
    for (int b = 0; b < 256; b++)
        n += (any[b >> 3] >> (b & 7) & 1) ? g->v->first[b] : 0;
    return n * WIDE_SHARE >= (uint64_t)g->v->n_vocab;
}

bool grammar_complete(const grammar *g) {
    return complete(g->cur.w, (uint32_t)g->cur.len);
}

static bool is_control(const grammar *g, int32_t token) {
    for (int i = 0; i < g->n_control; i++)
        if (g->control[i] == token) return true;
    return false;
}

int grammar_accept(grammar *g, int32_t token, sol_err *err) {
    const grammar_vocab *v = g->v;
    if (token < 0 || token >= v->n_vocab || (v->kind[token] == 2 && !is_control(g, token)) ||
        (v->kind[token] == 1 && !grammar_complete(g)))
        return sol_err_set(err, -EINVAL, "grammar: token %d is not allowed here", token);
    if (v->kind[token] == 1) return 0;
    int n = run_bytes(g, v->piece[token], v->len[token], v->kind[token] == 2);
    if (n <= 0)
        return n < 0 ? mask_error(n, err)
                     : sol_err_set(err, -EINVAL, "grammar: token %d is not allowed here", token);
    wbuf t = g->cur; /* the current state changes only on success */
    g->cur = g->spare, g->spare = t;
    return 0;
}

int grammar_allow_control(grammar *g, const int32_t *ids, int n, sol_err *err) {
    for (int i = 0; i < n; i++) {
        int32_t t = ids[i];
        if (t < 0 || t >= g->v->n_vocab || g->v->kind[t] != 2 || !g->v->len[t])
            return sol_err_set(err, -EINVAL, "grammar: token %d is not a control token with text",
                               (int)t);
        if (is_control(g, t)) continue;
        if (g->n_control == GRAMMAR_MAX_CONTROL)
            return sol_err_set(err, -E2BIG, "grammar: more than %d control tokens",
                               GRAMMAR_MAX_CONTROL);
        g->control[g->n_control++] = t;
        /* the masks differ from the same text's without them: another key in the shared cache */
        g->text_hash = sol_fnv64(g->text_hash, &t, sizeof t);
    }
    return 0;
}

int grammar_mark(grammar *g) {
    g->marked.len = 0;
    if (wbuf_need(&g->marked, g->cur.len + 1)) return -ENOMEM;
    memcpy(g->marked.w, g->cur.w, g->cur.len * sizeof *g->cur.w);
    g->marked.len = g->cur.len;
    return 0;
}

void grammar_reset_to_mark(grammar *g) {
    wbuf t = g->cur;
    g->cur = g->marked, g->marked = t;
}

void grammar_counters(const grammar *g, uint64_t *computed, uint64_t *cached) {
    *computed = g->computed, *cached = g->cached;
}

grammar *grammar_new(const char *text, size_t len, const grammar_vocab *v, sol_err *err) {
    grammar *m = calloc(1, sizeof *m);
    if (!m) {
        sol_err_set(err, -ENOMEM, "out of memory for the grammar");
        return NULL;
    }
    m->v = v;
    m->text_hash = sol_fnv64(SOL_FNV64_INIT, text, len);
    int rc = gbnf_parse(text, len, &m->g, err);
    if (!rc && !(m->mask = malloc(((size_t)v->n_vocab + 63) / 64 * sizeof *m->mask)))
        rc = sol_err_set(err, -ENOMEM, "out of memory for the grammar");
    uint32_t n = 0;
    const gbnf *g = m->g;
    for (uint32_t a = 0; !rc && a < g->rule_n_alts[g->root]; a++) {
        size_t at = m->tmp.len;
        if (wbuf_need(&m->tmp, 1)) rc = -ENOMEM;
        if (rc) break;
        m->tmp.w[at] = g->alt_start[g->rule_alt0[g->root] + a];
        m->tmp.len++;
        rc = expand(m, at, 1, &n, 0, 0);
        m->tmp.len = at;
        if (rc) mask_error(rc, err);
    }
    if (!rc) {
        wbuf t = m->cur;
        m->cur = m->build, m->build = t;
    }
    if (rc) {
        grammar_free(m);
        return NULL;
    }
    return m;
}

void grammar_free(grammar *m) {
    if (!m) return;
    gbnf_free(m->g);
    free(m->cur.w), free(m->build.w), free(m->spare.w), free(m->marked.w), free(m->tmp.w);
    free(m->arena.w);
    free(m->mask);
    for (int i = 0; i < CACHE_SLOTS; i++)
        free(m->cache[i].key), free(m->cache[i].bits);
    free(m);
}
