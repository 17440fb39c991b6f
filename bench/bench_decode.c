/* bench_decode: decode and prefill throughput of one model on one backend, at several batch
 * sizes, through model_forward as the engine drives it (paged KV, one token per sequence per
 * step). tests/gpu/run.sh prints its figures for a GPU; it runs on any backend.
 *
 *   bench_decode -m MODEL.gguf [--backend SPEC] [--batch 1,8,64] [--ctx 128] [--steps 32]
 *                [--prefill 512] [--membw GB/s | --measure-membw MiB] [--batch-invariant]
 *                [--enforce-eager]
 *
 * Decode at batch B: B sequences holding --ctx tokens each (written once, untimed), 4 untimed
 * warm-up steps, then --steps timed steps of B tokens. Prefill: one --prefill-token prompt in one
 * forward pass, timed the second time it runs. With
 * --membw, each decode line also gives the weight-streaming roofline: weight bytes per step /
 * bandwidth, and the share of it reached; --measure-membw measures that bandwidth first with a
 * device-to-device copy of a MiB-sized buffer through the backend (get_rows of one wide row):
 * bytes read + bytes written per second. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "backend.h"
#include "gguf.h"
#include "model.h"

typedef struct opts {
    const char *model, *backend;
    int batches[16], n_batches, ctx, steps, prefill, batch_invariant, enforce_eager, tp, threads;
    int greedy;   /* decode rows take their greedy token on the backend (model_batch.argmax_ids) */
    double membw; /* GB/s, 0 = not given */
    int measure_mib;
} opts;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_decode -m MODEL.gguf [--backend SPEC] [--batch 1,8,64] [--ctx N]\n"
            "                    [--steps N] [--prefill N] [--membw GB/s | --measure-membw MiB]\n"
            "                    [--batch-invariant] [--tensor-parallel-size N] [--threads N]\n"
            "                    [--greedy]\n"
            "Decode tok/s at each batch size (sequences of --ctx tokens, 4 warm-up steps, then\n"
            "--steps timed steps) and prefill tok/s of one --prefill-token prompt (after one\n"
            "untimed run), through model_forward.\n"
            "--tensor-parallel-size N shards the model over N ranks (cpu: --threads divided\n"
            "between them) and reports the all-reduce's share of the time.\n"
            "--greedy: each decode row's greedy token is taken on the backend and only the ids\n"
            "come back (as the engine asks for plain greedy requests); default: the logits.\n"
            "defaults: --backend cpu --batch 1,8,64 --ctx 128 --steps 32 --prefill 512\n");
}

static int parse_batches(opts *o, const char *s) {
    o->n_batches = 0;
    for (char *end; *s && o->n_batches < 16; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || (*end && *end != ',')) return -1;
        o->batches[o->n_batches++] = (int)v;
    }
    return o->n_batches ? 0 : -1;
}

/* --batch N,N,...: the batch sizes to time. */
static int batch_list(const char *v, void *ctx, sol_err *err) {
    if (parse_batches(ctx, v)) return sol_err_set(err, -EINVAL, "--batch %s: expected N,N,...", v);
    return 0;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.backend = "cpu",
                .batches = {1, 8, 64},
                .n_batches = 3,
                .ctx = 128,
                .steps = 32,
                .prefill = 512,
                .tp = 1};
    int help = 0;
    const sol_arg args[] = {
        {"--model", 'm', SOL_ARG_STR, &o->model, 0, 0, 0, NULL, NULL, NULL},
        {"--backend", 0, SOL_ARG_STR, &o->backend, 0, 0, 0, NULL, NULL, NULL},
        {"--batch", 0, SOL_ARG_FN, NULL, 0, 0, 0, batch_list, o, NULL},
        {"--ctx", 0, SOL_ARG_INT, &o->ctx, 1, 1048576, 0, NULL, NULL, NULL},
        {"--steps", 0, SOL_ARG_INT, &o->steps, 1, 1000000, 0, NULL, NULL, NULL},
        {"--prefill", 0, SOL_ARG_INT, &o->prefill, 0, 1048576, 0, NULL, NULL, NULL},
        {"--membw", 0, SOL_ARG_DOUBLE, &o->membw, 0.001, 1000000.0, 0, NULL, NULL, NULL},
        {"--measure-membw", 0, SOL_ARG_INT, &o->measure_mib, 1, 1048576, 0, NULL, NULL, NULL},
        {"--batch-invariant", 0, SOL_ARG_SWITCH, &o->batch_invariant, 0, 0, 0, NULL, NULL, NULL},
        {"--enforce-eager", 0, SOL_ARG_SWITCH, &o->enforce_eager, 0, 0, 0, NULL, NULL, NULL},
        {"--greedy", 0, SOL_ARG_SWITCH, &o->greedy, 0, 0, 0, NULL, NULL, NULL},
        {"--help", 'h', SOL_ARG_SWITCH, &help, 0, 0, 0, NULL, NULL, NULL},
        {"--tensor-parallel-size", 0, SOL_ARG_INT, &o->tp, 1, 8, 0, NULL, NULL, NULL},
        {"--threads", 0, SOL_ARG_INT, &o->threads, 0, 1024, 0, NULL, NULL, NULL},
    };
    sol_err e = {0};
    int npos = sol_args_parse(args, sizeof args / sizeof args[0], argc, argv, &e);
    if (npos < 0) return fprintf(stderr, "bench_decode: %s\n", e.msg), 2;
    if (help) return usage(stdout), 0;
    if (npos > 0) return fprintf(stderr, "bench_decode: unexpected argument %s\n", argv[1]), 2;
    if (!o->model) return usage(stderr), 2;
    if (o->membw > 0 && o->measure_mib > 0)
        return fprintf(stderr, "bench_decode: give --membw or --measure-membw, not both\n"), 2;
    return -1;
}

/* Runs n tokens: token t of sequence s (t_per_seq tokens each, starting at position p0) reads
 * blocks s * bps ... of its sequence. Logits for the last token of each sequence. */
static int step(model *m, model_kv *kv, int seqs, int t_per_seq, int p0, int bs, int bps,
                int32_t *tables, float *logits, int32_t *ids, sol_err *err) {
    int n = seqs * t_per_seq;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)n * 3 + sizeof(int32_t) * (size_t)seqs);
    sol_attn_seq *attn = malloc(sizeof *attn * (size_t)n);
    if (!buf || !attn) return free(buf), free(attn), -ENOMEM;
    int32_t *tok = buf, *pos = buf + n, *slot = buf + 2 * n, *rows = buf + 3 * n;
    for (int s = 0; s < seqs; s++) {
        for (int i = 0; i < t_per_seq; i++) {
            int t = s * t_per_seq + i, p = p0 + i;
            tok[t] = (s * 31 + p * 7) % 97 + 3;
            pos[t] = p;
            slot[t] = tables[s * bps + p / bs] * bs + p % bs;
            attn[t] = (sol_attn_seq){tables + s * bps, p + 1};
        }
        rows[s] = s * t_per_seq + t_per_seq - 1;
    }
    model_batch b = {n, tok, pos, slot, attn, seqs, rows, NULL, 0, NULL, ids};
    int rc = model_forward(m, kv, &b, logits, err);
    free(buf), free(attn);
    return rc;
}

/* Copy bandwidth of the backend's memory: one buffer copied into another, 10 times. */
static double measure_membw(sol_backend *be, int mib) {
    size_t bytes = (size_t)mib << 20;
    float *a = sol_buf_alloc(be, bytes), *b = sol_buf_alloc(be, bytes);
    const int32_t row0 = 0;
    double gbs = 0;
    if (a && b && sol_get_rows(be, a, (int64_t)(bytes / 4), &row0, 1, 1, b) == 0 &&
        sol_synchronize(be) == 0) {
        double t0 = now_s();
        for (int i = 0; i < 10; i++)
            sol_get_rows(be, i % 2 ? b : a, (int64_t)(bytes / 4), &row0, 1, 1, i % 2 ? a : b);
        sol_synchronize(be);
        gbs = 2.0 * 10 * (double)bytes / (now_s() - t0) / 1e9;
    }
    sol_buf_free(be, a);
    sol_buf_free(be, b);
    return gbs;
}

static int run(const opts *o) {
    sol_err err = {0};
    sol_backend_opts bo = {.threads = model_tp_rank_threads(o->threads, o->tp),
                           .batch_invariant = o->batch_invariant,
                           .enforce_eager = o->enforce_eager};
    sol_backend *be = sol_backend_new(o->backend, &bo, &err);
    if (!be) return fprintf(stderr, "bench_decode: %s\n", err.msg), 1;
    double membw = o->membw;
    if (o->measure_mib > 0) {
        membw = measure_membw(be, o->measure_mib);
        printf("memory bandwidth (copy of %d MiB, read + write): %.1f GB/s\n", o->measure_mib,
               membw);
    }
    fprintf(stderr, "loading %s on %s...\n", o->model, o->backend);
    model_tp_config tp = {o->tp, 600000, o->backend, bo};
    model *m = model_load_tp(o->model, 0, be, &tp, &err);
    if (!m) return fprintf(stderr, "bench_decode: %s\n", err.msg), sol_backend_free(be), 1;
    const model_hparams *hp = model_get_hparams(m);
    char desc[256];
    model_describe(m, desc, sizeof desc);
    double wbytes = 0;
    const gguf_file *g = model_gguf(m);
    /* what a decode step streams: every tensor, less token_embd when the head has its own
     * (then only B embedding rows are read) */
    int untied = gguf_tensor_find(g, "output.weight") != NULL;
    for (int i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (!(untied && strcmp(t->name, "token_embd.weight") == 0)) wbytes += (double)t->nbytes;
    }
    printf("model: %s (%.1f MiB of weights per step), backend %s, tensor parallel %d (%d threads "
           "each)\n",
           desc, wbytes / 1048576.0, o->backend, o->tp, bo.threads);
    int maxb = 1, rc = 0, bs = 16;
    for (int i = 0; i < o->n_batches; i++)
        maxb = o->batches[i] > maxb ? o->batches[i] : maxb;
    /* WARM decode steps after each batch's prefill, and one prefill, run untimed first: the
     * first steps pay for graph instantiation, cuBLASLt plans and first-touch of buffers. */
    enum { WARM = 4 };
    int need = o->ctx + WARM + o->steps, bps = (need + bs - 1) / bs;
    int pbps = (o->prefill + bs - 1) / bs, blocks = maxb * bps > pbps ? maxb * bps : pbps;
    model_kv *kv = model_kv_new(m, blocks, bs, SOL_DT_F16, &err);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)blocks);
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab * (size_t)maxb);
    int32_t *ids = o->greedy ? malloc(sizeof(int32_t) * (size_t)maxb) : NULL;
    if (!kv || !tables || !logits || (o->greedy && !ids)) {
        fprintf(stderr, "bench_decode: %s\n", kv ? "out of memory" : err.msg);
        rc = 1;
        goto out;
    }
    for (int i = 0; i < blocks; i++)
        tables[i] = i;
    for (int i = 0; i < o->n_batches && !rc; i++) {
        int B = o->batches[i];
        if ((rc = step(m, kv, B, o->ctx, 0, bs, bps, tables, logits, NULL, &err))) break;
        for (int s = 0; s < WARM && !rc; s++)
            rc = step(m, kv, B, 1, o->ctx + s, bs, bps, tables, logits, ids, &err);
        double t0 = now_s();
        uint64_t c0, ns0, c1, ns1;
        model_tp_time(m, &c0, &ns0);
        for (int s = 0; s < o->steps && !rc; s++)
            rc = step(m, kv, B, 1, o->ctx + WARM + s, bs, bps, tables, logits, ids, &err);
        double dt = now_s() - t0, tps = (double)B * o->steps / dt;
        printf("decode batch %3d, context %d%s: %9.1f tok/s (%.2f ms per step)", B, o->ctx,
               o->greedy ? ", greedy ids" : "", tps, dt * 1e3 / o->steps);
        if (membw > 0)
            printf(", %5.1f%% of the %.0f GB/s weight roofline",
                   100.0 * (wbytes / (membw * 1e9)) / (dt / o->steps), membw);
        model_tp_time(m, &c1, &ns1);
        if (o->tp > 1) printf(", all-reduce %.1f%% of it", 100.0 * (double)(ns1 - ns0) / 1e9 / dt);
        printf("\n");
        fflush(stdout);
    }
    if (!rc && o->prefill > 0)
        rc = step(m, kv, 1, o->prefill, 0, bs, pbps, tables, logits, NULL, &err);
    if (!rc && o->prefill > 0) {
        uint64_t c0, ns0, c1, ns1;
        model_tp_time(m, &c0, &ns0);
        double t0 = now_s();
        rc = step(m, kv, 1, o->prefill, 0, bs, pbps, tables, logits, NULL, &err);
        double dt = now_s() - t0;
        model_tp_time(m, &c1, &ns1);
        printf("prefill %d tokens: %.1f tok/s (%.1f ms)", o->prefill, o->prefill / dt, dt * 1e3);
        if (o->tp > 1) printf(", all-reduce %.1f%% of it", 100.0 * (double)(ns1 - ns0) / 1e9 / dt);
        printf("\n");
    }
    char stats[1024];
    if (!rc && sol_backend_stats(be, stats, sizeof stats) == 0) printf("%s\n", stats);
    if (rc) fprintf(stderr, "bench_decode: %s\n", err.msg);
out:
    free(tables), free(logits), free(ids);
    model_kv_free(m, kv);
    model_free(m);
    sol_backend_free(be);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    return rc >= 0 ? rc : run(&o);
}
