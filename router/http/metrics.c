/* metrics: a small Prometheus registry with fixed buckets.
 * One mutex guards everything: updates are a few adds per request or chunk, far below contention
 * levels that would justify per-series atomics, and a render sees one consistent snapshot.
 * Series are created on first use (pools and workers are only known at run time). */
#include "metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 64
#define STATUS_SLOTS 16

static const double lat_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
#define NB (sizeof lat_buckets / sizeof lat_buckets[0])

typedef struct hist {
    uint64_t counts[NB]; /* non-cumulative; cumulated at render */
    uint64_t count;
    double sum;
} hist;

typedef struct pool_series {
    char name[NAME_MAX_LEN];
    hist h[METRIC_HIST_COUNT];
    int status[STATUS_SLOTS];
    uint64_t status_count[STATUS_SLOTS];
    uint64_t prefix_hits, prefix_queries;
    uint64_t failovers;
    uint64_t migrations;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t slo_refused, slo_missed; /* latency targets: refused at arrival; deadline passed */
    uint64_t rebalances;              /* streams live rebalancing moved */
    uint64_t quoted;                  /* replies sent back as their ids (reply_ids.h) */
} pool_series;

typedef struct worker_series {
    char id[NAME_MAX_LEN];
    char pool[NAME_MAX_LEN];
    metrics_worker_load load;
} worker_series;

struct metrics {
    pthread_mutex_t mu;
    char model[NAME_MAX_LEN * 2];
    pool_series *pools;
    size_t n_pools, cap_pools;
    worker_series *workers;
    size_t n_workers, cap_workers;
};

metrics *metrics_new(const char *model_name) {
    metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    strncpy(m->model, model_name ? model_name : "", sizeof m->model - 1);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->pools);
    free(m->workers);
    free(m);
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, c * elem);
    if (!p) return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* Caller holds mu. NULL only when out of memory. */
static pool_series *pool_get(metrics *m, const char *pool) {
    if (!pool) pool = "";
    for (size_t i = 0; i < m->n_pools; i++)
        if (!strncmp(m->pools[i].name, pool, NAME_MAX_LEN - 1)) return &m->pools[i];
    if (grow((void **)&m->pools, &m->cap_pools, m->n_pools, sizeof *m->pools)) return NULL;
    pool_series *p = &m->pools[m->n_pools++];
    memset(p, 0, sizeof *p);
    strncpy(p->name, pool, NAME_MAX_LEN - 1);
    return p;
}

void metrics_observe(metrics *m, metric_hist h, const char *pool, double seconds) {
    if (!m || h < 0 || h >= METRIC_HIST_COUNT) return;
    if (!(seconds >= 0)) seconds = 0; /* NaN or negative clock skew */
    pthread_mutex_lock(&m->mu);
    pool_series *p = pool_get(m, pool);
    if (p) {
        hist *x = &p->h[h];
        size_t b = 0;
        while (b < NB && seconds > lat_buckets[b])
            b++;
        if (b < NB) x->counts[b]++;
        x->count++;
        x->sum += seconds;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_request(metrics *m, const char *pool, int status) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    pool_series *p = pool_get(m, pool);
    for (size_t i = 0; p && i < STATUS_SLOTS; i++) {
        if (p->status[i] == status || p->status[i] == 0) {
            p->status[i] = status;
            p->status_count[i]++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

/* One more in the pool's uint64_t counter at byte offset `field` of its series. */
static void add_pool(metrics *m, const char *pool, size_t field, uint64_t n) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    pool_series *p = pool_get(m, pool);
    if (p) (*(uint64_t *)((char *)p + field)) += n;
    pthread_mutex_unlock(&m->mu);
}

static void count_pool(metrics *m, const char *pool, size_t field) {
    add_pool(m, pool, field, 1);
}

void metrics_count_failover(metrics *m, const char *pool) {
    count_pool(m, pool, offsetof(pool_series, failovers));
}

void metrics_count_migration(metrics *m, const char *pool) {
    count_pool(m, pool, offsetof(pool_series, migrations));
}

void metrics_count_rebalance(metrics *m, const char *pool) {
    count_pool(m, pool, offsetof(pool_series, rebalances));
}

void metrics_count_quoted(metrics *m, const char *pool, uint64_t n) {
    if (n) add_pool(m, pool, offsetof(pool_series, quoted), n);
}

void metrics_count_slo(metrics *m, const char *pool, bool refused) {
    count_pool(m, pool,
               refused ? offsetof(pool_series, slo_refused) : offsetof(pool_series, slo_missed));
}

void metrics_add_prefix_cache(metrics *m, const char *pool, uint64_t hits, uint64_t queries) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    pool_series *p = pool_get(m, pool);
    if (p) {
        p->prefix_hits += hits;
        p->prefix_queries += queries;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_add_tokens(metrics *m, const char *pool, uint64_t prompt, uint64_t generated) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    pool_series *p = pool_get(m, pool);
    if (p) {
        p->prompt_tokens += prompt;
        p->generation_tokens += generated;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_worker(metrics *m, const char *worker, const char *pool,
                        const metrics_worker_load *load) {
    if (!m || !worker) return;
    pthread_mutex_lock(&m->mu);
    worker_series *w = NULL;
    for (size_t i = 0; i < m->n_workers && !w; i++)
        if (!strncmp(m->workers[i].id, worker, NAME_MAX_LEN - 1)) w = &m->workers[i];
    if (!w && !grow((void **)&m->workers, &m->cap_workers, m->n_workers, sizeof *m->workers)) {
        w = &m->workers[m->n_workers++];
        memset(w, 0, sizeof *w);
        strncpy(w->id, worker, NAME_MAX_LEN - 1);
    }
    if (w) {
        strncpy(w->pool, pool ? pool : "", NAME_MAX_LEN - 1);
        w->load = *load;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_remove_worker(metrics *m, const char *worker) {
    if (!m || !worker) return;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_workers; i++) {
        if (!strncmp(m->workers[i].id, worker, NAME_MAX_LEN - 1)) {
            m->workers[i] = m->workers[--m->n_workers];
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

/* ---- exposition ------------------------------------------------------------------------------ */

/* Label values escape \, " and newline (text format 0.0.4). */
static void label(strbuf *o, const char *k, const char *v, int first) {
    strbuf_printf(o, "%s%s=\"", first ? "" : ",", k);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') strbuf_putc(o, '\\');
        if (*v == '\n') {
            strbuf_puts(o, "\\n");
            continue;
        }
        strbuf_putc(o, *v);
    }
    strbuf_putc(o, '"');
}

static void family(strbuf *o, const char *name, const char *type, const char *help) {
    strbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Labels of a pool series: {pool=...} or {model_name=...,pool=...} for vllm:* names. */
static void pool_labels(strbuf *o, const metrics *m, const char *pool, int vllm) {
    if (vllm) label(o, "model_name", m->model, 1);
    label(o, "pool", pool, !vllm);
}

static void render_hist(strbuf *o, const metrics *m, const char *name, const char *help,
                        metric_hist h, int vllm) {
    family(o, name, "histogram", help);
    for (size_t i = 0; i < m->n_pools; i++) {
        const pool_series *p = &m->pools[i];
        const hist *x = &p->h[h];
        uint64_t cum = 0;
        for (size_t b = 0; b <= NB; b++) {
            cum += b < NB ? x->counts[b] : 0;
            strbuf_printf(o, "%s_bucket{", name);
            pool_labels(o, m, p->name, vllm);
            if (b < NB)
                strbuf_printf(o, ",le=\"%g\"} %llu\n", lat_buckets[b], (unsigned long long)cum);
            else
                strbuf_printf(o, ",le=\"+Inf\"} %llu\n", (unsigned long long)x->count);
        }
        strbuf_printf(o, "%s_sum{", name);
        pool_labels(o, m, p->name, vllm);
        strbuf_printf(o, "} %.9g\n%s_count{", x->sum, name);
        pool_labels(o, m, p->name, vllm);
        strbuf_printf(o, "} %llu\n", (unsigned long long)x->count);
    }
}

/* Per-worker series: gauges from the latest heartbeat, and the worker's own cumulative
 * speculative-decoding counters, passed through as they come (a worker restart resets them, which
 * Prometheus' rate() treats as a counter reset). */
enum {
    W_RUNNING,
    W_WAITING,
    W_KV,
    W_PREFIX,
    W_SPEC,
    W_SPEC_PER_STEP,
    W_SPEC_STEPS,
    W_SPEC_DRAFTED,
    W_SPEC_ACCEPTED,
    W_SPEC_EMITTED,
    W_TIER1_HITS, /* counters like the spec ones: printed exactly */
    W_TIER2_HITS,
    W_TIER2_USED,
    W_QUOTES_USED,
    W_QUOTES_DECLINED,
    W_SPEC_DRAFT_S,
    W_SPEC_VERIFY_S,
    W_UNHEALTHY
};

static uint64_t worker_count(const metrics_worker_load *l, int which) {
    switch (which) {
    case W_RUNNING:
        return l->running;
    case W_WAITING:
        return l->waiting;
    case W_SPEC_STEPS:
        return l->spec_steps;
    case W_SPEC_DRAFTED:
        return l->spec_drafted;
    case W_SPEC_ACCEPTED:
        return l->spec_accepted;
    case W_UNHEALTHY:
        return l->unhealthy;
    case W_TIER1_HITS:
        return l->tier1_hit_tokens;
    case W_TIER2_HITS:
        return l->tier2_hit_tokens;
    case W_TIER2_USED:
        return l->tier2_used;
    case W_QUOTES_USED:
        return l->quotes_used;
    case W_QUOTES_DECLINED:
        return l->quotes_declined;
    default:
        return l->spec_emitted;
    }
}

static double worker_real(const metrics_worker_load *l, int which) {
    switch (which) {
    case W_KV:
        return l->kv_usage;
    case W_PREFIX:
        return l->prefix_hit_rate;
    case W_SPEC:
        return l->spec_acceptance;
    case W_SPEC_PER_STEP:
        return l->spec_steps ? (double)l->spec_emitted / (double)l->spec_steps : 0;
    case W_SPEC_DRAFT_S:
        return l->spec_draft_seconds;
    default:
        return l->spec_verify_seconds;
    }
}

/* Integer series print exactly (a double holds only 53 bits); the rest with 9 digits. */
static void put_worker_value(strbuf *o, const metrics_worker_load *l, int which) {
    if (which == W_RUNNING || which == W_WAITING || which == W_UNHEALTHY ||
        (which >= W_SPEC_STEPS && which <= W_QUOTES_DECLINED))
        strbuf_printf(o, " %llu\n", (unsigned long long)worker_count(l, which));
    else
        strbuf_printf(o, " %.9g\n", worker_real(l, which));
}

static void render_worker(strbuf *o, const metrics *m, const char *name, const char *type,
                          const char *help, int which, int vllm) {
    family(o, name, type, help);
    for (size_t i = 0; i < m->n_workers; i++) {
        const worker_series *w = &m->workers[i];
        strbuf_printf(o, "%s{", name);
        if (vllm) label(o, "model_name", m->model, 1);
        label(o, "pool", w->pool, !vllm);
        label(o, "worker", w->id, 0);
        strbuf_putc(o, '}');
        put_worker_value(o, &w->load, which);
    }
}

static void render_gauge(strbuf *o, const metrics *m, const char *name, const char *help, int which,
                         int vllm) {
    render_worker(o, m, name, "gauge", help, which, vllm);
}

static void render_counter(strbuf *o, const metrics *m, const char *name, const char *help,
                           int which, int vllm) {
    render_worker(o, m, name, "counter", help, which, vllm);
}

/* The worker's speculative-decoding figures, under sol_* names and vLLM's spec_decode names. */
static void render_spec(strbuf *o, const metrics *m) {
    render_gauge(o, m, "sol_worker_spec_acceptance", "Speculative decoding acceptance rate (0..1).",
                 W_SPEC, 0);
    render_gauge(o, m, "sol_worker_spec_tokens_per_step",
                 "Tokens emitted per speculative verify step (0 before the first).",
                 W_SPEC_PER_STEP, 0);
    render_counter(o, m, "sol_worker_spec_verify_steps_total",
                   "Speculative verify steps (one per sequence per engine step).", W_SPEC_STEPS, 0);
    render_counter(o, m, "sol_worker_spec_draft_tokens_total", "Draft tokens proposed.",
                   W_SPEC_DRAFTED, 0);
    render_counter(o, m, "sol_worker_spec_accepted_tokens_total",
                   "Draft tokens accepted by verification.", W_SPEC_ACCEPTED, 0);
    render_counter(o, m, "sol_worker_spec_emitted_tokens_total",
                   "Tokens emitted by speculative verify steps.", W_SPEC_EMITTED, 0);
    render_counter(o, m, "sol_worker_spec_draft_seconds_total", "Time spent drafting.",
                   W_SPEC_DRAFT_S, 0);
    render_counter(o, m, "sol_worker_spec_verify_seconds_total",
                   "Time spent verifying drafts (target passes with verify rows, rejection "
                   "sampling).",
                   W_SPEC_VERIFY_S, 0);
    render_counter(o, m, "vllm:spec_decode_num_drafts_total",
                   "Speculative verify steps, as vLLM counts drafts.", W_SPEC_STEPS, 1);
    render_counter(o, m, "vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
                   W_SPEC_DRAFTED, 1);
    render_counter(o, m, "vllm:spec_decode_num_accepted_tokens_total",
                   "Draft tokens accepted by verification.", W_SPEC_ACCEPTED, 1);
}

/* A per-pool counter; which picks the pool_series field. */
typedef enum {
    P_QUERIES,
    P_HITS,
    P_FAILOVERS,
    P_MIGRATIONS,
    P_PROMPT,
    P_GENERATED,
    P_SLO_REFUSED,
    P_SLO_MISSED,
    P_REBALANCES,
    P_QUOTED
} pool_counter;

static uint64_t pool_value(const pool_series *p, pool_counter which) {
    switch (which) {
    case P_QUERIES:
        return p->prefix_queries;
    case P_HITS:
        return p->prefix_hits;
    case P_FAILOVERS:
        return p->failovers;
    case P_MIGRATIONS:
        return p->migrations;
    case P_PROMPT:
        return p->prompt_tokens;
    case P_GENERATED:
        return p->generation_tokens;
    case P_SLO_REFUSED:
        return p->slo_refused;
    case P_SLO_MISSED:
        return p->slo_missed;
    case P_REBALANCES:
        return p->rebalances;
    case P_QUOTED:
        return p->quoted;
    }
    return 0;
}

static void render_pool_counter(strbuf *o, const metrics *m, const char *name, const char *help,
                                pool_counter which) {
    family(o, name, "counter", help);
    for (size_t i = 0; i < m->n_pools; i++) {
        const pool_series *p = &m->pools[i];
        strbuf_printf(o, "%s{", name);
        pool_labels(o, m, p->name, !strncmp(name, "vllm:", 5)); /* vLLM's label set, or ours */
        strbuf_printf(o, "} %llu\n", (unsigned long long)pool_value(p, which));
    }
}

int metrics_render(metrics *m, strbuf *o) {
    pthread_mutex_lock(&m->mu);
    static const char *hnames[METRIC_HIST_COUNT][3] = {
        {"sol_request_ttft_seconds", "vllm:time_to_first_token_seconds",
         "Time from request receipt to the first token sent."},
        {"sol_request_inter_token_latency_seconds", "vllm:inter_token_latency_seconds",
         "Time between consecutive streamed chunks."},
        {"sol_request_e2e_seconds", "vllm:e2e_request_latency_seconds",
         "Time from request receipt to the end of the response."},
        {"sol_request_queue_seconds", "vllm:request_queue_time_seconds",
         "Time from request receipt to dispatch to a worker."},
    };
    for (int h = 0; h < METRIC_HIST_COUNT; h++) {
        render_hist(o, m, hnames[h][0], hnames[h][2], (metric_hist)h, 0);
        render_hist(o, m, hnames[h][1], hnames[h][2], (metric_hist)h, 1);
    }
    family(o, "sol_requests_total", "counter", "Finished requests by pool and HTTP status.");
    for (size_t i = 0; i < m->n_pools; i++)
        for (size_t s = 0; s < STATUS_SLOTS && m->pools[i].status[s]; s++) {
            strbuf_puts(o, "sol_requests_total{");
            label(o, "pool", m->pools[i].name, 1);
            strbuf_printf(o, ",status=\"%d\"} %llu\n", m->pools[i].status[s],
                          (unsigned long long)m->pools[i].status_count[s]);
        }
    render_gauge(o, m, "sol_worker_running", "Sequences running on the worker.", W_RUNNING, 0);
    render_gauge(o, m, "sol_worker_waiting", "Sequences waiting on the worker.", W_WAITING, 0);
    render_gauge(o, m, "sol_worker_kv_usage", "Fraction of KV-cache blocks in use (0..1).", W_KV,
                 0);
    render_gauge(o, m, "sol_worker_prefix_hit_rate", "Prefix-cache hit rate (0..1).", W_PREFIX, 0);
    render_counter(o, m, "sol_worker_kv_tier1_hit_tokens_total",
                   "Prompt tokens served from the KV pool (tier 1).", W_TIER1_HITS, 0);
    render_counter(o, m, "sol_worker_kv_tier2_hit_tokens_total",
                   "Prompt tokens served from the second KV tier (worker.kv.tier2_blocks).",
                   W_TIER2_HITS, 0);
    render_gauge(o, m, "sol_worker_kv_tier2_used_blocks", "Blocks held in the second KV tier.",
                 W_TIER2_USED, 0);
    render_counter(o, m, "sol_worker_quoted_replies_used_total",
                   "Replies sent back as their ids that the worker tokenized as those ids.",
                   W_QUOTES_USED, 0);
    render_counter(o, m, "sol_worker_quoted_replies_declined_total",
                   "Replies sent back as their ids that the worker tokenized as text instead (the "
                   "ids did not spell the content, or the rendered chat did not hold it verbatim).",
                   W_QUOTES_DECLINED, 0);
    render_gauge(o, m, "sol_worker_unhealthy",
                 "1 when the worker reports it cannot step (engine watchdog, stuck tensor-parallel "
                 "rank): it gets no work.",
                 W_UNHEALTHY, 0);
    render_spec(o, m);
    render_gauge(o, m, "vllm:num_requests_running", "Requests running on the worker.", W_RUNNING,
                 1);
    render_gauge(o, m, "vllm:num_requests_waiting", "Requests waiting on the worker.", W_WAITING,
                 1);
    render_gauge(o, m, "vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%.", W_KV, 1);
    render_pool_counter(o, m, "vllm:prefix_cache_hits_total",
                        "Prompt tokens served from prefix cache.", P_HITS);
    render_pool_counter(o, m, "vllm:prefix_cache_queries_total",
                        "Prompt tokens looked up in prefix "
                        "cache.",
                        P_QUERIES);
    render_pool_counter(o, m, "sol_failovers_total",
                        "Requests moved to another worker (theirs died, left or refused them).",
                        P_FAILOVERS);
    render_pool_counter(o, m, "sol_migrations_total",
                        "Requests a draining worker handed back, moved token-exactly to another "
                        "worker (worker.drain = migrate).",
                        P_MIGRATIONS);
    render_pool_counter(o, m, "sol_slo_refused_total",
                        "Requests refused at arrival because no worker could meet their latency "
                        "targets (429 slo_not_met_now, 503 slo_unattainable).",
                        P_SLO_REFUSED);
    render_pool_counter(o, m, "sol_slo_deadline_missed_total",
                        "Requests ended because their first-token or whole deadline passed "
                        "(X-Sol-TTFT-Ms, X-Sol-Deadline-Ms).",
                        P_SLO_MISSED);
    render_pool_counter(o, m, "sol_rebalanced_total",
                        "Streams moved token-exactly off a worker behind their X-Sol-TPOT-Ms or "
                        "far hotter than a peer (live rebalancing; also in sol_migrations_total).",
                        P_REBALANCES);
    render_pool_counter(o, m, "sol_quoted_replies_total",
                        "Assistant messages sent to a worker as the token ids they were generated "
                        "as, not re-tokenized (router.routing.reply_tokens_mib).",
                        P_QUOTED);
    static const char *tok[4][2] = {
        {"sol_prompt_tokens_total", "Prompt tokens of finished requests (per choice)."},
        {"vllm:prompt_tokens_total", "Prompt tokens of finished requests (per choice)."},
        {"sol_generation_tokens_total", "Tokens generated for finished requests."},
        {"vllm:generation_tokens_total", "Tokens generated for finished requests."},
    };
    for (int i = 0; i < 4; i++)
        render_pool_counter(o, m, tok[i][0], tok[i][1], i < 2 ? P_PROMPT : P_GENERATED);
    pthread_mutex_unlock(&m->mu);
    return o->oom ? -ENOMEM : 0;
}
