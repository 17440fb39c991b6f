/* Promise: every message survives encode/decode with every field intact, and no malformed,
 * truncated, oversized or out-of-range frame is ever accepted. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "frame.h"

/* ---- a fully populated instance of every message ------------------------------------------ */

typedef struct fixture {
    Sol__Register reg;
    Sol__Heartbeat hb;
    uint64_t kv_stored[2], kv_removed[1], kv_tier2[1];
    Sol__ChatMessage msg[2];
    Sol__ChatMessage *msgp[2];
    Sol__ToolCall call, *callp[1];
    uint32_t content_ids[2];
    char *tools[1];
    char *text_tokens[9]; /* one used; nine for the count check */
    Sol__SamplingParams sp;
    char *stop[2];
    char *tags[2];
    uint32_t resume[3];
    uint32_t bias_ids[2];
    float emb[2];
    float bias_vals[2];
    Sol__Generate gen;
    Sol__TopLogprob top[2];
    Sol__TopLogprob *topp[2];
    Sol__TokenLogprob lp;
    Sol__TokenLogprob *lpp[1];
    Sol__Usage usage;
    uint32_t ids[3];
    Sol__TokenChunk chunk;
    Sol__Cancel cancel;
    Sol__Drain drain;
    Sol__Error err;
    Sol__Envelope env[7]; /* one per body type, in oneof order */
} fixture;

static void fill_register_heartbeat(fixture *f) {
    frame_register_init(&f->reg, "worker-1", "fast", "demo-q4_0");
    f->reg.max_context = 4096;
    f->reg.capacity = 64;
    f->reg.backend = "cpu";
    f->reg.speculative = 1;
    f->reg.chat_template = "llama3";
    f->reg.tool_format = "llama3-json";
    f->reg.session = 0x9e3779b97f4a7c15ull;
    sol__heartbeat__init(&f->hb);
    f->hb.worker_id = "worker-1";
    f->hb.running = 3;
    f->hb.waiting = 2;
    f->hb.preempted = 1;
    f->hb.free_blocks = 100;
    f->hb.total_blocks = 512;
    f->hb.prefix_hit_rate = 0.25;
    f->hb.tokens_per_s = 1234.5;
    f->hb.spec_acceptance = 0.75;
    f->hb.engine_steps = 1ull << 40;
    f->hb.draining = 1;
    f->hb.spec_steps = (1ull << 33) + 1;
    f->hb.spec_drafted = (1ull << 35) + 2;
    f->hb.spec_accepted = (1ull << 34) + 3;
    f->hb.spec_emitted = (1ull << 34) + (1ull << 33) + 4;
    f->hb.spec_draft_seconds = 12.5;
    f->hb.spec_verify_seconds = 40.25;
    f->hb.unhealthy = 1;
    f->hb.unhealthy_reason = "tensor-parallel rank 1 is stuck";
    f->kv_stored[0] = 0x8000000000000001ull, f->kv_stored[1] = 7;
    f->kv_removed[0] = ~0ull;
    f->hb.kv_stored = f->kv_stored;
    f->hb.n_kv_stored = 2;
    f->hb.kv_removed = f->kv_removed;
    f->hb.n_kv_removed = 1;
    f->kv_tier2[0] = 42;
    f->hb.kv_tier2 = f->kv_tier2;
    f->hb.n_kv_tier2 = 1;
    f->hb.kv_snapshot = 1;
    f->hb.tier1_hit_tokens = 1ull << 36;
    f->hb.tier2_hit_tokens = (1ull << 35) + 9;
    f->hb.tier2_blocks = 4096;
    f->hb.tier2_used = 4000;
    f->hb.quotes_used = 12;
    f->hb.quotes_declined = 3;
}

static void fill_generate(fixture *f) {
    const char *roles[2] = {"system", "user"}, *texts[2] = {"Be brief.", "Hello \xe2\x98\x80"};
    for (int i = 0; i < 2; i++) {
        sol__chat_message__init(&f->msg[i]);
        f->msg[i].role = (char *)roles[i];
        f->msg[i].content = (char *)texts[i];
        f->msg[i].tool_call_id = "call_1";
        f->msg[i].reasoning_content = "thought";
        f->msg[i].content_ids = f->content_ids;
        f->msg[i].n_content_ids = 2;
        f->msg[i].tool_calls = f->callp;
        f->msg[i].n_tool_calls = 1;
        f->msgp[i] = &f->msg[i];
    }
    sol__tool_call__init(&f->call);
    f->call.id = "call_1", f->call.name = "get_weather", f->call.arguments = "{\"city\": \"Oslo\"}";
    f->callp[0] = &f->call;
    f->content_ids[0] = 17, f->content_ids[1] = 70000;
    f->tools[0] = "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}";
    sol__sampling_params__init(&f->sp);
    f->sp.temperature = 0.7f;
    f->sp.top_p = 0.9f;
    f->sp.top_k = 40;
    f->sp.min_p = 0.05f;
    f->sp.repetition_penalty = 1.1f;
    f->sp.frequency_penalty = 0.5f;
    f->sp.presence_penalty = -0.25f;
    f->sp.seed = 42;
    f->sp.has_seed = 1;
    f->sp.logprobs = 2;
    f->sp.want_logprobs = 1;
    f->stop[0] = "\n\n";
    f->stop[1] = "</s>";
    f->tags[0] = "fast";
    f->tags[1] = "tenant:a";
    f->resume[0] = 1;
    f->resume[1] = 29871;
    f->resume[2] = 4000000000u;
    f->bias_ids[0] = 7, f->bias_ids[1] = 31999;
    f->emb[0] = 0.6f, f->emb[1] = -0.8f;
    f->bias_vals[0] = -100.0f, f->bias_vals[1] = 2.5f;
    Sol__Generate *g = &f->gen;
    sol__generate__init(g);
    g->tools = f->tools;
    g->n_tools = 1;
    for (int i = 0; i < 9; i++)
        f->text_tokens[i] = "[TOOL_CALLS]";
    g->text_tokens = f->text_tokens;
    g->n_text_tokens = 1;
    g->tool_format = "hermes";
    g->traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    g->request_id = "req-0001";
    g->prompt = "Once upon a time";
    g->n_messages = 2;
    g->messages = f->msgp;
    g->sampling = &f->sp;
    g->max_tokens = 256;
    g->n_stop = 2;
    g->stop = f->stop;
    g->priority = -3;
    g->deadline_ms = 30000;
    g->ttft_ms = 500;
    g->tpot_ms = 40;
    g->n_tags = 2;
    g->tags = f->tags;
    g->resume_text = "Once";
    g->n_resume_tokens = 3;
    g->resume_tokens = f->resume;
    g->add_bos = 1;
    g->cache_salt = "salt-a";
    g->grammar = "root ::= \"yes\" | \"no\"";
    g->bias_tokens = f->bias_ids;
    g->n_bias_tokens = 2;
    g->bias_values = f->bias_vals;
    g->n_bias_values = 2;
    g->echo_prompt_tokens = 1;
    g->embed = 1;
}

static void fill_chunk(fixture *f) {
    for (int i = 0; i < 2; i++) {
        sol__top_logprob__init(&f->top[i]);
        f->top[i].token = 10u + (uint32_t)i;
        f->top[i].text = i ? "b" : "a";
        f->top[i].logprob = -1.5f - (float)i;
        f->topp[i] = &f->top[i];
    }
    sol__token_logprob__init(&f->lp);
    f->lp.token = 7;
    f->lp.text = "lo";
    f->lp.logprob = -0.5f;
    f->lp.n_top = 2;
    f->lp.top = f->topp;
    f->lpp[0] = &f->lp;
    sol__usage__init(&f->usage);
    f->usage.prompt_tokens = 12;
    f->usage.completion_tokens = 3;
    f->usage.cached_tokens = 8;
    f->ids[0] = 5;
    f->ids[1] = 6;
    f->ids[2] = 7;
    Sol__TokenChunk *c = &f->chunk;
    sol__token_chunk__init(c);
    c->request_id = "req-0001";
    c->text = "l\xc3\xb6";
    c->n_token_ids = 3;
    c->token_ids = f->ids;
    c->finish_reason = SOL__FINISH_REASON__FINISH_ERROR;
    c->usage = &f->usage;
    c->n_logprobs = 1;
    c->logprobs = f->lpp;
    c->error = "out of KV blocks";
    c->seq = 17;
    c->embedding = f->emb;
    c->n_embedding = 2;
}

static void fixture_init(fixture *f) {
    memset(f, 0, sizeof *f);
    fill_register_heartbeat(f);
    fill_generate(f);
    fill_chunk(f);
    sol__cancel__init(&f->cancel);
    f->cancel.request_id = "req-0001";
    sol__drain__init(&f->drain);
    f->drain.worker_id = "worker-1";
    frame_error_init(&f->err, SOL_ERROR_OVERLOADED, "queue full", "req-0001");
    frame_wrap_register(&f->env[0], &f->reg);
    frame_wrap_heartbeat(&f->env[1], &f->hb);
    frame_wrap_generate(&f->env[2], &f->gen);
    frame_wrap_token_chunk(&f->env[3], &f->chunk);
    frame_wrap_cancel(&f->env[4], &f->cancel);
    frame_wrap_drain(&f->env[5], &f->drain);
    frame_wrap_error(&f->env[6], &f->err);
}

/* Pack without frame's validation, to build frames that a buggy or hostile peer could send. */
static uint8_t *raw_pack(const Sol__Envelope *env, size_t *len) {
    *len = protobuf_c_message_get_packed_size(&env->base);
    uint8_t *buf = malloc(*len ? *len : 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(&env->base, buf), *len);
    return buf;
}

/* Walks the descriptors: fails when any field of a decoded message is at its default, which
 * proves the fixture really covers every field of the schema. */
static void assert_all_set(const ProtobufCMessage *m) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)m;
        const void *member = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id) continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0) fail_msg("%s.%s is empty", d->name, f->name);
            if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                assert_all_set(*(ProtobufCMessage *const *)*(void *const *)member);
            continue;
        }
        uint8_t zero[8] = {0};
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING:
            if (!*(char *const *)member || !**(char *const *)member)
                fail_msg("%s.%s is empty", d->name, f->name);
            break;
        case PROTOBUF_C_TYPE_MESSAGE:
            if (!*(void *const *)member) fail_msg("%s.%s is NULL", d->name, f->name);
            assert_all_set(*(ProtobufCMessage *const *)member);
            break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_DOUBLE:
            if (memcmp(member, zero, 8) == 0) fail_msg("%s.%s is 0", d->name, f->name);
            break;
        default:
            if (memcmp(member, zero, 4) == 0) fail_msg("%s.%s is 0", d->name, f->name);
            break;
        }
    }
}

/* ---- round trip --------------------------------------------------------------------------- */

static void test_round_trip_every_message(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    for (int i = 0; i < 7; i++) {
        sol_err e = {0};
        uint8_t *buf = NULL;
        size_t len = 0;
        assert_int_equal(frame_encode(&f.env[i], &buf, &len, &e), 0);
        Sol__Envelope *d = NULL;
        if (frame_decode(buf, len, &d, &e) != 0) fail_msg("decode %d: %s", i, e.msg);
        assert_int_equal(d->body_case, f.env[i].body_case);
        assert_all_set(&d->base);
        uint8_t *again = NULL;
        size_t len2 = 0;
        assert_int_equal(frame_encode(d, &again, &len2, &e), 0);
        assert_int_equal(len2, len);
        assert_memory_equal(again, buf, len);
        uint8_t small[8];
        size_t n;
        assert_int_equal(frame_encode_into(&f.env[i], small, sizeof small, &n, &e), -ENOSPC);
        free(again);
        free(buf);
        frame_free_envelope(d);
    }
}

static void test_round_trip_values(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    uint8_t buf[1024];
    size_t len;
    sol_err e = {0};
    assert_int_equal(frame_encode_into(&f.env[2], buf, sizeof buf, &len, &e), 0);
    Sol__Envelope *d;
    assert_int_equal(frame_decode(buf, len, &d, &e), 0);
    const Sol__Generate *g = d->generate;
    assert_string_equal(g->request_id, "req-0001");
    assert_string_equal(g->messages[1]->content, "Hello \xe2\x98\x80");
    assert_true(g->sampling->temperature == 0.7f);
    assert_true(g->sampling->presence_penalty == -0.25f);
    assert_int_equal(g->priority, -3);
    assert_int_equal(g->n_resume_tokens, 3);
    assert_int_equal(g->resume_tokens[2], 4000000000u);
    assert_string_equal(g->stop[1], "</s>");
    frame_free_envelope(d);

    assert_int_equal(frame_encode_into(&f.env[3], buf, sizeof buf, &len, &e), 0);
    assert_int_equal(frame_decode(buf, len, &d, &e), 0);
    const Sol__TokenChunk *c = d->token_chunk;
    assert_int_equal(c->seq, 17);
    assert_int_equal(c->finish_reason, SOL__FINISH_REASON__FINISH_ERROR);
    assert_true(c->logprobs[0]->top[1]->logprob == -2.5f);
    assert_int_equal(c->usage->cached_tokens, 8);
    frame_free_envelope(d);

    assert_int_equal(frame_encode_into(&f.env[1], buf, sizeof buf, &len, &e), 0);
    assert_int_equal(frame_decode(buf, len, &d, &e), 0);
    const Sol__Heartbeat *h = d->heartbeat;
    assert_true(h->spec_acceptance == 0.75);
    assert_true(h->spec_steps == (1ull << 33) + 1);
    assert_true(h->spec_drafted == (1ull << 35) + 2);
    assert_true(h->spec_accepted == (1ull << 34) + 3);
    assert_true(h->spec_emitted == (1ull << 34) + (1ull << 33) + 4);
    assert_true(h->spec_draft_seconds == 12.5);
    assert_true(h->spec_verify_seconds == 40.25);
    frame_free_envelope(d);
}

/* ---- rejection ---------------------------------------------------------------------------- */

/* Decode must fail with `code` and a message containing `needle`. */
static void expect_reject(const uint8_t *buf, size_t len, int code, const char *needle) {
    sol_err e = {0};
    Sol__Envelope *d = (Sol__Envelope *)1;
    int rc = frame_decode(buf, len, &d, &e);
    assert_null(d);
    if (rc != code) fail_msg("expected %d, got %d (%s)", code, rc, e.msg);
    if (!strstr(e.msg, needle)) fail_msg("message '%s' lacks '%s'", e.msg, needle);
}

static void expect_raw_reject(const Sol__Envelope *env, int code, const char *needle) {
    size_t len;
    uint8_t *buf = raw_pack(env, &len);
    expect_reject(buf, len, code, needle);
    free(buf);
}

static void test_rejects_empty_and_no_body(void **state) {
    (void)state;
    expect_reject(NULL, 0, -EBADMSG, "empty frame");
    const uint8_t unknown_only[] = {0x78, 0x01}; /* field 15, varint 1: no body */
    expect_reject(unknown_only, sizeof unknown_only, -EINVAL, "no body");
    Sol__Envelope env = SOL__ENVELOPE__INIT;
    sol_err e = {0};
    uint8_t *buf;
    size_t len;
    assert_int_equal(frame_encode(&env, &buf, &len, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "no body"));
    assert_null(buf);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Anything decode accepts must be valid and re-encodable. */
static void check_if_accepted(const uint8_t *buf, size_t len, int *accepted) {
    Sol__Envelope *d = NULL;
    sol_err e = {0};
    if (frame_decode(buf, len, &d, &e) != 0) {
        assert_null(d);
        assert_true(e.msg[0] != '\0');
        return;
    }
    (*accepted)++;
    assert_int_equal(frame_validate(d, &e), 0);
    uint8_t *again;
    size_t n;
    assert_int_equal(frame_encode(d, &again, &n, &e), 0);
    free(again);
    frame_free_envelope(d);
}

static void test_random_garbage(void **state) {
    (void)state;
    uint64_t seed = 0x5015eedULL;
    uint8_t buf[128];
    int accepted = 0;
    for (int i = 0; i < 3000; i++) {
        size_t len = (size_t)(rng_next(&seed) % sizeof buf);
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)rng_next(&seed);
        check_if_accepted(buf, len, &accepted);
    }
    /* Mutations of valid frames reach much deeper than pure noise. */
    fixture f;
    fixture_init(&f);
    for (int t = 0; t < 7; t++) {
        size_t len;
        uint8_t *valid = raw_pack(&f.env[t], &len);
        uint8_t *m = malloc(len);
        for (int i = 0; i < 400; i++) {
            memcpy(m, valid, len);
            for (int k = 0; k < 1 + i % 4; k++)
                m[rng_next(&seed) % len] = (uint8_t)rng_next(&seed);
            check_if_accepted(m, len, &accepted);
        }
        free(m);
        free(valid);
    }
    print_message("random/mutated frames accepted (all valid): %d\n", accepted);
}

static void test_rejects_every_truncation(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    for (int t = 0; t < 7; t++) {
        size_t len;
        uint8_t *buf = raw_pack(&f.env[t], &len);
        for (size_t n = 0; n < len; n++) {
            uint8_t *cut = malloc(n ? n : 1); /* exact size, so ASan sees any over-read */
            memcpy(cut, buf, n);
            Sol__Envelope *d = NULL;
            sol_err e = {0};
            if (frame_decode(cut, n, &d, &e) == 0) fail_msg("type %d prefix %zu accepted", t, n);
            free(cut);
        }
        free(buf);
    }
}

static void test_rejects_oversized(void **state) {
    (void)state;
    size_t big = SOL_FRAME_MAX_BYTES + 1;
    uint8_t *buf = calloc(1, big);
    expect_reject(buf, big, -EMSGSIZE, "limit");
    memset(buf, 'a', big - 1);
    buf[big - 1] = '\0';
    fixture f;
    fixture_init(&f);
    f.gen.prompt = (char *)buf;
    sol_err e = {0};
    uint8_t *out;
    size_t n;
    assert_int_equal(frame_encode(&f.env[2], &out, &n, &e), -EMSGSIZE);
    assert_non_null(strstr(e.msg, "SOL_FRAME_MAX_BYTES"));
    free(buf);
}

/* Replace the first occurrence of `from` in the frame by `to` (same length). */
static void patch(uint8_t *buf, size_t len, const char *from, const char *to, size_t n) {
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return;
        }
    fail_msg("pattern not found");
}

static void test_rejects_bad_utf8_and_nul(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    size_t len;
    uint8_t *buf = raw_pack(&f.env[0], &len);
    patch(buf, len, "demo-q4_0",
          "demo\xff"
          "q4_0",
          9);
    expect_reject(buf, len, -EBADMSG, "register.model is not valid UTF-8");
    patch(buf, len, "demo\xff", "demo\0", 5);
    expect_reject(buf, len, -EBADMSG, "register.model");
    free(buf);
    buf = raw_pack(&f.env[2], &len);
    patch(buf, len, "Be brief.", "Be \xed\xa0\x80rief", 9); /* a UTF-16 surrogate */
    expect_reject(buf, len, -EBADMSG, "generate.messages[0].content");
    free(buf);
    f.reg.model = "\xc0\xaf"; /* overlong '/' */
    sol_err e = {0};
    uint8_t *out;
    size_t n;
    assert_int_equal(frame_encode(&f.env[0], &out, &n, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "register.model is not valid UTF-8"));
}

static void test_rejects_missing_ids(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    f.gen.request_id = "";
    expect_raw_reject(&f.env[2], -EINVAL, "generate.request_id is missing");
    f.chunk.request_id = "";
    expect_raw_reject(&f.env[3], -EINVAL, "token_chunk.request_id is missing");
    f.cancel.request_id = "";
    expect_raw_reject(&f.env[4], -EINVAL, "cancel.request_id is missing");
    f.reg.worker_id = "";
    expect_raw_reject(&f.env[0], -EINVAL, "register.worker_id is missing");
    f.hb.worker_id = "two words";
    expect_raw_reject(&f.env[1], -EINVAL, "heartbeat.worker_id has byte 0x20");
}

static void test_rejects_out_of_range(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    f.sp.temperature = NAN;
    expect_raw_reject(&f.env[2], -EINVAL,
                      "generate.sampling: 'temperature' must be in [0, 2], got nan");
    f.sp.temperature = -0.5f;
    expect_raw_reject(&f.env[2], -EINVAL, "'temperature' must be in [0, 2], got -0.5");
    f.sp.temperature = INFINITY;
    expect_raw_reject(&f.env[2], -EINVAL, "'temperature' must be in [0, 2], got inf");
    fixture_init(&f);
    f.sp.top_p = 1.5f;
    expect_raw_reject(&f.env[2], -EINVAL, "generate.sampling: 'top_p' must be in (0, 1], got 1.5");
    fixture_init(&f);
    f.sp.repetition_penalty = 500.0f; /* the API's bound, from the same table */
    expect_raw_reject(&f.env[2], -EINVAL, "'repetition_penalty' must be in (0, 100], got 500");
    fixture_init(&f);
    f.gen.n_text_tokens = 9; /* SOL_FRAME_MAX_TEXT_TOKENS is 8 */
    expect_raw_reject(&f.env[2], -EINVAL, "generate.text_tokens");
    fixture_init(&f);
    f.sp.logprobs = 21;
    expect_raw_reject(&f.env[2], -EINVAL, "generate.sampling.logprobs is 21");
    fixture_init(&f);
    f.hb.free_blocks = 513;
    expect_raw_reject(&f.env[1], -EINVAL, "free_blocks (513) exceeds total_blocks (512)");
    fixture_init(&f);
    f.hb.spec_accepted = f.hb.spec_drafted + 1;
    expect_raw_reject(&f.env[1], -EINVAL,
                      "heartbeat.spec_accepted (34359738371) exceeds spec_drafted (34359738370)");
    fixture_init(&f);
    f.hb.spec_draft_seconds = NAN;
    expect_raw_reject(&f.env[1], -EINVAL, "heartbeat.spec_draft_seconds is nan");
    fixture_init(&f);
    f.hb.spec_verify_seconds = -1;
    expect_raw_reject(&f.env[1], -EINVAL, "heartbeat.spec_verify_seconds is -1");
    fixture_init(&f);
    f.hb.spec_verify_seconds = INFINITY;
    expect_raw_reject(&f.env[1], -EINVAL, "heartbeat.spec_verify_seconds is inf");
    fixture_init(&f);
    f.chunk.error = "";
    expect_raw_reject(&f.env[3], -EINVAL, "FINISH_ERROR");
    fixture_init(&f);
    f.lp.logprob = NAN;
    expect_raw_reject(&f.env[3], -EINVAL, "token_chunk.logprobs[0] logprob is nan");
    fixture_init(&f);
    f.err.code = 7;
    expect_raw_reject(&f.env[6], -EINVAL, "error.code is 7");
    fixture_init(&f);
    f.reg.capacity = 0;
    expect_raw_reject(&f.env[0], -EINVAL, "register.capacity is 0");
}

static void test_rejects_too_many_entries(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    char *stops[SOL_FRAME_MAX_STOP + 1];
    for (int i = 0; i <= SOL_FRAME_MAX_STOP; i++)
        stops[i] = "x";
    f.gen.stop = stops;
    f.gen.n_stop = SOL_FRAME_MAX_STOP + 1;
    expect_raw_reject(&f.env[2], -EINVAL, "generate.stop has 257 entries; at most 256");
    f.gen.n_stop = SOL_FRAME_MAX_STOP;
    sol_err e = {0};
    size_t n;
    assert_int_equal(frame_measure(&f.env[2], &n, &e), 0);

    /* 140k empty TopLogprob-like submessages: refused before protobuf-c allocates them. */
    size_t count = 140000, body = count * 2;
    size_t len = 1 + 3 + body;
    uint8_t *buf = malloc(len);
    buf[0] = 0x22; /* envelope field 4 (token_chunk), length-delimited */
    buf[1] = (uint8_t)(0x80 | (body & 0x7f));
    buf[2] = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
    buf[3] = (uint8_t)(body >> 14);
    for (size_t i = 0; i < count; i++) {
        buf[4 + 2 * i] = 0x32; /* token_chunk field 6 (logprobs) */
        buf[5 + 2 * i] = 0x00;
    }
    expect_reject(buf, len, -EBADMSG, "nested messages");
    free(buf);
}

static void test_rejects_two_bodies_and_duplicates(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f);
    size_t a, b;
    uint8_t *reg = raw_pack(&f.env[0], &a), *cancel = raw_pack(&f.env[4], &b);
    uint8_t *both = malloc(2 * a + b);
    memcpy(both, reg, a);
    memcpy(both + a, cancel, b);
    expect_reject(both, a + b, -EBADMSG, "carries both register and cancel");
    memcpy(both + a, reg, a); /* the same body twice */
    expect_reject(both, 2 * a, -EBADMSG, "envelope.register appears twice");
    free(both);
    free(reg);
    free(cancel);
}

/* ---- fuzz seed corpus --------------------------------------------------------------------- */

/* tests/fuzz/corpus/frame/ holds these seeds. Regenerate after a schema change with
 *     SOL_WRITE_CORPUS=tests/fuzz/corpus/frame build/tests/test_frame
 * and this test checks that the committed files still match what the codec produces. */
typedef struct seed {
    const char *name;
    uint8_t *bytes;
    size_t len;
} seed;

static int make_seeds(seed *out) {
    static const char *valid[7] = {"valid_register",    "valid_heartbeat", "valid_generate",
                                   "valid_token_chunk", "valid_cancel",    "valid_drain",
                                   "valid_error"};
    fixture f;
    fixture_init(&f);
    int n = 0;
    for (int t = 0; t < 7; t++, n++) {
        out[n].name = valid[t];
        out[n].bytes = raw_pack(&f.env[t], &out[n].len);
    }
    out[n].name = "bad_truncated_generate";
    out[n].bytes = raw_pack(&f.env[2], &out[n].len);
    out[n++].len /= 2;
    size_t a, b;
    uint8_t *reg = raw_pack(&f.env[0], &a), *cancel = raw_pack(&f.env[4], &b);
    out[n].name = "bad_two_bodies";
    out[n].bytes = malloc(a + b);
    memcpy(out[n].bytes, reg, a);
    memcpy(out[n].bytes + a, cancel, b);
    out[n++].len = a + b;
    free(cancel);
    patch(reg, a, "demo-q4_0",
          "demo\xff"
          "q4_0",
          9);
    out[n].name = "bad_utf8_register";
    out[n].bytes = reg;
    out[n++].len = a;
    f.sp.temperature = NAN;
    out[n].name = "bad_nan_temperature";
    out[n].bytes = raw_pack(&f.env[2], &out[n].len);
    return n + 1;
}

static void test_corpus_seeds(void **state) {
    (void)state;
    seed seeds[12];
    int n = make_seeds(seeds);
    const char *write_dir = getenv("SOL_WRITE_CORPUS");
    char path[512];
    for (int i = 0; i < n; i++) {
        const char *dir = write_dir ? write_dir : SOL_SOURCE_DIR "/tests/fuzz/corpus/frame";
        snprintf(path, sizeof path, "%s/%s.bin", dir, seeds[i].name);
        if (write_dir) {
            FILE *fw = fopen(path, "wb");
            assert_non_null(fw);
            assert_int_equal(fwrite(seeds[i].bytes, 1, seeds[i].len, fw), seeds[i].len);
            fclose(fw);
        }
        FILE *fr = fopen(path, "rb");
        if (!fr) fail_msg("missing seed %s", path);
        uint8_t buf[1024];
        size_t got = fread(buf, 1, sizeof buf, fr);
        fclose(fr);
        if (got != seeds[i].len || memcmp(buf, seeds[i].bytes, got) != 0)
            fail_msg("%s is stale: regenerate with SOL_WRITE_CORPUS (see this file)", path);
        Sol__Envelope *d = NULL;
        sol_err e = {0};
        int rc = frame_decode(buf, got, &d, &e);
        assert_int_equal(rc == 0, strncmp(seeds[i].name, "valid_", 6) == 0);
        frame_free_envelope(d);
        free(seeds[i].bytes);
    }
}

static void test_version_check(void **state) {
    (void)state;
    Sol__Register reg;
    frame_register_init(&reg, "w7", "fast", "m");
    sol_err e = {0};
    assert_int_equal(reg.protocol_version, SOL_PROTOCOL_VERSION);
    assert_int_equal(frame_check_version(&reg, &e), 0);
    reg.protocol_version = SOL_PROTOCOL_VERSION + 1;
    assert_int_equal(frame_check_version(&reg, &e), -EPROTONOSUPPORT);
    assert_non_null(strstr(e.msg, "'w7' speaks Sol protocol version 2"));
    assert_non_null(strstr(e.msg, "refusing"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_message),
        cmocka_unit_test(test_round_trip_values),
        cmocka_unit_test(test_rejects_empty_and_no_body),
        cmocka_unit_test(test_random_garbage),
        cmocka_unit_test(test_rejects_every_truncation),
        cmocka_unit_test(test_rejects_oversized),
        cmocka_unit_test(test_rejects_bad_utf8_and_nul),
        cmocka_unit_test(test_rejects_missing_ids),
        cmocka_unit_test(test_rejects_out_of_range),
        cmocka_unit_test(test_rejects_too_many_entries),
        cmocka_unit_test(test_rejects_two_bodies_and_duplicates),
        cmocka_unit_test(test_version_check),
        cmocka_unit_test(test_corpus_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
