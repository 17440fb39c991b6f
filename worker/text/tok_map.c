/* tok_map: see tok_internal.h. Keys live in the tokenizer's arenas; the map stores only indices,
 * so building it copies nothing. FNV-1a is enough: keys are short and not attacker-chosen at
 * build time, and lookups hash each candidate string once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "tok_internal.h"

static uint32_t hash2(const char *a, size_t alen, char sep, const char *b, size_t blen) {
    uint32_t h = sol_fnv32(SOL_FNV32_INIT, a, alen);
    if (sep) h = sol_fnv32(h, &sep, 1);
    return sol_fnv32(h, b, blen);
}

static int key_equals(const tok_map *m, int32_t i, const char *a, size_t alen, char sep,
                      const char *b, size_t blen) {
    size_t total = alen + (sep ? 1 : 0) + blen;
    const char *k = m->arena + m->off[i];
    if (m->len[i] != total) return 0;
    if (memcmp(k, a, alen) != 0) return 0;
    if (sep && k[alen] != sep) return 0;
    return memcmp(k + alen + (sep ? 1 : 0), b, blen) == 0;
}

int tok_map_build(tok_map *m, const char *arena, const uint32_t *off, const uint32_t *len,
                  int32_t n, int last_wins) {
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u)
        cap <<= 1;
    m->slot = malloc(sizeof *m->slot * cap);
    if (!m->slot) return -ENOMEM;
    memset(m->slot, 0xFF, sizeof *m->slot * cap);
    m->mask = cap - 1;
    m->arena = arena;
    m->off = off;
    m->len = len;
    for (int32_t i = 0; i < n; i++) {
        const char *k = arena + off[i];
        uint32_t h = hash2(k, len[i], 0, "", 0) & m->mask;
        while (m->slot[h] >= 0 && !key_equals(m, m->slot[h], k, len[i], 0, "", 0))
            h = (h + 1) & m->mask;
        if (m->slot[h] < 0 || last_wins) m->slot[h] = i;
    }
    return 0;
}

void tok_map_release(tok_map *m) {
    free(m->slot);
    m->slot = NULL;
}

int32_t tok_map_find2(const tok_map *m, const char *a, size_t alen, char sep, const char *b,
                      size_t blen) {
    if (!m->slot) return -1;
    uint32_t h = hash2(a, alen, sep, b, blen) & m->mask;
    while (m->slot[h] >= 0) {
        if (key_equals(m, m->slot[h], a, alen, sep, b, blen)) return m->slot[h];
        h = (h + 1) & m->mask;
    }
    return -1;
}
