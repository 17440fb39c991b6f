/* gguf: GGUF v2/v3 reader. The file is untrusted: every count and length is checked against the
 * bytes that remain before anything is allocated, so memory use stays proportional to the file and
 * a corrupt file yields a message naming the file and the key or tensor, never a crash.
 * Keys, strings and metadata arrays are copied into an arena (NUL-terminated, aligned); tensor
 * data stays in the mapping. Key and tensor names are hashed so lookups are O(1) and duplicates
 * are caught while parsing. Assumes a little-endian host, like ggml. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian files by memcpy and needs a little-endian host"
#endif

#define GGUF_MAX_ARRAY_DEPTH                                                                       \
    8                       /* nested arrays deeper than this are rejected, bounding recursion     \
                             */
#define KV_MIN_BYTES 13     /* key length (8) + value type (4) + smallest value (1) */
#define TENSOR_MIN_BYTES 24 /* name length (8) + n_dims (4) + type (4) + offset (8) */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_chunk;

enum { BACKING_BORROWED, BACKING_MMAP, BACKING_HEAP };

struct gguf_file {
    char *path;
    const uint8_t *base;
    size_t size;
    int backing;
    int locked;
    uint32_t version, alignment;
    uint64_t data_off;
    int n_kv, n_tensors;
    gguf_kv *kvs;
    gguf_tensor *tensors;
    uint32_t *kv_slots, *t_slots; /* open addressing; slot holds index + 1, 0 is empty */
    uint32_t kv_cap, t_cap;
    arena_chunk *arena;
};

/* Parsing cursor; `where` names what is being read, for messages. */
typedef struct {
    gguf_file *g;
    size_t pos;
    sol_err *e;
    char where[128];
} rd;

static const char *const k_vtype_names[GGUF_T_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t k_vtype_sizes[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(gguf_vtype t) {
    return (unsigned)t < GGUF_T_COUNT ? k_vtype_names[t] : "unknown";
}

size_t gguf_vtype_size(gguf_vtype t) {
    return (unsigned)t < GGUF_T_COUNT ? k_vtype_sizes[t] : 0;
}

/* ---- arena ------------------------------------------------------------------------------- */

static void *arena_alloc(gguf_file *g, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_chunk *c = g->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static void *arena_array(gguf_file *g, uint64_t n, size_t elem) {
    size_t bytes;
    if (n > SIZE_MAX || __builtin_mul_overflow((size_t)n, elem, &bytes)) return NULL;
    return arena_alloc(g, bytes ? bytes : 1);
}

/* ---- errors and primitive reads ---------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int fail(rd *r, int code, const char *fmt, ...) {
    char msg[SOL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->where[0]) return sol_err_set(r->e, code, "%s: %s: %s", r->g->path, r->where, msg);
    return sol_err_set(r->e, code, "%s: %s", r->g->path, msg);
}

static int oom(rd *r) {
    return fail(r, -ENOMEM, "out of memory");
}

static size_t left(const rd *r) {
    return r->g->size - r->pos;
}

static int need(rd *r, uint64_t n, const char *what) {
    if (n > left(r))
        return fail(r, -EINVAL,
                    "file truncated: %s needs %" PRIu64 " bytes at offset %zu, only %zu remain",
                    what, n, r->pos, left(r));
    return 0;
}

static int rd_bytes(rd *r, void *out, size_t n, const char *what) {
    int rc = need(r, n, what);
    if (rc) return rc;
    memcpy(out, r->g->base + r->pos, n);
    r->pos += n;
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    return rd_bytes(r, v, sizeof *v, what);
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    return rd_bytes(r, v, sizeof *v, what);
}

/* Reads a length-prefixed string into the arena, NUL-terminated. */
static int rd_str(rd *r, const char **out, uint64_t *len_out, const char *what) {
    uint64_t n;
    int rc = rd_u64(r, &n, what);
    if (rc) return rc;
    if (n > left(r))
        return fail(r, -EINVAL, "%s of %" PRIu64 " bytes runs past the end of the file (%zu left)",
                    what, n, left(r));
    char *s = arena_alloc(r->g, (size_t)n + 1);
    if (!s) return oom(r);
    memcpy(s, r->g->base + r->pos, (size_t)n);
    s[n] = '\0';
    r->pos += (size_t)n;
    *out = s;
    if (len_out) *len_out = n;
    return 0;
}

/* ---- name hashing ------------------------------------------------------------------------ */

static uint32_t fnv1a(const char *s) {
    return sol_fnv32(SOL_FNV32_INIT, s, strlen(s));
}

static uint32_t *slots_new(uint64_t n, uint32_t *cap) {
    uint32_t c = 8;
    while (c < 2 * n)
        c *= 2;
    *cap = c;
    return calloc(c, sizeof(uint32_t));
}

/* Items are gguf_kv or gguf_tensor: both start with their name. Returns the matching index or
 * -1, and the slot where the name would be inserted. */
static int slots_find(const uint32_t *slots, uint32_t cap, const void *items, size_t stride,
                      const char *name, uint32_t *slot) {
    if (!slots) return -1;
    uint32_t i = fnv1a(name) & (cap - 1);
    for (; slots[i]; i = (i + 1) & (cap - 1)) {
        const char *other = *(const char *const *)((const char *)items + (slots[i] - 1) * stride);
        if (strcmp(other, name) == 0) return (int)slots[i] - 1;
    }
    if (slot) *slot = i;
    return -1;
}

static int name_check(rd *r, const char *name, uint64_t len, const char *what) {
    if (strlen(name) != len) return fail(r, -EINVAL, "%s contains a NUL byte", what);
    return 0;
}

/* ---- metadata ---------------------------------------------------------------------------- */

static int min_elem_bytes(gguf_vtype t) {
    if (t == GGUF_T_STR) return 8;
    if (t == GGUF_T_ARR) return 12;
    return k_vtype_sizes[t];
}

static int parse_arr(rd *r, gguf_arr *a, int depth);

static int parse_arr_items(rd *r, gguf_arr *a, int depth) {
    if (a->type == GGUF_T_STR) {
        const char **strs = arena_array(r->g, a->n, sizeof *strs);
        uint64_t *lens = arena_array(r->g, a->n, sizeof *lens);
        if (!strs || !lens) return oom(r);
        for (uint64_t i = 0; i < a->n; i++) {
            int rc = rd_str(r, &strs[i], &lens[i], "array string");
            if (rc) return rc;
        }
        a->strs = strs;
        a->lens = lens;
    } else if (a->type == GGUF_T_ARR) {
        gguf_arr *arrs = arena_array(r->g, a->n, sizeof *arrs);
        if (!arrs) return oom(r);
        for (uint64_t i = 0; i < a->n; i++) {
            int rc = parse_arr(r, &arrs[i], depth + 1);
            if (rc) return rc;
        }
        a->arrs = arrs;
    } else {
        size_t sz = k_vtype_sizes[a->type];
        uint8_t *d = arena_array(r->g, a->n, sz);
        if (!d) return oom(r);
        memcpy(d, r->g->base + r->pos, (size_t)a->n * sz);
        r->pos += (size_t)a->n * sz;
        if (a->type == GGUF_T_BOOL)
            for (uint64_t i = 0; i < a->n; i++)
                d[i] = d[i] != 0;
        a->data = d;
    }
    return 0;
}

static int parse_arr(rd *r, gguf_arr *a, int depth) {
    /* The arena does not zero: a nested array of strings or arrays would keep a stale `data`
     * (found by fuzz_gguf: a reader that checks `data` followed it). */
    memset(a, 0, sizeof *a);
    uint32_t type;
    int rc = rd_u32(r, &type, "array element type");
    if (!rc) rc = rd_u64(r, &a->n, "array length");
    if (rc) return rc;
    if (type >= GGUF_T_COUNT) return fail(r, -EINVAL, "unknown array element type %" PRIu32, type);
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return fail(r, -EINVAL, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    a->type = (gguf_vtype)type;
    if (a->n > left(r) / (uint64_t)min_elem_bytes(a->type))
        return fail(r, -EINVAL,
                    "array of %" PRIu64 " %s elements cannot fit in the %zu bytes left in the file",
                    a->n, k_vtype_names[type], left(r));
    return parse_arr_items(r, a, depth);
}

static int parse_scalar(rd *r, gguf_kv *kv) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    int rc = rd_bytes(r, &v, k_vtype_sizes[kv->type], "value");
    if (rc) return rc;
    switch (kv->type) {
    case GGUF_T_U8:
        kv->u = v.u8;
        break;
    case GGUF_T_BOOL:
        kv->u = v.u8 != 0;
        break;
    case GGUF_T_I8:
        kv->i = v.i8;
        break;
    case GGUF_T_U16:
        kv->u = v.u16;
        break;
    case GGUF_T_I16:
        kv->i = v.i16;
        break;
    case GGUF_T_U32:
        kv->u = v.u32;
        break;
    case GGUF_T_I32:
        kv->i = v.i32;
        break;
    case GGUF_T_F32:
        kv->f = v.f32;
        break;
    case GGUF_T_U64:
        kv->u = v.u64;
        break;
    case GGUF_T_I64:
        kv->i = v.i64;
        break;
    case GGUF_T_F64:
        kv->f = v.f64;
        break;
    default:
        break;
    }
    return 0;
}

static int parse_kv(rd *r, int idx) {
    gguf_file *g = r->g;
    gguf_kv *kv = &g->kvs[idx];
    uint64_t klen;
    snprintf(r->where, sizeof r->where, "metadata entry #%d", idx);
    int rc = rd_str(r, &kv->key, &klen, "key");
    if (!rc) rc = name_check(r, kv->key, klen, "key");
    if (rc) return rc;
    snprintf(r->where, sizeof r->where, "key '%.100s'", kv->key);
    uint32_t slot = 0;
    int prev = slots_find(g->kv_slots, g->kv_cap, g->kvs, sizeof *kv, kv->key, &slot);
    if (prev >= 0)
        return fail(r, -EINVAL, "duplicate key (metadata entries #%d and #%d)", prev, idx);
    g->kv_slots[slot] = (uint32_t)idx + 1;
    uint32_t type;
    if ((rc = rd_u32(r, &type, "value type"))) return rc;
    if (type >= GGUF_T_COUNT) return fail(r, -EINVAL, "unknown value type %" PRIu32, type);
    kv->type = (gguf_vtype)type;
    if (type == GGUF_T_STR) return rd_str(r, &kv->str, &kv->str_len, "string value");
    if (type == GGUF_T_ARR) return parse_arr(r, &kv->arr, 0);
    return parse_scalar(r, kv);
}

static int kv_as_u64(const gguf_kv *kv, uint64_t *out, int *negative) {
    *negative = 0;
    switch (kv->type) {
    case GGUF_T_U8:
    case GGUF_T_U16:
    case GGUF_T_U32:
    case GGUF_T_U64:
        *out = kv->u;
        return 0;
    case GGUF_T_I8:
    case GGUF_T_I16:
    case GGUF_T_I32:
    case GGUF_T_I64:
        *negative = kv->i < 0;
        *out = (uint64_t)kv->i;
        return 0;
    default:
        return -1;
    }
}

static int parse_alignment(rd *r) {
    gguf_file *g = r->g;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_get_kv(g, "general.alignment");
    if (!kv) return 0;
    snprintf(r->where, sizeof r->where, "key 'general.alignment'");
    uint64_t v;
    int neg;
    if (kv_as_u64(kv, &v, &neg))
        return fail(r, -EINVAL, "expected an unsigned integer, found %s", k_vtype_names[kv->type]);
    if (neg || v == 0 || v > (1u << 30) || (v & (v - 1)))
        return fail(r, -EINVAL, "expected a power of two, found %" PRId64, (int64_t)v);
    g->alignment = (uint32_t)v;
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------------- */

static int tensor_shape(rd *r, gguf_tensor *t) {
    uint32_t n_dims;
    int rc = rd_u32(r, &n_dims, "n_dims");
    if (rc) return rc;
    if (n_dims > GGUF_MAX_DIMS)
        return fail(r, -EINVAL, "n_dims is %" PRIu32 ", at most %d is supported", n_dims,
                    GGUF_MAX_DIMS);
    t->n_dims = n_dims;
    for (int j = 0; j < GGUF_MAX_DIMS; j++)
        t->ne[j] = 1;
    int64_t count = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        uint64_t ne;
        if ((rc = rd_u64(r, &ne, "dimension"))) return rc;
        if (ne > INT64_MAX)
            return fail(r, -EINVAL, "ne[%" PRIu32 "] = %" PRIu64 " exceeds INT64_MAX", j, ne);
        t->ne[j] = (int64_t)ne;
        if (__builtin_mul_overflow(count, t->ne[j], &count))
            return fail(r, -EINVAL,
                        "element count overflows 64 bits (ne[%" PRIu32 "] = %" PRIu64 ")", j, ne);
    }
    return 0;
}

static int tensor_type_and_size(rd *r, gguf_tensor *t) {
    uint32_t type;
    int rc = rd_u32(r, &type, "tensor type");
    if (!rc) rc = rd_u64(r, &t->offset, "tensor offset");
    if (rc) return rc;
    if (!sol_dtype_known(type)) return fail(r, -EINVAL, "unknown tensor type %" PRIu32, type);
    t->type = (sol_dtype)type;
    size_t be = sol_dtype_block_elems(t->type);
    if (t->ne[0] % (int64_t)be)
        return fail(r, -EINVAL, "ne[0] = %" PRId64 " is not a multiple of the %s block size %zu",
                    t->ne[0], sol_dtype_name(t->type), be);
    /* The element count was checked, but a zero ne[0] hides an overflow in the other dims. */
    uint64_t rows = 1;
    uint64_t row_bytes = (uint64_t)(t->ne[0] / (int64_t)be) * sol_dtype_block_bytes(t->type);
    bool over = false;
    for (int j = 1; j < GGUF_MAX_DIMS; j++)
        over |= __builtin_mul_overflow(rows, (uint64_t)t->ne[j], &rows);
    if (over || __builtin_mul_overflow(rows, row_bytes, &t->nbytes))
        return fail(r, -EINVAL, "byte size overflows 64 bits");
    if (t->offset % r->g->alignment)
        return fail(r, -EINVAL,
                    "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                    t->offset, r->g->alignment);
    return 0;
}

static int parse_tensor_info(rd *r, int idx) {
    gguf_file *g = r->g;
    gguf_tensor *t = &g->tensors[idx];
    uint64_t nlen;
    snprintf(r->where, sizeof r->where, "tensor #%d", idx);
    int rc = rd_str(r, &t->name, &nlen, "tensor name");
    if (!rc) rc = name_check(r, t->name, nlen, "tensor name");
    if (rc) return rc;
    if (nlen > GGUF_MAX_NAME)
        return fail(r, -EINVAL, "tensor name of %" PRIu64 " bytes is longer than %d: '%.80s...'",
                    nlen, GGUF_MAX_NAME, t->name);
    snprintf(r->where, sizeof r->where, "tensor %s", t->name);
    uint32_t slot = 0;
    int prev = slots_find(g->t_slots, g->t_cap, g->tensors, sizeof *t, t->name, &slot);
    if (prev >= 0)
        return fail(r, -EINVAL, "duplicate tensor name (tensors #%d and #%d)", prev, idx);
    g->t_slots[slot] = (uint32_t)idx + 1;
    if ((rc = tensor_shape(r, t))) return rc;
    return tensor_type_and_size(r, t);
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Tensor data must lie inside the file and no two tensors may share bytes. */
static int place_tensors(rd *r) {
    gguf_file *g = r->g;
    r->where[0] = '\0';
    for (int i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t avail = g->size > g->data_off ? g->size - g->data_off : 0;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return fail(r, -EINVAL,
                        "tensor %s: data [%" PRIu64 ", +%" PRIu64 ") lies outside the file "
                        "(data section starts at %" PRIu64 ", file size %zu)",
                        t->name, t->offset, t->nbytes, g->data_off, g->size);
        t->data = g->base + g->data_off + t->offset;
    }
    if (g->n_tensors < 2) return 0;
    const gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return oom(r);
    for (int i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (int i = 1; i < g->n_tensors && !rc; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->nbytes > b->offset)
            rc = fail(r, -EINVAL,
                      "tensors %s [%" PRIu64 ", +%" PRIu64 ") and %s [%" PRIu64 ", +%" PRIu64
                      ") overlap",
                      a->name, a->offset, a->nbytes, b->name, b->offset, b->nbytes);
    }
    free(order);
    return rc;
}

/* ---- header and driver ------------------------------------------------------------------- */

static int parse_header(rd *r, uint64_t *n_tensors, uint64_t *n_kv) {
    gguf_file *g = r->g;
    if (g->size < 4)
        return fail(r, -EINVAL, "not a GGUF file: %zu bytes, too short for the magic", g->size);
    if (memcmp(g->base, "GGUF", 4) != 0)
        return fail(r, -EINVAL,
                    "not a GGUF file: expected magic 'GGUF', found bytes %02x %02x %02x %02x",
                    g->base[0], g->base[1], g->base[2], g->base[3]);
    r->pos = 4;
    int rc = rd_u32(r, &g->version, "version");
    if (rc) return rc;
    if (g->version == 1)
        return fail(r, -EINVAL, "GGUF version 1 is not supported (expected 2 or 3)");
    if (g->version != 2 && g->version != 3)
        return fail(r, -EINVAL, "unsupported GGUF version %" PRIu32 " (expected 2 or 3)%s",
                    g->version, (g->version & 0xffff) == 0 ? "; the file may be big-endian" : "");
    if ((rc = rd_u64(r, n_tensors, "tensor count")) || (rc = rd_u64(r, n_kv, "metadata count")))
        return rc;
    if (*n_kv > left(r) / KV_MIN_BYTES || *n_kv > INT32_MAX)
        return fail(r, -EINVAL, "metadata count %" PRIu64 " cannot fit in the %zu bytes left",
                    *n_kv, left(r));
    if (*n_tensors > left(r) / TENSOR_MIN_BYTES || *n_tensors > INT32_MAX)
        return fail(r, -EINVAL, "tensor count %" PRIu64 " cannot fit in the %zu bytes left",
                    *n_tensors, left(r));
    return 0;
}

static int parse(gguf_file *g, sol_err *e) {
    rd r = {.g = g, .e = e};
    uint64_t n_tensors = 0, n_kv = 0; /* gcc -O3 cannot see parse_header set both */
    int rc = parse_header(&r, &n_tensors, &n_kv);
    if (rc) return rc;
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->kv_slots = slots_new(n_kv, &g->kv_cap);
    if (!g->kvs || !g->kv_slots) return oom(&r);
    for (uint64_t i = 0; i < n_kv; i++, g->n_kv++)
        if ((rc = parse_kv(&r, (int)i))) return rc;
    if ((rc = parse_alignment(&r))) return rc;
    r.where[0] = '\0';
    if (n_tensors > left(&r) / TENSOR_MIN_BYTES)
        return fail(&r, -EINVAL, "tensor count %" PRIu64 " cannot fit in the %zu bytes left",
                    n_tensors, left(&r));
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->t_slots = slots_new(n_tensors, &g->t_cap);
    if (!g->tensors || !g->t_slots) return oom(&r);
    for (uint64_t i = 0; i < n_tensors; i++, g->n_tensors++)
        if ((rc = parse_tensor_info(&r, (int)i))) return rc;
    g->data_off = ((uint64_t)r.pos + g->alignment - 1) / g->alignment * g->alignment;
    return place_tensors(&r);
}

static gguf_file *file_new(const char *name) {
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->path = strdup(name ? name : "(memory)");
    if (!g->path) {
        free(g);
        return NULL;
    }
    return g;
}

gguf_file *gguf_open_memory(const void *buf, size_t len, const char *name, sol_err *e) {
    gguf_file *g = file_new(name);
    if (!g) {
        sol_err_set(e, -ENOMEM, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    g->base = buf;
    g->size = len;
    g->backing = BACKING_BORROWED;
    if (parse(g, e)) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

static int load_heap(gguf_file *g, int fd, sol_err *e) {
    uint8_t *buf = aligned_alloc(64, (g->size + 63) & ~(size_t)63);
    if (!buf) return sol_err_set(e, -ENOMEM, "%s: cannot allocate %zu bytes", g->path, g->size);
    g->base = buf;
    g->backing = BACKING_HEAP;
    for (size_t got = 0; got < g->size;) {
        ssize_t n = read(fd, buf + got, g->size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return sol_err_set(e, n < 0 ? -errno : -EIO, "%s: read failed at offset %zu: %s",
                               g->path, got, n < 0 ? strerror(errno) : "unexpected end of file");
        got += (size_t)n;
    }
    return 0;
}

static int load(gguf_file *g, int flags, sol_err *e) {
    int fd = open(g->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sol_err_set(e, -errno, "%s: cannot open: %s", g->path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = sol_err_set(e, -errno, "%s: cannot stat: %s", g->path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = sol_err_set(e, -EINVAL, "%s: not a regular file", g->path);
    } else if (st.st_size == 0) {
        rc = sol_err_set(e, -EINVAL, "%s: file is empty, expected a GGUF header", g->path);
    } else {
        g->size = (size_t)st.st_size;
        if (flags & GGUF_OPEN_NO_MMAP) {
            rc = load_heap(g, fd, e);
        } else {
            /* Writable copy-on-write: a backend may repack weights in place (the CPU backend
             * interleaves Q4_0 rows), turning each touched page into one anonymous page rather
             * than keeping a second copy; the file itself is never written. */
            void *p = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED)
                rc = sol_err_set(e, -errno, "%s: mmap failed: %s", g->path, strerror(errno));
            else {
                g->base = p;
                g->backing = BACKING_MMAP;
            }
        }
    }
    close(fd);
    return rc;
}

gguf_file *gguf_open(const char *path, int flags, sol_err *e) {
    gguf_file *g = file_new(path);
    if (!g) {
        sol_err_set(e, -ENOMEM, "%s: out of memory", path ? path : "(null)");
        return NULL;
    }
    if (load(g, flags, e) || parse(g, e)) {
        gguf_close(g);
        return NULL;
    }
    if (flags & GGUF_OPEN_MLOCK) {
        if (mlock(g->base, g->size) == 0)
            g->locked = 1;
        else
            LOG_WARN("gguf", "%s: mlock of %zu bytes failed (%s); continuing unlocked", g->path,
                     g->size, strerror(errno));
    }
    return g;
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    if (g->locked) munlock(g->base, g->size);
    if (g->backing == BACKING_MMAP) munmap((void *)g->base, g->size);
    if (g->backing == BACKING_HEAP) free((void *)g->base);
    while (g->arena) {
        arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    free(g->kvs);
    free(g->tensors);
    free(g->kv_slots);
    free(g->t_slots);
    free(g->path);
    free(g);
}

const char *gguf_path(const gguf_file *g) {
    return g->path;
}
uint32_t gguf_version(const gguf_file *g) {
    return g->version;
}
uint32_t gguf_alignment(const gguf_file *g) {
    return g->alignment;
}
uint64_t gguf_data_offset(const gguf_file *g) {
    return g->data_off;
}
uint64_t gguf_file_size(const gguf_file *g) {
    return g->size;
}
int gguf_n_kv(const gguf_file *g) {
    return g->n_kv;
}
const gguf_kv *gguf_kv_at(const gguf_file *g, int i) {
    return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}
int gguf_find_key(const gguf_file *g, const char *key) {
    return slots_find(g->kv_slots, g->kv_cap, g->kvs, sizeof(gguf_kv), key, NULL);
}
const gguf_kv *gguf_get_kv(const gguf_file *g, const char *key) {
    return gguf_kv_at(g, gguf_find_key(g, key));
}
int gguf_n_tensors(const gguf_file *g) {
    return g->n_tensors;
}
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
const gguf_tensor *gguf_tensor_find(const gguf_file *g, const char *name) {
    return gguf_tensor_at(
        g, slots_find(g->t_slots, g->t_cap, g->tensors, sizeof(gguf_tensor), name, NULL));
}

/* ---- typed getters ----------------------------------------------------------------------- */

static int get_kv(const gguf_file *g, const char *key, const gguf_kv **kv, sol_err *e) {
    *kv = gguf_get_kv(g, key);
    if (!*kv) return sol_err_set(e, -ENOENT, "%s: key '%s' not found", g->path, key);
    return 0;
}

static int type_err(const gguf_file *g, const gguf_kv *kv, const char *want, sol_err *e) {
    return sol_err_set(e, -EINVAL, "%s: key '%s': expected %s, found %s", g->path, kv->key, want,
                       gguf_vtype_name(kv->type));
}

static int get_int(const gguf_file *g, const char *key, const char *want, int64_t lo, uint64_t hi,
                   uint64_t *out, sol_err *e) {
    const gguf_kv *kv;
    int rc = get_kv(g, key, &kv, e), neg;
    if (rc) return rc;
    if (kv_as_u64(kv, out, &neg)) return type_err(g, kv, want, e);
    if (neg ? (int64_t)*out < lo : *out > hi)
        return sol_err_set(e, -EINVAL, "%s: key '%s': value %s%" PRIu64 " does not fit %s", g->path,
                           key, neg ? "-" : "", neg ? -*out : *out, want);
    return 0;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, sol_err *e) {
    uint64_t v = 0; /* gcc -O2 -fPIC cannot see that get_int sets it on success */
    int rc = get_int(g, key, "u32", 0, UINT32_MAX, &v, e);
    if (!rc) *out = (uint32_t)v;
    return rc;
}

int gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, sol_err *e) {
    uint64_t v = 0;
    int rc = get_int(g, key, "i32", INT32_MIN, INT32_MAX, &v, e);
    if (!rc) *out = (int32_t)(int64_t)v;
    return rc;
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, sol_err *e) {
    return get_int(g, key, "u64", 0, UINT64_MAX, out, e);
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, sol_err *e) {
    const gguf_kv *kv;
    int rc = get_kv(g, key, &kv, e), neg;
    if (rc) return rc;
    uint64_t v;
    if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64)
        *out = (float)kv->f;
    else if (kv_as_u64(kv, &v, &neg) == 0)
        *out = neg ? (float)(int64_t)v : (float)v;
    else
        return type_err(g, kv, "f32", e);
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out, sol_err *e) {
    const gguf_kv *kv;
    int rc = get_kv(g, key, &kv, e);
    if (rc) return rc;
    if (kv->type != GGUF_T_BOOL) return type_err(g, kv, "bool", e);
    *out = (int)kv->u;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **out, sol_err *e) {
    const gguf_kv *kv;
    int rc = get_kv(g, key, &kv, e);
    if (rc) return rc;
    if (kv->type != GGUF_T_STR) return type_err(g, kv, "string", e);
    *out = kv->str;
    return 0;
}

int gguf_get_arr(const gguf_file *g, const char *key, int elem, const gguf_arr **out, sol_err *e) {
    const gguf_kv *kv;
    int rc = get_kv(g, key, &kv, e);
    if (rc) return rc;
    if (kv->type != GGUF_T_ARR) return type_err(g, kv, "array", e);
    if (elem >= 0 && kv->arr.type != (gguf_vtype)elem)
        return sol_err_set(e, -EINVAL,
                           "%s: key '%s': expected an array of %s, found an array of %s", g->path,
                           key, gguf_vtype_name((gguf_vtype)elem), gguf_vtype_name(kv->arr.type));
    *out = &kv->arr;
    return 0;
}

int gguf_get_u32_def(const gguf_file *g, const char *key, uint32_t def, uint32_t *out, sol_err *e) {
    if (gguf_find_key(g, key) < 0) {
        *out = def;
        return 0;
    }
    return gguf_get_u32(g, key, out, e);
}

int gguf_get_f32_def(const gguf_file *g, const char *key, float def, float *out, sol_err *e) {
    if (gguf_find_key(g, key) < 0) {
        *out = def;
        return 0;
    }
    return gguf_get_f32(g, key, out, e);
}

int gguf_get_bool_def(const gguf_file *g, const char *key, int def, int *out, sol_err *e) {
    if (gguf_find_key(g, key) < 0) {
        *out = def;
        return 0;
    }
    return gguf_get_bool(g, key, out, e);
}

/* ---- tensor expectations ----------------------------------------------------------------- */

static void fmt_shape(char *buf, size_t n, int n_dims, const int64_t *ne) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int j = 0; j < n_dims && at < n; j++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64, j ? ", " : "", ne[j]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

int gguf_expect_tensor(const gguf_file *g, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                       sol_err *e) {
    return gguf_expect_shape(g, name, n_dims, (const int64_t[]){ne0, ne1}, e);
}

int gguf_expect_shape(const gguf_file *g, const char *name, int n_dims, const int64_t *ne,
                      sol_err *e) {
    const gguf_tensor *t = gguf_tensor_find(g, name);
    if (!t) return sol_err_set(e, -ENOENT, "%s: tensor %s not found", g->path, name);
    int64_t want[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    for (int j = 0; j < n_dims && j < GGUF_MAX_DIMS; j++)
        want[j] = ne[j];
    int ok = (int)t->n_dims == n_dims;
    for (int j = 0; j < GGUF_MAX_DIMS && ok; j++)
        ok = t->ne[j] == want[j];
    if (ok) return 0;
    char exp[96], got[128];
    fmt_shape(exp, sizeof exp, n_dims, want);
    fmt_shape(got, sizeof got, (int)t->n_dims, t->ne);
    return sol_err_set(e, -EINVAL, "%s: tensor %s: expected shape %s, found %s", g->path, name, exp,
                       got);
}

int gguf_expect_type(const gguf_file *g, const char *name, uint64_t type_mask, sol_err *e) {
    const gguf_tensor *t = gguf_tensor_find(g, name);
    if (!t) return sol_err_set(e, -ENOENT, "%s: tensor %s not found", g->path, name);
    if ((unsigned)t->type < 64 && (type_mask & GGUF_TYPE_BIT(t->type))) return 0;
    char allowed[160] = "";
    size_t at = 0;
    for (unsigned b = 0; b < 64 && at < sizeof allowed; b++)
        if ((type_mask & GGUF_TYPE_BIT(b)) && sol_dtype_known(b))
            at += (size_t)snprintf(allowed + at, sizeof allowed - at, "%s%s", at ? ", " : "",
                                   sol_dtype_name((sol_dtype)b));
    return sol_err_set(e, -EINVAL, "%s: tensor %s: expected type %s, found %s", g->path, name,
                       allowed, sol_dtype_name(t->type));
}
