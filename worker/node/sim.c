/* sim: the simulation executor. One thread advances every request from a binary min-heap keyed
 * by each request's next token deadline, so ten thousand concurrent streams cost one thread and
 * one poll timeout, not ten thousand timers. Requests beyond `capacity` wait in a FIFO, as they
 * would in a real scheduler, so heartbeat figures (running/waiting/blocks) look like a real
 * worker's to the router.
 *
 * The text is a pure function of (prompt, seed, position): see sim.h. Stop strings are matched
 * over the completion text (including resume_text) and text that could still become a stop
 * string is held back, as a real sampler must, so a stop string is never streamed.
 *
 * Threads: submit/cancel/stats/idle run on the caller's thread (the link) and talk to the
 * simulation thread over an inproc PAIR (commands carry a pointer to a request the caller built;
 * ownership passes with it). Shared figures are atomics. */
#include "sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "clock.h"
#include "frame.h"
#include "hash.h"
#include "log.h"

/* Tokens put in one chunk at most; with a very high rate more are due, and the next chunk
 * follows at once. Bounds the per-request id buffer. */
#define SIM_CHUNK_MAX 64
#define SIM_TOKEN_BASE 1000u

static const char *const k_words[] = {
    "the",    "of",    "and",    "a",      "to",      "in",    "is",   "you",   "that",   "it",
    "he",     "was",   "for",    "on",     "are",     "as",    "with", "his",   "they",   "at",
    "be",     "this",  "have",   "from",   "or",      "one",   "had",  "by",    "word",   "but",
    "not",    "what",  "all",    "were",   "we",      "when",  "your", "can",   "said",   "there",
    "use",    "an",    "each",   "which",  "she",     "do",    "how",  "their", "if",     "will",
    "up",     "other", "about",  "out",    "many",    "then",  "them", "these", "so",     "some",
    "her",    "would", "make",   "like",   "him",     "into",  "time", "has",   "look",   "two",
    "more",   "write", "go",     "see",    "number",  "no",    "way",  "could", "people", "my",
    "than",   "first", "water",  "been",   "call",    "who",   "oil",  "its",   "now",    "find",
    "long",   "down",  "day",    "did",    "get",     "come",  "made", "may",   "part",   "router",
    "worker", "token", "stream", "sample", "cluster", "model", "pool", "quiet",
};
#define SIM_NWORDS (sizeof k_words / sizeof k_words[0])
#define SIM_MAX_WORD 8 /* longest entry above */

typedef struct sim_req {
    char id[SOL_FRAME_MAX_ID_BYTES + 1];
    uint64_t hash, seed;
    uint32_t prompt_tokens;
    uint32_t resumed; /* tokens a failed worker already streamed */
    uint32_t limit;   /* completion tokens in total (resumed included) */
    uint32_t gen;     /* tokens generated here */
    uint32_t seq;     /* next TokenChunk.seq */
    uint32_t blocks;  /* pretend KV blocks held */
    char *error;      /* set at submit: answer FINISH_ERROR at once */
    char **stop;
    size_t n_stop, max_stop;
    char *txt; /* resume_text + generated text */
    size_t len, cap, sent;
    uint64_t t_first, period_ns, deadline;
    uint64_t end_by; /* Generate.deadline_ms on the sol_now_ns clock (0: none) */
    size_t heap_idx;
    struct sim_req *next; /* waiting FIFO */
    uint32_t ids[SIM_CHUNK_MAX];
} sim_req;

typedef struct sim {
    executor base;
    sim_config cfg;
    char model[256];
    exec_events *events;
    void *cmd_tx, *cmd_rx; /* caller thread -> simulation thread */
    pthread_t thread;
    bool started;
    /* simulation thread only */
    sim_req **heap;
    size_t n_heap, cap_heap;
    sim_req *wait_head, *wait_tail;
    /* shared, atomics */
    atomic_uint running, waiting, used_blocks, inflight;
    atomic_uint_fast64_t steps, tokens;
    /* stats caller only */
    uint64_t rate_prev_tokens, rate_prev_ns;
    double rate;
} sim;

enum { CMD_SUBMIT = 'S', CMD_CANCEL = 'C', CMD_TERM = 'T' };

/* ---- determinism ------------------------------------------------------------------------- */

uint64_t sim_prompt_hash(const Sol__Generate *g) {
    uint64_t h = SOL_FNV64_INIT;
    if (g->n_messages == 0) return sol_fnv64_str(h, g->prompt);
    for (size_t i = 0; i < g->n_messages; i++) {
        h = sol_fnv64_str(h, g->messages[i]->role);
        h = sol_fnv64(h, "\x1f", 1); /* separator: ("ab","c") != ("a","bc") */
        h = sol_fnv64_str(h, g->messages[i]->content);
        h = sol_fnv64(h, "\x1e", 1);
    }
    return h;
}

uint32_t sim_token_id(uint64_t prompt_hash, uint64_t seed, uint32_t k) {
    uint64_t x =
        sol_splitmix64(prompt_hash ^ sol_splitmix64(seed ^ sol_splitmix64((uint64_t)k + 1)));
    return SIM_TOKEN_BASE + (uint32_t)(x % SIM_NWORDS);
}

const char *sim_token_text(uint32_t id) {
    if (id < SIM_TOKEN_BASE || id >= SIM_TOKEN_BASE + SIM_NWORDS) return "?";
    return k_words[id - SIM_TOKEN_BASE];
}

static uint32_t count_words(const char *s) {
    uint32_t n = 0;
    bool in = false;
    for (; s && *s; s++) {
        bool space =
            *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v';
        if (!space && !in) n++;
        in = !space;
    }
    return n;
}

uint32_t sim_prompt_tokens(const Sol__Generate *g) {
    if (g->n_messages == 0) return count_words(g->prompt);
    uint32_t n = 0;
    for (size_t i = 0; i < g->n_messages; i++)
        n += count_words(g->messages[i]->content);
    return n;
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_free(sim_req *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->txt);
    free(r->error);
    free(r);
}

static int req_reserve(sim_req *r, size_t extra) {
    if (r->len + extra + 1 <= r->cap) return 0;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + extra + 1)
        cap *= 2;
    char *t = realloc(r->txt, cap);
    if (!t) return -ENOMEM;
    r->txt = t;
    r->cap = cap;
    return 0;
}

static int req_copy_stops(sim_req *r, const Sol__Generate *g) {
    if (g->n_stop == 0) return 0;
    r->stop = calloc(g->n_stop, sizeof *r->stop);
    if (!r->stop) return -ENOMEM;
    for (size_t i = 0; i < g->n_stop; i++) {
        if (!g->stop[i] || !g->stop[i][0]) continue;
        if (!(r->stop[r->n_stop] = strdup(g->stop[i]))) return -ENOMEM;
        size_t n = strlen(g->stop[i]);
        if (n > r->max_stop) r->max_stop = n;
        r->n_stop++;
    }
    return 0;
}

static void req_set_error(sim_req *r, const char *fmt, uint32_t a, uint32_t b) {
    char buf[256];
    snprintf(buf, sizeof buf, fmt, a, b);
    r->error = strdup(buf);
}

/* Copy what the simulation needs from `g`; the caller frees `g` afterwards. */
static int req_new(const sim *s, const Sol__Generate *g, sim_req **out) {
    sim_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    snprintf(r->id, sizeof r->id, "%s", g->request_id);
    r->hash = sim_prompt_hash(g);
    r->end_by = g->deadline_ms ? sol_now_ns() + g->deadline_ms * 1000000ull : 0;
    r->seed = g->sampling && g->sampling->has_seed ? g->sampling->seed : 0;
    r->prompt_tokens = sim_prompt_tokens(g);
    r->resumed = g->n_resume_tokens ? (uint32_t)g->n_resume_tokens : count_words(g->resume_text);
    uint32_t ctx = s->cfg.max_context;
    if (r->prompt_tokens >= ctx) {
        req_set_error(r, "prompt is %u tokens; this worker's context holds %u", r->prompt_tokens,
                      ctx);
    } else {
        uint32_t room = ctx - r->prompt_tokens;
        r->limit = g->max_tokens && g->max_tokens < room ? g->max_tokens : room;
    }
    size_t rlen = g->resume_text ? strlen(g->resume_text) : 0;
    int rc = req_copy_stops(r, g);
    if (rc == 0) rc = req_reserve(r, rlen);
    if (rc < 0) {
        req_free(r);
        return rc;
    }
    if (rlen) memcpy(r->txt, g->resume_text, rlen);
    r->len = r->sent = rlen;
    r->txt[r->len] = '\0';
    double rate = s->cfg.tokens_per_s > 0 ? s->cfg.tokens_per_s : 1;
    r->period_ns = (uint64_t)(1e9 / rate);
    *out = r;
    return 0;
}

/* ---- the deadline heap (simulation thread) ---------------------------------------------- */

static void heap_swap(sim *s, size_t a, size_t b) {
    sim_req *t = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = t;
    s->heap[a]->heap_idx = a;
    s->heap[b]->heap_idx = b;
}

static void heap_up(sim *s, size_t i) {
    while (i > 0 && s->heap[(i - 1) / 2]->deadline > s->heap[i]->deadline) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(sim *s, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < s->n_heap && s->heap[l]->deadline < s->heap[m]->deadline) m = l;
        if (l + 1 < s->n_heap && s->heap[l + 1]->deadline < s->heap[m]->deadline) m = l + 1;
        if (m == i) return;
        heap_swap(s, i, m);
        i = m;
    }
}

static int heap_push(sim *s, sim_req *r) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 64;
        sim_req **h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -ENOMEM;
        s->heap = h;
        s->cap_heap = cap;
    }
    r->heap_idx = s->n_heap;
    s->heap[s->n_heap++] = r;
    heap_up(s, r->heap_idx);
    return 0;
}

static void heap_remove(sim *s, sim_req *r) {
    size_t i = r->heap_idx;
    heap_swap(s, i, --s->n_heap);
    if (i < s->n_heap) {
        heap_down(s, i);
        heap_up(s, i);
    }
}

/* ---- emitting ---------------------------------------------------------------------------- */

static void set_blocks(sim *s, sim_req *r, uint32_t blocks) {
    if (blocks > r->blocks)
        atomic_fetch_add(&s->used_blocks, blocks - r->blocks);
    else
        atomic_fetch_sub(&s->used_blocks, r->blocks - blocks);
    r->blocks = blocks;
}

/* Send txt[sent, upto) and ids[0, n_ids) as one chunk. */
static void emit(sim *s, sim_req *r, size_t upto, size_t n_ids, Sol__FinishReason fin,
                 const char *error) {
    Sol__TokenChunk c = SOL__TOKEN_CHUNK__INIT;
    Sol__Usage u = SOL__USAGE__INIT;
    char saved = r->txt[upto];
    r->txt[upto] = '\0';
    c.request_id = r->id;
    c.text = r->txt + r->sent;
    c.token_ids = r->ids;
    c.n_token_ids = n_ids;
    c.finish_reason = fin;
    c.seq = r->seq++;
    if (error) c.error = (char *)error;
    if (fin != SOL__FINISH_REASON__FINISH_NONE) {
        u.prompt_tokens = r->prompt_tokens;
        u.completion_tokens = r->resumed + r->gen;
        c.usage = &u;
        /* Before the push: once the link sees the final chunk, idle() must be true already. */
        atomic_fetch_sub(&s->inflight, 1);
    }
    sol_err err = {0};
    if (exec_events_push(s->events, &c, &err) < 0)
        LOG_ERROR("sim", "request %s: dropping a chunk: %s", r->id, err.msg);
    r->txt[upto] = saved;
    r->sent = upto;
}

/* Earliest stop-string occurrence starting at or after `from`, or (size_t)-1. */
static size_t find_stop(const sim_req *r, size_t from) {
    size_t best = (size_t)-1;
    for (size_t i = 0; i < r->n_stop; i++) {
        const char *p = strstr(r->txt + from, r->stop[i]);
        if (p && (size_t)(p - r->txt) < best) best = (size_t)(p - r->txt);
    }
    return best;
}

/* Bytes at the end of the unsent text that could still grow into a stop string. */
static size_t holdback(const sim_req *r) {
    size_t keep = 0, pending = r->len - r->sent;
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        for (size_t l = n - 1; l > keep; l--)
            if (l <= pending && memcmp(r->txt + r->len - l, r->stop[i], l) == 0) {
                keep = l;
                break;
            }
    }
    return keep;
}

static void finish(sim *s, sim_req *r, bool in_heap) {
    if (in_heap) heap_remove(s, r);
    set_blocks(s, r, 0);
    if (in_heap) atomic_fetch_sub(&s->running, 1);
    req_free(r);
}

/* Generate the tokens due by `now`; returns true when the request ended. */
static bool advance(sim *s, sim_req *r, uint64_t now) {
    if (r->end_by && now >= r->end_by) { /* as the engine does (Generate.deadline_ms) */
        emit(s, r, r->sent, 0, SOL__FINISH_REASON__FINISH_ERROR,
             "deadline exceeded before the request finished");
        return true;
    }
    uint64_t due = now < r->t_first ? 0 : 1 + (now - r->t_first) / r->period_ns;
    uint32_t done = r->resumed + r->gen;
    uint32_t left = done < r->limit ? r->limit - done : 0;
    size_t n = due > r->gen ? (size_t)(due - r->gen) : 0;
    if (n > left) n = left;
    if (n > SIM_CHUNK_MAX) n = SIM_CHUNK_MAX;
    size_t stop_at = (size_t)-1, n_ids = 0;
    for (size_t i = 0; i < n && stop_at == (size_t)-1; i++) {
        uint32_t id = sim_token_id(r->hash, r->seed, r->resumed + r->gen);
        const char *w = sim_token_text(id);
        size_t wl = strlen(w), before = r->len;
        if (req_reserve(r, wl + 1) < 0) {
            emit(s, r, r->sent, i, SOL__FINISH_REASON__FINISH_ERROR, "out of memory");
            return true;
        }
        r->txt[r->len++] = ' ';
        memcpy(r->txt + r->len, w, wl + 1);
        r->len += wl;
        r->ids[n_ids++] = id;
        r->gen++;
        /* A stop string that completes with this token starts at most max_stop - 1 bytes
         * before it; like a real sampler, generation ends at that token. */
        if (r->n_stop) {
            size_t from = before + 1 > r->max_stop ? before + 1 - r->max_stop : 0;
            stop_at = find_stop(r, from > r->sent ? from : r->sent);
        }
    }
    atomic_fetch_add(&s->tokens, n_ids);
    uint32_t bs = s->cfg.block_size ? s->cfg.block_size : 16;
    set_blocks(s, r, (r->prompt_tokens + r->resumed + r->gen + bs - 1) / bs);
    if (stop_at != (size_t)-1) {
        emit(s, r, stop_at, n_ids, SOL__FINISH_REASON__FINISH_STOP, NULL);
        return true;
    }
    if (r->resumed + r->gen >= r->limit) {
        emit(s, r, r->len, n_ids, SOL__FINISH_REASON__FINISH_LENGTH, NULL);
        return true;
    }
    if (n_ids > 0) emit(s, r, r->len - holdback(r), n_ids, SOL__FINISH_REASON__FINISH_NONE, NULL);
    r->deadline = r->t_first + (uint64_t)r->gen * r->period_ns;
    if (r->deadline < now) r->deadline = now; /* more were due than one chunk holds */
    if (r->end_by && r->end_by < r->deadline) r->deadline = r->end_by;
    return false;
}

static void admit(sim *s, sim_req *r, uint64_t now) {
    r->t_first = now + (uint64_t)s->cfg.ttft_ms * 1000000u;
    r->deadline = r->end_by && r->end_by < r->t_first ? r->end_by : r->t_first;
    if (heap_push(s, r) < 0) {
        emit(s, r, r->sent, 0, SOL__FINISH_REASON__FINISH_ERROR, "out of memory");
        req_free(r);
        return;
    }
    atomic_fetch_add(&s->running, 1);
}

static void admit_waiting(sim *s, uint64_t now) {
    while (s->wait_head && s->n_heap < s->cfg.capacity) {
        sim_req *r = s->wait_head;
        s->wait_head = r->next;
        if (!s->wait_head) s->wait_tail = NULL;
        atomic_fetch_sub(&s->waiting, 1);
        admit(s, r, now);
    }
}

static void on_submit(sim *s, sim_req *r, uint64_t now) {
    if (r->error) {
        emit(s, r, r->sent, 0, SOL__FINISH_REASON__FINISH_ERROR, r->error);
        finish(s, r, false);
        return;
    }
    r->next = NULL;
    if (s->wait_tail)
        s->wait_tail->next = r;
    else
        s->wait_head = r;
    s->wait_tail = r;
    atomic_fetch_add(&s->waiting, 1);
    admit_waiting(s, now);
}

static void on_cancel(sim *s, const char *id) {
    for (size_t i = 0; i < s->n_heap; i++)
        if (strcmp(s->heap[i]->id, id) == 0) {
            sim_req *r = s->heap[i];
            emit(s, r, r->sent, 0, SOL__FINISH_REASON__FINISH_CANCELLED, NULL);
            finish(s, r, true);
            return;
        }
    for (sim_req **pp = &s->wait_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0) {
            sim_req *r = *pp;
            *pp = r->next;
            if (s->wait_tail == r) s->wait_tail = prev;
            atomic_fetch_sub(&s->waiting, 1);
            emit(s, r, r->sent, 0, SOL__FINISH_REASON__FINISH_CANCELLED, NULL);
            finish(s, r, false);
            return;
        }
}

/* Handle every queued command; false once told to stop. */
static bool drain_commands(sim *s) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->cmd_rx, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return zmq_errno() == EAGAIN;
        }
        const char *p = zmq_msg_data(&m);
        size_t n = zmq_msg_size(&m);
        char kind = n ? p[0] : CMD_TERM;
        if (kind == CMD_SUBMIT && n == 1 + sizeof(sim_req *)) {
            sim_req *r;
            memcpy(&r, p + 1, sizeof r);
            on_submit(s, r, sol_now_ns());
        } else if (kind == CMD_CANCEL && n > 1 && n <= 1 + SOL_FRAME_MAX_ID_BYTES) {
            char id[SOL_FRAME_MAX_ID_BYTES + 1];
            memcpy(id, p + 1, n - 1);
            id[n - 1] = '\0';
            on_cancel(s, id);
        }
        zmq_msg_close(&m);
        if (kind == CMD_TERM) return false;
    }
}

static void run_due(sim *s) {
    uint64_t now = sol_now_ns();
    bool stepped = false;
    while (s->n_heap && s->heap[0]->deadline <= now) {
        sim_req *r = s->heap[0];
        stepped = true;
        if (advance(s, r, now)) {
            finish(s, r, true);
            admit_waiting(s, now);
        } else {
            heap_down(s, 0);
        }
    }
    if (stepped) atomic_fetch_add(&s->steps, 1);
}

static void *sim_main(void *arg) {
    sim *s = arg;
    for (;;) {
        long timeout = -1;
        if (s->n_heap) {
            uint64_t now = sol_now_ns(), d = s->heap[0]->deadline;
            timeout = d <= now ? 0 : (long)((d - now + 999999) / 1000000);
        }
        zmq_pollitem_t it = {s->cmd_rx, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, timeout) < 0 && zmq_errno() != EINTR) break;
        if (!drain_commands(s)) break;
        run_due(s);
    }
    return NULL;
}

/* ---- executor ops (caller thread) --------------------------------------------------------- */

static int sim_submit(void *self, const Sol__Generate *g, sol_err *e) {
    sim *s = self;
    sim_req *r = NULL;
    int rc = req_new(s, g, &r);
    if (rc < 0) return sol_err_set(e, rc, "out of memory for request %s", g->request_id);
    char msg[1 + sizeof r];
    msg[0] = CMD_SUBMIT;
    memcpy(msg + 1, &r, sizeof r);
    atomic_fetch_add(&s->inflight, 1);
    if (zmq_send(s->cmd_tx, msg, sizeof msg, 0) < 0) {
        atomic_fetch_sub(&s->inflight, 1);
        req_free(r);
        return sol_err_set(e, -zmq_errno(), "simulation thread is gone: %s",
                           zmq_strerror(zmq_errno()));
    }
    return 0;
}

static void sim_cancel(void *self, const char *request_id) {
    sim *s = self;
    char msg[1 + SOL_FRAME_MAX_ID_BYTES];
    size_t n = strlen(request_id);
    if (n == 0 || n > SOL_FRAME_MAX_ID_BYTES) return;
    msg[0] = CMD_CANCEL;
    memcpy(msg + 1, request_id, n);
    zmq_send(s->cmd_tx, msg, n + 1, 0);
}

static uint32_t total_blocks(const sim_config *c) {
    if (c->total_blocks) return c->total_blocks;
    uint32_t bs = c->block_size ? c->block_size : 16;
    return c->capacity * ((c->max_context + bs - 1) / bs);
}

static void sim_info(void *self, exec_info *out) {
    sim *s = self;
    memset(out, 0, sizeof *out);
    snprintf(out->model, sizeof out->model, "%s", s->model);
    snprintf(out->backend, sizeof out->backend, "sim");
    out->max_context = s->cfg.max_context;
    out->capacity = s->cfg.capacity;
}

static void sim_stats(void *self, exec_stats *out) {
    sim *s = self;
    memset(out, 0, sizeof *out);
    out->running = atomic_load(&s->running);
    out->waiting = atomic_load(&s->waiting);
    out->total_blocks = total_blocks(&s->cfg);
    uint32_t used = atomic_load(&s->used_blocks);
    out->free_blocks = used < out->total_blocks ? out->total_blocks - used : 0;
    out->engine_steps = atomic_load(&s->steps);
    uint64_t now = sol_now_ns(), tok = atomic_load(&s->tokens);
    if (s->rate_prev_ns && now > s->rate_prev_ns + 100000000u)
        s->rate = (double)(tok - s->rate_prev_tokens) * 1e9 / (double)(now - s->rate_prev_ns);
    if (!s->rate_prev_ns || now > s->rate_prev_ns + 100000000u) {
        s->rate_prev_ns = now;
        s->rate_prev_tokens = tok;
    }
    out->tokens_per_s = s->rate;
    /* the simulation does not speculate: the spec_* counters stay 0 */
}

static bool sim_idle(void *self) {
    sim *s = self;
    return atomic_load(&s->inflight) == 0;
}

static void sim_free(void *self) {
    sim *s = self;
    if (!s) return;
    if (s->started) {
        char t = CMD_TERM;
        zmq_send(s->cmd_tx, &t, 1, 0);
        pthread_join(s->thread, NULL);
    }
    for (size_t i = 0; i < s->n_heap; i++)
        req_free(s->heap[i]);
    while (s->wait_head) {
        sim_req *r = s->wait_head;
        s->wait_head = r->next;
        req_free(r);
    }
    /* Submits still queued in the command socket carry owned pointers. */
    zmq_msg_t m;
    for (zmq_msg_init(&m); s->cmd_rx && zmq_msg_recv(&m, s->cmd_rx, ZMQ_DONTWAIT) >= 0;) {
        if (zmq_msg_size(&m) == 1 + sizeof(sim_req *) && *(char *)zmq_msg_data(&m) == CMD_SUBMIT) {
            sim_req *r;
            memcpy(&r, (char *)zmq_msg_data(&m) + 1, sizeof r);
            req_free(r);
        }
    }
    zmq_msg_close(&m);
    free(s->heap);
    if (s->cmd_tx) zmq_close(s->cmd_tx);
    if (s->cmd_rx) zmq_close(s->cmd_rx);
    free(s);
}

static const executor_ops k_sim_ops = {
    .submit = sim_submit,
    .cancel = sim_cancel,
    .info = sim_info,
    .stats = sim_stats,
    .idle = sim_idle,
    .free = sim_free,
};

static void *cmd_socket(void *zctx) {
    void *sock = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    if (sock) {
        zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero);
        zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof zero);
        zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    }
    return sock;
}

int sim_new(void *zctx, const sim_config *cfg, exec_events *events, executor **out, sol_err *e) {
    *out = NULL;
    if (cfg->capacity == 0 || cfg->max_context == 0 || !(cfg->tokens_per_s > 0) || cfg->ttft_ms < 0)
        return sol_err_set(e, -EINVAL,
                           "simulation settings: capacity %u, max_context %u, tokens_per_s %g, "
                           "ttft_ms %d; expected all positive (ttft_ms >= 0)",
                           cfg->capacity, cfg->max_context, cfg->tokens_per_s, cfg->ttft_ms);
    sim *s = calloc(1, sizeof *s);
    if (!s) return sol_err_set(e, -ENOMEM, "out of memory for the simulation");
    s->base.ops = &k_sim_ops;
    s->base.self = s;
    s->cfg = *cfg;
    snprintf(s->model, sizeof s->model, "%s", cfg->model && cfg->model[0] ? cfg->model : "sim");
    s->cfg.model = s->model;
    s->events = events;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://sol-sim-cmd-%p", (void *)s);
    s->cmd_rx = cmd_socket(zctx);
    s->cmd_tx = cmd_socket(zctx);
    if (!s->cmd_rx || !s->cmd_tx || zmq_bind(s->cmd_rx, ep) != 0 ||
        zmq_connect(s->cmd_tx, ep) != 0) {
        int err = zmq_errno();
        sim_free(s);
        return sol_err_set(e, -err, "simulation command socket: %s", zmq_strerror(err));
    }
    if (pthread_create(&s->thread, NULL, sim_main, s) != 0) {
        sim_free(s);
        return sol_err_set(e, -EAGAIN, "cannot start the simulation thread");
    }
    s->started = true;
    LOG_INFO("sim",
             "SIMULATED backend: model \"%s\", ttft %d ms, %g tokens/s per sequence, "
             "capacity %u, context %u (no model is run)",
             s->model, cfg->ttft_ms, cfg->tokens_per_s, cfg->capacity, cfg->max_context);
    *out = &s->base;
    return 0;
}
