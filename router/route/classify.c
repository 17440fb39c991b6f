/* classify: the routing decision over request text, tags and limits.
 * The router is tokenizer-free, so every length here is in characters, not tokens. Rules are
 * evaluated in config order and the first match wins, so an operator reads the config top down
 * the way the router does. Tag rules are looked at before other rules: a caller's explicit tag
 * beats any heuristic. */
#include "classify.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rule {
    char *tag;
    size_t prompt_chars_below, prompt_chars_above;
    uint32_t max_tokens_below, max_tokens_above;
    char **keywords;
    size_t n_keywords;
    char *model;
    const char *pool; /* points into classify.pools */
} rule;

struct classify {
    char **pools;
    size_t n_pools;
    const char *default_pool;
    rule *rules;
    size_t n_rules;
    clf_model *model;
    double threshold;
    const char *clf_pos, *clf_neg;
};

const char *classify_pool(const classify *c, const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < c->n_pools; i++)
        if (!strcmp(c->pools[i], name)) return c->pools[i];
    return NULL;
}

size_t classify_n_pools(const classify *c) {
    return c->n_pools;
}

const char *classify_pool_at(const classify *c, size_t i) {
    return i < c->n_pools ? c->pools[i] : NULL;
}

void classify_free(classify *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_pools; i++)
        free(c->pools[i]);
    free(c->pools);
    for (size_t i = 0; i < c->n_rules; i++) {
        free(c->rules[i].tag);
        free(c->rules[i].model);
        for (size_t k = 0; k < c->rules[i].n_keywords; k++)
            free(c->rules[i].keywords[k]);
        free(c->rules[i].keywords);
    }
    free(c->rules);
    clf_model_free(c->model);
    free(c);
}

static int copy_rule(classify *c, const classify_rule *src, size_t i, sol_err *e) {
    rule *r = &c->rules[i];
    r->pool = classify_pool(c, src->pool);
    if (!r->pool)
        return sol_err_set(e, -EINVAL, "routing rule %zu: pool '%s' is not a known pool", i,
                           src->pool ? src->pool : "(none)");
    r->prompt_chars_below = src->prompt_chars_below;
    r->prompt_chars_above = src->prompt_chars_above;
    r->max_tokens_below = src->max_tokens_below;
    r->max_tokens_above = src->max_tokens_above;
    if ((src->tag && !(r->tag = strdup(src->tag))) ||
        (src->model && !(r->model = strdup(src->model))))
        return sol_err_set(e, -ENOMEM, "out of memory");
    if (src->n_keywords) {
        r->keywords = calloc(src->n_keywords, sizeof *r->keywords);
        if (!r->keywords) return sol_err_set(e, -ENOMEM, "out of memory");
        for (size_t k = 0; k < src->n_keywords; k++) {
            if (!src->keywords[k] || !src->keywords[k][0])
                return sol_err_set(e, -EINVAL, "routing rule %zu: keyword %zu is empty", i, k);
            if (!(r->keywords[r->n_keywords++] = strdup(src->keywords[k])))
                return sol_err_set(e, -ENOMEM, "out of memory");
        }
    }
    if (!r->tag && !r->prompt_chars_below && !r->prompt_chars_above && !r->max_tokens_below &&
        !r->max_tokens_above && !r->n_keywords && !r->model)
        return sol_err_set(e, -EINVAL,
                           "routing rule %zu: has no condition (it would match every "
                           "request; use default_pool instead)",
                           i);
    return 0;
}

static int load_classifier(classify *c, const classify_config *cfg, sol_err *e) {
    if (!cfg->classifier_path) return 0;
    int rc = clf_model_load(cfg->classifier_path, &c->model, e);
    if (rc) return rc;
    c->clf_pos = classify_pool(c, c->model->positive);
    c->clf_neg = classify_pool(c, c->model->negative);
    if (!c->clf_pos || !c->clf_neg)
        return sol_err_set(e, -EINVAL,
                           "%s: classifier pools '%s'/'%s' are not both configured pools",
                           cfg->classifier_path, c->model->positive, c->model->negative);
    c->threshold = cfg->classifier_threshold > 0 ? cfg->classifier_threshold : 0.5;
    if (c->threshold < 0.5 || c->threshold >= 1)
        return sol_err_set(e, -EINVAL, "classifier threshold must be in [0.5, 1), got %g",
                           c->threshold);
    return 0;
}

int classify_new(const classify_config *cfg, classify **out, sol_err *e) {
    *out = NULL;
    if (!cfg->n_pools) return sol_err_set(e, -EINVAL, "routing: no pools configured");
    classify *c = calloc(1, sizeof *c);
    if (!c) return sol_err_set(e, -ENOMEM, "out of memory");
    int rc = 0;
    c->pools = calloc(cfg->n_pools, sizeof *c->pools);
    c->rules = calloc(cfg->n_rules ? cfg->n_rules : 1, sizeof *c->rules);
    if (!c->pools || !c->rules) {
        rc = sol_err_set(e, -ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_pools; i++) {
        if (!(c->pools[c->n_pools++] = strdup(cfg->pools[i]))) {
            rc = sol_err_set(e, -ENOMEM, "out of memory");
            goto fail;
        }
    }
    c->default_pool = classify_pool(c, cfg->default_pool);
    if (!c->default_pool) {
        rc = sol_err_set(e, -EINVAL, "routing.default_pool '%s' is not a known pool",
                         cfg->default_pool ? cfg->default_pool : "(none)");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_rules; i++) {
        c->n_rules++;
        if ((rc = copy_rule(c, &cfg->rules[i], i, e))) goto fail;
    }
    if ((rc = load_classifier(c, cfg, e))) goto fail;
    *out = c;
    return 0;
fail:
    classify_free(c);
    return rc;
}

/* ---- matching -------------------------------------------------------------------------------- */

static size_t count_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* ASCII case-insensitive substring search (non-ASCII bytes compare exactly). */
static int contains_nocase(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m > n) return 0;
    for (size_t i = 0; i + m <= n; i++) {
        size_t j = 0;
        while (j < m && tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j]))
            j++;
        if (j == m) return 1;
    }
    return 0;
}

static int has_tag(const classify_input *in, const char *tag) {
    for (size_t i = 0; i < in->n_tags; i++)
        if (in->tags[i] && !strcmp(in->tags[i], tag)) return 1;
    return 0;
}

static int rule_matches(const rule *r, const classify_input *in, size_t chars) {
    if (r->tag && !has_tag(in, r->tag)) return 0;
    if (r->model && (!in->model || strcmp(r->model, in->model))) return 0;
    if (r->prompt_chars_below && !(chars < r->prompt_chars_below)) return 0;
    if (r->prompt_chars_above && !(chars > r->prompt_chars_above)) return 0;
    if (r->max_tokens_below && !(in->max_tokens_set && in->max_tokens < r->max_tokens_below))
        return 0;
    if (r->max_tokens_above && in->max_tokens_set && !(in->max_tokens > r->max_tokens_above))
        return 0;
    if (r->n_keywords) {
        size_t k = 0;
        while (k < r->n_keywords && !contains_nocase(in->text, in->text_len, r->keywords[k]))
            k++;
        if (k == r->n_keywords) return 0;
    }
    return 1;
}

static int set(classify_result *out, const char *pool, const char *reason) {
    out->pool = pool;
    snprintf(out->reason, sizeof out->reason, "%s", reason);
    return 0;
}

int classify_route(const classify *c, const classify_input *in, classify_result *out) {
    const char *p = classify_pool(c, in->model);
    if (p) return set(out, p, "model");

    for (size_t i = 0; i < in->n_tags; i++)
        if ((p = classify_pool(c, in->tags[i]))) return set(out, p, "tag");

    size_t chars = count_chars(in->text, in->text_len);
    char reason[CLASSIFY_REASON_MAX];
    for (int pass = 0; pass < 2; pass++) { /* pass 0: rules with a tag condition, then the rest */
        for (size_t i = 0; i < c->n_rules; i++) {
            const rule *r = &c->rules[i];
            if ((pass == 0) != (r->tag != NULL) || !rule_matches(r, in, chars)) continue;
            snprintf(reason, sizeof reason, "rule:%zu", i);
            return set(out, r->pool, reason);
        }
    }

    if (c->model) {
        const char *t = in->user_text ? in->user_text : in->text;
        size_t n = in->user_text ? in->user_text_len : in->text_len;
        double pp = clf_model_predict(c->model, t, n);
        if (pp >= c->threshold || 1.0 - pp >= c->threshold) {
            int pos = pp >= c->threshold;
            snprintf(reason, sizeof reason, "classifier:%.2f", pos ? pp : 1.0 - pp);
            return set(out, pos ? c->clf_pos : c->clf_neg, reason);
        }
    }
    return set(out, c->default_pool, "default");
}

size_t classify_split_tags(const char *header, char *store, size_t cap, const char **tags,
                           size_t max) {
    size_t n = 0, used = 0;
    const char *s = header;
    while (s && *s && n < max) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        const char *start = s;
        while (*s && *s != ',')
            s++;
        const char *end = s;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        size_t len = (size_t)(end - start);
        if (!len) continue;
        if (used + len + 1 > cap) break;
        memcpy(store + used, start, len);
        store[used + len] = '\0';
        tags[n++] = store + used;
        used += len + 1;
    }
    return n;
}
