/* utf8: see utf8.h. The lenient decoder mirrors what llama.cpp's tokenizer does with bad input, so
 * both split invalid text the same way; the strict checker guards what Sol sends to clients. */
#include "utf8.h"

size_t utf8_lead_len(uint8_t b) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[b >> 4];
}

static int is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

uint32_t utf8_decode(const uint8_t *s, size_t n, size_t *pos) {
    size_t i = *pos;
    uint8_t b = s[i];
    size_t need;
    uint32_t cpt;
    if (b < 0x80) {
        *pos = i + 1;
        return b;
    }
    if (b < 0xC0 || b >= 0xF8) {
        *pos = i + 1;
        return UTF8_REPLACEMENT;
    }
    need = b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
    cpt = b & (0x3F >> need);
    if (i + need >= n) {
        *pos = i + 1;
        return UTF8_REPLACEMENT;
    }
    for (size_t k = 1; k <= need; k++) {
        if (!is_cont(s[i + k])) {
            *pos = i + 1;
            return UTF8_REPLACEMENT;
        }
        cpt = (cpt << 6) | (s[i + k] & 0x3F);
    }
    *pos = i + need + 1;
    return cpt;
}

size_t utf8_encode(uint32_t cpt, uint8_t *out) {
    if (cpt < 0x80) {
        out[0] = (uint8_t)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cpt >> 6));
        out[1] = (uint8_t)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cpt >> 12));
        out[1] = (uint8_t)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cpt & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cpt >> 18));
    out[1] = (uint8_t)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cpt & 0x3F));
    return 4;
}

int utf8_check(const uint8_t *s, size_t n) {
    uint8_t b = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte (RFC 3629 table) */
    if (b < 0x80) return 1;
    if (b < 0xC2 || b > 0xF4) return -1;
    if (b < 0xE0) {
        need = 2;
    } else if (b < 0xF0) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    }
    for (size_t k = 1; k < need; k++) {
        if (k >= n) return 0;
        uint8_t c = s[k];
        if (k == 1 ? (c < lo || c > hi) : !is_cont(c)) return -1;
    }
    return (int)need;
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        int l = utf8_check(u + i, n - i);
        if (l <= 0) break;
        i += (size_t)l;
    }
    return i;
}
