/* scheduler: one step = decodes, then unfinished prefills, then admissions, all in priority order.
 *
 * Why the running set is an array sorted by (priority, admission stamp): the preemption victim -
 * the lowest-priority, most recently admitted sequence - is then always its last element, and
 * walking it front to back schedules the most important sequences first. A victim chosen while
 * decodes are being placed always sits at or after the sequence being placed, so a sequence that
 * already has tokens in the batch is never preempted (its block table stays valid for the pass).
 *
 * Admission asks for blocks for every known token of the sequence past its prefix-cache hit, plus
 * one spare block per running sequence (a watermark): without it a new admission takes the block
 * a running decode needs next step, which then preempts the newcomer again (thrashing). */
#include "scheduler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct sched_queue {
    sched_seq *head, *tail;
    int32_t n;
} sched_queue;

struct sched {
    sched_config cfg;
    kv_cache *kv;
    int32_t block_size;
    sched_seq **running;
    int32_t n_running;
    sched_queue waiting, preempted;
    uint64_t arrivals, admissions, total_preemptions;
    int32_t budget;   /* tokens left in the step being planned */
    int32_t step_cap; /* sched_set_step_cap (0: none) */
    /* per-step output arrays, sized once */
    int32_t *tokens, *pos, *slots, *logit_rows;
    sol_attn_seq *attn;
    sched_seq **logit_seqs, **seqs;
    kv_copy *copies;
};

/* ---- queues ------------------------------------------------------------------------------- */

/* Priority, then the earlier first-token deadline (none: after every deadline), then arrival. */
static bool before(const sched_seq *a, const sched_seq *b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    uint64_t da = a->due_ns ? a->due_ns : UINT64_MAX, db = b->due_ns ? b->due_ns : UINT64_MAX;
    return da != db ? da < db : a->arrival < b->arrival;
}

/* Sorted insert from the tail: most requests share a priority, so this is O(1) in practice. */
static void queue_insert(sched_queue *q, sched_seq *seq) {
    sched_seq *after = q->tail;
    while (after && before(seq, after))
        after = after->prev;
    seq->prev = after;
    seq->next = after ? after->next : q->head;
    if (seq->next)
        seq->next->prev = seq;
    else
        q->tail = seq;
    if (after)
        after->next = seq;
    else
        q->head = seq;
    q->n++;
}

static void queue_unlink(sched_queue *q, sched_seq *seq) {
    if (seq->prev)
        seq->prev->next = seq->next;
    else
        q->head = seq->next;
    if (seq->next)
        seq->next->prev = seq->prev;
    else
        q->tail = seq->prev;
    seq->prev = seq->next = NULL;
    q->n--;
}

static bool run_before(const sched_seq *a, const sched_seq *b) {
    return a->priority != b->priority ? a->priority < b->priority : a->admit_stamp < b->admit_stamp;
}

static void running_insert(sched *s, sched_seq *seq) {
    int32_t i = s->n_running;
    while (i > 0 && run_before(seq, s->running[i - 1])) {
        s->running[i] = s->running[i - 1];
        i--;
    }
    s->running[i] = seq;
    s->n_running++;
}

static void running_remove(sched *s, sched_seq *seq) {
    for (int32_t i = 0; i < s->n_running; i++) {
        if (s->running[i] != seq) continue;
        memmove(&s->running[i], &s->running[i + 1],
                sizeof *s->running * (size_t)(s->n_running - i - 1));
        s->n_running--;
        return;
    }
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

sched *sched_new(const sched_config *cfg, kv_cache *kv, sol_err *err) {
    if (!cfg || !kv || cfg->max_num_seqs < 1 || cfg->max_batched_tokens < cfg->max_num_seqs ||
        cfg->kv_window < 0) {
        sol_err_set(err, -EINVAL,
                    "scheduler: expected max_num_seqs >= 1, max_batched_tokens >= "
                    "max_num_seqs and kv_window >= 0, found %d, %d and %d",
                    cfg ? cfg->max_num_seqs : 0, cfg ? cfg->max_batched_tokens : 0,
                    cfg ? cfg->kv_window : 0);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->cfg = *cfg;
    s->kv = kv;
    s->block_size = kv_cache_block_size(kv);
    size_t nt = (size_t)cfg->max_batched_tokens, ns = (size_t)cfg->max_num_seqs;
    s->running = calloc(ns, sizeof *s->running);
    s->tokens = calloc(nt, sizeof *s->tokens);
    s->pos = calloc(nt, sizeof *s->pos);
    s->slots = calloc(nt, sizeof *s->slots);
    s->attn = calloc(nt, sizeof *s->attn);
    s->logit_rows = calloc(nt, sizeof *s->logit_rows); /* verify decodes: up to a row a token */
    s->logit_seqs = calloc(nt, sizeof *s->logit_seqs);
    s->seqs = calloc(ns, sizeof *s->seqs);
    s->copies = calloc(ns * KV_MAX_COPIES, sizeof *s->copies);
    if (!s->running || !s->tokens || !s->pos || !s->slots || !s->attn || !s->logit_rows ||
        !s->logit_seqs || !s->seqs || !s->copies)
        goto oom;
    return s;
oom:
    sched_free(s);
    sol_err_set(err, -ENOMEM, "scheduler: out of memory");
    return NULL;
}

static void release_all(sched *s, sched_queue *q) {
    while (q->head)
        sched_remove(s, q->head);
}

void sched_free(sched *s) {
    if (!s) return;
    while (s->n_running > 0)
        sched_remove(s, s->running[0]);
    release_all(s, &s->waiting);
    release_all(s, &s->preempted);
    free(s->running);
    free(s->tokens);
    free(s->pos);
    free(s->slots);
    free(s->attn);
    free(s->logit_rows);
    free(s->logit_seqs);
    free(s->seqs);
    free(s->copies);
    free(s);
}

int sched_add(sched *s, sched_seq *seq, sol_err *err) {
    if (!seq || !seq->tokens || seq->n_tokens < 1 || seq->n_tokens > seq->cap_tokens)
        return sol_err_set(err, -EINVAL,
                           "scheduler: a sequence needs 1..cap_tokens tokens, found %d of %d",
                           seq ? seq->n_tokens : 0, seq ? seq->cap_tokens : 0);
    if (seq->state != SCHED_NEW)
        return sol_err_set(err, -EINVAL, "scheduler: sequence %llu was already added",
                           (unsigned long long)seq->id);
    seq->kv = NULL;
    seq->n_computed = seq->n_cached = seq->n_preempted = seq->step_n = 0;
    seq->admitted_once = false;
    seq->arrival = ++s->arrivals;
    seq->state = SCHED_WAITING;
    queue_insert(&s->waiting, seq);
    return 0;
}

void sched_remove(sched *s, sched_seq *seq) {
    if (!seq) return;
    switch (seq->state) {
    case SCHED_RUNNING:
        running_remove(s, seq);
        break;
    case SCHED_WAITING:
        queue_unlink(&s->waiting, seq);
        break;
    case SCHED_PREEMPTED:
        queue_unlink(&s->preempted, seq);
        break;
    default:
        return;
    }
    kv_seq_free(seq->kv);
    seq->kv = NULL;
    seq->state = SCHED_DONE;
}

int sched_seq_push(sched_seq *seq, int32_t token) {
    if (seq->n_tokens >= seq->cap_tokens) return -ENOSPC;
    seq->tokens[seq->n_tokens++] = token;
    return 0;
}

/* ---- one step ----------------------------------------------------------------------------- */

void sched_spec_drop(sched_seq *seq) {
    seq->n_tokens -= seq->n_spec;
    seq->n_spec = 0;
    seq->spec_step = false;
}

int sched_spec_resolve(sched_seq *seq, int32_t n_keep, sol_err *err) {
    if (n_keep < 0 || n_keep > seq->n_spec)
        return sol_err_set(err, -EINVAL, "scheduler: keep %d of %d drafts", n_keep, seq->n_spec);
    int32_t n_hist = seq->n_tokens - seq->n_spec, len = n_hist + n_keep;
    int rc = kv_seq_truncate(seq->kv, len, err);
    if (rc) return rc;
    /* The kept drafts are pushed again by the caller, one emitted token at a time, so EOS and
     * stop strings can end the run early; n_computed runs ahead of n_tokens until then. */
    seq->n_computed = len;
    seq->n_tokens = n_hist;
    seq->n_spec = 0;
    return 0;
}

static void preempt(sched *s, sched_seq *victim, sched_batch *out) {
    sched_spec_drop(victim); /* drafts were for this step's verify; recompute never sees them */
    running_remove(s, victim);
    kv_seq_free(victim->kv);
    victim->kv = NULL;
    victim->n_computed = 0;
    victim->n_preempted++;
    victim->state = SCHED_PREEMPTED;
    queue_insert(&s->preempted, victim);
    s->total_preemptions++;
    out->n_preempted++;
}

/* Blocks the pool can hand out now (free + evictable cached). */
static int32_t avail_blocks(const sched *s) {
    kv_cache_stats st;
    kv_cache_get_stats(s->kv, &st);
    return st.free_blocks + st.cached_blocks;
}

/* The most of n tokens the pool can take for seq now. */
static int32_t fit(const sched *s, const sched_seq *seq, int32_t n) {
    int32_t n_blocks = 0, avail = avail_blocks(s);
    kv_seq_block_table(seq->kv, &n_blocks);
    int64_t room = (int64_t)n_blocks * s->block_size - kv_seq_len(seq->kv);
    int64_t most = room + (int64_t)avail * s->block_size;
    if (n > most) n = (int32_t)most;
    /* A copy-on-write block can cost one more: back off a block at a time (at most twice). */
    while (n > 0 && kv_seq_blocks_needed(seq->kv, n) > avail)
        n = n > s->block_size ? n - s->block_size : 0;
    return n;
}

/* Reserves n tokens of seq and writes them into the batch. */
static int place(sched *s, sched_seq *seq, int32_t n, sched_batch *out, sol_err *err) {
    kv_copy copies[KV_MAX_COPIES];
    int32_t n_copies = 0, off = out->n_tokens, start = seq->n_computed;
    int rc = kv_seq_reserve(seq->kv, n, copies, &n_copies, err);
    if (rc) return rc;
    for (int32_t i = 0; i < n_copies; i++)
        out->copies[out->n_copies++] = copies[i];
    if ((rc = kv_seq_slots(seq->kv, start, n, out->slots + off, err))) return rc;
    int32_t n_blocks;
    const int32_t *table = kv_seq_block_table(seq->kv, &n_blocks);
    for (int32_t j = 0; j < n; j++) {
        out->tokens[off + j] = seq->tokens[start + j];
        out->pos[off + j] = start + j;
        out->attn[off + j] = (sol_attn_seq){table, start + j + 1};
    }
    out->n_tokens += n;
    if (seq->spec_step) /* verify decode: the last accepted token and each draft */
        for (int32_t j = 0; j + 1 < n; j++) {
            out->logit_rows[out->n_logits] = off + j;
            out->logit_seqs[out->n_logits++] = seq;
        }
    if (start + n == seq->n_tokens) { /* every known token computed: sample the next one */
        out->logit_rows[out->n_logits] = off + n - 1;
        out->logit_seqs[out->n_logits++] = seq;
    }
    out->seqs[out->n_seqs++] = seq;
    seq->step_n = n;
    s->budget -= n;
    return 0;
}

static bool is_decode(const sched_seq *seq) {
    return seq->n_tokens - seq->n_spec - seq->n_computed == 1;
}

/* Drafts cost rows and blocks; they are dropped before anyone is preempted for them and when
 * the token budget must still cover one row for each decode after this one. */
static void fit_drafts(sched *s, sched_seq *seq, int32_t decodes_after) {
    if (!seq->n_spec) return;
    if (1 + seq->n_spec > s->budget - decodes_after ||
        kv_seq_blocks_needed(seq->kv, 1 + seq->n_spec) > avail_blocks(s))
        sched_spec_drop(seq);
}

static int schedule_decodes(sched *s, sched_batch *out, sol_err *err) {
    int32_t i = 0, left = 0;
    for (int32_t r = 0; r < s->n_running; r++)
        left += is_decode(s->running[r]);
    while (i < s->n_running) {
        sched_seq *seq = s->running[i];
        if (!is_decode(seq)) {
            i++;
            continue;
        }
        fit_drafts(s, seq, left - 1);
        if (kv_seq_blocks_needed(seq->kv, 1) > avail_blocks(s)) {
            sched_seq *victim = s->running[s->n_running - 1]; /* may be seq itself */
            left -= is_decode(victim);
            preempt(s, victim, out);
            continue;
        }
        left--;
        seq->spec_step = seq->n_spec > 0;
        int rc = place(s, seq, 1 + seq->n_spec, out, err);
        if (rc) return rc;
        out->n_decode++;
        i++;
    }
    return 0;
}

static int schedule_prefills(sched *s, sched_batch *out, sol_err *err) {
    for (int32_t i = 0; i < s->n_running && s->budget > 0; i++) {
        sched_seq *seq = s->running[i];
        int32_t left = seq->n_tokens - seq->n_computed;
        if (seq->step_n || left <= 1) continue;
        int32_t n = fit(s, seq, left < s->budget ? left : s->budget);
        if (n == 0) continue;
        int rc = place(s, seq, n, out, err);
        if (rc) return rc;
        out->n_prefill_tokens += n;
    }
    return 0;
}

/* Preempted sequences go first among equals: they were admitted before anything waiting. */
static sched_seq *next_candidate(sched *s) {
    sched_seq *p = s->preempted.head, *w = s->waiting.head;
    if (!p) return w;
    if (!w) return p;
    return w->priority < p->priority ? w : p;
}

/* Blocks admission would take: the rest of the known tokens after the cache hit, plus the cached
 * blocks the hit pulls out of the free pool. */
static bool admissible(const sched *s, const sched_seq *seq) {
    int32_t n_evict = 0, bs = s->block_size;
    int32_t hit = seq->no_prefix_hit ? 0
                                     : kv_cache_peek_prefix(s->kv, seq->cache_salt, seq->tokens,
                                                            seq->n_tokens, &n_evict);
    if (hit < 0) hit = 0;
    int32_t need = (seq->n_tokens + bs - 1) / bs - hit / bs + n_evict;
    if (s->cfg.kv_window > 0) { /* blocks behind the window are freed as the prompt goes */
        int32_t live = (s->cfg.kv_window + s->cfg.max_batched_tokens + 2 * bs - 1) / bs;
        if (need > live) need = live;
    }
    return kv_cache_can_allocate(s->kv, need + s->n_running);
}

static int admit(sched *s, sched_seq *seq, sched_batch *out, sol_err *err) {
    seq->kv = kv_seq_new(s->kv, seq->cache_salt, err);
    if (!seq->kv) return err && err->code ? err->code : -ENOMEM;
    int32_t hit =
        seq->no_prefix_hit ? 0 : kv_seq_match_prefix(seq->kv, seq->tokens, seq->n_tokens, err);
    if (hit < 0) {
        kv_seq_free(seq->kv);
        seq->kv = NULL;
        return hit;
    }
    queue_unlink(seq->state == SCHED_PREEMPTED ? &s->preempted : &s->waiting, seq);
    seq->n_computed = hit;
    if (!seq->admitted_once) seq->n_cached = hit;
    seq->admitted_once = true;
    seq->state = SCHED_RUNNING;
    seq->admit_stamp = ++s->admissions;
    running_insert(s, seq);
    int32_t left = seq->n_tokens - hit;
    int32_t n = fit(s, seq, left < s->budget ? left : s->budget);
    if (n == 0) return 0;
    out->n_prefill_tokens += n;
    return place(s, seq, n, out, err);
}

static bool same_salt(const char *a, const char *b) {
    return !strcmp(a ? a : "", b ? b : "");
}

/* A running sequence is still prefilling a prompt whose first block is seq's (the n samples of
 * one request, or one prompt from several clients): seq waits until those blocks are written and
 * then takes them from the prefix cache - one prefill instead of n. */
static bool sibling_prefilling(const sched *s, const sched_seq *seq) {
    int32_t bs = s->block_size;
    if (!kv_cache_prefix_caching(s->kv) || seq->no_prefix_hit || seq->n_tokens <= bs) return false;
    for (int32_t i = 0; i < s->n_running; i++) {
        const sched_seq *r = s->running[i];
        if (r->n_computed + 1 < r->n_tokens - r->n_spec && r->n_tokens > bs && /* prefilling */
            same_salt(r->cache_salt, seq->cache_salt) &&
            !memcmp(r->tokens, seq->tokens, (size_t)bs * sizeof *seq->tokens))
            return true;
    }
    return false;
}

static int schedule_admissions(sched *s, sched_batch *out, sol_err *err) {
    while (s->n_running < s->cfg.max_num_seqs && s->budget > 0) {
        sched_seq *seq = next_candidate(s);
        /* Head-of-line: a sequence that does not fit blocks the ones behind it, which keeps the
         * priority order and stops small requests from starving a large one; so does one that
         * waits for a sibling's prefill (briefly: that prefill is under way). */
        if (!seq || !admissible(s, seq) || sibling_prefilling(s, seq)) break;
        int rc = admit(s, seq, out, err);
        if (rc) return rc;
    }
    return 0;
}

static void reset_batch(sched *s, sched_batch *out) {
    *out = (sched_batch){.tokens = s->tokens,
                         .pos = s->pos,
                         .slots = s->slots,
                         .attn = s->attn,
                         .logit_rows = s->logit_rows,
                         .logit_seqs = s->logit_seqs,
                         .seqs = s->seqs,
                         .copies = s->copies};
    for (int32_t i = 0; i < s->n_running; i++) {
        s->running[i]->step_n = 0;
        s->running[i]->spec_step = false;
    }
    s->budget = s->step_cap > 0 && s->step_cap < s->cfg.max_batched_tokens
                    ? s->step_cap
                    : s->cfg.max_batched_tokens;
}

void sched_set_step_cap(sched *s, int32_t cap) {
    s->step_cap = cap;
}

int sched_step(sched *s, sched_batch *out, sol_err *err) {
    reset_batch(s, out);
    for (;;) {
        int rc;
        if ((rc = schedule_decodes(s, out, err)) || (rc = schedule_prefills(s, out, err)) ||
            (rc = schedule_admissions(s, out, err)))
            return rc;
        /* Running prefills that all stall on blocks (nothing decodes, nothing frees): give the
         * newest one's blocks to the others. Each round removes one, so this ends. */
        if (out->n_tokens > 0 || s->n_running == 0) return 0;
        int32_t preempted = out->n_preempted;
        preempt(s, s->running[s->n_running - 1], out);
        reset_batch(s, out);
        out->n_preempted = preempted + 1;
    }
}

int sched_commit(sched *s, const sched_batch *b, sol_err *err) {
    for (int32_t i = 0; i < b->n_seqs; i++) {
        sched_seq *seq = b->seqs[i];
        int rc = kv_seq_append(seq->kv, seq->tokens + seq->n_computed, seq->step_n, err);
        if (rc) return rc;
        seq->n_computed += seq->step_n; /* step_n stays readable until the next step */
        if (s->cfg.kv_window > 0) {
            /* Kept for sure: computed tokens that are not drafts (a verify may still reject
             * those). The next token sits at or after it and reads from kept + 1 - window. */
            int32_t kept = seq->n_tokens - seq->n_spec;
            if (kept > seq->n_computed) kept = seq->n_computed;
            kv_seq_drop_before(seq->kv, kept + 1 - s->cfg.kv_window);
        }
    }
    return 0;
}

void sched_get_counts(const sched *s, sched_counts *out) {
    out->running = s->n_running;
    out->waiting = s->waiting.n;
    out->preempted = s->preempted.n;
    out->total_preemptions = s->total_preemptions;
}

sched_seq *const *sched_running(const sched *s, int32_t *n) {
    *n = s->n_running;
    return s->running;
}
