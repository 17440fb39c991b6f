/* bench_membw: memory read bandwidth with N threads (the roofline for decode, which streams every
 * weight once per token). Reads a buffer much larger than the caches, repeated, median of runs. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#define MB (1024ull * 1024ull)

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} job;

static void *reader(void *arg) {
    job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: bench_membw [THREADS=2] [MiB=1024] [RUNS=7]\n"
             "Prints the median read bandwidth in GB/s over RUNS passes.");
        return 0;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    int runs = argc > 3 ? atoi(argv[3]) : 7;
    if (threads < 1 || threads > 64 || mib < 64 || runs < 1 || runs > 101) {
        fprintf(stderr, "bench_membw: bad arguments (try --help)\n");
        return 2;
    }
    size_t bytes = mib * MB, words = bytes / 8;
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++)
        buf[i] = i; /* touch every page */
    double gbs[101];
    uint64_t check = 0;
    for (int r = 0; r < runs; r++) {
        pthread_t tid[64];
        job jobs[64];
        double t0 = sol_now_s();
        for (int t = 0; t < threads; t++) {
            size_t a = words * (size_t)t / threads, b = words * (size_t)(t + 1) / threads;
            jobs[t] = (job){buf + a, b - a, 0};
            pthread_create(&tid[t], NULL, reader, &jobs[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            check += jobs[t].sum;
        }
        gbs[r] = (double)bytes / (sol_now_s() - t0) / 1e9;
        fprintf(stderr, "run %d/%d: %.1f GB/s\n", r + 1, runs, gbs[r]);
    }
    qsort(gbs, (size_t)runs, sizeof gbs[0], cmp_double);
    printf("read bandwidth, %d threads, %zu MiB: median %.1f GB/s (min %.1f, max %.1f) [%llu]\n",
           threads, mib, gbs[runs / 2], gbs[0], gbs[runs - 1], (unsigned long long)(check & 1));
    free(buf);
    return 0;
}
