/* tok_scratch: growable work buffers and the bigram heap shared by the SPM and BPE merge loops.
 * Both loops are llama.cpp's: a priority queue of adjacent pairs, stale entries skipped on pop. */
#include <errno.h>
#include <stdlib.h>

#include "tok_internal.h"

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int tok_scratch_bytes(tok_scratch *sc, size_t n) {
    return grow((void **)&sc->bytes, &sc->cap_bytes, n, 1);
}

int tok_scratch_cpts(tok_scratch *sc, size_t n) {
    size_t cap = sc->cap_cpts;
    int rc = grow((void **)&sc->cpts, &cap, n, sizeof *sc->cpts);
    if (rc == 0) rc = grow((void **)&sc->ends, &sc->cap_cpts, n, sizeof *sc->ends);
    return rc;
}

int tok_scratch_sym(tok_scratch *sc, size_t n) {
    return grow((void **)&sc->sym, &sc->cap_sym, n, sizeof *sc->sym);
}

void tok_scratch_release(tok_scratch *sc) {
    free(sc->bytes);
    free(sc->cpts);
    free(sc->ends);
    free(sc->sym);
    free(sc->heap);
}

static int before(const tok_bigram *a, const tok_bigram *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

int tok_heap_push(tok_scratch *sc, tok_bigram b) {
    if (grow((void **)&sc->heap, &sc->cap_heap, sc->n_heap + 1, sizeof b) != 0) return -ENOMEM;
    size_t i = sc->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!before(&b, &sc->heap[up])) break;
        sc->heap[i] = sc->heap[up];
        i = up;
    }
    sc->heap[i] = b;
    return 0;
}

int tok_heap_pop(tok_scratch *sc, tok_bigram *out) {
    if (sc->n_heap == 0) return 0;
    *out = sc->heap[0];
    tok_bigram last = sc->heap[--sc->n_heap];
    size_t i = 0, n = sc->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&sc->heap[c + 1], &sc->heap[c])) c++;
        if (!before(&sc->heap[c], &last)) break;
        sc->heap[i] = sc->heap[c];
        i = c;
    }
    if (n > 0) sc->heap[i] = last;
    return 1;
}

void tok_symbols_merge(tok_symbol *sym, const tok_bigram *b) {
    tok_symbol *l = &sym[b->left], *r = &sym[b->right];
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) sym[r->next].prev = b->left;
}
