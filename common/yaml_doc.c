/* The tree is built from events with an explicit stack, so nesting depth is bounded by
 * YDOC_MAX_DEPTH rather than by the C stack; freeing recurses at most that deep. */
#include "yaml_doc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    const char *name;
    sol_err *err;
    ydoc_node *root;
    ydoc_node *stack[YDOC_MAX_DEPTH];
    int depth;
    int docs;
} builder;

static int fail_mark(builder *b, yaml_mark_t m, const char *what) {
    return sol_err_set(b->err, -EINVAL, "%s:%zu:%zu: %s", b->name, m.line + 1, m.column + 1, what);
}

static ydoc_node *node_new(ydoc_kind kind, yaml_mark_t m) {
    ydoc_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->line = (int)m.line + 1;
    n->col = (int)m.column + 1;
    return n;
}

void ydoc_free(ydoc_node *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n; i++)
        ydoc_free(n->items[i]);
    free(n->items);
    free(n->text);
    free(n);
}

static int push_item(ydoc_node *parent, ydoc_node *child) {
    ydoc_node **items = realloc(parent->items, (parent->n + 1) * sizeof *items);
    if (!items) return -ENOMEM;
    parent->items = items;
    items[parent->n++] = child;
    return 0;
}

/* Attach a finished or just-opened node to the innermost open container (or make it the root). */
static int attach(builder *b, ydoc_node *n, yaml_mark_t m) {
    if (b->depth == 0) {
        b->root = n;
        return 0;
    }
    ydoc_node *top = b->stack[b->depth - 1];
    if (top->kind == YDOC_MAP && top->n % 2 == 0 && n->kind != YDOC_SCALAR) {
        ydoc_free(n);
        return fail_mark(b, m, "mapping keys must be plain scalars, not collections");
    }
    if (push_item(top, n) < 0) {
        ydoc_free(n);
        return sol_err_set(b->err, -ENOMEM, "%s: out of memory", b->name);
    }
    return 0;
}

static int on_scalar(builder *b, const yaml_event_t *ev) {
    const yaml_mark_t m = ev->start_mark;
    if (strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
        return fail_mark(b, m, "NUL character inside a value");
    ydoc_node *n = node_new(YDOC_SCALAR, m);
    char *text = strdup((const char *)ev->data.scalar.value);
    if (!n || !text) {
        free(n);
        free(text);
        return sol_err_set(b->err, -ENOMEM, "%s: out of memory", b->name);
    }
    n->text = text;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    return attach(b, n, m);
}

static int on_open(builder *b, ydoc_kind kind, yaml_mark_t m) {
    if (b->depth == YDOC_MAX_DEPTH) return fail_mark(b, m, "nesting is too deep");
    ydoc_node *n = node_new(kind, m);
    if (!n) return sol_err_set(b->err, -ENOMEM, "%s: out of memory", b->name);
    int rc = attach(b, n, m);
    if (rc < 0) return rc;
    b->stack[b->depth++] = n;
    return 0;
}

static int on_event(builder *b, const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++b->docs > 1)
            return fail_mark(b, ev->start_mark, "only one YAML document is allowed per file");
        return 0;
    case YAML_ALIAS_EVENT:
        return fail_mark(b, ev->start_mark, "YAML aliases (*name) are not supported");
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_open(b, YDOC_SEQ, ev->start_mark);
    case YAML_MAPPING_START_EVENT:
        return on_open(b, YDOC_MAP, ev->start_mark);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth > 0) b->depth--;
        return 0;
    default:
        return 0;
    }
}

static int syntax_error(builder *b, const yaml_parser_t *p) {
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (p->context)
        return sol_err_set(b->err, -EINVAL, "%s:%zu:%zu: YAML syntax error: %s (%s at %zu:%zu)",
                           b->name, p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                           p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    if (p->error == YAML_READER_ERROR)
        return sol_err_set(b->err, -EINVAL, "%s: YAML syntax error: %s at byte %zu", b->name,
                           problem, p->problem_offset);
    return sol_err_set(b->err, -EINVAL, "%s:%zu:%zu: YAML syntax error: %s", b->name,
                       p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

int ydoc_parse_string(const char *text, size_t len, const char *name, ydoc_node **out,
                      sol_err *err) {
    *out = NULL;
    if (len > YDOC_MAX_BYTES)
        return sol_err_set(err, -EFBIG, "%s: too large (%zu bytes, at most %u)", name, len,
                           YDOC_MAX_BYTES);
    builder b = {.name = name, .err = err};
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return sol_err_set(err, -ENOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = 0, done = 0;
    while (!done && rc == 0) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = syntax_error(&b, &p);
            break;
        }
        rc = on_event(&b, &ev);
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (rc < 0) {
        ydoc_free(b.root);
        return rc;
    }
    *out = b.root;
    return 0;
}

int ydoc_parse_file(const char *path, ydoc_node **out, sol_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return sol_err_set(err, -errno, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(YDOC_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return sol_err_set(err, -ENOMEM, "%s: out of memory", path);
    }
    size_t len = fread(buf, 1, YDOC_MAX_BYTES + 1, f);
    int rc = 0;
    if (ferror(f))
        rc = sol_err_set(err, -EIO, "%s: cannot read: %s", path, strerror(errno));
    else if (len > YDOC_MAX_BYTES)
        rc = sol_err_set(err, -EFBIG, "%s: too large for a configuration file (over %u bytes)",
                         path, YDOC_MAX_BYTES);
    else
        rc = ydoc_parse_string(buf, len, path, out, err);
    fclose(f);
    free(buf);
    return rc;
}

size_t ydoc_map_len(const ydoc_node *n) {
    return (n && n->kind == YDOC_MAP) ? n->n / 2 : 0;
}

int ydoc_is_null(const ydoc_node *n) {
    if (!n) return 1;
    if (n->kind != YDOC_SCALAR || !n->plain) return 0;
    const char *t = n->text;
    return !*t || !strcmp(t, "~") || !strcmp(t, "null") || !strcmp(t, "Null") || !strcmp(t, "NULL");
}

const char *ydoc_describe(const ydoc_node *n) {
    if (ydoc_is_null(n)) return "null";
    if (n->kind == YDOC_MAP) return "a mapping";
    if (n->kind == YDOC_SEQ) return "a sequence";
    return "a string";
}
