/* gguf: reads GGUF v2/v3 model files (ggml's container: typed metadata + tensor table + data).
 * Every size in the file is checked against the file; tensor data is zero-copy from the mapping. */
#ifndef SOL_GGUF_H
#define SOL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63 /* ggml's tensor name limit (64 bytes with the NUL) */

/* Metadata value types, numbered as in the GGUF spec. */
typedef enum {
    GGUF_T_U8 = 0,
    GGUF_T_I8 = 1,
    GGUF_T_U16 = 2,
    GGUF_T_I16 = 3,
    GGUF_T_U32 = 4,
    GGUF_T_I32 = 5,
    GGUF_T_F32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STR = 8,
    GGUF_T_ARR = 9,
    GGUF_T_U64 = 10,
    GGUF_T_I64 = 11,
    GGUF_T_F64 = 12,
    GGUF_T_COUNT
} gguf_vtype;

const char *gguf_vtype_name(gguf_vtype t); /* "u32", "string", "array", ... */
size_t gguf_vtype_size(gguf_vtype t);      /* bytes of a scalar; 0 for string and array */

/* An array value. Exactly one of data/strs/arrs is used, by element type:
 * numbers and bools: `data` holds n native, aligned elements (bool as uint8_t 0/1);
 * strings: strs[i] is NUL-terminated (lens[i] bytes; may hold inner NULs); arrays: arrs[i]. */
typedef struct gguf_arr {
    gguf_vtype type;
    uint64_t n;
    const void *data;
    const char *const *strs;
    const uint64_t *lens;
    const struct gguf_arr *arrs;
} gguf_arr;

/* One metadata entry. The value sits in the field for its type: u (unsigned ints, bool),
 * i (signed ints), f (f32, f64), str/str_len (string), arr (array). */
typedef struct gguf_kv {
    const char *key;
    gguf_vtype type;
    uint64_t u;
    int64_t i;
    double f;
    const char *str;
    uint64_t str_len;
    gguf_arr arr;
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is contiguous; dims past n_dims are 1 */
    sol_dtype type;
    uint64_t offset; /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* points into the mapping; valid until gguf_close */
} gguf_tensor;

typedef struct gguf_file gguf_file;

enum {
    GGUF_OPEN_NO_MMAP = 1, /* read the whole file into memory instead of mapping it */
    GGUF_OPEN_MLOCK = 2,   /* mlock the data; failure is logged as a warning */
};

/* Opens and validates `path`. Returns NULL and fills `e` ("path: what went wrong") on failure.
 * The caller owns the result and frees it with gguf_close. */
gguf_file *gguf_open(const char *path, int flags, sol_err *e);
/* Parses `len` bytes at `buf` (borrowed: must outlive the result). `name` is used in messages. */
gguf_file *gguf_open_memory(const void *buf, size_t len, const char *name, sol_err *e);
void gguf_close(gguf_file *g); /* NULL is a no-op */

const char *gguf_path(const gguf_file *g);
uint32_t gguf_version(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
uint64_t gguf_data_offset(const gguf_file *g); /* file offset of the data section */
uint64_t gguf_file_size(const gguf_file *g);

/* Metadata lookup. */
int gguf_n_kv(const gguf_file *g);
const gguf_kv *gguf_kv_at(const gguf_file *g, int i);
int gguf_find_key(const gguf_file *g, const char *key);          /* index, or -1 */
const gguf_kv *gguf_get_kv(const gguf_file *g, const char *key); /* NULL when absent */

/* Typed getters: 0 on success; -ENOENT when the key is absent; -EINVAL when the type does not
 * fit (message names the file, the key, the expected and the found type) or the value is out of
 * range. Integer getters accept any integer type whose value fits; gguf_get_f32 also accepts
 * f64 and integers. The _def variants store `def` when the key is absent and return 0. */
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, sol_err *e);
int gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, sol_err *e);
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, sol_err *e);
int gguf_get_f32(const gguf_file *g, const char *key, float *out, sol_err *e);
int gguf_get_bool(const gguf_file *g, const char *key, int *out, sol_err *e);
int gguf_get_str(const gguf_file *g, const char *key, const char **out, sol_err *e);
/* `elem` is the required element type, or -1 for any. */
int gguf_get_arr(const gguf_file *g, const char *key, int elem, const gguf_arr **out, sol_err *e);
int gguf_get_u32_def(const gguf_file *g, const char *key, uint32_t def, uint32_t *out, sol_err *e);
int gguf_get_f32_def(const gguf_file *g, const char *key, float def, float *out, sol_err *e);
int gguf_get_bool_def(const gguf_file *g, const char *key, int def, int *out, sol_err *e);

/* Tensors, in file order. */
int gguf_n_tensors(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int i);
const gguf_tensor *gguf_tensor_find(const gguf_file *g, const char *name); /* NULL when absent */

/* Checks that `name` exists with n_dims dims and shape [ne0] or [ne0, ne1]:
 * "m.gguf: tensor blk.3.attn_q.weight: expected shape [2048, 2048], found [2048, 256]".
 * -ENOENT when missing, -EINVAL on a mismatch. */
/* The same for any n_dims (1..GGUF_MAX_DIMS) and shape ne[0..n_dims): a mixture of experts'
 * 3-D [cols, rows, experts] tensors. */
int gguf_expect_shape(const gguf_file *g, const char *name, int n_dims, const int64_t *ne,
                      sol_err *e);
int gguf_expect_tensor(const gguf_file *g, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                       sol_err *e);
#define GGUF_TYPE_BIT(t) (UINT64_C(1) << (t))
/* Checks the tensor's type is in `type_mask` (an OR of GGUF_TYPE_BIT). */
int gguf_expect_type(const gguf_file *g, const char *name, uint64_t type_mask, sol_err *e);

#endif
