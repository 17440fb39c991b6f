/* strbuf: growable byte buffer and JSON string escaping.
 * UTF-8 validation lives here too because escaping needs it and the request parser reuses it. */
#include "strbuf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void strbuf_init(strbuf *b) {
    memset(b, 0, sizeof *b);
}

void strbuf_free(strbuf *b) {
    if (!b) return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

void strbuf_reset(strbuf *b) {
    b->len = 0;
    if (b->cap) b->data[0] = '\0';
}

int strbuf_reserve(strbuf *b, size_t extra) {
    if (b->oom) return -ENOMEM;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = 1;
            return -ENOMEM;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return -ENOMEM;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int strbuf_append(strbuf *b, const void *s, size_t n) {
    if (strbuf_reserve(b, n) < 0) return -ENOMEM;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int strbuf_puts(strbuf *b, const char *s) {
    return strbuf_append(b, s, strlen(s));
}

int strbuf_putc(strbuf *b, char c) {
    return strbuf_append(b, &c, 1);
}

int strbuf_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -EINVAL;
    if ((size_t)n < sizeof small) return strbuf_append(b, small, (size_t)n);
    if (strbuf_reserve(b, (size_t)n) < 0) return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int strbuf_json_str(strbuf *b, const char *s, size_t n) {
    /* worst case every byte becomes "\u00XX" (6) */
    if (strbuf_reserve(b, n * 6 + 2) < 0) return -ENOMEM;
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    char *o = b->data + b->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        if (c >= 0x80) {
            int l = utf8_check(u + i, n - i); /* a truncated sequence is invalid here */
            if (l > 0) {
                memcpy(o, u + i, l);
                o += l;
                i += l;
            } else {
                memcpy(o, "\\ufffd", 6);
                o += 6;
                i++;
            }
            continue;
        }
        i++;
        switch (c) {
        case '"':
            *o++ = '\\';
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            *o++ = '\\';
            break;
        case '\n':
            *o++ = '\\';
            *o++ = 'n';
            break;
        case '\r':
            *o++ = '\\';
            *o++ = 'r';
            break;
        case '\t':
            *o++ = '\\';
            *o++ = 't';
            break;
        default:
            if (c < 0x20 || c == 0x7F) {
                memcpy(o, "\\u00", 4);
                o[4] = hex[c >> 4];
                o[5] = hex[c & 15];
                o += 6;
            } else {
                *o++ = (char)c;
            }
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return 0;
}

char *strbuf_take(strbuf *b, size_t *len) {
    if (len) *len = b->len;
    char *p = b->data;
    if (!p) p = calloc(1, 1);
    memset(b, 0, sizeof *b);
    return p;
}

int strbuf_read_file(strbuf *b, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    int rc = 0;
    for (;;) {
        if ((rc = strbuf_reserve(b, 65536))) break;
        size_t r = fread(b->data + b->len, 1, b->cap - b->len - 1, f);
        if (r == 0) break;
        b->len += r;
        b->data[b->len] = '\0';
    }
    if (!rc && ferror(f)) rc = -EIO;
    fclose(f);
    return rc;
}

int strbuf_has_line(const strbuf *b, const char *line) {
    size_t n = strlen(line);
    if (!n || b->len < 2) return 0;
    for (const char *p = b->data; (p = strstr(p, line)); p++)
        if (p > b->data && p[-1] == '\n' && p[n] == '\n') return 1;
    return 0;
}
