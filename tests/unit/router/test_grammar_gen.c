/* Promise: JSON schemas, regexes and choice lists become GBNF grammars whose every complete
 * output is valid: random walks through a byte-level vocabulary (the worst case: a model with no
 * idea of JSON) end in texts that parse as JSON and satisfy the schema (types, required and
 * optional properties in order, enums, consts, arrays with bounds, $ref recursion, anyOf,
 * patterns), match the regex, or equal a choice; unsupported keywords and schema bombs are
 * refused naming where. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <regex.h>
#include <time.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gbnf.h"
#include "grammar.h"
#include "grammar_gen.h"
#include "grammar_tools.h"
#include "grammar_range.h"
#include "strbuf.h"

/* Every byte as a token, a few multi-byte ones, and the end of generation. */
#define N_VOCAB (256 + 6 + 1)
#define EOS (N_VOCAB - 1)
static char g_piece[N_VOCAB][8];
static const char *g_ptr[N_VOCAB];
static size_t g_len[N_VOCAB];
static uint8_t g_kind[N_VOCAB];
static grammar_vocab *g_vocab;

static int setup(void **state) {
    (void)state;
    const char *extra[] = {"\"name\"", "true", "null", "\":", "\xc3\xa9", "12"};
    for (int i = 0; i < 256; i++)
        g_piece[i][0] = (char)i, g_len[i] = 1;
    for (int i = 0; i < 6; i++)
        g_len[256 + i] = strlen(extra[i]), memcpy(g_piece[256 + i], extra[i], g_len[256 + i]);
    g_kind[EOS] = 1;
    for (int i = 0; i < N_VOCAB; i++)
        g_ptr[i] = g_piece[i];
    sol_err e = {0};
    g_vocab = grammar_vocab_new(N_VOCAB, g_ptr, g_len, g_kind, &e);
    return g_vocab ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    grammar_vocab_free(g_vocab);
    return 0;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

/* One walk: uniform over allowed tokens, but the end of generation and closing bytes are
 * favoured once allowed (a random model at temperature 1 still stops sometimes). Returns 1 and
 * the text when it ended within max_tokens. */
static int walk(grammar *g, int max_tokens, char *out, size_t cap) {
    static float logits[N_VOCAB];
    size_t used = 0;
    for (int n = 0; n < max_tokens; n++) {
        for (int i = 0; i < N_VOCAB; i++)
            logits[i] = 0;
        sol_err e = {0};
        assert_int_equal(grammar_apply(g, logits, &e), 0);
        int allowed[N_VOCAB], k = 0;
        for (int i = 0; i < N_VOCAB; i++)
            if (logits[i] == 0) allowed[k++] = i;
        int32_t t = allowed[rnd() % (uint32_t)k];
        if (logits[EOS] == 0 && rnd() % 3 == 0) t = EOS;
        for (int i = 0; i < k && rnd() % 4 == 0; i++) /* prefer closers */
            if (g_len[allowed[i]] == 1 && g_piece[allowed[i]][0] &&
                strchr("\"]}", g_piece[allowed[i]][0]))
                t = allowed[i];
        assert_int_equal(grammar_accept(g, t, &e), 0);
        if (t == EOS) {
            out[used] = 0;
            return 1;
        }
        assert_true(used + g_len[t] < cap);
        memcpy(out + used, g_piece[t], g_len[t]), used += g_len[t];
    }
    out[used] = 0;
    return 0;
}

static grammar *compile_schema(const char *schema_text, strbuf *gb) {
    json_error_t je;
    json_t *s = json_loads(schema_text, 0, &je);
    assert_non_null(s);
    sol_err e = {0};
    strbuf_init(gb);
    if (gg_json_schema(s, gb, &e)) fail_msg("%s: %s", schema_text, e.msg);
    json_decref(s);
    grammar *g = grammar_new(gb->data, gb->len, g_vocab, &e);
    if (!g) fail_msg("%s\n%s", e.msg, gb->data);
    return g;
}

typedef void (*checker)(const json_t *v);

static void run_schema(const char *schema, checker check, int walks, int max_tokens) {
    strbuf gb;
    int ended = 0;
    for (int w = 0; w < walks; w++) {
        grammar *g = compile_schema(schema, &gb);
        char out[8192];
        if (walk(g, max_tokens, out, sizeof out)) {
            ended++;
            json_error_t je;
            json_t *v = json_loads(out, JSON_DECODE_ANY, &je);
            if (!v) fail_msg("not JSON (%s): %s\ngrammar:\n%s", je.text, out, gb.data);
            check(v);
            json_decref(v);
        }
        grammar_free(g);
        strbuf_free(&gb);
    }
    printf("%d of %d walks ended: %.60s\n", ended, walks, schema);
    assert_true(ended >= walks / 4);
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void check_person(const json_t *v) {
    assert_true(json_is_object(v));
    const json_t *name = json_object_get(v, "name"), *age = json_object_get(v, "age");
    assert_true(json_is_string(name) && code_points(json_string_value(name)) <= 8);
    assert_true(json_is_integer(age));
    const json_t *role = json_object_get(v, "role");
    if (role) {
        const char *r = json_string_value(role);
        assert_true(r && (!strcmp(r, "admin") || !strcmp(r, "user")));
    }
    const json_t *tags = json_object_get(v, "tags");
    if (tags) {
        assert_true(json_is_array(tags) && json_array_size(tags) <= 3);
        for (size_t i = 0; i < json_array_size(tags); i++)
            assert_true(json_is_boolean(json_array_get(tags, i)));
    }
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        (void)x;
        assert_true(!strcmp(k, "name") || !strcmp(k, "age") || !strcmp(k, "role") ||
                    !strcmp(k, "tags"));
    }
}

static void test_object_schema(void **state) {
    (void)state;
    run_schema(
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
        "\"age\":{\"type\":\"integer\"},\"role\":{\"enum\":[\"admin\",\"user\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3}},"
        "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
        check_person, 50, 400);
}

static int tree_depth(const json_t *v) {
    assert_true(json_is_object(v));
    assert_true(json_is_number(json_object_get(v, "v")) || json_is_null(json_object_get(v, "v")));
    const json_t *kids = json_object_get(v, "kids");
    int d = 0;
    for (size_t i = 0; kids && i < json_array_size(kids); i++) {
        int k = tree_depth(json_array_get(kids, i));
        d = k > d ? k : d;
    }
    return d + 1;
}

static void check_tree(const json_t *v) {
    assert_true(tree_depth(v) >= 1);
}

static void test_ref_recursion_anyof(void **state) {
    (void)state;
    run_schema("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\","
               "\"properties\":{\"v\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}]},"
               "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},"
               "\"maxItems\":2}},\"required\":[\"v\"]}}}",
               check_tree, 50, 400);
}

static void check_const_pattern(const json_t *v) {
    assert_true(json_is_object(v));
    assert_string_equal(json_string_value(json_object_get(v, "kind")), "point");
    const char *id = json_string_value(json_object_get(v, "id"));
    assert_non_null(id);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[A-Z]{2}-[0-9]{3}$", REG_EXTENDED | REG_NOSUB), 0);
    assert_int_equal(regexec(&re, id, 0, NULL, 0), 0);
    regfree(&re);
    const json_t *xy = json_object_get(v, "xy");
    assert_true(json_is_array(xy) && json_array_size(xy) >= 2);
    assert_true(json_is_number(json_array_get(xy, 0)) && json_is_number(json_array_get(xy, 1)));
}

static void test_const_pattern_prefix(void **state) {
    (void)state;
    run_schema("{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"point\"},"
               "\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"},"
               "\"xy\":{\"type\":\"array\",\"prefixItems\":[{\"type\":\"number\"},"
               "{\"type\":\"number\"}],\"maxItems\":2}},\"required\":[\"kind\",\"id\",\"xy\"]}",
               check_const_pattern, 50, 300);
}

static void check_any_object(const json_t *v) {
    assert_true(json_is_object(v));
}

static void test_json_object(void **state) {
    (void)state;
    strbuf gb;
    strbuf_init(&gb);
    sol_err e = {0};
    assert_int_equal(gg_json_object(&gb, &e), 0);
    int ended = 0;
    for (int w = 0; w < 50; w++) {
        grammar *g = grammar_new(gb.data, gb.len, g_vocab, &e);
        assert_non_null(g);
        char out[8192];
        if (walk(g, 300, out, sizeof out)) {
            ended++;
            json_error_t je;
            json_t *v = json_loads(out, 0, &je);
            if (!v) fail_msg("not JSON: %s", out);
            check_any_object(v);
            json_decref(v);
        }
        grammar_free(g);
    }
    printf("json_object: %d of 50 walks ended\n", ended);
    assert_true(ended > 10);
    strbuf_free(&gb);
}

static void test_regex_and_choice(void **state) {
    (void)state;
    const char *res[] = {"(cat|dog)s?", "[a-c]{2,4}x*", "\\d+(\\.\\d{1,2})?", "a.b", "(?:ab)+"};
    const char *posix[] = {"^(cat|dog)s?$", "^[a-c]{2,4}x*$", "^[0-9]+(\\.[0-9]{1,2})?$", "^a.b$",
                           "^(ab)+$"};
    for (int i = 0; i < 5; i++) {
        strbuf gb;
        strbuf_init(&gb);
        sol_err e = {0};
        if (gg_regex(res[i], &gb, &e)) fail_msg("%s: %s", res[i], e.msg);
        regex_t re;
        assert_int_equal(regcomp(&re, posix[i], REG_EXTENDED | REG_NOSUB), 0);
        int ended = 0;
        for (int w = 0; w < 50; w++) {
            grammar *g = grammar_new(gb.data, gb.len, g_vocab, &e);
            if (!g) fail_msg("%s: %s\n%s", res[i], e.msg, gb.data);
            char out[4096];
            if (walk(g, 60, out, sizeof out)) {
                ended++;
                if (regexec(&re, out, 0, NULL, 0)) fail_msg("'%s' does not match %s", out, res[i]);
            }
            grammar_free(g);
        }
        printf("regex %s: %d of 50 ended\n", res[i], ended);
        assert_true(ended > 10);
        regfree(&re);
        strbuf_free(&gb);
    }
    const char *choices[] = {"red", "green", "blue \"sky\""};
    strbuf gb;
    strbuf_init(&gb);
    sol_err e = {0};
    assert_int_equal(gg_choice(choices, 3, &gb, &e), 0);
    for (int w = 0; w < 30; w++) {
        grammar *g = grammar_new(gb.data, gb.len, g_vocab, &e);
        assert_non_null(g);
        char out[256];
        assert_int_equal(walk(g, 40, out, sizeof out), 1);
        assert_true(!strcmp(out, "red") || !strcmp(out, "green") || !strcmp(out, "blue \"sky\""));
        grammar_free(g);
    }
    strbuf_free(&gb);
}

/* gg_json_schema on a schema's text: its return, the GBNF into gb (initialized here), e. */
static int gen_text(const char *schema, strbuf *gb, sol_err *e) {
    json_error_t je;
    json_t *s = json_loads(schema, 0, &je);
    assert_non_null(s);
    strbuf_init(gb);
    int rc = gg_json_schema(s, gb, e);
    json_decref(s);
    return rc;
}

static void expect_refused(const char *schema, const char *needle) {
    strbuf gb;
    sol_err e = {0};
    int rc = gen_text(schema, &gb, &e);
    printf("refused: %s\n", e.msg);
    if (rc != -EINVAL) fail_msg("%s: not refused (%d): %s", schema, rc, gb.data ? gb.data : "");
    if (!strstr(e.msg, needle)) fail_msg("'%s' not in '%s'", needle, e.msg);
    strbuf_free(&gb);
}

/* Whether the grammar takes exactly text: every byte allowed in turn, then the end. */
static bool takes(const char *gbnf, const char *text) {
    sol_err e = {0};
    grammar *g = grammar_new(gbnf, strlen(gbnf), g_vocab, &e);
    if (!g) fail_msg("%s\n%s", e.msg, gbnf);
    static float logits[N_VOCAB];
    bool ok = true;
    for (const char *p = text; ok && *p; p++) {
        memset(logits, 0, sizeof logits);
        assert_int_equal(grammar_apply(g, logits, &e), 0);
        ok = logits[(unsigned char)*p] == 0 && !grammar_accept(g, (unsigned char)*p, &e);
    }
    if (ok) {
        memset(logits, 0, sizeof logits);
        assert_int_equal(grammar_apply(g, logits, &e), 0);
        ok = logits[EOS] == 0;
    }
    grammar_free(g);
    return ok;
}

/* Integer ranges: every integer near the bounds, the powers of ten and zero is taken exactly
 * when it lies inside, in its JSON form only (no "-0", no leading zeros, no "+"). */
static void test_int_ranges(void **state) {
    (void)state;
    const int64_t S = GG_INT_SAFE;
    const int64_t ranges[][2] = {{0, 0},     {18, 120},   {-19, -4},    {-7, 13},   {5, 5},
                                 {99, 1000}, {-1000, -1}, {123, 45678}, {0, 9},     {-S, S},
                                 {1, S},     {-S, -1},    {10, 99},     {-3, 1200}, {998, 1002}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        int64_t lo = ranges[r][0], hi = ranges[r][1];
        strbuf gb;
        strbuf_init(&gb);
        strbuf_puts(&gb, "root ::= ");
        gg_int_range(&gb, lo, hi);
        strbuf_putc(&gb, '\n');
        int64_t probes[200];
        int np = 0;
        for (int64_t d = -3; d <= 3; d++)
            probes[np++] = lo + d, probes[np++] = hi + d, probes[np++] = d;
        for (int64_t p10 = 10; p10 <= 1000000000000000LL && np < 190; p10 *= 10)
            probes[np++] = p10, probes[np++] = p10 - 1, probes[np++] = -p10, probes[np++] = 1 - p10;
        int taken = 0;
        for (int i = 0; i < np; i++) {
            int64_t v = probes[i];
            if (v > S + 3 || v < -S - 3) continue;
            char text[32];
            snprintf(text, sizeof text, "%lld", (long long)v);
            bool in = v >= lo && v <= hi;
            if (takes(gb.data, text) != in)
                fail_msg("range %lld..%lld: %s %s\n%s", (long long)lo, (long long)hi, text,
                         in ? "refused" : "taken", gb.data);
            taken += in;
        }
        /* and never another spelling of a taken value */
        const char *other[] = {"-0", "00", "+1", "01", "-01", ""};
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
            if (takes(gb.data, other[i]))
                fail_msg("range %lld..%lld takes '%s'", (long long)lo, (long long)hi, other[i]);
        if (r + 1 == sizeof ranges / sizeof ranges[0])
            print_message("  %zu ranges, %d probes inside the last\n", r + 1, taken);
        strbuf_free(&gb);
    }
}

/* Number ranges are exact: over a grid of decimals (0 to 3 fraction digits) around each case's
 * bounds, a text is taken exactly when its value lies inside; no exponent, no "-0"; bounds with
 * fractions are read as the decimals the schema wrote (0.2 is 0.2). */
static void test_num_ranges(void **state) {
    (void)state;
    const struct {
        double lo;
        bool lo_x;
        double hi;
        bool hi_x;
    } cases[] = {
        {0, false, 1, false},      {-2.5, true, -0.5, false},      {-3, false, 2, true},
        {0.5, false, 2.25, false}, {-INFINITY, false, 1.5, false}, {3, true, INFINITY, false},
        {0.2, false, 0.8, false},  {0.25, true, 0.75, true},       {-0.8, false, -0.2, true},
        {1.05, false, 3.5, false}, {0, true, INFINITY, false},     {-0.001, false, 0.001, false},
        {-1, true, 0, true},       {2.125, false, 2.125, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        strbuf gb;
        strbuf_init(&gb);
        strbuf_puts(&gb, "root ::= ");
        assert_int_equal(gg_num_range(&gb, cases[c].lo, cases[c].lo_x, cases[c].hi, cases[c].hi_x),
                         0);
        strbuf_putc(&gb, '\n');
        int taken = 0;
        for (int k = -4500; k <= 4500; k += 25) { /* -4.5 .. 4.5 in steps of 0.025 */
            char text[4][32];
            snprintf(text[0], 32, "%.3f", k / 1000.0);
            snprintf(text[1], 32, "%.2f", k / 1000.0);
            snprintf(text[2], 32, "%.1f", k / 1000.0);
            snprintf(text[3], 32, "%d", k / 1000);
            for (int t = 0; t < 4; t++) {
                double v = strtod(text[t], NULL);
                if (v == 0 && text[t][0] == '-') continue; /* -0, -0.0: never written */
                bool in = (cases[c].lo_x ? v > cases[c].lo : v >= cases[c].lo) &&
                          (cases[c].hi_x ? v < cases[c].hi : v <= cases[c].hi);
                bool got = takes(gb.data, text[t]);
                if (got != in)
                    fail_msg("case %zu %s %s, inside: %d\n%s", c, got ? "takes" : "refuses",
                             text[t], in, gb.data);
                taken += got;
            }
        }
        assert_true(taken > 0);
        assert_false(takes(gb.data, "-0"));
        assert_false(takes(gb.data, "1e0"));
        strbuf_free(&gb);
    }
    strbuf gb;
    strbuf_init(&gb);
    strbuf_puts(&gb, "root ::= ");
    assert_int_equal(gg_num_range(&gb, 0, true, 1, false), 0);
    strbuf_putc(&gb, '\n');
    assert_true(takes(gb.data, "0.000000000000001")); /* 15 fraction digits */
    assert_false(takes(gb.data, "0.0000000000000001"));
    assert_false(takes(gb.data, "0.000000000000000"));
    assert_true(takes(gb.data, "1.000"));
    assert_false(takes(gb.data, "1.000000000000001"));
    strbuf_free(&gb);
    strbuf_init(&gb);
    assert_int_equal(gg_num_range(&gb, 0.8, false, 0.2, false), -1);
    assert_int_equal(gg_num_range(&gb, 0.25, true, 0.25, false), -1);
    assert_int_equal(gg_num_range(&gb, 0.1234567890123456, false, 1, false), -2);
    assert_int_equal(gb.len, 0);
    strbuf_free(&gb);
}

/* The grammar compiled from a schema, as GBNF text (the caller frees it). */
static char *schema_gbnf(const char *schema) {
    strbuf gb;
    sol_err e = {0};
    if (gen_text(schema, &gb, &e)) fail_msg("%s: %s", schema, e.msg);
    return strbuf_take(&gb, NULL);
}

/* multipleOf on integers: listed within bounds, an automaton over the digits without them;
 * exactly the multiples, in JSON form, within 15 digits. */
static void test_multiple_of(void **state) {
    (void)state;
    char *listed = schema_gbnf("{\"type\":\"integer\",\"minimum\":-20,\"maximum\":100,"
                               "\"multipleOf\":7}");
    for (int v = -30; v <= 110; v++) {
        char text[16];
        snprintf(text, sizeof text, "%d", v);
        if (takes(listed, text) != (v >= -20 && v <= 100 && v % 7 == 0))
            fail_msg("multipleOf 7 in -20..100: %d", v);
    }
    free(listed);
    char *dfa = schema_gbnf("{\"type\":\"integer\",\"multipleOf\":12}");
    for (int v = -200; v <= 400; v++) {
        char text[16];
        snprintf(text, sizeof text, "%d", v);
        if (takes(dfa, text) != (v % 12 == 0)) fail_msg("multipleOf 12: %d\n%s", v, dfa);
    }
    const char *big_ok[] = {"999999999999996", "-120000000000000", "100000000000008"};
    const char *big_bad[] = {"1200000000000000", "999999999999997", "-0", "012", "+12", ""};
    for (size_t i = 0; i < sizeof big_ok / sizeof big_ok[0]; i++)
        if (!takes(dfa, big_ok[i])) fail_msg("multipleOf 12 refuses %s", big_ok[i]);
    for (size_t i = 0; i < sizeof big_bad / sizeof big_bad[0]; i++)
        if (takes(dfa, big_bad[i])) fail_msg("multipleOf 12 takes '%s'", big_bad[i]);
    free(dfa);
    expect_refused("{\"type\":\"integer\",\"multipleOf\":7.5}", "schema.multipleOf: must be");
    expect_refused("{\"type\":\"number\",\"multipleOf\":5}", "schema.multipleOf: on type number");
    expect_refused("{\"type\":\"integer\",\"multipleOf\":100}", "schema.multipleOf: held by");
    expect_refused("{\"type\":\"integer\",\"minimum\":1,\"maximum\":6,\"multipleOf\":7}",
                   "no multiple lies within");
    expect_refused("{\"type\":\"string\",\"multipleOf\":7}", "schema.multipleOf: applies to type");
}

static bool matches(const char *re_text, const char *s) {
    regex_t re;
    assert_int_equal(regcomp(&re, re_text, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* Each field checked by other means than the grammar's own regexes: ranges as numbers,
 * addresses through inet_pton, dates through their calendar fields. */
static void check_bounded(const json_t *v) {
    assert_true(json_is_object(v));
    json_int_t age = json_integer_value(json_object_get(v, "age"));
    json_int_t neg = json_integer_value(json_object_get(v, "neg"));
    const json_t *big = json_object_get(v, "big");
    assert_true(json_is_integer(json_object_get(v, "age")) && age >= 18 && age <= 120);
    assert_true(json_is_integer(json_object_get(v, "neg")) && neg > -20 && neg < -3);
    assert_true(json_is_integer(big) && llabs(json_integer_value(big)) <= GG_INT_SAFE);
    const char *d = json_string_value(json_object_get(v, "d"));
    int y = 0, m = 0, day = 0;
    assert_true(d && sscanf(d, "%4d-%2d-%2d", &y, &m, &day) == 3 && strlen(d) == 10);
    assert_true(m >= 1 && m <= 12 && day >= 1 && day <= 31);
    unsigned char addr[16];
    assert_int_equal(inet_pton(AF_INET, json_string_value(json_object_get(v, "ip")), addr), 1);
    const char *ip6 = json_string_value(json_object_get(v, "ip6"));
    if (inet_pton(AF_INET6, ip6, addr) != 1) fail_msg("not an IPv6 address: %s", ip6);
    const char *u = json_string_value(json_object_get(v, "u"));
    assert_true(matches("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-"
                        "[0-9a-fA-F]{12}$",
                        u));
    const char *mail = json_string_value(json_object_get(v, "mail"));
    assert_true(mail && strchr(mail, '@') && mail[0] != '.' && !strstr(mail, ".."));
    const char *dt = json_string_value(json_object_get(v, "dt"));
    struct tm tm = {0};
    const char *rest = dt ? strptime(dt, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!rest) fail_msg("not a date-time: %s", dt ? dt : "(none)");
    const json_t *p = json_object_get(v, "p"), *t = json_object_get(v, "t");
    assert_true(json_is_number(p) && json_number_value(p) >= 0 && json_number_value(p) <= 1);
    assert_true(json_is_number(t) && json_number_value(t) > -2.5 && json_number_value(t) <= -0.5);
    const char *dur = json_string_value(json_object_get(v, "dur"));
    assert_true(dur && dur[0] == 'P' && strlen(dur) > 1 && dur[strlen(dur) - 1] != 'T');
}

static void test_bounds_and_formats(void **state) {
    (void)state;
    run_schema("{\"type\":\"object\",\"properties\":{"
               "\"age\":{\"type\":\"integer\",\"minimum\":18,\"maximum\":120},"
               "\"neg\":{\"type\":\"integer\",\"exclusiveMinimum\":-20,\"exclusiveMaximum\":-3},"
               "\"big\":{\"type\":\"integer\"},\"d\":{\"type\":\"string\",\"format\":\"date\"},"
               "\"p\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
               "\"t\":{\"type\":\"number\",\"exclusiveMinimum\":-2.5,\"maximum\":-0.5},"
               "\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
               "\"ip6\":{\"type\":\"string\",\"format\":\"ipv6\"},"
               "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},"
               "\"mail\":{\"type\":\"string\",\"format\":\"email\"},"
               "\"dt\":{\"type\":\"string\",\"format\":\"date-time\"},"
               "\"dur\":{\"type\":\"string\",\"format\":\"duration\"}},"
               "\"required\":[\"age\",\"neg\",\"big\",\"p\",\"t\",\"d\",\"ip\",\"ip6\",\"u\","
               "\"mail\",\"dt\","
               "\"dur\"],\"additionalProperties\":false}",
               check_bounded, 40, 1500);
    /* zod writes a pattern beside some formats; one outside the regex subset (lookaround)
     * leaves the format to hold the string */
    strbuf gb;
    grammar *g = compile_schema("{\"type\":\"string\",\"format\":\"email\","
                                "\"pattern\":\"^(?!\\\\.)[a-z.]+@[a-z]+\\\\.[a-z]{2,}$\"}",
                                &gb);
    grammar_free(g);
    strbuf_free(&gb);
}

/* tool_choice auto with strict tools: free text that never holds the opening text, and from
 * it on the calls to the end (hermes and mistral shapes, a trigger that repeats its first
 * character); long free text stays cheap. */
static void test_lazy_tool_calls(void **state) {
    (void)state;
    const gg_call_shape hermes = {
        "",  "<tool_call>\n", "arguments", "\n</tool_call>", "\n", "", "<tool_call>", NULL, NULL,
        NULL};
    const gg_call_shape mistral = {"[TOOL_CALLS] [", "",   "arguments", "",  ", ", "]",
                                   "[TOOL_CALLS]",   NULL, NULL,        NULL};
    json_error_t je;
    json_t *params = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\","
                                "\"minimum\":1,\"maximum\":9}},\"required\":[\"a\"],"
                                "\"additionalProperties\":false}",
                                0, &je);
    const char *names[] = {"f"};
    const json_t *ps[] = {params};
    const char *call = "{\"name\": \"f\", \"arguments\": {\"a\": 3}}";
    char buf[512];
    for (int shape = 0; shape < 2; shape++) {
        strbuf gb;
        strbuf_init(&gb);
        sol_err e = {0};
        const gg_call_shape *sh = shape ? &mistral : &hermes;
        if (gg_tool_calls(names, ps, 1, true, true, sh, &gb, &e)) fail_msg("%s", e.msg);
        const char *t = sh->trigger;
        const struct {
            const char *pre, *post;
            bool ok;
        } cases[] = {
            {"", NULL, true}, /* empty text */
            {"Hello there, no calls.", NULL, true},
            {"partial <tool_cal", NULL, true},
            {"partial [TOOL_CALL", NULL, true},
            {"Sure. ", "", true},      /* text, then calls to the end */
            {"<<[[", "", true},        /* the trigger's first character repeated before it */
            {"Sure. ", " bye", false}, /* nothing after the calls */
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (!cases[i].post) {
                snprintf(buf, sizeof buf, "%s", cases[i].pre);
            } else if (shape) {
                snprintf(buf, sizeof buf, "%s%s [%s, %s]%s", cases[i].pre, t, call, call,
                         cases[i].post);
            } else {
                snprintf(buf, sizeof buf, "%s%s\n%s\n</tool_call>\n<tool_call>\n%s\n</tool_call>%s",
                         cases[i].pre, t, call, call, cases[i].post);
            }
            if (takes(gb.data, buf) != cases[i].ok)
                fail_msg("%s: '%s' %s\n%s", t, buf, cases[i].ok ? "refused" : "taken", gb.data);
        }
        /* the trigger with anything but a call after it, and arguments outside the schema */
        snprintf(buf, sizeof buf, "ok %s oops", t);
        assert_false(takes(gb.data, buf));
        snprintf(buf, sizeof buf, "%c%s oops", t[0], t); /* found after a false start too */
        assert_false(takes(gb.data, buf));
        snprintf(buf, sizeof buf,
                 shape ? "%s [{\"name\": \"f\", \"arguments\": {\"a\": 12}}]"
                       : "%s\n{\"name\": \"f\", \"arguments\": {\"a\": 12}}\n"
                         "</tool_call>",
                 t);
        assert_false(takes(gb.data, buf));
        /* 3000 characters of free text: the grammar's state does not grow with them */
        char *longt = malloc(3001);
        for (int i = 0; i < 3000; i++)
            longt[i] = "ab<c [x]"[i % 8];
        longt[3000] = 0;
        assert_true(takes(gb.data, longt));
        free(longt);
        strbuf_free(&gb);
    }
    /* Llama 3: calls when the answer opens with one (after whitespace) or with <|python_tag|>,
     * free text when it opens otherwise */
    const gg_call_shape llama = {"", "",   "parameters",     "",   "; ",
                                 "", NULL, "<|python_tag|>", NULL, NULL};
    strbuf gb;
    strbuf_init(&gb);
    sol_err e = {0};
    if (gg_tool_calls(names, ps, 1, true, true, &llama, &gb, &e)) fail_msg("%s", e.msg);
    const char *lcall = "{\"name\": \"f\", \"parameters\": {\"a\": 3}}";
    const struct {
        const char *text;
        bool ok;
    } lcases[] = {
        {"", true},
        {"Hello {there}", true},
        {"  \n hi", true},
        {"<b>bold</b>", true},
        {"<|pyt", true},
        {"<|python_tag", true},
        {"{not a call}", false},
        {" {\"name\": \"g\"", false},
        {"<|python_tag|>oops", false},
    };
    for (size_t i = 0; i < sizeof lcases / sizeof lcases[0]; i++)
        if (takes(gb.data, lcases[i].text) != lcases[i].ok)
            fail_msg("llama: '%s' %s\n%s", lcases[i].text, lcases[i].ok ? "refused" : "taken",
                     gb.data);
    const char *lpre[] = {"", " \n", "<|python_tag|>", "<|python_tag|> "};
    for (size_t i = 0; i < 4; i++) {
        snprintf(buf, sizeof buf, "%s%s; %s", lpre[i], lcall, lcall);
        if (!takes(gb.data, buf)) fail_msg("llama: '%s' refused\n%s", buf, gb.data);
        snprintf(buf, sizeof buf, "%s{\"name\": \"f\", \"parameters\": {\"a\": 12}}", lpre[i]);
        if (takes(gb.data, buf)) fail_msg("llama: '%s' taken (a = 12)", buf);
    }
    strbuf_free(&gb);
    /* a shape with no opening text at all cannot be lazy */
    const gg_call_shape none = {"", "", "parameters", "", "; ", "", NULL, NULL, NULL, NULL};
    strbuf_init(&gb);
    assert_int_equal(gg_tool_calls(names, ps, 1, true, true, &none, &gb, &e), -EINVAL);
    strbuf_free(&gb);
    json_decref(params);
}

/* A pattern or format beside minLength/maxLength: every string over {a, b, c} up to 5
 * characters is taken exactly when POSIX regexec matches it whole and its length is in bounds;
 * zod's z.email().max(20) takes emails of at most 20 characters only. */
static void test_bounded_patterns(void **state) {
    (void)state;
    const char *pats[] = {"(ab|c)*", "a{1,3}b?c*", "[ab]+(c[ab]{2})?"};
    const int bounds[][2] = {{2, 4}, {3, -1}, {0, 1}};
    for (size_t p = 0; p < 3; p++) {
        char want_re[64];
        snprintf(want_re, sizeof want_re, "^(%s)$", pats[p]);
        regex_t rx;
        assert_int_equal(regcomp(&rx, want_re, REG_EXTENDED | REG_NOSUB), 0);
        for (size_t b = 0; b < 3; b++) {
            char schema[256];
            int n = snprintf(schema, sizeof schema,
                             "{\"type\":\"string\",\"pattern\":\"%s\","
                             "\"minLength\":%d",
                             pats[p], bounds[b][0]);
            if (bounds[b][1] >= 0)
                n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"maxLength\":%d",
                              bounds[b][1]);
            snprintf(schema + n, sizeof schema - (size_t)n, "}");
            char *gb = schema_gbnf(schema);
            char s[8], text[16];
            for (int len = 0; len <= 5; len++)
                for (int code = 0; code < (int)pow(3, len); code++) {
                    for (int i = 0, c = code; i < len; i++, c /= 3)
                        s[i] = (char)('a' + c % 3);
                    s[len] = 0;
                    bool in = !regexec(&rx, s, 0, NULL, 0) && len >= bounds[b][0] &&
                              (bounds[b][1] < 0 || len <= bounds[b][1]);
                    snprintf(text, sizeof text, "\"%s\"", s);
                    if (takes(gb, text) != in)
                        fail_msg("%s: '%s' %s", schema, s, in ? "refused" : "taken");
                }
            free(gb);
        }
        regfree(&rx);
    }
    char *email = schema_gbnf("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":20}");
    assert_true(takes(email, "\"ann@example.org\""));
    assert_true(takes(email, "\"a.b@cd.example.com\""));     /* 18 */
    assert_false(takes(email, "\"ann.smith@example.com\"")); /* 21 */
    assert_false(takes(email, "\"not an email\""));
    free(email);
    expect_refused("{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":10}",
                   "no text the pattern or format allows is 0 to 10 characters long");
}

static void test_refusals(void **state) {
    (void)state;
    expect_refused("{\"type\":\"string\",\"format\":\"color\"}",
                   "schema.format: unsupported format");
    expect_refused("{\"properties\":{\"a\":{\"type\":\"integer\",\"contains\":3}}}",
                   "schema.properties.a.contains: unsupported");
    expect_refused("{\"type\":\"number\",\"minimum\":0.8,\"maximum\":0.2}",
                   "schema: no number lies within");
    expect_refused("{\"type\":\"number\",\"minimum\":0.12345678901234567}",
                   "schema: a bound (minimum/maximum) needs more than 15 fraction digits");
    expect_refused("{\"type\":\"string\",\"minimum\":3}",
                   "schema.minimum: applies to type integer");
    expect_refused("{\"type\":\"integer\",\"format\":\"date\"}",
                   "schema.format: applies to type string");
    expect_refused("{\"type\":\"integer\",\"minimum\":3.5,\"exclusiveMaximum\":4}",
                   "schema: no integer lies within");
    expect_refused("{\"type\":\"integer\",\"minimum\":\"3\"}", "schema.minimum: must be a number");
    expect_refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":3}",
                   "schema: no text the pattern or format allows is 0 to 3 characters long");
    expect_refused("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":1000}",
                   "needs over 20000 grammar rules");
    expect_refused("{\"$ref\":\"#/nowhere\"}", "$ref must name an entry");
    expect_refused("{\"type\":\"object\",\"required\":[\"x\"]}", "required names a property");
    expect_refused("{\"type\":\"strin\"}", "type must be");
    /* A bomb: 40 levels of nesting. */
    strbuf deep;
    strbuf_init(&deep);
    for (int i = 0; i < 40; i++)
        strbuf_puts(&deep, "{\"type\":\"array\",\"items\":");
    strbuf_puts(&deep, "{\"type\":\"null\"}");
    for (int i = 0; i < 40; i++)
        strbuf_putc(&deep, '}');
    expect_refused(deep.data, "nested more than 32 deep");
    strbuf_free(&deep);
    sol_err e = {0};
    strbuf gb;
    strbuf_init(&gb);
    assert_int_equal(gg_regex("(a", &gb, &e), -EINVAL);
    assert_int_equal(gg_regex("a(?=b)", &gb, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "lookaround"));
    assert_int_equal(gg_regex("(a)\\1", &gb, &e), -EINVAL);
    strbuf_free(&gb);
}

int main(void) {
    setlocale(LC_ALL, "C.UTF-8"); /* regexec's '.' is then one character, as the grammar's */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_object_schema),        cmocka_unit_test(test_ref_recursion_anyof),
        cmocka_unit_test(test_const_pattern_prefix), cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_regex_and_choice),     cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_int_ranges),           cmocka_unit_test(test_bounds_and_formats),
        cmocka_unit_test(test_lazy_tool_calls),      cmocka_unit_test(test_bounded_patterns),
        cmocka_unit_test(test_num_ranges),           cmocka_unit_test(test_multiple_of),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
