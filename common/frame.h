/* frame: encode and decode the one Sol__Envelope that travels in each ZeroMQ frame, and refuse
 * anything malformed, oversized or semantically absurd before the router or a worker acts on it. */
#ifndef SOL_FRAME_H
#define SOL_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampling.h"
#include "sol.pb-c.h"

/* Bumped on any incompatible change to proto/sol.proto; carried in Register.protocol_version.
 * A router refuses a worker whose version differs (frame_check_version). */
#define SOL_PROTOCOL_VERSION 1

/* Hard cap on one encoded Envelope. protobuf-c has no size limit of its own and unpacking
 * allocates several times the input size, so this bounds what one peer can make us allocate.
 * The largest legitimate frame is a Generate carrying a long chat history plus resume_tokens
 * for failover: a 128k-token context is ~0.5 MiB of text and ~0.5 MiB of varint ids, so 4 MiB
 * leaves room for 4x that. Also set as ZMQ_MAXMSGSIZE so libzmq drops bigger peers itself. */
#define SOL_FRAME_MAX_BYTES (4u << 20)

/* Per-field bounds checked on both encode and decode (see docs/protocol.md, "Limits"). */
#define SOL_FRAME_MAX_ID_BYTES 128      /* request_id, worker_id: printable ASCII */
#define SOL_FRAME_MAX_NAME_BYTES 256    /* pool, model, backend, chat_template, role */
#define SOL_FRAME_MAX_STOP 256          /* Generate.stop */
#define SOL_FRAME_MAX_STOP_BYTES 1024   /* one stop string */
#define SOL_FRAME_MAX_TAGS 64           /* Generate.tags */
#define SOL_FRAME_MAX_MESSAGES 4096     /* Generate.messages */
#define SOL_FRAME_MAX_TOKENS (1u << 20) /* resume_tokens, token_ids, logprobs entries */
#define SOL_FRAME_MAX_TOP_LOGPROBS SOL_SAMPLING_MAX_LOGPROBS /* logprobs, TokenLogprob.top */
#define SOL_FRAME_MAX_GRAMMAR_BYTES (1u << 20)               /* Generate.grammar (GBNF) */
#define SOL_FRAME_MAX_LOGIT_BIAS 1024        /* Generate.bias_tokens / bias_values */
#define SOL_FRAME_MAX_TOOLS 128              /* Generate.tools, ChatMessage.tool_calls */
#define SOL_FRAME_MAX_TEXT_TOKENS 8          /* Generate.text_tokens */
#define SOL_FRAME_MAX_EMBEDDING 65536        /* TokenChunk.embedding: floats (the model dim) */
#define SOL_FRAME_MAX_SUBMESSAGES (1u << 17) /* nested messages + repeated strings per frame */
#define SOL_FRAME_MAX_KV_LINKS                                                                     \
    (1u << 16) /* Heartbeat.kv_stored, kv_tier2, kv_removed: 0.5 MiB each */

/* Error.code values (HTTP-like) used on the wire. */
#define SOL_ERROR_BAD_REQUEST 400
#define SOL_ERROR_VERSION_MISMATCH 409
#define SOL_ERROR_NOT_REGISTERED 412 /* sent to an identity that never registered: do it now */
#define SOL_ERROR_OVERLOADED 503

/* Check an Envelope against every rule in docs/protocol.md: exactly one body, required ids
 * present, strings valid UTF-8, counts and numbers in range. 0 or -EINVAL with the field path. */
int frame_validate(const Sol__Envelope *env, sol_err *e);

/* Validate `env` and compute its encoded size (-EMSGSIZE past SOL_FRAME_MAX_BYTES). */
int frame_measure(const Sol__Envelope *env, size_t *len, sol_err *e);

/* The encoded size alone (-EMSGSIZE past SOL_FRAME_MAX_BYTES), for a message frame_measure
 * accepted once and whose later changes come from checked state (the router's per-attempt ids and
 * resume fields): the rules are not checked again. */
int frame_size(const Sol__Envelope *env, size_t *len, sol_err *e);

/* Pack an envelope that frame_measure accepted into `buf` (at least the measured length).
 * Returns the number of bytes written. */
size_t frame_pack(const Sol__Envelope *env, uint8_t *buf);

/* Validate and encode into a new malloc'd buffer; the caller frees *out with free(). */
int frame_encode(const Sol__Envelope *env, uint8_t **out, size_t *out_len, sol_err *e);

/* Validate and encode into a caller-owned buffer; -ENOSPC when `cap` is too small. */
int frame_encode_into(const Sol__Envelope *env, uint8_t *buf, size_t cap, size_t *out_len,
                      sol_err *e);

/* Decode one frame. The size cap and a wire-level scan (well-formed tags, UTF-8 strings without
 * NUL, at most one body, bounded nesting) run BEFORE protobuf-c allocates anything; then the
 * unpacked envelope goes through frame_validate. On success the caller owns *out and releases it
 * with frame_free_envelope; on failure *out is NULL. */
int frame_decode(const uint8_t *buf, size_t len, Sol__Envelope **out, sol_err *e);

/* Free an envelope returned by frame_decode. NULL is a no-op. Never pass a hand-built one. */
void frame_free_envelope(Sol__Envelope *env);

/* Router side: 0 when the worker speaks SOL_PROTOCOL_VERSION, else -EPROTONOSUPPORT with the
 * refusal text to log and to send back as Error{code = SOL_ERROR_VERSION_MISMATCH}. */
int frame_check_version(const Sol__Register *reg, sol_err *e);

/* "register", "heartbeat", ... or "none"; for logs and error messages. */
const char *frame_body_name(Sol__Envelope__BodyCase body);

/* Building messages without allocation: fill stack structs and point the envelope at them.
 *
 *     Sol__Register reg;
 *     frame_register_init(&reg, "w1", "fast", "demo");   // sets protocol_version
 *     reg.capacity = 64; reg.max_context = 4096;
 *     Sol__Envelope env;
 *     frame_wrap_register(&env, &reg);
 *     zmq_util_dealer_send(sock, &env, &err);
 *
 * The envelope only borrows the body and its strings; nothing needs freeing. String arguments
 * are stored as-is (protobuf-c never writes through them when packing); NULL means "". */
void frame_register_init(Sol__Register *reg, const char *worker_id, const char *pool,
                         const char *model);
void frame_error_init(Sol__Error *err, int32_t code, const char *message, const char *request_id);
void frame_wrap_register(Sol__Envelope *env, Sol__Register *body);
void frame_wrap_heartbeat(Sol__Envelope *env, Sol__Heartbeat *body);
void frame_wrap_generate(Sol__Envelope *env, Sol__Generate *body);
void frame_wrap_token_chunk(Sol__Envelope *env, Sol__TokenChunk *body);
void frame_wrap_cancel(Sol__Envelope *env, Sol__Cancel *body);
void frame_wrap_drain(Sol__Envelope *env, Sol__Drain *body);
void frame_wrap_error(Sol__Envelope *env, Sol__Error *body);

/* Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF, no NUL): returns the offset of
 * the first bad byte, or (size_t)-1 when all `len` bytes are valid. */
size_t frame_utf8_invalid_at(const uint8_t *s, size_t len);

#endif
