/* inflight: request records addressed by a wire id that embeds their slot and generation, so a
 * TokenChunk finds its record without hashing, and a chunk for a released slot (a late chunk
 * after a cancel or failover) is recognised by its stale generation and dropped. */
#include "inflight.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void inflight_init(inflight *t) {
    memset(t, 0, sizeof *t);
}

static void req_free(bk_req *r) {
    if (!r) return;
    strbuf_free(&r->text);
    free(r->toks);
    genmsg_free(r->msg);
    free(r->chain);
    http_stream_unref(r->stream);
    free(r);
}

void inflight_free(inflight *t) {
    for (size_t i = 0; i < t->cap; i++)
        req_free(t->slots[i]);
    free(t->slots);
    free(t->gens);
    free(t->free_list);
    memset(t, 0, sizeof *t);
}

static int grow(inflight *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    bk_req **s = realloc(t->slots, cap * sizeof *s);
    if (!s) return -ENOMEM;
    t->slots = s;
    uint32_t *g = realloc(t->gens, cap * sizeof *g);
    if (!g) return -ENOMEM;
    t->gens = g;
    uint32_t *f = realloc(t->free_list, cap * sizeof *f);
    if (!f) return -ENOMEM;
    t->free_list = f;
    for (size_t i = t->cap; i < cap; i++) {
        s[i] = NULL;
        g[i] = 0;
    }
    for (size_t i = cap; i > t->cap; i--) /* lowest slots first */
        f[t->n_free++] = (uint32_t)(i - 1);
    t->cap = cap;
    return 0;
}

bk_req *inflight_add(inflight *t, const char *http_id) {
    if (!t->n_free && grow(t)) return NULL;
    bk_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    uint32_t slot = t->free_list[--t->n_free];
    r->slot = slot;
    r->gen = t->gens[slot];
    r->last_seq = -1;
    strbuf_init(&r->text);
    snprintf(r->http_id, sizeof r->http_id, "%s", http_id);
    snprintf(r->wire_id, sizeof r->wire_id, "%s.%x.%x", r->http_id, slot, r->gen);
    t->slots[slot] = r;
    t->live++;
    return r;
}

bk_req *inflight_find(const inflight *t, const char *wire_id) {
    const char *g = strrchr(wire_id, '.');
    if (!g || g == wire_id) return NULL;
    const char *s = g - 1;
    while (s > wire_id && *s != '.')
        s--;
    if (*s != '.') return NULL;
    char *end;
    unsigned long slot = strtoul(s + 1, &end, 16);
    if (end != g) return NULL;
    unsigned long gen = strtoul(g + 1, &end, 16);
    if (*end || slot >= t->cap) return NULL;
    bk_req *r = t->slots[slot];
    if (!r || r->gen != gen || strcmp(r->wire_id, wire_id)) return NULL;
    return r;
}

void inflight_new_attempt(inflight *t, bk_req *r) {
    r->gen = ++t->gens[r->slot];
    snprintf(r->wire_id, sizeof r->wire_id, "%s.%x.%x", r->http_id, r->slot, r->gen);
}

void inflight_release(inflight *t, bk_req *r) {
    if (!r) return;
    t->slots[r->slot] = NULL;
    t->gens[r->slot]++;
    t->free_list[t->n_free++] = r->slot;
    t->live--;
    req_free(r);
}

int inflight_add_tokens(bk_req *r, const uint32_t *ids, size_t n) {
    if (!n) return 0;
    if (r->n_toks + n > r->cap_toks) {
        size_t cap = r->cap_toks ? r->cap_toks : 64;
        while (cap < r->n_toks + n)
            cap *= 2;
        uint32_t *p = realloc(r->toks, cap * sizeof *p);
        if (!p) return -ENOMEM;
        r->toks = p;
        r->cap_toks = cap;
    }
    memcpy(r->toks + r->n_toks, ids, n * sizeof *ids);
    r->n_toks += n;
    return 0;
}

void queue_push_back(bk_queue *q, bk_req *r) {
    r->qnext = NULL;
    if (q->tail)
        q->tail->qnext = r;
    else
        q->head = r;
    q->tail = r;
    q->n++;
}

void queue_push_front(bk_queue *q, bk_req *r) {
    r->qnext = q->head;
    q->head = r;
    if (!q->tail) q->tail = r;
    q->n++;
}

bk_req *queue_pop(bk_queue *q) {
    bk_req *r = q->head;
    if (!r) return NULL;
    q->head = r->qnext;
    if (!q->head) q->tail = NULL;
    r->qnext = NULL;
    q->n--;
    return r;
}

int queue_remove(bk_queue *q, bk_req *r) {
    bk_req *prev = NULL;
    for (bk_req *c = q->head; c; prev = c, c = c->qnext) {
        if (c != r) continue;
        if (prev)
            prev->qnext = c->qnext;
        else
            q->head = c->qnext;
        if (q->tail == c) q->tail = prev;
        c->qnext = NULL;
        q->n--;
        return 1;
    }
    return 0;
}
