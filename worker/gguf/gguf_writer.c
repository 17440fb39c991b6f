/* gguf_writer: GGUF v3 writer. Metadata is encoded into one byte buffer as it is added; tensor
 * infos are kept until the write, when data is streamed tensor by tensor (callback tensors in
 * chunks of rows), so the largest buffer held is one chunk, not the model. */
#include "gguf_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strbuf.h"

#define FILL_CHUNK_BYTES (4u << 20) /* rows handed to a fill callback at once */

typedef struct {
    char *name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    sol_dtype type;
    const void *data;
    gguf_fill_fn fill;
    void *ctx;
    uint64_t nbytes, row_bytes, n_rows, offset;
} wtensor;

struct gguf_writer {
    strbuf kv;
    char **keys;
    int n_kv, cap_kv;
    wtensor *tensors;
    int n_tensors, cap_tensors;
    uint32_t alignment;
    uint64_t data_bytes;
    gguf_progress_fn progress;
    void *progress_ctx;
    uint64_t total_bytes; /* file size, known once the header is written */
};

/* Output: a FILE or a growing memory buffer. */
typedef struct {
    FILE *f;
    strbuf *mem;
    uint64_t written;
} sink;

static int buf_u32(strbuf *b, uint32_t v) {
    return strbuf_append(b, &v, sizeof v);
}

static int buf_u64(strbuf *b, uint64_t v) {
    return strbuf_append(b, &v, sizeof v);
}

static int buf_str(strbuf *b, const char *s) {
    size_t n = strlen(s);
    int rc = buf_u64(b, n);
    return rc ? rc : strbuf_append(b, s, n);
}

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    for (int i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->keys);
    free(w->tensors);
    strbuf_free(&w->kv);
    free(w);
}

int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, sol_err *e) {
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 30))
        return sol_err_set(
            e, -EINVAL, "gguf writer: alignment must be a power of two, got %" PRIu32, alignment);
    if (w->n_tensors)
        return sol_err_set(e, -EINVAL, "gguf writer: set the alignment before adding tensors");
    w->alignment = alignment;
    return 0;
}

void gguf_writer_set_progress(gguf_writer *w, gguf_progress_fn fn, void *ctx) {
    w->progress = fn;
    w->progress_ctx = ctx;
}

/* Starts a metadata entry: checks the key and writes it with the value type. */
static int kv_begin(gguf_writer *w, const char *key, gguf_vtype type, sol_err *e) {
    if (!key || !*key) return sol_err_set(e, -EINVAL, "gguf writer: empty metadata key");
    for (int i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return sol_err_set(e, -EEXIST, "gguf writer: duplicate key '%s'", key);
    if (w->n_kv == w->cap_kv) {
        int cap = w->cap_kv ? 2 * w->cap_kv : 32;
        char **k = realloc(w->keys, (size_t)cap * sizeof *k);
        if (!k) return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
        w->keys = k;
        w->cap_kv = cap;
    }
    char *dup = strdup(key);
    if (!dup || buf_str(&w->kv, key) || buf_u32(&w->kv, (uint32_t)type)) {
        free(dup);
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    }
    w->keys[w->n_kv++] = dup;
    return 0;
}

static int add_scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *v, sol_err *e) {
    int rc = kv_begin(w, key, t, e);
    if (rc) return rc;
    if (strbuf_append(&w->kv, v, gguf_vtype_size(t)))
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    return 0;
}

#define SCALAR_ADDER(fn, ctype, vt)                                                                \
    int fn(gguf_writer *w, const char *key, ctype v, sol_err *e) {                                 \
        return add_scalar(w, key, vt, &v, e);                                                      \
    }
SCALAR_ADDER(gguf_writer_add_u8, uint8_t, GGUF_T_U8)
SCALAR_ADDER(gguf_writer_add_i8, int8_t, GGUF_T_I8)
SCALAR_ADDER(gguf_writer_add_u16, uint16_t, GGUF_T_U16)
SCALAR_ADDER(gguf_writer_add_i16, int16_t, GGUF_T_I16)
SCALAR_ADDER(gguf_writer_add_u32, uint32_t, GGUF_T_U32)
SCALAR_ADDER(gguf_writer_add_i32, int32_t, GGUF_T_I32)
SCALAR_ADDER(gguf_writer_add_u64, uint64_t, GGUF_T_U64)
SCALAR_ADDER(gguf_writer_add_i64, int64_t, GGUF_T_I64)
SCALAR_ADDER(gguf_writer_add_f32, float, GGUF_T_F32)
SCALAR_ADDER(gguf_writer_add_f64, double, GGUF_T_F64)

int gguf_writer_add_bool(gguf_writer *w, const char *key, int v, sol_err *e) {
    uint8_t b = v != 0;
    return add_scalar(w, key, GGUF_T_BOOL, &b, e);
}

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v, sol_err *e) {
    int rc = kv_begin(w, key, GGUF_T_STR, e);
    if (rc) return rc;
    if (buf_str(&w->kv, v ? v : "")) return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    return 0;
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data,
                        uint64_t n, sol_err *e) {
    size_t sz = gguf_vtype_size(elem);
    if (sz == 0)
        return sol_err_set(e, -EINVAL, "gguf writer: key '%s': array of %s needs its own adder",
                           key, gguf_vtype_name(elem));
    int rc = kv_begin(w, key, GGUF_T_ARR, e);
    if (rc) return rc;
    if (buf_u32(&w->kv, (uint32_t)elem) || buf_u64(&w->kv, n) ||
        strbuf_append(&w->kv, data, (size_t)n * sz))
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    return 0;
}

int gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n,
                            sol_err *e) {
    int rc = kv_begin(w, key, GGUF_T_ARR, e);
    if (rc) return rc;
    rc = buf_u32(&w->kv, GGUF_T_STR) || buf_u64(&w->kv, n);
    for (uint64_t i = 0; i < n && !rc; i++)
        rc = buf_str(&w->kv, strs[i] ? strs[i] : "");
    return rc ? sol_err_set(e, -ENOMEM, "gguf writer: out of memory") : 0;
}

int gguf_writer_add_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes,
                        size_t len, sol_err *e) {
    int rc = kv_begin(w, key, type, e);
    if (rc) return rc;
    if (strbuf_append(&w->kv, bytes, len))
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------------- */

static int check_tensor(const gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                        sol_dtype type, sol_err *e) {
    if (!name || !*name || strlen(name) > GGUF_MAX_NAME)
        return sol_err_set(e, -EINVAL, "gguf writer: tensor name '%s' must be 1..%d bytes",
                           name ? name : "", GGUF_MAX_NAME);
    for (int i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return sol_err_set(e, -EEXIST, "gguf writer: duplicate tensor %s", name);
    if (!sol_dtype_known((uint32_t)type))
        return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: unknown type %d", name, (int)type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: n_dims %d not in 1..%d", name,
                           n_dims, GGUF_MAX_DIMS);
    for (int j = 0; j < n_dims; j++)
        if (ne[j] < 1)
            return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: ne[%d] = %" PRId64, name, j,
                               ne[j]);
    if (sol_dtype_row_bytes(type, ne[0]) == 0)
        return sol_err_set(e, -EINVAL,
                           "gguf writer: tensor %s: ne[0] = %" PRId64
                           " is not a multiple of the %s block size %zu",
                           name, ne[0], sol_dtype_name(type), sol_dtype_block_elems(type));
    return 0;
}

static int add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                      sol_dtype type, const void *data, gguf_fill_fn fill, void *ctx, sol_err *e) {
    int rc = check_tensor(w, name, n_dims, ne, type, e);
    if (rc) return rc;
    wtensor t = {.n_dims = n_dims, .type = type, .data = data, .fill = fill, .ctx = ctx};
    t.n_rows = 1;
    for (int j = 0; j < GGUF_MAX_DIMS; j++) {
        t.ne[j] = j < n_dims ? ne[j] : 1;
        if (j > 0 && __builtin_mul_overflow(t.n_rows, (uint64_t)t.ne[j], &t.n_rows))
            return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: size overflows", name);
    }
    t.row_bytes = sol_dtype_row_bytes(type, ne[0]);
    if (__builtin_mul_overflow(t.n_rows, t.row_bytes, &t.nbytes))
        return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: size overflows", name);
    t.offset = w->data_bytes;
    if (w->n_tensors == w->cap_tensors) {
        int cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *nt = realloc(w->tensors, (size_t)cap * sizeof *nt);
        if (!nt) return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    if (!(t.name = strdup(name))) return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    w->tensors[w->n_tensors++] = t;
    w->data_bytes += (t.nbytes + w->alignment - 1) / w->alignment * w->alignment;
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                           sol_dtype type, const void *data, sol_err *e) {
    if (!data) return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: no data", name);
    return add_tensor(w, name, n_dims, ne, type, data, NULL, NULL, e);
}

int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                                sol_dtype type, gguf_fill_fn fill, void *ctx, sol_err *e) {
    if (!fill) return sol_err_set(e, -EINVAL, "gguf writer: tensor %s: no fill callback", name);
    return add_tensor(w, name, n_dims, ne, type, NULL, fill, ctx, e);
}

int gguf_writer_n_tensors(const gguf_writer *w) {
    return w->n_tensors;
}

uint64_t gguf_writer_data_bytes(const gguf_writer *w) {
    return w->data_bytes;
}

/* ---- output ------------------------------------------------------------------------------ */

static int sink_put(sink *s, const void *p, size_t n, sol_err *e) {
    if (s->mem) {
        if (strbuf_append(s->mem, p, n))
            return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    } else if (n && fwrite(p, 1, n, s->f) != n) {
        return sol_err_set(e, -EIO, "write failed: %s", strerror(errno));
    }
    s->written += n;
    return 0;
}

static int sink_pad(sink *s, uint32_t alignment, sol_err *e) {
    static const uint8_t zeros[256];
    size_t pad = (size_t)((alignment - s->written % alignment) % alignment);
    while (pad) {
        size_t n = pad < sizeof zeros ? pad : sizeof zeros;
        int rc = sink_put(s, zeros, n, e);
        if (rc) return rc;
        pad -= n;
    }
    return 0;
}

static int write_header(gguf_writer *w, sink *s, sol_err *e) {
    strbuf h = {0};
    int extra = w->alignment != GGUF_DEFAULT_ALIGNMENT;
    int rc = strbuf_append(&h, "GGUF", 4) || buf_u32(&h, 3) ||
             buf_u64(&h, (uint64_t)w->n_tensors) || buf_u64(&h, (uint64_t)(w->n_kv + extra)) ||
             strbuf_append(&h, w->kv.data, w->kv.len);
    if (!rc && extra)
        rc = buf_str(&h, "general.alignment") || buf_u32(&h, GGUF_T_U32) ||
             buf_u32(&h, w->alignment);
    for (int i = 0; i < w->n_tensors && !rc; i++) {
        const wtensor *t = &w->tensors[i];
        rc = buf_str(&h, t->name) || buf_u32(&h, (uint32_t)t->n_dims);
        for (int j = 0; j < t->n_dims && !rc; j++)
            rc = buf_u64(&h, (uint64_t)t->ne[j]);
        if (!rc) rc = buf_u32(&h, (uint32_t)t->type) || buf_u64(&h, t->offset);
    }
    if (rc) {
        strbuf_free(&h);
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    }
    rc = sink_put(s, h.data, h.len, e);
    strbuf_free(&h);
    return rc ? rc : sink_pad(s, w->alignment, e);
}

static int write_filled(gguf_writer *w, int i, sink *s, uint8_t *scratch, uint64_t chunk_rows,
                        sol_err *e) {
    const wtensor *t = &w->tensors[i];
    for (uint64_t r = 0; r < t->n_rows; r += chunk_rows) {
        uint64_t n = t->n_rows - r < chunk_rows ? t->n_rows - r : chunk_rows;
        int rc = t->fill(t->ctx, i, (int64_t)r, (int64_t)n, scratch, e);
        if (rc) return sol_err_wrap(e, "tensor %s: ", t->name);
        if ((rc = sink_put(s, scratch, (size_t)(n * t->row_bytes), e))) return rc;
        if (w->progress) w->progress(w->progress_ctx, s->written, w->total_bytes, i, w->n_tensors);
    }
    return 0;
}

static int write_data(gguf_writer *w, sink *s, sol_err *e) {
    uint64_t max_chunk = 0;
    for (int i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t rows = t->row_bytes ? FILL_CHUNK_BYTES / t->row_bytes : 1;
        if (rows == 0) rows = 1;
        if (t->fill && rows * t->row_bytes > max_chunk) max_chunk = rows * t->row_bytes;
    }
    uint8_t *scratch = max_chunk ? malloc((size_t)max_chunk) : NULL;
    if (max_chunk && !scratch) return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    w->total_bytes = s->written + w->data_bytes;
    int rc = 0;
    for (int i = 0; i < w->n_tensors && !rc; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->fill) {
            uint64_t rows = FILL_CHUNK_BYTES / t->row_bytes;
            rc = write_filled(w, i, s, scratch, rows ? rows : 1, e);
        } else {
            rc = sink_put(s, t->data, (size_t)t->nbytes, e);
        }
        if (!rc) rc = sink_pad(s, w->alignment, e);
        if (!rc && w->progress)
            w->progress(w->progress_ctx, s->written, w->total_bytes, i + 1, w->n_tensors);
    }
    free(scratch);
    return rc;
}

static int write_all(gguf_writer *w, sink *s, sol_err *e) {
    int rc = write_header(w, s, e);
    return rc ? rc : write_data(w, s, e);
}

int gguf_writer_write_mem(gguf_writer *w, void **out, size_t *len, sol_err *e) {
    strbuf b = {0};
    sink s = {.mem = &b};
    int rc = write_all(w, &s, e);
    if (rc) {
        strbuf_free(&b);
        return rc;
    }
    if (!(*out = strbuf_take(&b, len)))
        return sol_err_set(e, -ENOMEM, "gguf writer: out of memory");
    return 0;
}

int gguf_writer_write_file(gguf_writer *w, const char *path, sol_err *e) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return sol_err_set(e, -ENAMETOOLONG, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return sol_err_set(e, -errno, "%s: cannot create: %s", tmp, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    sink s = {.f = f};
    int rc = write_all(w, &s, e);
    if (fclose(f) != 0 && !rc) rc = sol_err_set(e, -EIO, "close failed: %s", strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = sol_err_set(e, -errno, "cannot rename to %s: %s", path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return sol_err_wrap(e, "%s: ", path);
    }
    return 0;
}
