/* strbuf: the one growable byte buffer (HTTP bodies, SSE lines, metrics, chat prompts, GGUF
 * headers); reused per stream or render, so steady-state appends do not allocate. */
#ifndef SOL_STRBUF_H
#define SOL_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct strbuf {
    char *data; /* always NUL-terminated when cap > 0 */
    size_t len;
    size_t cap;
    int oom; /* sticky: set when an append could not grow the buffer */
} strbuf;

void strbuf_init(strbuf *b);
void strbuf_free(strbuf *b);  /* releases data; the struct can be re-initialized */
void strbuf_reset(strbuf *b); /* len = 0, keeps capacity */

/* Appends return 0 or -ENOMEM (and set b->oom). */
int strbuf_reserve(strbuf *b, size_t extra);
int strbuf_append(strbuf *b, const void *s, size_t n);
int strbuf_puts(strbuf *b, const char *s);
int strbuf_putc(strbuf *b, char c);
int strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append `n` bytes of `s` as a quoted JSON string. Control characters and non-ASCII bytes that
 * do not form valid UTF-8 are escaped (\u00XX / U+FFFD) so the output is always valid JSON. */
int strbuf_json_str(strbuf *b, const char *s, size_t n);

/* Append the whole file at `path`; 0, -errno when it cannot be read, or -ENOMEM. */
int strbuf_read_file(strbuf *b, const char *path);

/* Hand the data to the caller (who frees it) and reset the buffer to empty. */
char *strbuf_take(strbuf *b, size_t *len);

/* Whether `line` is one of the lines of b when b holds "\nline1\nline2\n" (a name list: the
 * models the router serves). An empty line is never there. */
int strbuf_has_line(const strbuf *b, const char *line);

#endif
