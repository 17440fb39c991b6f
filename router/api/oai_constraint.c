/* oai_constraint: response_format and the guided_* fields to GBNF (grammar_gen), validated by
 * the same GBNF parser the worker uses. */
#include "oai_constraint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar_gen.h"

#define BAD(err, param, ...)                                                                       \
    oai_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

static const char *const k_fields[] = {
    "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "grammar",         NULL};

static int from_schema(const json_t *schema, strbuf *g, const char *param, oai_error *err) {
    sol_err e = {0};
    if (!json_is_object(schema) && !json_is_true(schema))
        return BAD(err, param, "'%s' must be a JSON Schema object", param), -EINVAL;
    if (gg_json_schema(schema, g, &e))
        return BAD(err, param, "%s: %s", param, e.msg), e.code == -ENOMEM ? -ENOMEM : -EINVAL;
    return 0;
}

static int response_format(const json_t *v, strbuf *g, bool *none, oai_error *err) {
    const char *p = "response_format";
    if (!json_is_object(v)) return BAD(err, p, "'%s' must be an object", p), -EINVAL;
    const char *type = json_string_value(json_object_get(v, "type")), *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        (void)x;
        if (strcmp(k, "type") && strcmp(k, "json_schema"))
            return BAD(err, p, "response_format.%s is not supported (type, json_schema)", k),
                   -EINVAL;
    }
    sol_err e = {0};
    if (type && !strcmp(type, "text")) return *none = true, 0;
    if (type && !strcmp(type, "json_object")) return gg_json_object(g, &e) ? -ENOMEM : 0;
    if (!type || strcmp(type, "json_schema"))
        return BAD(err, p, "response_format.type must be text, json_object or json_schema"),
               -EINVAL;
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return BAD(err, p, "response_format.json_schema must be an object"), -EINVAL;
    json_object_foreach((json_t *)js, k, x) {
        if (!strcmp(k, "name") || !strcmp(k, "description")) {
            if (!json_is_string(x))
                return BAD(err, p, "response_format.json_schema.%s must be a string", k), -EINVAL;
        } else if (!strcmp(k, "strict")) {
            if (!json_is_boolean(x))
                return BAD(err, p, "response_format.json_schema.strict must be a boolean"), -EINVAL;
        } else if (strcmp(k, "schema")) {
            return BAD(err, p, "response_format.json_schema.%s is not supported", k), -EINVAL;
        }
    }
    if (!json_is_string(json_object_get(js, "name")))
        return BAD(err, p, "response_format.json_schema.name is required"), -EINVAL;
    const json_t *schema = json_object_get(js, "schema");
    if (!schema) return BAD(err, p, "response_format.json_schema.schema is required"), -EINVAL;
    return from_schema(schema, g, "response_format.json_schema.schema", err);
}

static int guided(const char *key, const json_t *v, strbuf *g, oai_error *err) {
    sol_err e = {0};
    if (!strcmp(key, "guided_json")) {
        if (!json_is_string(v)) return from_schema(v, g, key, err);
        json_error_t je;
        json_t *s = json_loads(json_string_value(v), 0, &je);
        if (!s) return BAD(err, key, "'guided_json' is not JSON: %s", je.text), -EINVAL;
        int rc = from_schema(s, g, key, err);
        json_decref(s);
        return rc;
    }
    if (!strcmp(key, "guided_choice")) {
        size_t n = json_is_array(v) ? json_array_size(v) : 0;
        const char **c = calloc(n ? n : 1, sizeof *c);
        if (!c) return -ENOMEM;
        for (size_t i = 0; i < n && c; i++)
            if (!(c[i] = json_string_value(json_array_get(v, i)))) n = 0;
        int rc = n ? gg_choice(c, n, g, &e) : -EINVAL;
        free(c);
        if (rc) return BAD(err, key, "'guided_choice' must be a non-empty array of strings"), rc;
        return 0;
    }
    if (!json_is_string(v)) return BAD(err, key, "'%s' must be a string", key), -EINVAL;
    if (!strcmp(key, "guided_regex") && gg_regex(json_string_value(v), g, &e))
        return BAD(err, key, "%s", e.msg), -EINVAL;
    if (strcmp(key, "guided_regex")) strbuf_puts(g, json_string_value(v)); /* GBNF as given */
    return 0;
}

int oai_constraint_field(const char *key, const json_t *v, char **grammar, const char **field,
                         oai_error *err) {
    int which = -1;
    for (int i = 0; k_fields[i] && which < 0; i++)
        if (!strcmp(key, k_fields[i])) which = i;
    if (which < 0) return 1;
    if (json_is_null(v)) return 0;
    if (*grammar)
        return BAD(err, key, "'%s' and '%s' cannot be combined: give one output constraint", key,
                   *field),
               -EINVAL;
    strbuf g;
    strbuf_init(&g);
    bool none = false;
    int rc = which == 0 ? response_format(v, &g, &none, err) : guided(key, v, &g, err);
    if (!rc && !none) {
        gbnf *parsed = NULL;
        sol_err e = {0};
        if (g.oom)
            rc = -ENOMEM;
        else if (gbnf_parse(g.data ? g.data : "", g.len, &parsed, &e))
            rc = (BAD(err, key, "%s: %s", key, e.msg), -EINVAL);
        gbnf_free(parsed);
    }
    if (rc || none) {
        strbuf_free(&g);
        return rc;
    }
    *grammar = strbuf_take(&g, NULL);
    *field = k_fields[which];
    return 0;
}
