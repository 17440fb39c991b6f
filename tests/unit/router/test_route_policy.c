/* Promise: cache-aware routing as docs/broker.md describes it. A request's prefix chain shares a
 * link with another request exactly as far as their prompts agree (messages, roles, tools, the
 * tenant's cache_salt); the prefix index remembers which worker was sent which links within its
 * bound; cache_aware sends a conversation's next turn to the worker that holds its history unless
 * that breaks the bounded-load limit, charges and releases each request's uncached bytes, and the
 * other policies (affinity, least_loaded, round_robin) pick as named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "generate_msg.h"
#include "oai_request.h"
#include "prompt_chain.h"
#include "prefix_index.h"
#include "route_policy.h"

/* pool "p", any model */
#define P ((wt_scope){"p", NULL})

static oai_request *parse(oai_kind kind, const char *json) {
    oai_request *r = NULL;
    oai_error err;
    if (oai_parse_request(kind, json, strlen(json), &r, &err))
        fail_msg("request refused: %s", err.message);
    return r;
}

/* The chain the router hashes as it dispatches: over the Generate it sends (the worker hashes the
 * same message with the same function). */
static void chain_of(oai_kind kind, const char *json, prefix_chain *c) {
    oai_request *r = parse(kind, json);
    genmsg *m = NULL;
    sol_err e = {0};
    if (genmsg_new(r, "req-1", 0, &m, &e)) fail_msg("genmsg_new: %s", e.msg);
    pc_of_generate(genmsg_envelope(m)->generate, c);
    genmsg_free(m);
    oai_request_free(r);
}

/* Links a and b share from the start. */
static size_t shared(const prefix_chain *a, const prefix_chain *b) {
    size_t i = 0;
    while (i < a->n && i < b->n && a->hash[i] == b->hash[i])
        i++;
    return i;
}

#define SYS "{\"role\":\"system\",\"content\":\"You are terse.\"}"
#define U1 "{\"role\":\"user\",\"content\":\"Hi\"}"
#define A1 "{\"role\":\"assistant\",\"content\":\"Hello.\"}"
#define U2 "{\"role\":\"user\",\"content\":\"And then?\"}"
#define S100                                                                                       \
    "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmn" \
    "opqrstuv"
#define S1K S100 S100 S100 S100 S100 S100 S100 S100 S100 S100
#define PROMPT3K S1K S1K S1K

static void test_chain_follows_the_conversation(void **st) {
    (void)st;
    prefix_chain t1, t2, other, salted, tooled, role;
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "]}", &t1);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "," A1 "," U2 "]}", &t2);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS ",{\"role\":\"user\",\"content\":\"Yo\"}]}", &other);
    chain_of(OAI_CHAT, "{\"cache_salt\":\"tenant-b\",\"messages\":[" SYS "," U1 "]}", &salted);
    chain_of(OAI_CHAT,
             "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
             "\"messages\":[" SYS "," U1 "]}",
             &tooled);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS ",{\"role\":\"assistant\",\"content\":\"Hi\"}]}",
             &role);
    assert_int_equal(t1.n, 2);
    assert_int_equal(t2.n, 4);
    assert_int_equal(shared(&t1, &t2), 2);     /* the next turn holds the whole first one */
    assert_int_equal(shared(&t1, &other), 1);  /* the system prompt only */
    assert_int_equal(shared(&t1, &role), 1);   /* same text, another role */
    assert_int_equal(shared(&t1, &salted), 0); /* tenants never share */
    assert_int_equal(shared(&t1, &tooled), 0); /* the tools go before the messages */
    assert_int_equal(t1.bytes[0], strlen("You are terse."));
    assert_int_equal(t1.total, strlen("You are terse.") + 2);
    assert_int_equal(t2.total, t2.bytes[3]);
    /* embeddings route on nothing */
    prefix_chain e;
    chain_of(OAI_EMBEDDING, "{\"input\":\"x\"}", &e);
    assert_int_equal(e.n, 0);
}

/* A completion prompt: a link per full 1 KiB piece, and one for its end. */
static void test_chain_of_a_long_prompt(void **st) {
    (void)st;
    size_t len = 3 * PC_PIECE_BYTES + 10;
    char *a = malloc(len + 1), *json = malloc(len + 64);
    memset(a, 'x', len);
    a[len] = 0;
    prefix_chain c1, c2;
    snprintf(json, len + 64, "{\"prompt\":\"%s\"}", a);
    chain_of(OAI_COMPLETION, json, &c1);
    a[2 * PC_PIECE_BYTES + 5] = 'y'; /* differs in the third piece */
    snprintf(json, len + 64, "{\"prompt\":\"%s\"}", a);
    chain_of(OAI_COMPLETION, json, &c2);
    assert_int_equal(c1.n, 4);
    assert_int_equal(c1.bytes[1], 2 * PC_PIECE_BYTES);
    assert_int_equal(c1.total, len);
    assert_int_equal(shared(&c1, &c2), 2);
    a[2 * PC_PIECE_BYTES + 5] = 'x';
    a[len - 1] = 0; /* a prefix of the first: shares its full pieces, not its end */
    snprintf(json, len + 64, "{\"prompt\":\"%s\"}", a);
    chain_of(OAI_COMPLETION, json, &c2);
    assert_int_equal(shared(&c1, &c2), 3);
    assert_int_not_equal(c1.hash[3], c2.hash[3]);
    free(a);
    free(json);
}

static void test_index_matches_and_forgets(void **st) {
    (void)st;
    prefix_chain t1, t2, other;
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "]}", &t1);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "," A1 "," U2 "]}", &t2);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS ",{\"role\":\"user\",\"content\":\"Yo\"}]}", &other);
    prefix_index *x = pidx_new(64);
    assert_non_null(x);
    pidx_note(x, &t1, 7);
    pidx_note(x, &other, 9);
    uint32_t uids[3] = {7, 9, 11}, got[3];
    pidx_match(x, &t2, uids, 3, got, NULL);
    assert_int_equal(got[0], t1.total);    /* 7 holds the first turn */
    assert_int_equal(got[1], t1.bytes[0]); /* 9 the system prompt */
    assert_int_equal(got[2], 0);
    assert_int_equal(pidx_size(x), 3);
    /* more holders than PIDX_WAYS: the oldest is forgotten */
    for (uint32_t u = 100; u < 100 + PIDX_WAYS; u++)
        pidx_note(x, &t1, u);
    pidx_match(x, &t1, uids, 1, got, NULL);
    assert_int_equal(got[0], 0);
    pidx_free(x);
    /* the bound: 4 links, the least recently used go first, a chain's tail before its head */
    x = pidx_new(4);
    pidx_note(x, &t2, 1);    /* 4 links */
    pidx_note(x, &other, 2); /* its system link exists; its second recycles t2's deepest */
    assert_int_equal(pidx_size(x), 4);
    pidx_match(x, &t2, uids, 1, got, NULL);
    assert_int_equal(got[0], 0); /* uid 7 was never noted here */
    uint32_t one = 1;
    pidx_match(x, &t2, &one, 1, got, NULL);
    assert_int_equal(got[0], t2.bytes[2]); /* t2's first three links are left */
    pidx_free(x);
    assert_null(pidx_new(0));
}

/* KV events with tiers: a link held in the pool counts toward both answers of pidx_match, one held
 * only in the second tier toward the held bytes alone; the index says what it knew before. */
static void test_index_tiers(void **st) {
    (void)st;
    prefix_chain t2;
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "," A1 "," U2 "]}", &t2);
    assert_true(t2.n >= 3);
    prefix_index *x = pidx_new(64);
    uint32_t uids[2] = {5, 6}, got[2], pool[2];
    assert_int_equal(pidx_hold(x, t2.hash[0], 5, false), PIDX_NONE);
    assert_int_equal(pidx_hold(x, t2.hash[2], 5, true), PIDX_NONE); /* the tail spilled */
    assert_int_equal(pidx_hold(x, t2.hash[2], 6, false), PIDX_NONE);
    pidx_match(x, &t2, uids, 2, got, pool);
    assert_int_equal(got[0], t2.bytes[2]);
    assert_int_equal(pool[0], t2.bytes[0]);
    assert_int_equal(got[1], t2.bytes[2]);
    assert_int_equal(pool[1], t2.bytes[2]);
    assert_int_equal(pidx_hold(x, t2.hash[2], 5, false), PIDX_TIER2); /* restored */
    pidx_match(x, &t2, uids, 1, got, pool);
    assert_int_equal(pool[0], t2.bytes[2]);
    assert_int_equal(pidx_drop(x, t2.hash[2], 5), PIDX_POOL);
    assert_int_equal(pidx_drop(x, t2.hash[2], 5), PIDX_NONE);
    pidx_free(x);
}

static bk_worker *add(worker_table *t, const char *id, uint32_t cap, uint32_t uid) {
    bk_worker w = {0};
    snprintf(w.id, sizeof w.id, "%s", id);
    snprintf(w.pool, sizeof w.pool, "p");
    w.ident.len = strlen(id);
    memcpy(w.ident.bytes, id, w.ident.len);
    w.capacity = cap;
    w.uid = uid;
    return wt_add(t, &w);
}

static void test_cache_aware_follows_the_history(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *a = add(&t, "a", 4, 1), *b = add(&t, "b", 4, 2), *c = add(&t, "c", 4, 3);
    prefix_index *x = pidx_new(256);
    prefix_chain t1, t2;
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "]}", &t1);
    chain_of(OAI_CHAT, "{\"messages\":[" SYS "," U1 "," A1 "," U2 "]}", &t2);
    rp_request r = {.chain = &t1};
    bk_worker *first = rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x);
    assert_non_null(first);
    bk_charge ch = {0};
    first->inflight++;
    rp_charge(x, &t1, first, &ch);
    assert_true(ch.on);
    assert_int_equal(ch.bytes, t1.total); /* nothing was cached */
    assert_int_equal(first->backlog_bytes, t1.total);
    rp_release(first, &ch);
    rp_release(first, &ch); /* once only */
    assert_int_equal(first->backlog_bytes, 0);
    first->inflight--;
    /* the next turn goes where the first went, whichever worker that was */
    r.chain = &t2;
    for (int i = 0; i < 5; i++)
        assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    /* a short history does not outweigh a stream decoding there (RP_DECODE_BYTES) */
    first->inflight = 1;
    assert_ptr_not_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    a->inflight = b->inflight = c->inflight = 1; /* even again: the history wins */
    assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    a->inflight = b->inflight = c->inflight = 0;
    /* the history only in another worker's second tier: it costs a copy there, a prefill here */
    bk_worker *other = first == a ? b : a;
    for (size_t i = 0; i < t2.n; i++) {
        pidx_drop(x, t2.hash[i], first->uid);
        pidx_hold(x, t2.hash[i], other->uid, true);
    }
    for (size_t i = 0; i < t1.n; i++) /* first keeps the first turn in its pool */
        pidx_hold(x, t1.hash[i], first->uid, false);
    assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), other);
    for (size_t i = 0; i < t2.n; i++) { /* back in first's pool only: first again */
        pidx_hold(x, t2.hash[i], first->uid, false);
        pidx_drop(x, t2.hash[i], other->uid);
    }
    assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    /* a worker that came back without its cache has a new uid: it matches nothing */
    first->uid = 99;
    bk_worker *w = rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x);
    assert_true(w == a || w == b || w == c);
    /* the backlog steers: a worker whose queue holds more than the uncached prompt loses */
    first->uid = first == a ? 1 : first == b ? 2 : 3;
    first->backlog_bytes = 10 * t2.total;
    first->inflight = 1;
    assert_ptr_not_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    /* the avoided worker only when it is the only one */
    first->backlog_bytes = 0, first->inflight = 0;
    r.avoid = first;
    assert_ptr_not_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), first);
    r.avoid = NULL;
    /* a request for another model never goes to the history's worker, under any policy */
    bk_worker *ws[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        snprintf(ws[i]->model, sizeof ws[i]->model, "%s", ws[i] == first ? "m1" : "m2");
    wt_scope m2 = {"p", "m2"}, m1 = {"p", "m1"};
    for (int p = 0; p < 4; p++) {
        sol_routing_policy pol = (sol_routing_policy)p;
        assert_ptr_not_equal(rp_pick(&t, pol, m2, &r, x), first);
        assert_ptr_equal(rp_pick(&t, pol, m1, &r, x), first);
    }
    pidx_free(x);
    wt_free(&t);
}

/* The load bound: a long cached history keeps its worker while, counting the request, it holds at
 * most twice its fair share + 2 (RP_BOUND_*), and not beyond, however much it has cached. */
static void test_cache_aware_bound(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *ws[3] = {add(&t, "a", 16, 1), add(&t, "b", 16, 2), add(&t, "c", 16, 3)};
    size_t len = 20000;
    char *doc = malloc(len + 1), *json = malloc(len + 128);
    memset(doc, 'd', len);
    doc[len] = 0;
    snprintf(json, len + 128, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", doc);
    prefix_chain long1;
    chain_of(OAI_CHAT, json, &long1);
    prefix_index *x = pidx_new(256);
    pidx_note(x, &long1, ws[0]->uid);
    rp_request r = {.chain = &long1};
    ws[0]->inflight = 4; /* 5 after: share (4 + 1) x 16 / 48 = 1.67, bound 2 x 1.67 + 2 = 5.33 */
    assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), ws[0]);
    ws[0]->inflight = 6; /* 7 after: bound 2 x 2.33 + 2 = 6.67 */
    assert_ptr_not_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, x), ws[0]);
    assert_true(rp_within_bound(ws[1], 6, 48)); /* the idle ones always */
    assert_false(rp_within_bound(ws[0], 6, 48));
    free(doc);
    free(json);
    pidx_free(x);
    wt_free(&t);
}

static void test_cost_terms(void **st) {
    (void)st;
    bk_worker w = {.capacity = 8};
    assert_true(rp_cost(&w, 1000, 200, 200, 1) == 800);
    assert_true(rp_cost(&w, 1000, 5000, 5000, 1) == 0); /* cached beyond the prompt: none left */
    /* 600 bytes held, the last 400 of them only in the second tier: a copy, not a prefill */
    assert_true(rp_cost(&w, 1000, 600, 200, 1) == 400 + 400.0 / RP_TIER2_SPEEDUP);
    assert_true(rp_uncached(1000, 600, 900) == 400); /* pool beyond cached: clamped */
    w.inflight = 3, w.backlog_bytes = 300;
    assert_true(rp_cost(&w, 1000, 1000, 1000, 1) == 300 + 3.0 * RP_DECODE_BYTES); /* all held */
    assert_true(rp_cost(&w, 1000, 1000, 1000, 4) == (300 + 3.0 * RP_DECODE_BYTES) / 4); /* s */
}

/* The prefill rate: sampled at first tokens from (bytes + bytes ahead) / time, not from small
 * work; a worker measured four times faster takes a prompt though it has a backlog the other has
 * not, and a worker not measured yet is costed at the mean rate of those that are. */
static void test_measured_rate(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *slow = add(&t, "slow", 4, 1), *fast = add(&t, "fast", 4, 2);
    bk_charge c = {.bytes = 3000, .on = true, .ahead = 1000, .sent_ns = 1000000000ull};
    slow->backlog_bytes = 4000;
    rp_first_token(slow, &c, 3000000000ull); /* 4000 bytes in 2 s */
    assert_true(slow->prefill_bps == 2000);
    assert_false(c.on);
    assert_int_equal(slow->backlog_bytes, 1000);
    c = (bk_charge){.bytes = 100, .on = true, .sent_ns = 0};
    rp_first_token(slow, &c, 1000000000ull); /* too little work to time */
    assert_true(slow->prefill_bps == 2000);
    c = (bk_charge){.bytes = 4000, .on = true, .sent_ns = 0};
    rp_first_token(slow, &c, RP_RATE_MIN_NS - 1); /* too soon: overhead, not prefill */
    assert_true(slow->prefill_bps == 2000);
    c = (bk_charge){.bytes = 4000, .on = true, .sent_ns = 0};
    fast->backlog_bytes = 4000;
    rp_first_token(fast, &c, 500000000ull); /* 8000 bytes/s */
    assert_true(fast->prefill_bps == 8000);
    c = (bk_charge){.bytes = 4000, .on = true, .sent_ns = 0};
    fast->backlog_bytes = 4000;
    rp_first_token(fast, &c, 1000000000ull); /* 4000 bytes/s, weighed in by a quarter */
    assert_true(fast->prefill_bps == 0.75 * 8000 + 0.25 * 4000);
    slow->backlog_bytes = 0;
    fast->backlog_bytes = 2000; /* 2000 + 3000 at 7000 / s beats 3000 at 2000 / s */
    prefix_chain ch;
    chain_of(OAI_COMPLETION, "{\"prompt\":\"" PROMPT3K "\"}", &ch);
    rp_request r = {.chain = &ch};
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, NULL), fast);
    bk_worker *fresh = add(&t, "fresh", 4, 3); /* unmeasured: the mean, 4500 / s, no backlog */
    assert_ptr_equal(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, NULL), fresh);
    wt_free(&t);
}

static void test_other_policies(void **st) {
    (void)st;
    worker_table t;
    wt_init(&t);
    bk_worker *ws[3] = {add(&t, "a", 2, 1), add(&t, "b", 2, 2), add(&t, "c", 2, 3)};
    rp_request r = {0};
    /* round_robin: each in turn, whatever the load */
    ws[0]->inflight = 1;
    bk_worker *seen[3];
    for (int i = 0; i < 3; i++)
        seen[i] = rp_pick(&t, SOL_ROUTE_ROUND_ROBIN, P, &r, NULL);
    assert_true(seen[0] != seen[1] && seen[1] != seen[2] && seen[0] != seen[2]);
    /* least_loaded: never the busy one, whatever the prefix */
    r.prefix_hash = 42;
    r.affinity_on = true;
    for (int i = 0; i < 6; i++)
        assert_ptr_not_equal(rp_pick(&t, SOL_ROUTE_LEAST_LOADED, P, &r, NULL), ws[0]);
    /* affinity: one worker for one prefix while the load allows */
    ws[0]->inflight = 0;
    bk_worker *aff = rp_pick(&t, SOL_ROUTE_AFFINITY, P, &r, NULL);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(rp_pick(&t, SOL_ROUTE_AFFINITY, P, &r, NULL), aff);
    /* full: nobody */
    for (int i = 0; i < 3; i++)
        ws[i]->inflight = 2;
    assert_null(rp_pick(&t, SOL_ROUTE_ROUND_ROBIN, P, &r, NULL));
    assert_null(rp_pick(&t, SOL_ROUTE_CACHE_AWARE, P, &r, NULL));
    wt_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_follows_the_conversation),
        cmocka_unit_test(test_chain_of_a_long_prompt),
        cmocka_unit_test(test_index_matches_and_forgets),
        cmocka_unit_test(test_index_tiers),
        cmocka_unit_test(test_cache_aware_follows_the_history),
        cmocka_unit_test(test_cache_aware_bound),
        cmocka_unit_test(test_cost_terms),
        cmocka_unit_test(test_measured_rate),
        cmocka_unit_test(test_other_policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
