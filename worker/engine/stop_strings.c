/* stop_strings: a small held-back buffer per request. Every match must start inside the held text
 * (released text never ends with a stop-string prefix), so each feed searches only that buffer:
 * O((max stop length + delta) x stops) per token, no allocation once the buffer has grown. */
#include "stop_strings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int stop_text_init(stop_text *st, const char *const *stops, size_t n, sol_err *err) {
    memset(st, 0, sizeof *st);
    if (n == 0) return 0;
    st->stops = calloc(n, sizeof *st->stops);
    st->stop_lens = calloc(n, sizeof *st->stop_lens);
    if (!st->stops || !st->stop_lens) goto oom;
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            stop_text_free(st);
            return sol_err_set(err, -EINVAL, "stop[%zu]: expected a non-empty string", i);
        }
        st->stop_lens[i] = strlen(stops[i]);
        if (!(st->stops[i] = strdup(stops[i]))) goto oom;
        st->n_stops = i + 1;
        if (st->stop_lens[i] > st->max_len) st->max_len = st->stop_lens[i];
    }
    st->cap = st->max_len * 2 + 64;
    if (!(st->held = malloc(st->cap))) goto oom;
    return 0;
oom:
    stop_text_free(st);
    return sol_err_set(err, -ENOMEM, "out of memory for stop strings");
}

void stop_text_free(stop_text *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_stops; i++)
        free(st->stops[i]);
    free(st->stops);
    free(st->stop_lens);
    free(st->held);
    memset(st, 0, sizeof *st);
}

static const char *find(const char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

/* Length of the longest tail of h[0, n) that is a proper prefix of some stop string. */
static size_t pending_prefix(const stop_text *st, const char *h, size_t n) {
    size_t best = 0;
    for (size_t s = 0; s < st->n_stops; s++) {
        size_t m = st->stop_lens[s] - 1 < n ? st->stop_lens[s] - 1 : n;
        for (size_t k = m; k > best; k--)
            if (memcmp(h + n - k, st->stops[s], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

int stop_text_feed(stop_text *st, const char *delta, size_t len, const char **out,
                   size_t *out_len) {
    *out = delta;
    *out_len = len;
    if (st->n_stops == 0) return 0;
    *out_len = 0;
    if (st->matched) return 1;
    /* Drop what the previous call released. */
    memmove(st->held, st->held + st->emitted, st->len - st->emitted);
    st->len -= st->emitted;
    st->emitted = 0;
    if (st->len + len > st->cap) {
        size_t cap = (st->len + len) * 2;
        char *h = realloc(st->held, cap);
        if (!h) return -ENOMEM;
        st->held = h;
        st->cap = cap;
    }
    memcpy(st->held + st->len, delta, len);
    st->len += len;
    const char *first = NULL;
    for (size_t s = 0; s < st->n_stops; s++) {
        const char *p = find(st->held, st->len, st->stops[s], st->stop_lens[s]);
        if (p && (!first || p < first)) first = p;
    }
    *out = st->held;
    if (first) {
        *out_len = (size_t)(first - st->held);
        st->matched = 1;
        st->emitted = st->len = 0;
        return 1;
    }
    st->emitted = st->len - pending_prefix(st, st->held, st->len);
    *out_len = st->emitted;
    return 0;
}

void stop_text_flush(stop_text *st, const char **out, size_t *out_len) {
    *out = st->held;
    *out_len = 0;
    if (st->n_stops == 0 || st->matched) return;
    *out = st->held + st->emitted;
    *out_len = st->len - st->emitted;
    st->emitted = st->len;
}
