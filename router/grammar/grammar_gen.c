/* grammar_gen: JSON Schema, regexes and choices to GBNF text. One rule per schema node
 * ("s1", "s2", ...), the JSON building blocks (json-string, json-number, ...) appended once. */
#include "grammar_gen.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"
#include "grammar_range.h"
#include "regex_gbnf.h"

static int bad(gg *c, const char *path, const char *what) {
    return sol_err_set(c->err, -EINVAL, "%s: %s", path, what);
}

/* A JSON value's compact text as a literal (const, enum, property names). */
static int json_literal(gg *c, strbuf *o, const json_t *v, const char *path) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!text) return bad(c, path, "cannot encode the value");
    gbnf_literal(o, text, strlen(text));
    free(text);
    return 0;
}

static void common_rules(gg *c) {
    strbuf *o = c->out;
    if (c->used & USE_VALUE) {
        c->used |= USE_STRING | USE_NUMBER | USE_WS;
        strbuf_puts(o, "json-value ::= json-obj | json-arr | json-string | json-number | \"true\" "
                       "| \"false\" | \"null\"\n"
                       "json-obj ::= \"{\" ws ( json-string \":\" ws json-value ( \",\" ws "
                       "json-string \":\" ws json-value )* )? \"}\"\n"
                       "json-arr ::= \"[\" ws ( json-value ( \",\" ws json-value )* )? \"]\"\n");
    }
    if (c->used & USE_NUMBER) {
        c->used |= USE_INT;
        strbuf_puts(o, "json-number ::= json-int ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} "
                       ")?\n");
    }
    if (c->used & USE_INT) { /* integers a JSON client reads exactly: within ±(2^53 - 1) */
        strbuf_puts(o, "json-int ::= ");
        gg_int_range(o, -GG_INT_SAFE, GG_INT_SAFE);
        strbuf_putc(o, '\n');
    }
    if (c->used & USE_STRING) {
        c->used |= USE_CHAR;
        strbuf_puts(o, "json-string ::= \"\\\"\" json-char* \"\\\"\"\n");
    }
    if (c->used & USE_CHAR)
        /* \u escapes of lone surrogates (D800-DFFF) are left out: many parsers reject them */
        strbuf_puts(o, "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( "
                       "[0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n");
    if (c->used & USE_WS) strbuf_puts(o, "ws ::= \" \"?\n");
}

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

static const char *const k_annotations[] = {
    "title",      "description", "default",   "examples", "$schema",     "$id", "$comment",
    "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", NULL};
static const char *const k_keywords[] = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "strict",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "format",
                                         "multipleOf",
                                         NULL};

static int check_keywords(gg *c, const json_t *s, const char *path) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        (void)v;
        if (in_list(k, k_annotations) || in_list(k, k_keywords)) continue;
        char where[300];
        snprintf(where, sizeof where, "%.200s.%.64s", path, k);
        return bad(c, where, "unsupported JSON Schema keyword (docs/api.md lists the subset)");
    }
    return 0;
}

static int get_count(gg *c, const json_t *s, const char *key, const char *path, int def, int *out) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return 0;
    char where[300];
    snprintf(where, sizeof where, "%.200s.%.60s", path, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000)
        return bad(c, where, "must be an integer from 0 to 1000");
    *out = (int)json_integer_value(v);
    return 0;
}

/* JSON Schema's string formats, each as a regex of the subset (RFC 3339 dates and times, RFC
 * 9562 UUIDs with their version and variant digits, dotted-quad IPv4, LDH hostnames). ipv6 is
 * built by ipv6_regex. */
#define HEX4 "[0-9a-fA-F]{1,4}"
#define D4 "[0-9]{1,4}"
#define DATE_RE "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
#define TIME_RE                                                                                    \
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]" \
    ")"
#define DUR_T "T(" D4 "H(" D4 "M(" D4 "S)?)?|" D4 "M(" D4 "S)?|" D4 "S)"
#define LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
static const struct {
    const char *name, *re;
} k_formats[] = {
    {"date-time", DATE_RE "T" TIME_RE},
    {"date", DATE_RE},
    {"time", TIME_RE},
    {"duration",
     "P((" D4 "D|" D4 "M(" D4 "D)?|" D4 "Y(" D4 "M(" D4 "D)?)?)(" DUR_T ")?|" DUR_T "|" D4 "W)"},
    {"email", "[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@(" LABEL "\\.)+[A-Za-z]{2,24}"},
    {"hostname", LABEL "(\\." LABEL ")*"},
    {"ipv4", OCTET "(\\." OCTET "){3}"},
    {"ipv6", NULL},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-"
             "[0-9a-fA-F]{12}"},
};

/* IPv6: eight groups, or l groups "::" r more with l + r <= 7 (each split its own branch, so no
 * text has too many groups). */
static void ipv6_regex(strbuf *o) {
    strbuf_puts(o, HEX4 "(:" HEX4 "){7}");
    for (int l = 0; l <= 7; l++) {
        strbuf_puts(o, "|");
        if (l) strbuf_printf(o, HEX4 "(:" HEX4 "){%d}", l - 1);
        strbuf_puts(o, "::");
        if (7 - l > 0) strbuf_printf(o, "(" HEX4 "(:" HEX4 "){0,%d})?", 6 - l);
    }
}

static int format_regex(gg *c, const json_t *f, const char *path, strbuf *re) {
    char where[300];
    snprintf(where, sizeof where, "%.200s.format", path);
    if (!json_is_string(f)) return bad(c, where, "must be a string");
    for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++) {
        if (strcmp(json_string_value(f), k_formats[i].name)) continue;
        if (k_formats[i].re)
            strbuf_puts(re, k_formats[i].re);
        else
            ipv6_regex(re);
        return 0;
    }
    return bad(c, where,
               "unsupported format (date-time, date, time, duration, email, hostname, ipv4, "
               "ipv6, uuid)");
}

/* The regex as a GBNF expression into body (inside a JSON string), its length held to min..max
 * too when those bound it (max < 0: none): the automaton's rules go to the grammar's rules. */
static int regex_body(gg *c, strbuf *body, const char *re, int min, int max, const char *path) {
    if (!min && max < 0) return regex_gbnf(body, re, true, path, c->err);
    char name[32];
    snprintf(name, sizeof name, "len%d", ++c->n_rules);
    return regex_gbnf_bounded(c->out, body, name, re, true, min, max, path, c->err);
}

/* A string held to a regex: pattern when it is in the subset, else format's (zod writes both,
 * and some of its patterns use lookaround), and to min..max characters. */
static int regex_string(gg *c, strbuf *o, const json_t *pat, const json_t *fmt, int min, int max,
                        const char *path) {
    strbuf re, body;
    strbuf_init(&re), strbuf_init(&body);
    int rc = fmt ? format_regex(c, fmt, path, &re) : 0;
    if (!rc && pat && !json_is_string(pat)) rc = bad(c, path, "pattern must be a string");
    const char *use = re.data;
    if (!rc && pat) { /* a pattern outside the subset leaves the string to the format */
        strbuf probe;
        strbuf_init(&probe);
        rc = regex_gbnf(&probe, json_string_value(pat), true, path, c->err);
        strbuf_free(&probe);
        if (rc && fmt)
            sol_err_clear(c->err), rc = 0;
        else
            use = json_string_value(pat);
    }
    if (!rc) rc = regex_body(c, &body, use, min, max, path);
    if (!rc) strbuf_printf(o, "\"\\\"\" %s \"\\\"\"", body.data);
    strbuf_free(&re), strbuf_free(&body);
    return rc;
}

static int string_rule(gg *c, strbuf *o, const json_t *s, const char *path) {
    int min, max, rc;
    if ((rc = get_count(c, s, "minLength", path, 0, &min)) ||
        (rc = get_count(c, s, "maxLength", path, -1, &max)))
        return rc;
    if (max >= 0 && max < min) return bad(c, path, "maxLength is below minLength");
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat || fmt) return regex_string(c, o, pat, fmt, min, max, path);
    c->used |= USE_CHAR;
    strbuf_puts(o, "\"\\\"\" json-char");
    gbnf_repeat(o, min, max);
    strbuf_puts(o, " \"\\\"\"");
    return 0;
}

static int array_rule(gg *c, strbuf *o, const json_t *s, const char *path, int depth) {
    int min, max, rc;
    if ((rc = get_count(c, s, "minItems", path, 0, &min)) ||
        (rc = get_count(c, s, "maxItems", path, -1, &max)))
        return rc;
    if (max >= 0 && max < min) return bad(c, path, "maxItems is below minItems");
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    char item[32] = "json-value", where[300];
    c->used |= USE_WS;
    if (items) {
        snprintf(where, sizeof where, "%.200s.items", path);
        if ((rc = gg_schema_rule(c, items, where, item, depth + 1))) return rc;
    } else {
        c->used |= USE_VALUE;
    }
    strbuf tail; /* the rule text is built aside: sub-schemas append their own rules */
    strbuf_init(&tail);
    strbuf_puts(&tail, "\"[\" ws ");
    size_t n_prefix = prefix ? json_array_size(prefix) : 0;
    if (prefix && !json_is_array(prefix)) rc = bad(c, path, "prefixItems must be an array");
    for (size_t i = 0; i < n_prefix && !rc; i++) {
        char p[32];
        snprintf(where, sizeof where, "%.200s.prefixItems[%zu]", path, i);
        if ((rc = gg_schema_rule(c, json_array_get(prefix, i), where, p, depth + 1))) break;
        strbuf_printf(&tail, "%s%s ", i ? "\",\" ws " : "", p);
    }
    if (!rc && n_prefix) {
        strbuf_printf(&tail, "( \",\" ws %s )", item);
        int lo = min > (int)n_prefix ? min - (int)n_prefix : 0;
        gbnf_repeat(&tail, lo, max < 0 ? -1 : (max > (int)n_prefix ? max - (int)n_prefix : 0));
    } else if (!rc && (max < 0 || max > 0)) {
        if (min == 0)
            strbuf_printf(&tail, "( %s ( \",\" ws %s )", item, item);
        else
            strbuf_printf(&tail, "%s ( \",\" ws %s )", item, item);
        gbnf_repeat(&tail, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        if (min == 0) strbuf_puts(&tail, " )?");
    }
    strbuf_puts(&tail, " \"]\"");
    if (!rc) strbuf_append(o, tail.data, tail.len);
    strbuf_free(&tail);
    return rc;
}

/* Properties in the schema's order: the required ones, then each optional one maybe. */
static int object_rule(gg *c, strbuf *o, const json_t *s, const char *path, int depth) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *extra = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return bad(c, path, "properties must be an object");
    if (req && !json_is_array(req)) return bad(c, path, "required must be an array");
    if (extra && !json_is_boolean(extra) && !json_is_object(extra))
        return bad(c, path, "additionalProperties must be a boolean or a schema");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r)))
            return bad(c, path, "required names a property that properties does not define");
    }
    c->used |= USE_WS;
    strbuf kv[2]; /* [0] required "k": v parts, [1] optional ones, each rule name per line */
    strbuf_init(&kv[0]), strbuf_init(&kv[1]);
    int rc = 0, n_req = 0, n_opt = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        bool required = false;
        for (size_t i = 0; req && i < json_array_size(req); i++)
            required |= !strcmp(json_string_value(json_array_get(req, i)), k);
        char where[300], sub[32];
        snprintf(where, sizeof where, "%.200s.properties.%.64s", path, k);
        if ((rc = gg_schema_rule(c, v, where, sub, depth + 1))) break;
        strbuf *b = &kv[required ? 0 : 1];
        json_t *key = json_string(k);
        json_literal(c, b, key, where);
        json_decref(key);
        strbuf_printf(b, " \":\" ws %s\n", sub);
        required ? n_req++ : n_opt++;
    }
    char extra_rule[32] = "";
    if (!rc && extra && !json_is_false(extra)) {
        char where[300];
        snprintf(where, sizeof where, "%.200s.additionalProperties", path);
        if (json_is_true(extra))
            c->used |= USE_VALUE, strcpy(extra_rule, "json-value");
        else
            rc = gg_schema_rule(c, extra, where, extra_rule, depth + 1);
        c->used |= USE_STRING;
    }
    if (rc) {
        strbuf_free(&kv[0]), strbuf_free(&kv[1]);
        return rc;
    }
    /* Optional ones: tail_i ::= kv_i ( "," ws tail_i+1 )? | tail_i+1, tail_last ::= kv_last */
    int tail0 = c->n_rules + 1;
    c->n_rules += n_opt;
    strbuf rules;
    strbuf_init(&rules);
    char *line = kv[1].data;
    for (int i = 0; i < n_opt; i++) {
        char *nl = strchr(line, '\n');
        *nl = 0;
        strbuf_printf(&rules, "s%d ::= %s", tail0 + i, line);
        if (i + 1 < n_opt)
            strbuf_printf(&rules, " ( \",\" ws s%d )? | s%d", tail0 + i + 1, tail0 + i + 1);
        strbuf_putc(&rules, '\n');
        line = nl + 1;
    }
    strbuf_puts(o, "\"{\" ws ");
    line = kv[0].data;
    for (int i = 0; i < n_req; i++) {
        char *nl = strchr(line, '\n');
        *nl = 0;
        strbuf_printf(o, "%s%s ", i ? "\",\" ws " : "", line);
        line = nl + 1;
    }
    if (n_opt) strbuf_printf(o, n_req ? "( \",\" ws s%d )? " : "s%d? ", tail0);
    if (extra_rule[0])
        strbuf_printf(o, "( %sjson-string \":\" ws %s )* ", n_req || n_opt ? "\",\" ws " : "",
                      extra_rule);
    strbuf_puts(o, "\"}\"");
    strbuf_append(c->out, rules.data ? rules.data : "", rules.len);
    strbuf_free(&rules), strbuf_free(&kv[0]), strbuf_free(&kv[1]);
    return 0;
}

/* "#/$defs/name" or "#/definitions/name": the rule "def-N" (made once; recursion allowed). */
static int ref_rule(gg *c, const char *ref, const char *path, char *name, int depth) {
    const char *key = NULL;
    const json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8))
        key = ref + 8, defs = json_object_get(c->root, "$defs");
    else if (!strncmp(ref, "#/definitions/", 14))
        key = ref + 14, defs = json_object_get(c->root, "definitions");
    const json_t *target = key && defs ? json_object_get(defs, key) : NULL;
    if (!target) return bad(c, path, "$ref must name an entry of $defs or definitions");
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], ref)) return snprintf(name, 32, "def-%d", c->def_base + i), 0;
    if (c->n_refs == 64) return bad(c, path, "more than 64 $ref targets");
    snprintf(c->refs[c->n_refs], sizeof c->refs[0], "%s", ref);
    int id = c->def_base + c->n_refs++;
    snprintf(name, 32, "def-%d", id);
    char sub[32], where[300];
    snprintf(where, sizeof where, "%.200s", ref);
    int rc = gg_schema_rule(c, target, where, sub, depth + 1);
    if (!rc) strbuf_printf(c->out, "def-%d ::= %s\n", id, sub);
    return rc;
}

/* The bound keywords of numbers, in one table: which side, and whether the bound itself is out. */
static const struct {
    const char *key;
    bool upper, exclusive;
} k_bounds[] = {{"minimum", false, false},
                {"exclusiveMinimum", false, true},
                {"maximum", true, false},
                {"exclusiveMaximum", true, true}};
enum { N_BOUNDS = sizeof k_bounds / sizeof k_bounds[0] };

/* The first bound keyword s has, or NULL. */
static const char *first_bound(const json_t *s) {
    for (int i = 0; i < N_BOUNDS; i++)
        if (json_object_get(s, k_bounds[i].key)) return k_bounds[i].key;
    return NULL;
}

/* The tightest of s's bounds (each side: the larger lower or smaller upper value, exclusive on a
 * tie); ±INFINITY where s has none. */
typedef struct bounds {
    double lo, hi;
    bool lo_x, hi_x;
} bounds;

static int read_bounds(gg *c, const json_t *s, const char *path, bounds *r) {
    *r = (bounds){-INFINITY, INFINITY, false, false};
    char where[300];
    for (int i = 0; i < N_BOUNDS; i++) {
        const json_t *v = json_object_get(s, k_bounds[i].key);
        if (!v) continue;
        snprintf(where, sizeof where, "%.200s.%s", path, k_bounds[i].key);
        if (!json_is_number(v)) return bad(c, where, "must be a number");
        double x = json_number_value(v);
        bool ex = k_bounds[i].exclusive;
        if (k_bounds[i].upper && (x < r->hi || (x == r->hi && ex))) r->hi = x, r->hi_x = ex;
        if (!k_bounds[i].upper && (x > r->lo || (x == r->lo && ex))) r->lo = x, r->lo_x = ex;
    }
    return 0;
}

/* x within ±(2^53 - 1). */
static double clamp_safe(double x) {
    return x < (double)-GG_INT_SAFE  ? (double)-GG_INT_SAFE
           : x > (double)GG_INT_SAFE ? (double)GG_INT_SAFE
                                     : x;
}

/* multipleOf m on an integer in lo..hi: the multiples listed when the range holds few, else
 * (no bounds given) an automaton over the digits' remainder mod m. */
static int multiple_rule(gg *c, strbuf *b, const json_t *s, const char *path, int64_t lo,
                         int64_t hi) {
    const json_t *v = json_object_get(s, "multipleOf");
    char where[300];
    snprintf(where, sizeof where, "%.200s.multipleOf", path);
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return bad(c, where, "must be a positive integer (multipleOf holds integers only)");
    int64_t m = json_integer_value(v);
    if (m == 1) return c->used |= USE_INT, gg_int_range(b, lo, hi), 0;
    if (!gg_int_multiples_listed(b, lo, hi, m)) return 0;
    if (lo == -GG_INT_SAFE && hi == GG_INT_SAFE && m <= GG_MULTIPLE_OF_MAX) {
        char name[32];
        snprintf(name, sizeof name, "mult-%d", ++c->n_rules);
        gg_int_multiples_dfa(c->out, b, name, (int)m);
        return 0;
    }
    return bad(c, where,
               lo > hi || (hi - lo) / m < GG_MULTIPLES_MAX
                   ? "no multiple lies within minimum/maximum"
                   : "held by listing the multiples within minimum/maximum (at most 512), or "
                     "without bounds for multipleOf up to 64: this schema is neither");
}

/* An integer within s's bounds (none: the ±(2^53 - 1) that JSON clients read exactly). */
static int int_rule(gg *c, strbuf *b, const json_t *s, const char *path) {
    bounds r;
    int rc = read_bounds(c, s, path, &r);
    if (rc) return rc;
    /* the integers inside: the nearest to each bound, clamped to the safe range */
    int64_t lo = (int64_t)clamp_safe(r.lo_x ? floor(r.lo) + 1 : ceil(r.lo));
    int64_t hi = (int64_t)clamp_safe(r.hi_x ? ceil(r.hi) - 1 : floor(r.hi));
    if (lo > hi) return bad(c, path, "no integer lies within minimum/maximum");
    if (json_object_get(s, "multipleOf")) return multiple_rule(c, b, s, path, lo, hi);
    if (lo == -GG_INT_SAFE && hi == GG_INT_SAFE)
        return c->used |= USE_INT, strbuf_puts(b, "json-int"), 0;
    gg_int_range(b, lo, hi);
    return 0;
}

/* A number within s's bounds (gg_num_range: no exponent, fractions only where they all fit);
 * none: any JSON number. */
static int number_rule(gg *c, strbuf *b, const json_t *s, const char *path) {
    if (json_object_get(s, "multipleOf")) {
        char where[300];
        snprintf(where, sizeof where, "%.200s.multipleOf", path);
        return bad(c, where, "on type number is not supported (on integer it is)");
    }
    if (!first_bound(s)) return c->used |= USE_NUMBER, strbuf_puts(b, "json-number"), 0;
    bounds r;
    int rc = read_bounds(c, s, path, &r);
    if (rc) return rc;
    int rc2 = gg_num_range(b, r.lo, r.lo_x, r.hi, r.hi_x);
    if (rc2 == -2)
        return bad(c, path,
                   "a bound (minimum/maximum) needs more than 15 fraction digits; numbers are "
                   "written with at most 15");
    if (rc2)
        return bad(c, path,
                   "no number lies within minimum/maximum (numbers are written with at most 15 "
                   "fraction digits)");
    return 0;
}

static int one_type(gg *c, strbuf *b, const json_t *s, const char *t, const char *path, int depth) {
    if (!strcmp(t, "string")) return string_rule(c, b, s, path);
    if (!strcmp(t, "object")) return object_rule(c, b, s, path, depth);
    if (!strcmp(t, "array")) return array_rule(c, b, s, path, depth);
    if (!strcmp(t, "integer")) return int_rule(c, b, s, path);
    if (!strcmp(t, "number")) return number_rule(c, b, s, path);
    if (!strcmp(t, "boolean")) return strbuf_puts(b, "( \"true\" | \"false\" )"), 0;
    if (!strcmp(t, "null")) return strbuf_puts(b, "\"null\""), 0;
    return bad(c, path, "type must be string, number, integer, boolean, object, array or null");
}

/* anyOf / oneOf / enum members as alternatives. */
static int alternatives(gg *c, strbuf *b, const json_t *list, const char *kw, const char *path,
                        int depth) {
    char where[300];
    snprintf(where, sizeof where, "%.200s.%s", path, kw);
    if (!json_is_array(list) || !json_array_size(list))
        return bad(c, where, "must be a non-empty array");
    if (json_array_size(list) > 1000) return bad(c, where, "more than 1000 members");
    strbuf_puts(b, "( ");
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (i) strbuf_puts(b, " | ");
        int rc;
        if (!strcmp(kw, "enum")) {
            rc = json_literal(c, b, json_array_get(list, i), where);
        } else {
            char sub[32], w[320];
            snprintf(w, sizeof w, "%.280s[%zu]", where, i);
            rc = gg_schema_rule(c, json_array_get(list, i), w, sub, depth + 1);
            if (!rc) strbuf_puts(b, sub);
        }
        if (rc) return rc;
    }
    strbuf_puts(b, " )");
    return 0;
}

/* Whether type t (a string or a list) names one of the two types. */
static bool has_type(const json_t *t, const char *a, const char *b) {
    if (json_is_string(t))
        return !strcmp(json_string_value(t), a) || (b && !strcmp(json_string_value(t), b));
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++)
        if (has_type(json_array_get(t, i), a, b)) return true;
    return false;
}

/* Bounds hold numbers and format strings: on a schema of no such type they would hold nothing,
 * so they are refused rather than dropped. */
static int keywords_fit_type(gg *c, const json_t *s, const json_t *t, const char *path) {
    char where[300];
    const char *k = first_bound(s);
    k = k ? k : json_object_get(s, "multipleOf") ? "multipleOf" : NULL;
    if (k && !has_type(t, "integer", "number")) {
        snprintf(where, sizeof where, "%.200s.%s", path, k);
        return bad(c, where, "applies to type integer or number: give the schema that type");
    }
    if (json_object_get(s, "format") && !has_type(t, "string", NULL)) {
        snprintf(where, sizeof where, "%.200s.format", path);
        return bad(c, where, "applies to type string: give the schema that type");
    }
    return 0;
}

static int schema_body(gg *c, strbuf *b, const json_t *s, const char *path, int depth) {
    const json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        char name[32];
        if (!json_is_string(v)) return bad(c, path, "$ref must be a string");
        int rc = ref_rule(c, json_string_value(v), path, name, depth);
        return rc ? rc : (strbuf_puts(b, name), 0);
    }
    if ((v = json_object_get(s, "const"))) return json_literal(c, b, v, path);
    if ((v = json_object_get(s, "enum"))) return alternatives(c, b, v, "enum", path, depth);
    if ((v = json_object_get(s, "anyOf"))) return alternatives(c, b, v, "anyOf", path, depth);
    if ((v = json_object_get(s, "oneOf"))) return alternatives(c, b, v, "oneOf", path, depth);
    if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || json_array_size(v) != 1)
            return bad(c, path, "allOf is supported with exactly one member");
        char sub[32];
        int rc = gg_schema_rule(c, json_array_get(v, 0), path, sub, depth + 1);
        return rc ? rc : (strbuf_puts(b, sub), 0);
    }
    const json_t *t = json_object_get(s, "type");
    int rc = keywords_fit_type(c, s, t, path);
    if (rc) return rc;
    if (json_is_string(t)) return one_type(c, b, s, json_string_value(t), path, depth);
    if (json_is_array(t) && json_array_size(t)) {
        strbuf_puts(b, "( ");
        for (size_t i = 0; i < json_array_size(t); i++) {
            const json_t *x = json_array_get(t, i);
            if (!json_is_string(x)) return bad(c, path, "type list members must be strings");
            if (i) strbuf_puts(b, " | ");
            int rc = one_type(c, b, s, json_string_value(x), path, depth);
            if (rc) return rc;
        }
        strbuf_puts(b, " )");
        return 0;
    }
    if (t) return bad(c, path, "type must be a string or a list of strings");
    if (json_object_get(s, "properties")) return object_rule(c, b, s, path, depth);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems"))
        return array_rule(c, b, s, path, depth);
    c->used |= USE_VALUE; /* {}: any JSON value */
    strbuf_puts(b, "json-value");
    return 0;
}

/* A rule "sN ::= ..." for schema s (its name into name); sub-schemas' rules come first. */
int gg_schema_rule(gg *c, const json_t *s, const char *path, char *name, int depth) {
    if (depth > GG_MAX_DEPTH) return bad(c, path, "schema nested more than 32 deep");
    if (c->out->len > GG_MAX_BYTES) return bad(c, path, "schema too large");
    if (json_is_true(s)) return c->used |= USE_VALUE, strcpy(name, "json-value"), 0;
    if (!json_is_object(s)) return bad(c, path, "a schema must be an object (or true)");
    int rc = check_keywords(c, s, path);
    if (rc) return rc;
    int id = ++c->n_rules;
    strbuf b;
    strbuf_init(&b);
    rc = schema_body(c, &b, s, path, depth);
    if (!rc) strbuf_printf(c->out, "s%d ::= %s\n", id, b.data ? b.data : "");
    strbuf_free(&b);
    snprintf(name, 32, "s%d", id);
    return rc;
}

int gg_finish(gg *c, const char *root_rule) {
    strbuf_printf(c->out, "root ::= %s\n", root_rule);
    common_rules(c);
    if (c->out->oom) return sol_err_set(c->err, -ENOMEM, "out of memory for the grammar");
    if (c->out->len > GG_MAX_BYTES)
        return sol_err_set(c->err, -EINVAL, "the grammar would exceed %d bytes", GG_MAX_BYTES);
    return 0;
}

int gg_json_schema(const json_t *schema, strbuf *out, sol_err *err) {
    gg c = {.out = out, .err = err, .root = schema};
    char name[32];
    int rc = gg_schema_rule(&c, schema, "schema", name, 0);
    return rc ? rc : gg_finish(&c, name);
}

int gg_json_object(strbuf *out, sol_err *err) {
    gg c = {.out = out, .err = err, .used = USE_VALUE};
    return gg_finish(&c, "json-obj");
}

int gg_choice(const char *const *choices, size_t n, strbuf *out, sol_err *err) {
    if (n == 0) return sol_err_set(err, -EINVAL, "guided_choice: needs at least one choice");
    strbuf_puts(out, "root ::= ");
    for (size_t i = 0; i < n; i++) {
        if (i) strbuf_puts(out, " | ");
        gbnf_literal(out, choices[i], strlen(choices[i]));
    }
    strbuf_putc(out, '\n');
    if (out->oom) return sol_err_set(err, -ENOMEM, "out of memory for the grammar");
    if (out->len > GG_MAX_BYTES)
        return sol_err_set(err, -EINVAL, "guided_choice: the choices exceed %d bytes",
                           GG_MAX_BYTES);
    return 0;
}

int gg_regex(const char *re, strbuf *out, sol_err *err) {
    gg c = {.out = out, .err = err};
    strbuf body;
    strbuf_init(&body);
    int rc = regex_gbnf(&body, re, false, "guided_regex", c.err);
    if (!rc) strbuf_printf(out, "root ::= %s\n", body.data);
    strbuf_free(&body);
    return rc;
}
