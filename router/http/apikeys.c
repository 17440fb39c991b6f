/* apikeys: constant-time membership test over a small list of secrets.
 * Each candidate is compared over the full APIKEYS_MAX_LEN bytes against every stored key and the
 * results are OR-ed without branching, so timing does not depend on where a mismatch happens. */
#include "apikeys.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct apikeys {
    unsigned char (*keys)[APIKEYS_MAX_LEN]; /* zero-padded */
    size_t *lens;
    size_t n, cap;
};

void apikeys_free(apikeys *k) {
    if (!k) return;
    if (k->keys) memset(k->keys, 0, k->cap * APIKEYS_MAX_LEN); /* don't leave secrets in the heap */
    free(k->keys);
    free(k->lens);
    free(k);
}

size_t apikeys_count(const apikeys *k) {
    return k ? k->n : 0;
}

static int add_key(apikeys *k, const char *s, size_t len, const char *where, sol_err *e) {
    if (len < APIKEYS_MIN_LEN || len > APIKEYS_MAX_LEN)
        return sol_err_set(e, -EINVAL, "%s: API key must be %d..%d characters, found %zu", where,
                           APIKEYS_MIN_LEN, APIKEYS_MAX_LEN, len);
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)s[i]))
            return sol_err_set(e, -EINVAL,
                               "%s: API key contains a space or control character at column %zu",
                               where, i + 1);
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 8;
        void *keys = realloc(k->keys, cap * APIKEYS_MAX_LEN);
        if (!keys) return sol_err_set(e, -ENOMEM, "out of memory");
        k->keys = keys;
        size_t *lens = realloc(k->lens, cap * sizeof *lens);
        if (!lens) return sol_err_set(e, -ENOMEM, "out of memory");
        k->lens = lens;
        k->cap = cap;
    }
    memset(k->keys[k->n], 0, APIKEYS_MAX_LEN);
    memcpy(k->keys[k->n], s, len);
    k->lens[k->n++] = len;
    return 0;
}

int apikeys_from_list(const char *const *keys, size_t n, apikeys **out, sol_err *e) {
    *out = NULL;
    apikeys *k = calloc(1, sizeof *k);
    if (!k) return sol_err_set(e, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "key %zu", i);
        int rc = add_key(k, keys[i], strlen(keys[i]), where, e);
        if (rc) {
            apikeys_free(k);
            return rc;
        }
    }
    *out = k;
    return 0;
}

int apikeys_load(const char *path, apikeys **out, sol_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return sol_err_set(e, -errno, "%s: cannot open API keys file: %s", path, strerror(errno));
    apikeys *k = calloc(1, sizeof *k);
    char *line = NULL;
    size_t cap = 0;
    unsigned ln = 0;
    int rc = k ? 0 : sol_err_set(e, -ENOMEM, "out of memory");
    ssize_t got;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        ln++;
        char *s = line, *end = line + got;
        while (s < end && isspace((unsigned char)*s))
            s++;
        while (end > s && isspace((unsigned char)end[-1]))
            end--;
        if (s == end || *s == '#') continue;
        char where[64];
        snprintf(where, sizeof where, "%.40s:%u", path, ln);
        rc = add_key(k, s, (size_t)(end - s), where, e);
    }
    if (line) memset(line, 0, cap);
    free(line);
    fclose(f);
    if (!rc && k->n == 0)
        rc = sol_err_set(e, -EINVAL, "%s: no API keys found (one per line)", path);
    if (rc) {
        apikeys_free(k);
        return rc;
    }
    *out = k;
    return 0;
}

int apikeys_check(const apikeys *k, const char *key, size_t len) {
    if (!k || !key) return 0;
    unsigned char cand[APIKEYS_MAX_LEN] = {0};
    unsigned too_long = len > APIKEYS_MAX_LEN;
    memcpy(cand, key, too_long ? APIKEYS_MAX_LEN : len);
    unsigned found = 0;
    for (size_t i = 0; i < k->n; i++) {
        unsigned diff = (unsigned)(k->lens[i] ^ len);
        for (size_t j = 0; j < APIKEYS_MAX_LEN; j++)
            diff |= k->keys[i][j] ^ cand[j];
        found |= (diff == 0);
    }
    memset(cand, 0, sizeof cand);
    return (int)(found & !too_long);
}

int apikeys_check_bearer(const apikeys *k, const char *header, const char **key_out) {
    if (!header || strncasecmp(header, "Bearer ", 7)) return 0;
    const char *key = header + 7;
    while (*key == ' ')
        key++;
    size_t len = strlen(key);
    while (len && (key[len - 1] == ' ' || key[len - 1] == '\t'))
        len--;
    if (!apikeys_check(k, key, len)) return 0;
    if (key_out) *key_out = key;
    return 1;
}
