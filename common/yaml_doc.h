/* yaml_doc: a small YAML tree (scalars, sequences, mappings) built with libyaml's event API,
 * where every node keeps its 1-based line:column so configuration errors can point at the text. */
#ifndef SOL_YAML_DOC_H
#define SOL_YAML_DOC_H

#include <stddef.h>

#include "err.h"

/* Inputs are small configuration files; these bounds keep hostile input from costing much. */
#define YDOC_MAX_BYTES (1u << 20)
#define YDOC_MAX_DEPTH 32

typedef enum { YDOC_SCALAR, YDOC_SEQ, YDOC_MAP } ydoc_kind;

typedef struct ydoc_node {
    ydoc_kind kind;
    int line, col; /* 1-based position of the node's first character; 0 when synthetic */
    char *text;    /* scalars: the value, NUL-terminated (embedded NULs are rejected) */
    int plain;     /* scalars: 1 when unquoted, so `null`/`~` mean null but "null" is a string */
    /* Sequences: items[0..n). Mappings: key i at items[2i], its value at items[2i+1]. */
    struct ydoc_node **items;
    size_t n;
} ydoc_node;

/* Parse one YAML document. `name` labels error messages ("cfg.yaml:3:5: ..."). An empty
 * document gives *out == NULL. Aliases, several documents and non-scalar keys are refused.
 * The caller owns *out and frees it with ydoc_free. */
int ydoc_parse_string(const char *text, size_t len, const char *name, ydoc_node **out,
                      sol_err *err);

/* Read and parse a file; a missing or unreadable file is reported as "path: cannot open ...". */
int ydoc_parse_file(const char *path, ydoc_node **out, sol_err *err);

void ydoc_free(ydoc_node *n);

/* Number of key/value pairs of a mapping (0 for other kinds). */
size_t ydoc_map_len(const ydoc_node *n);

/* 1 for an absent node or an unquoted "", "~", "null", "Null", "NULL". */
int ydoc_is_null(const ydoc_node *n);

/* "a mapping", "a sequence", "null" or "a string" — for "expected X, found Y" messages. */
const char *ydoc_describe(const ydoc_node *n);

#endif
