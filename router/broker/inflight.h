/* inflight: the broker's table of requests it holds (queued or on a worker), what each has
 * streamed so far (for failover resume), and the per-pool FIFO queues. Owned by the broker thread.
 */
#ifndef SOL_INFLIGHT_H
#define SOL_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "generate_msg.h"
#include "http.h"
#include "prompt_chain.h"
#include "strbuf.h"
#include "worker_table.h"

#define INFLIGHT_WIRE_ID_MAX 96

typedef struct bk_req {
    uint32_t slot, gen;
    char wire_id[INFLIGHT_WIRE_ID_MAX]; /* "<http id>.<slot>.<gen>": unique even when clients
                                           reuse X-Request-Id, and decodable in O(1) */
    char http_id[HTTP_REQUEST_ID_MAX + 1];
    http_stream *stream; /* one reference held */
    genmsg *msg;         /* the Generate (owned): packed per attempt with its id and resume */
    int pool;            /* index of the pool it is queued for / served by */
    int metric_pool;     /* the pool classify chose (labels metrics) */
    char model[SOL_FRAME_MAX_NAME_BYTES + 1]; /* only workers registered with it ("" any) */
    uint64_t received_ns, queued_ms;
    uint64_t prefix_hash;
    prefix_chain *chain; /* cache_aware (owned), else NULL */
    bk_charge charge;    /* its part of worker->backlog_bytes */
    bk_worker *worker;   /* NULL while queued */
    bk_worker *avoid;    /* failed attempt's worker: try another first */
    int64_t last_seq;    /* last accepted TokenChunk.seq of this attempt; -1 none */
    strbuf text;         /* text already pushed to the client */
    uint32_t *toks;      /* token ids already pushed */
    size_t n_toks, cap_toks;
    unsigned attempts;
    bool dispatched_once; /* queue time observed */
    uint32_t choice;      /* which of the client request's n samples (the chunks' index) */
    sol_slo slo;          /* latency targets (docs/api.md, "Latency targets"); 0: none */
    uint64_t moved_ms;    /* when live rebalancing last moved it (0: never) */
    struct bk_req *qnext; /* pool queue link */
} bk_req;

typedef struct bk_queue {
    bk_req *head, *tail;
    size_t n;
    /* latency targets (slo_admit.h): the pool's measured gap between two slots freeing while it
     * had no room (seconds, an average; 0: not measured), and when the last one freed */
    double free_gap_s;
    uint64_t last_free_ns;
} bk_queue;

/* Slot array; requests are allocated one by one so pointers stay valid as it grows. */
typedef struct inflight {
    bk_req **slots;
    uint32_t *gens; /* generation of each slot, bumped at release */
    uint32_t *free_list;
    size_t n_free, cap, live;
} inflight;

void inflight_init(inflight *t);
/* Frees the records still held (their stream references are dropped). */
void inflight_free(inflight *t);
/* New record with a wire id built from `http_id`; NULL when out of memory. */
bk_req *inflight_add(inflight *t, const char *http_id);
/* A new wire id for r's next attempt (next generation of its slot): chunks of the earlier attempt
 * become stale, and a worker that still holds the old attempt (it lost the router, cancelled, and
 * registered again) does not refuse the new one as a duplicate. */
void inflight_new_attempt(inflight *t, bk_req *r);

/* The record `wire_id` names, or NULL (finished, or never ours). */
bk_req *inflight_find(const inflight *t, const char *wire_id);
/* Release the record (drops its stream reference). */
void inflight_release(inflight *t, bk_req *r);
/* Append streamed token ids; -ENOMEM on failure. */
int inflight_add_tokens(bk_req *r, const uint32_t *ids, size_t n);

void queue_push_back(bk_queue *q, bk_req *r);
void queue_push_front(bk_queue *q, bk_req *r);
bk_req *queue_pop(bk_queue *q);
/* Unlink r if it is in q; returns 1 when it was. */
int queue_remove(bk_queue *q, bk_req *r);

#endif
