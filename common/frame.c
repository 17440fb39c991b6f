/* frame: the envelope codec. Decoding never trusts the peer: the size is capped first, then a
 * scan of the raw wire bytes (guided by protobuf-c's own descriptors) rejects what protobuf-c
 * would accept silently or pay for dearly (strings that are not UTF-8 or hide a NUL, two bodies
 * in one envelope, repeated fields, millions of empty submessages that cost ~50 bytes of heap
 * each), and only then does protobuf-c unpack. Encoding runs the same semantic checks, so a
 * sender bug is caught where it happens rather than as a refusal on the other side. */
#include "frame.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"
#include "utf8.h"

/* ---- UTF-8 ------------------------------------------------------------------------------- */

size_t frame_utf8_invalid_at(const uint8_t *s, size_t len) {
    size_t valid = utf8_valid_prefix((const char *)s, len);
    const uint8_t *nul = memchr(s, 0, valid);
    if (nul) return (size_t)(nul - s);
    return valid == len ? (size_t)-1 : valid;
}

/* ---- wire scan (before unpacking) --------------------------------------------------------- */

/* Nesting in sol.proto is at most 4 deep (Envelope > TokenChunk > TokenLogprob > TopLogprob). */
#define SCAN_MAX_DEPTH 8

typedef struct scan_state {
    const uint8_t *frame; /* start of the whole frame, for byte offsets in messages */
    size_t submessages;
} scan_state;

static int read_varint(const uint8_t *p, size_t len, size_t *pos, uint64_t *v) {
    uint64_t r = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (*pos >= len) return -1;
        uint8_t b = p[(*pos)++];
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

static int scan_message(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                        const char *path, int depth, scan_state *st, sol_err *e);

/* Skip one field's payload; on return *pos is past it and, for length-delimited fields,
 * body and body_len describe the payload. */
static int skip_payload(const uint8_t *p, size_t len, size_t *pos, unsigned wire_type,
                        const uint8_t **body, size_t *body_len) {
    uint64_t v;
    switch (wire_type) {
    case PROTOBUF_C_WIRE_TYPE_VARINT:
        return read_varint(p, len, pos, &v);
    case PROTOBUF_C_WIRE_TYPE_64BIT:
        if (len - *pos < 8) return -1;
        *pos += 8;
        return 0;
    case PROTOBUF_C_WIRE_TYPE_32BIT:
        if (len - *pos < 4) return -1;
        *pos += 4;
        return 0;
    case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
        if (read_varint(p, len, pos, &v) < 0 || v > len - *pos) return -1;
        *body = p + *pos;
        *body_len = (size_t)v;
        *pos += (size_t)v;
        return 0;
    default: /* groups (3, 4) and the unused 6, 7: nothing in sol.proto */
        return -1;
    }
}

/* Checks one known length-delimited field: strings must be UTF-8 without NUL, submessages are
 * counted and scanned recursively. */
static int scan_field(const ProtobufCFieldDescriptor *f, const uint8_t *body, size_t body_len,
                      const char *field_path, int depth, scan_state *st, sol_err *e) {
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        if (f->label == PROTOBUF_C_LABEL_REPEATED) st->submessages++;
        size_t bad = frame_utf8_invalid_at(body, body_len);
        if (bad != (size_t)-1)
            return sol_err_set(e, -EBADMSG,
                               "%s is not valid UTF-8 without NUL: byte 0x%02x at offset %zu of "
                               "the string (frame byte %zu)",
                               field_path, body[bad], bad, (size_t)(body - st->frame) + bad);
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        st->submessages++;
        if (st->submessages > SOL_FRAME_MAX_SUBMESSAGES)
            return sol_err_set(e, -EBADMSG,
                               "frame holds more than %u nested messages and repeated strings "
                               "(at %s); refusing to unpack it",
                               SOL_FRAME_MAX_SUBMESSAGES, field_path);
        return scan_message(f->descriptor, body, body_len, field_path, depth + 1, st, e);
    }
    if (st->submessages > SOL_FRAME_MAX_SUBMESSAGES)
        return sol_err_set(e, -EBADMSG,
                           "frame holds more than %u nested messages and repeated strings (at "
                           "%s); refusing to unpack it",
                           SOL_FRAME_MAX_SUBMESSAGES, field_path);
    return 0;
}

static int scan_message(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                        const char *path, int depth, scan_state *st, sol_err *e) {
    if (depth > SCAN_MAX_DEPTH)
        return sol_err_set(e, -EBADMSG, "%s is nested more than %d deep", path, SCAN_MAX_DEPTH);
    uint64_t seen = 0;            /* singular fields already present, by descriptor index */
    uint32_t repeats[64] = {0};   /* occurrences of repeated fields, for the path index */
    const char *oneof_set = NULL; /* sol.proto has at most one oneof per message */
    size_t pos = 0;
    while (pos < len) {
        size_t at = (size_t)(p - st->frame) + pos;
        uint64_t tag;
        if (read_varint(p, len, &pos, &tag) < 0)
            return sol_err_set(e, -EBADMSG, "truncated field tag in %s at frame byte %zu", path,
                               at);
        uint64_t number = tag >> 3;
        unsigned wire_type = (unsigned)(tag & 7);
        const uint8_t *body = NULL;
        size_t body_len = 0;
        if (number == 0 || number > 0x1FFFFFFF)
            return sol_err_set(e, -EBADMSG, "invalid field number %llu in %s at frame byte %zu",
                               (unsigned long long)number, path, at);
        if (skip_payload(p, len, &pos, wire_type, &body, &body_len) < 0)
            return sol_err_set(e, -EBADMSG,
                               "field %llu of %s (wire type %u) at frame byte %zu is truncated "
                               "or of an unsupported wire type",
                               (unsigned long long)number, path, wire_type, at);
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(desc, (unsigned)number);
        if (!f) continue; /* unknown field from a newer peer: skipped, per proto3 */
        size_t idx = (size_t)(f - desc->fields);
        char field_path[160];
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            uint32_t n = idx < 64 ? repeats[idx]++ : 0;
            snprintf(field_path, sizeof field_path, "%s.%s[%u]", path, f->name, n);
        } else {
            snprintf(field_path, sizeof field_path, "%s.%s", path, f->name);
            if (idx < 64 && (seen >> idx) & 1)
                return sol_err_set(e, -EBADMSG, "%s appears twice (frame byte %zu)", field_path,
                                   at);
            if (idx < 64) seen |= 1ull << idx;
            if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                if (oneof_set)
                    return sol_err_set(e, -EBADMSG,
                                       "%s carries both %s and %s; expected exactly one body", path,
                                       oneof_set, f->name);
                oneof_set = f->name;
            }
        }
        if (wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) continue;
        int rc = scan_field(f, body, body_len, field_path, depth, st, e);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- semantic validation ------------------------------------------------------------------ */

enum { STR_REQUIRED = 1, STR_ID = 2 };

/* Prefix the message just set by a check with the field's path. */
static int at_field(sol_err *e, int rc, const char *path) {
    sol_err_wrap(e, "%s ", path);
    return rc;
}

static int at_item(sol_err *e, int rc, const char *path, size_t i, const char *sub) {
    sol_err_wrap(e, "%s[%zu]%s ", path, i, sub);
    return rc;
}

static int check_string(const char *s, size_t max, int flags, sol_err *e) {
    if (!s) s = ""; /* protobuf-c packs a NULL singular string as empty */
    size_t n = strlen(s);
    if (n == 0 && (flags & STR_REQUIRED))
        return sol_err_set(e, -EINVAL, "is missing or empty; expected a non-empty string");
    if (n > max) return sol_err_set(e, -EINVAL, "is %zu bytes long; at most %zu allowed", n, max);
    if (flags & STR_ID) {
        for (size_t i = 0; i < n; i++)
            if ((uint8_t)s[i] < 0x21 || (uint8_t)s[i] > 0x7e)
                return sol_err_set(e, -EINVAL,
                                   "has byte 0x%02x at offset %zu; ids are printable ASCII "
                                   "without spaces",
                                   (uint8_t)s[i], i);
        return 0;
    }
    size_t bad = frame_utf8_invalid_at((const uint8_t *)s, n);
    if (bad != (size_t)-1)
        return sol_err_set(e, -EINVAL, "is not valid UTF-8: byte 0x%02x at offset %zu",
                           (uint8_t)s[bad], bad);
    return 0;
}

static int check_count(size_t n, const void *array, size_t max, sol_err *e) {
    if (n > max) return sol_err_set(e, -EINVAL, "has %zu entries; at most %zu allowed", n, max);
    if (n > 0 && !array) return sol_err_set(e, -EINVAL, "has %zu entries but no array", n);
    return 0;
}

static int check_range(double v, double lo, double hi, sol_err *e) {
    if (!isfinite(v) || v < lo || v > hi)
        return sol_err_set(e, -EINVAL, "is %g; expected a finite number in [%g, %g]", v, lo, hi);
    return 0;
}

static int check_strings(char *const *items, size_t n, size_t max_n, size_t max_len, int flags,
                         const char *path, sol_err *e) {
    int rc = check_count(n, items, max_n, e);
    if (rc < 0) return at_field(e, rc, path);
    for (size_t i = 0; i < n; i++) {
        if (!items[i]) return at_item(e, sol_err_set(e, -EINVAL, "is NULL"), path, i, "");
        rc = check_string(items[i], max_len, flags, e);
        if (rc < 0) return at_item(e, rc, path, i, "");
    }
    return 0;
}

static int validate_register(const Sol__Register *r, sol_err *e) {
    int rc;
    if ((rc = check_string(r->worker_id, SOL_FRAME_MAX_ID_BYTES, STR_REQUIRED | STR_ID, e)) < 0)
        return at_field(e, rc, "register.worker_id");
    if ((rc = check_string(r->pool, SOL_FRAME_MAX_NAME_BYTES, STR_REQUIRED, e)) < 0)
        return at_field(e, rc, "register.pool");
    if ((rc = check_string(r->model, SOL_FRAME_MAX_NAME_BYTES, STR_REQUIRED, e)) < 0)
        return at_field(e, rc, "register.model");
    if ((rc = check_string(r->backend, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
        return at_field(e, rc, "register.backend");
    if ((rc = check_string(r->chat_template, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
        return at_field(e, rc, "register.chat_template");
    if ((rc = check_string(r->tool_format, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
        return at_field(e, rc, "register.tool_format");
    if (r->capacity == 0)
        return sol_err_set(e, -EINVAL, "register.capacity is 0; expected at least 1 sequence");
    if (r->max_context == 0)
        return sol_err_set(e, -EINVAL, "register.max_context is 0; expected at least 1 token");
    return 0;
}

static int validate_heartbeat(const Sol__Heartbeat *h, sol_err *e) {
    int rc;
    if ((rc = check_string(h->worker_id, SOL_FRAME_MAX_ID_BYTES, STR_REQUIRED | STR_ID, e)) < 0)
        return at_field(e, rc, "heartbeat.worker_id");
    if (h->free_blocks > h->total_blocks)
        return sol_err_set(e, -EINVAL, "heartbeat.free_blocks (%u) exceeds total_blocks (%u)",
                           h->free_blocks, h->total_blocks);
    if ((rc = check_range(h->prefix_hit_rate, 0, 1, e)) < 0)
        return at_field(e, rc, "heartbeat.prefix_hit_rate");
    if ((rc = check_range(h->spec_acceptance, 0, 1, e)) < 0)
        return at_field(e, rc, "heartbeat.spec_acceptance");
    if ((rc = check_range(h->tokens_per_s, 0, 1e12, e)) < 0)
        return at_field(e, rc, "heartbeat.tokens_per_s");
    if (h->spec_accepted > h->spec_drafted)
        return sol_err_set(e, -EINVAL, "heartbeat.spec_accepted (%llu) exceeds spec_drafted (%llu)",
                           (unsigned long long)h->spec_accepted,
                           (unsigned long long)h->spec_drafted);
    if ((rc = check_range(h->spec_draft_seconds, 0, 1e12, e)) < 0)
        return at_field(e, rc, "heartbeat.spec_draft_seconds");
    if ((rc = check_range(h->spec_verify_seconds, 0, 1e12, e)) < 0)
        return at_field(e, rc, "heartbeat.spec_verify_seconds");
    if (h->tier2_used > h->tier2_blocks)
        return sol_err_set(e, -EINVAL, "heartbeat.tier2_used (%u) exceeds tier2_blocks (%u)",
                           h->tier2_used, h->tier2_blocks);
    if ((rc = check_count(h->n_kv_stored, h->kv_stored, SOL_FRAME_MAX_KV_LINKS, e)) < 0)
        return at_field(e, rc, "heartbeat.kv_stored");
    if ((rc = check_count(h->n_kv_removed, h->kv_removed, SOL_FRAME_MAX_KV_LINKS, e)) < 0)
        return at_field(e, rc, "heartbeat.kv_removed");
    if ((rc = check_count(h->n_kv_tier2, h->kv_tier2, SOL_FRAME_MAX_KV_LINKS, e)) < 0)
        return at_field(e, rc, "heartbeat.kv_tier2");
    return 0;
}

/* The numeric settings against sampling.c's table (the bounds the router's API takes), as the
 * sampler reads them (sol_sampling_from_msg: a zero top_p or repetition_penalty is the default). */
static int validate_sampling(const Sol__SamplingParams *s, sol_err *e) {
    sol_sampling v = sol_sampling_from_msg(s);
    int rc = sol_sampling_check(&v, e);
    if (rc) return sol_err_wrap(e, "generate.sampling: "), rc;
    if (s->logprobs > SOL_FRAME_MAX_TOP_LOGPROBS)
        return sol_err_set(e, -EINVAL, "generate.sampling.logprobs is %u; at most %d allowed",
                           s->logprobs, SOL_FRAME_MAX_TOP_LOGPROBS);
    return 0;
}

static int validate_messages(const Sol__Generate *g, sol_err *e) {
    int rc = check_count(g->n_messages, g->messages, SOL_FRAME_MAX_MESSAGES, e);
    if (rc < 0) return at_field(e, rc, "generate.messages");
    for (size_t i = 0; i < g->n_messages; i++) {
        const Sol__ChatMessage *m = g->messages[i];
        if (!m) return at_item(e, sol_err_set(e, -EINVAL, "is NULL"), "generate.messages", i, "");
        if ((rc = check_string(m->role, SOL_FRAME_MAX_NAME_BYTES, STR_REQUIRED, e)) < 0)
            return at_item(e, rc, "generate.messages", i, ".role");
        if ((rc = check_string(m->content, SIZE_MAX, 0, e)) < 0)
            return at_item(e, rc, "generate.messages", i, ".content");
        if ((rc = check_string(m->tool_call_id, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
            return at_item(e, rc, "generate.messages", i, ".tool_call_id");
        if ((rc = check_count(m->n_tool_calls, m->tool_calls, SOL_FRAME_MAX_TOOLS, e)) < 0)
            return at_item(e, rc, "generate.messages", i, ".tool_calls");
        if ((rc = check_count(m->n_content_ids, m->content_ids, SOL_FRAME_MAX_TOKENS, e)) < 0)
            return at_item(e, rc, "generate.messages", i, ".content_ids");
        for (size_t j = 0; j < m->n_tool_calls; j++) {
            const Sol__ToolCall *c = m->tool_calls[j];
            if (!c || (rc = check_string(c->id, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0 ||
                (rc = check_string(c->name, SOL_FRAME_MAX_NAME_BYTES, STR_REQUIRED, e)) < 0 ||
                (rc = check_string(c->arguments, SIZE_MAX, 0, e)) < 0)
                return at_item(e, c ? rc : sol_err_set(e, -EINVAL, "is NULL"), "generate.messages",
                               i, ".tool_calls");
        }
    }
    if ((rc = check_strings(g->tools, g->n_tools, SOL_FRAME_MAX_TOOLS, SIZE_MAX, 0,
                            "generate.tools", e)) < 0)
        return rc;
    if ((rc = check_strings(g->text_tokens, g->n_text_tokens, SOL_FRAME_MAX_TEXT_TOKENS,
                            SOL_FRAME_MAX_NAME_BYTES, STR_REQUIRED, "generate.text_tokens", e)) < 0)
        return rc;
    return 0;
}

static int validate_generate(const Sol__Generate *g, sol_err *e) {
    int rc;
    if ((rc = check_string(g->request_id, SOL_FRAME_MAX_ID_BYTES, STR_REQUIRED | STR_ID, e)) < 0)
        return at_field(e, rc, "generate.request_id");
    if ((rc = check_string(g->prompt, SIZE_MAX, 0, e)) < 0)
        return at_field(e, rc, "generate.prompt");
    if ((rc = validate_messages(g, e)) < 0) return rc;
    if (g->sampling && (rc = validate_sampling(g->sampling, e)) < 0) return rc;
    if ((rc = check_strings(g->stop, g->n_stop, SOL_FRAME_MAX_STOP, SOL_FRAME_MAX_STOP_BYTES,
                            STR_REQUIRED, "generate.stop", e)) < 0)
        return rc;
    if ((rc = check_strings(g->tags, g->n_tags, SOL_FRAME_MAX_TAGS, SOL_FRAME_MAX_NAME_BYTES,
                            STR_REQUIRED, "generate.tags", e)) < 0)
        return rc;
    if ((rc = check_string(g->resume_text, SIZE_MAX, 0, e)) < 0)
        return at_field(e, rc, "generate.resume_text");
    if ((rc = check_count(g->n_resume_tokens, g->resume_tokens, SOL_FRAME_MAX_TOKENS, e)) < 0)
        return at_field(e, rc, "generate.resume_tokens");
    if ((rc = check_string(g->cache_salt, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
        return at_field(e, rc, "generate.cache_salt");
    if ((rc = check_string(g->grammar, SOL_FRAME_MAX_GRAMMAR_BYTES, 0, e)) < 0)
        return at_field(e, rc, "generate.grammar");
    if ((rc = check_string(g->tool_format, SOL_FRAME_MAX_NAME_BYTES, 0, e)) < 0)
        return at_field(e, rc, "generate.tool_format");
    if ((rc = check_count(g->n_bias_tokens, g->bias_tokens, SOL_FRAME_MAX_LOGIT_BIAS, e)) < 0)
        return at_field(e, rc, "generate.bias_tokens");
    if (g->n_bias_values != g->n_bias_tokens)
        return sol_err_set(e, -EINVAL, "generate.bias_values: %zu values for %zu tokens",
                           g->n_bias_values, g->n_bias_tokens);
    for (size_t i = 0; i < g->n_bias_values; i++)
        if (!(g->bias_values[i] >= -100.0f && g->bias_values[i] <= 100.0f))
            return sol_err_set(e, -EINVAL, "generate.bias_values[%zu]: %g is outside [-100, 100]",
                               i, (double)g->bias_values[i]);
    return 0;
}

static int check_logprob(float v, sol_err *e) {
    /* -inf is a legitimate log(0); NaN and positive values are not log-probabilities. A little
     * slack above 0 tolerates rounding in log-softmax. */
    if (isnan(v) || v > 1e-3f)
        return sol_err_set(e, -EINVAL, "logprob is %g; expected a number <= 0", (double)v);
    return 0;
}

static int validate_logprob(const Sol__TokenLogprob *lp, size_t i, sol_err *e) {
    const char *path = "token_chunk.logprobs";
    if (!lp) return at_item(e, sol_err_set(e, -EINVAL, "is NULL"), path, i, "");
    int rc;
    if ((rc = check_string(lp->text, SIZE_MAX, 0, e)) < 0) return at_item(e, rc, path, i, ".text");
    if ((rc = check_logprob(lp->logprob, e)) < 0) return at_item(e, rc, path, i, "");
    if ((rc = check_count(lp->n_top, lp->top, SOL_FRAME_MAX_TOP_LOGPROBS, e)) < 0)
        return at_item(e, rc, path, i, ".top");
    for (size_t k = 0; k < lp->n_top; k++) {
        const Sol__TopLogprob *t = lp->top[k];
        if (!t) return at_item(e, sol_err_set(e, -EINVAL, "is NULL"), path, i, ".top[]");
        if ((rc = check_string(t->text, SIZE_MAX, 0, e)) < 0)
            return at_item(e, rc, path, i, ".top[].text");
        if ((rc = check_logprob(t->logprob, e)) < 0) return at_item(e, rc, path, i, ".top[]");
    }
    return 0;
}

static int validate_token_chunk(const Sol__TokenChunk *c, sol_err *e) {
    int rc;
    if ((rc = check_string(c->request_id, SOL_FRAME_MAX_ID_BYTES, STR_REQUIRED | STR_ID, e)) < 0)
        return at_field(e, rc, "token_chunk.request_id");
    if ((rc = check_string(c->text, SIZE_MAX, 0, e)) < 0)
        return at_field(e, rc, "token_chunk.text");
    if ((rc = check_count(c->n_token_ids, c->token_ids, SOL_FRAME_MAX_TOKENS, e)) < 0)
        return at_field(e, rc, "token_chunk.token_ids");
    if ((int)c->finish_reason < 0 || c->finish_reason > SOL__FINISH_REASON__FINISH_ERROR)
        return sol_err_set(e, -EINVAL, "token_chunk.finish_reason is %d; expected 0..%d",
                           (int)c->finish_reason, SOL__FINISH_REASON__FINISH_ERROR);
    if ((rc = check_string(c->error, SIZE_MAX, 0, e)) < 0)
        return at_field(e, rc, "token_chunk.error");
    if ((rc = check_count(c->n_embedding, c->embedding, SOL_FRAME_MAX_EMBEDDING, e)) < 0)
        return at_field(e, rc, "token_chunk.embedding");
    for (size_t i = 0; i < c->n_embedding; i++)
        if (!isfinite(c->embedding[i]))
            return sol_err_set(e, -EINVAL, "token_chunk.embedding[%zu] is not finite", i);
    bool has_error = c->error && c->error[0];
    if (has_error != (c->finish_reason == SOL__FINISH_REASON__FINISH_ERROR))
        return sol_err_set(e, -EINVAL,
                           "token_chunk.error is %s but finish_reason is %d; an error text goes "
                           "with FINISH_ERROR (4) and only with it",
                           has_error ? "set" : "empty", (int)c->finish_reason);
    if ((rc = check_count(c->n_logprobs, c->logprobs, SOL_FRAME_MAX_TOKENS, e)) < 0)
        return at_field(e, rc, "token_chunk.logprobs");
    for (size_t i = 0; i < c->n_logprobs; i++)
        if ((rc = validate_logprob(c->logprobs[i], i, e)) < 0) return rc;
    return 0;
}

static int validate_error(const Sol__Error *m, sol_err *e) {
    int rc;
    if (m->code < 100 || m->code > 599)
        return sol_err_set(e, -EINVAL, "error.code is %d; expected an HTTP-like status 100..599",
                           m->code);
    if ((rc = check_string(m->message, SIZE_MAX, STR_REQUIRED, e)) < 0)
        return at_field(e, rc, "error.message");
    if ((rc = check_string(m->request_id, SOL_FRAME_MAX_ID_BYTES, STR_ID, e)) < 0)
        return at_field(e, rc, "error.request_id");
    return 0;
}

static int validate_body(const Sol__Envelope *env, sol_err *e) {
    int rc;
    switch (env->body_case) {
    case SOL__ENVELOPE__BODY_REGISTER:
        return validate_register(env->register_, e);
    case SOL__ENVELOPE__BODY_HEARTBEAT:
        return validate_heartbeat(env->heartbeat, e);
    case SOL__ENVELOPE__BODY_GENERATE:
        return validate_generate(env->generate, e);
    case SOL__ENVELOPE__BODY_TOKEN_CHUNK:
        return validate_token_chunk(env->token_chunk, e);
    case SOL__ENVELOPE__BODY_CANCEL:
        rc =
            check_string(env->cancel->request_id, SOL_FRAME_MAX_ID_BYTES, STR_REQUIRED | STR_ID, e);
        return rc < 0 ? at_field(e, rc, "cancel.request_id") : 0;
    case SOL__ENVELOPE__BODY_DRAIN:
        rc = check_string(env->drain->worker_id, SOL_FRAME_MAX_ID_BYTES, STR_ID, e);
        return rc < 0 ? at_field(e, rc, "drain.worker_id") : 0;
    case SOL__ENVELOPE__BODY_ERROR:
        return validate_error(env->error, e);
    case SOL__ENVELOPE__BODY__NOT_SET:
        return sol_err_set(e, -EINVAL, "envelope has no body; expected exactly one message");
    default:
        return sol_err_set(e, -EINVAL, "envelope body case %d is unknown; expected 1..7",
                           (int)env->body_case);
    }
}

int frame_validate(const Sol__Envelope *env, sol_err *e) {
    if (!env) return sol_err_set(e, -EINVAL, "envelope is NULL");
    if (env->base.descriptor != &sol__envelope__descriptor)
        return sol_err_set(e, -EINVAL, "envelope was not initialised (SOL__ENVELOPE__INIT)");
    if (env->body_case != SOL__ENVELOPE__BODY__NOT_SET && !env->register_)
        return sol_err_set(e, -EINVAL, "envelope says it carries %s but the body is NULL",
                           frame_body_name(env->body_case));
    return validate_body(env, e);
}

/* ---- encode / decode ---------------------------------------------------------------------- */

int frame_measure(const Sol__Envelope *env, size_t *len, sol_err *e) {
    int rc = frame_validate(env, e);
    return rc < 0 ? rc : frame_size(env, len, e);
}

int frame_size(const Sol__Envelope *env, size_t *len, sol_err *e) {
    size_t n = protobuf_c_message_get_packed_size(&env->base);
    if (n > SOL_FRAME_MAX_BYTES)
        return sol_err_set(e, -EMSGSIZE,
                           "encoded %s is %zu bytes; the frame limit is %u (SOL_FRAME_MAX_BYTES)",
                           frame_body_name(env->body_case), n, SOL_FRAME_MAX_BYTES);
    *len = n;
    return 0;
}

size_t frame_pack(const Sol__Envelope *env, uint8_t *buf) {
    return protobuf_c_message_pack(&env->base, buf);
}

int frame_encode(const Sol__Envelope *env, uint8_t **out, size_t *out_len, sol_err *e) {
    *out = NULL;
    size_t n = 0;
    int rc = frame_measure(env, &n, e);
    if (rc < 0) return rc;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return sol_err_set(e, -ENOMEM, "out of memory encoding a %zu-byte frame", n);
    *out_len = frame_pack(env, buf);
    *out = buf;
    return 0;
}

int frame_encode_into(const Sol__Envelope *env, uint8_t *buf, size_t cap, size_t *out_len,
                      sol_err *e) {
    size_t n = 0;
    int rc = frame_measure(env, &n, e);
    if (rc < 0) return rc;
    if (n > cap)
        return sol_err_set(e, -ENOSPC, "encoded %s needs %zu bytes; the buffer holds %zu",
                           frame_body_name(env->body_case), n, cap);
    *out_len = frame_pack(env, buf);
    return 0;
}

int frame_decode(const uint8_t *buf, size_t len, Sol__Envelope **out, sol_err *e) {
    *out = NULL;
    if (!buf || len == 0)
        return sol_err_set(e, -EBADMSG, "empty frame (0 bytes); expected an encoded Envelope");
    if (len > SOL_FRAME_MAX_BYTES)
        return sol_err_set(e, -EMSGSIZE,
                           "frame is %zu bytes; the limit is %u (SOL_FRAME_MAX_BYTES)", len,
                           SOL_FRAME_MAX_BYTES);
    scan_state st = {.frame = buf, .submessages = 0};
    int rc = scan_message(&sol__envelope__descriptor, buf, len, "envelope", 0, &st, e);
    if (rc < 0) return rc;
    Sol__Envelope *env = sol__envelope__unpack(NULL, len, buf);
    if (!env)
        return sol_err_set(e, -EBADMSG,
                           "protobuf-c could not unpack the %zu-byte frame (a field has the wrong "
                           "wire type or is malformed)",
                           len);
    rc = frame_validate(env, e);
    if (rc < 0) {
        sol__envelope__free_unpacked(env, NULL);
        return rc;
    }
    *out = env;
    return 0;
}

void frame_free_envelope(Sol__Envelope *env) {
    if (env) sol__envelope__free_unpacked(env, NULL);
}

int frame_check_version(const Sol__Register *reg, sol_err *e) {
    if (reg->protocol_version == SOL_PROTOCOL_VERSION) return 0;
    return sol_err_set(e, -EPROTONOSUPPORT,
                       "worker '%s' speaks Sol protocol version %u but this router speaks "
                       "version %u; refusing it (run the same Sol release on router and workers)",
                       reg->worker_id ? reg->worker_id : "", reg->protocol_version,
                       SOL_PROTOCOL_VERSION);
}

const char *frame_body_name(Sol__Envelope__BodyCase body) {
    switch (body) {
    case SOL__ENVELOPE__BODY_REGISTER:
        return "register";
    case SOL__ENVELOPE__BODY_HEARTBEAT:
        return "heartbeat";
    case SOL__ENVELOPE__BODY_GENERATE:
        return "generate";
    case SOL__ENVELOPE__BODY_TOKEN_CHUNK:
        return "token_chunk";
    case SOL__ENVELOPE__BODY_CANCEL:
        return "cancel";
    case SOL__ENVELOPE__BODY_DRAIN:
        return "drain";
    case SOL__ENVELOPE__BODY_ERROR:
        return "error";
    default:
        return "none";
    }
}

/* ---- building ----------------------------------------------------------------------------- */

static char *borrow(const char *s) {
    return (char *)(s ? s : "");
}

void frame_register_init(Sol__Register *reg, const char *worker_id, const char *pool,
                         const char *model) {
    sol__register__init(reg);
    reg->protocol_version = SOL_PROTOCOL_VERSION;
    reg->worker_id = borrow(worker_id);
    reg->pool = borrow(pool);
    reg->model = borrow(model);
}

void frame_error_init(Sol__Error *err, int32_t code, const char *message, const char *request_id) {
    sol__error__init(err);
    err->code = code;
    err->message = borrow(message);
    err->request_id = borrow(request_id);
}

static void wrap(Sol__Envelope *env, Sol__Envelope__BodyCase body_case) {
    sol__envelope__init(env);
    env->body_case = body_case;
}

void frame_wrap_register(Sol__Envelope *env, Sol__Register *body) {
    wrap(env, SOL__ENVELOPE__BODY_REGISTER);
    env->register_ = body;
}

void frame_wrap_heartbeat(Sol__Envelope *env, Sol__Heartbeat *body) {
    wrap(env, SOL__ENVELOPE__BODY_HEARTBEAT);
    env->heartbeat = body;
}

void frame_wrap_generate(Sol__Envelope *env, Sol__Generate *body) {
    wrap(env, SOL__ENVELOPE__BODY_GENERATE);
    env->generate = body;
}

void frame_wrap_token_chunk(Sol__Envelope *env, Sol__TokenChunk *body) {
    wrap(env, SOL__ENVELOPE__BODY_TOKEN_CHUNK);
    env->token_chunk = body;
}

void frame_wrap_cancel(Sol__Envelope *env, Sol__Cancel *body) {
    wrap(env, SOL__ENVELOPE__BODY_CANCEL);
    env->cancel = body;
}

void frame_wrap_drain(Sol__Envelope *env, Sol__Drain *body) {
    wrap(env, SOL__ENVELOPE__BODY_DRAIN);
    env->drain = body;
}

void frame_wrap_error(Sol__Envelope *env, Sol__Error *body) {
    wrap(env, SOL__ENVELOPE__BODY_ERROR);
    env->error = body;
}
