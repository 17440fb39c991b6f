/* pretok: see pretok.h. The regexes are written out as scanners because a general regex engine
 * would need \p{..} classes and lookahead; the scanners also run in linear time on any input.
 * Alternatives are tried in regex order at each position, each one greedy, as in the regex. */
#include "pretok.h"

#include <errno.h>
#include <string.h>

#include "unicode_cat.h"

#define OUT_OF_TEXT 0x100u /* class of a position past the end: matches nothing */

typedef struct scan {
    const uint32_t *c;
    size_t n;
    size_t prev_end;
    uint32_t *ends;
    size_t n_words;
} scan;

static const struct {
    const char *name;
    pretok_kind kind;
} k_names[] = {
    /* the names llama.cpp maps to these three regexes */
    {"default", PRETOK_LLAMA3},   {"llama3", PRETOK_LLAMA3},  {"llama-v3", PRETOK_LLAMA3},
    {"llama-bpe", PRETOK_LLAMA3}, {"falcon3", PRETOK_LLAMA3}, {"falcon-h1", PRETOK_LLAMA3},
    {"pixtral", PRETOK_LLAMA3},   {"qwen2", PRETOK_QWEN2},    {"deepseek-r1-qwen", PRETOK_QWEN2},
    {"stablelm2", PRETOK_QWEN2},  {"gpt-2", PRETOK_GPT2},     {"gpt2", PRETOK_GPT2},
    {"phi-2", PRETOK_GPT2},       {"mpt", PRETOK_GPT2},       {"olmo", PRETOK_GPT2},
};

int pretok_from_name(const char *name, pretok_kind *kind) {
    if (!name || !*name) name = "default";
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++) {
        if (strcmp(name, k_names[i].name) == 0) {
            *kind = k_names[i].kind;
            return 0;
        }
    }
    return -ENOENT;
}

const char *pretok_names(void) {
    return "default, llama3, llama-v3, llama-bpe, falcon3, falcon-h1, pixtral, qwen2, "
           "deepseek-r1-qwen, stablelm2, gpt-2, gpt2, phi-2, mpt, olmo";
}

static unsigned cls(const scan *s, size_t pos) {
    return pos < s->n ? ucat_of(s->c[pos]) : OUT_OF_TEXT;
}

static uint32_t cpt_at(const scan *s, size_t pos) {
    return pos < s->n ? s->c[pos] : 0xFFFFFFFFu;
}

/* [^\s\p{L}\p{N}] inside the text */
static int is_other(unsigned f) {
    return f == 0;
}

static size_t emit(scan *s, size_t end) {
    size_t len = end - s->prev_end;
    if (len > 0) s->ends[s->n_words++] = (uint32_t)end;
    s->prev_end = end;
    return len;
}

static uint32_t ascii_lower(uint32_t c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* 's 't 're 've 'm 'll 'd at pos: returns the match length (0 if none). */
static size_t contraction(const scan *s, size_t pos, int fold_case) {
    if (cpt_at(s, pos) != '\'' || pos + 1 >= s->n) return 0;
    uint32_t a = cpt_at(s, pos + 1), b = pos + 2 < s->n ? cpt_at(s, pos + 2) : 0;
    if (fold_case) {
        a = ascii_lower(a);
        b = ascii_lower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static size_t whitespace_run(const scan *s, size_t pos, size_t *after_last_newline) {
    size_t k = 0;
    *after_last_newline = 0;
    while (cls(s, pos + k) & UCAT_SPACE) {
        uint32_t c = s->c[pos + k];
        if (c == '\r' || c == '\n') *after_last_newline = pos + k + 1;
        k++;
    }
    return k;
}

/* One word of the llama-3 / qwen2 regex starting at pos; returns the new position. */
static size_t step_llama3(scan *s, size_t pos, size_t max_digits) {
    uint32_t c = s->c[pos];
    unsigned f = cls(s, pos);
    size_t k = contraction(s, pos, 1);
    if (k) return emit(s, pos + k), pos + k;
    if (!(c == '\r' || c == '\n' || (f & UCAT_NUMBER)) &&
        ((f & UCAT_LETTER) || (cls(s, pos + 1) & UCAT_LETTER))) {
        pos++;
        while (cls(s, pos) & UCAT_LETTER)
            pos++;
        emit(s, pos);
        return pos;
    }
    if (f & UCAT_NUMBER) {
        size_t start = pos;
        while (cls(s, pos) & UCAT_NUMBER) {
            if (++pos - start >= max_digits) {
                emit(s, pos);
                start = pos;
            }
        }
        emit(s, pos);
        return pos;
    }
    unsigned f2 = c == ' ' ? cls(s, pos + 1) : f;
    if (is_other(f2)) {
        pos += (c == ' ');
        while (is_other(cls(s, pos)))
            pos++;
        while (cpt_at(s, pos) == '\r' || cpt_at(s, pos) == '\n')
            pos++;
        emit(s, pos);
        return pos;
    }
    size_t nl_end, nws = whitespace_run(s, pos, &nl_end);
    if (nl_end > 0)
        pos = nl_end;
    else if (nws > 1 && pos + nws < s->n)
        pos += nws - 1;
    else if (nws > 0)
        pos += nws;
    else
        pos++;
    emit(s, pos);
    return pos;
}

static size_t step_gpt2(scan *s, size_t pos) {
    uint32_t c = s->c[pos];
    size_t k = contraction(s, pos, 0);
    if (k) return emit(s, pos + k), pos + k;
    unsigned f2 = c == ' ' ? cls(s, pos + 1) : cls(s, pos);
    unsigned want = (f2 & UCAT_LETTER) ? UCAT_LETTER : (f2 & UCAT_NUMBER) ? UCAT_NUMBER : 0;
    if (want || is_other(f2)) {
        pos += (c == ' ');
        if (want) {
            while (cls(s, pos) & want)
                pos++;
        } else {
            while (is_other(cls(s, pos)))
                pos++;
        }
        emit(s, pos);
        return pos;
    }
    size_t nl_end, nws = whitespace_run(s, pos, &nl_end);
    if (nws > 1 && pos + nws < s->n)
        pos += nws - 1;
    else if (nws > 0)
        pos += nws;
    else
        pos++;
    emit(s, pos);
    return pos;
}

size_t pretok_split(pretok_kind kind, const uint32_t *cpts, size_t n, uint32_t *ends) {
    scan s = {cpts, n, 0, ends, 0};
    size_t pos = 0;
    while (pos < n) {
        switch (kind) {
        case PRETOK_LLAMA3:
            pos = step_llama3(&s, pos, 3);
            break;
        case PRETOK_QWEN2:
            pos = step_llama3(&s, pos, 1);
            break;
        default:
            pos = step_gpt2(&s, pos);
            break;
        }
    }
    return s.n_words;
}
