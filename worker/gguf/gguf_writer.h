/* gguf_writer: builds GGUF v3 files (metadata of every type, tensors with ggml names and types).
 * Tensor data comes from a caller buffer or a row-range callback, so huge models stream to disk. */
#ifndef SOL_GGUF_WRITER_H
#define SOL_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "gguf.h"

typedef struct gguf_writer gguf_writer;

/* Fills rows [row0, row0 + n_rows) of tensor `index` (rows of ne[0] elements in the tensor's
 * type, packed) into `dst`. Returns 0 or a negative code with `e` filled. */
typedef int (*gguf_fill_fn)(void *ctx, int index, int64_t row0, int64_t n_rows, void *dst,
                            sol_err *e);
/* Called after each chunk of tensor data is written. */
typedef void (*gguf_progress_fn)(void *ctx, uint64_t bytes_done, uint64_t bytes_total,
                                 int tensors_done, int n_tensors);

gguf_writer *gguf_writer_new(void); /* NULL on out of memory; free with gguf_writer_free */
void gguf_writer_free(gguf_writer *w);

/* Alignment of tensor data (power of two, default 32). A non-default value is also written as
 * general.alignment when the file is written. */
int gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment, sol_err *e);
void gguf_writer_set_progress(gguf_writer *w, gguf_progress_fn fn, void *ctx);

/* Metadata. Keys must be unique (-EEXIST otherwise). Strings are copied. */
int gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v, sol_err *e);
int gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v, sol_err *e);
int gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v, sol_err *e);
int gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v, sol_err *e);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v, sol_err *e);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v, sol_err *e);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v, sol_err *e);
int gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v, sol_err *e);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v, sol_err *e);
int gguf_writer_add_f64(gguf_writer *w, const char *key, double v, sol_err *e);
int gguf_writer_add_bool(gguf_writer *w, const char *key, int v, sol_err *e);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v, sol_err *e);
/* Array of n numbers or bools of type `elem` (native layout; bool as uint8_t). */
int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data,
                        uint64_t n, sol_err *e);
int gguf_writer_add_str_arr(gguf_writer *w, const char *key, const char *const *strs, uint64_t n,
                            sol_err *e);
/* A value already encoded in GGUF layout (the bytes after the value type), e.g. nested arrays. */
int gguf_writer_add_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes,
                        size_t len, sol_err *e);

/* Tensors, written in the order added. ne[0] is contiguous and must be a multiple of the type's
 * block size. `data` is borrowed until the write and holds the whole tensor. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                           sol_dtype type, const void *data, sol_err *e);
int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, int n_dims, const int64_t *ne,
                                sol_dtype type, gguf_fill_fn fill, void *ctx, sol_err *e);
int gguf_writer_n_tensors(const gguf_writer *w);
uint64_t gguf_writer_data_bytes(const gguf_writer *w); /* tensor data incl. padding */

/* Writes to `path` through a temporary file renamed on success. */
int gguf_writer_write_file(gguf_writer *w, const char *path, sol_err *e);
/* Writes into a malloc'd buffer the caller frees. */
int gguf_writer_write_mem(gguf_writer *w, void **out, size_t *len, sol_err *e);

#endif
