/* model: a decoder model as its users see it - loaded whole, or as a tensor-parallel group of
 * rank shards - with its KV caches and the forward pass over every rank. One rank is model_rank.c
 * (loading, scratch) and model_forward.c (its pass); the group's threads are model_tp.c. */
#include "model_internal.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"

/* The model over ranks 0..n-1: rank 0 (its shard, or the whole model) and the group that runs the
 * others (tp_group_new owns them and the communicator). */
static model *with_rank0(model_rank *r0, sol_err *err) {
    model *m = r0 ? calloc(1, sizeof *m) : NULL;
    if (r0 && !m) sol_err_set(err, -ENOMEM, "out of memory"), rank_free(r0);
    if (m) m->r0 = r0;
    return m;
}

model *model_load(const char *path, int gguf_flags, sol_backend *be, sol_err *err) {
    return with_rank0(rank_load(path, gguf_flags, be, 0, 1, NULL, err), err);
}

model *model_load_tp(const char *path, int gguf_flags, sol_backend *be, const model_tp_config *tp,
                     sol_err *err) {
    if (!tp || tp->n <= 1) return model_load(path, gguf_flags, be, err);
    sol_tp_comm *comm = NULL;
    if (sol_tp_comm_new(tp->n, tp->timeout_ms, &comm, err)) return NULL;
    model *m = with_rank0(rank_load(path, gguf_flags, be, 0, tp->n, comm, err), err);
    if (!m) {
        sol_tp_comm_free(comm);
        return NULL;
    }
    /* The group owns the communicator from here (also when it fails). */
    if (!(m->grp = tp_group_new(path, gguf_flags, tp, comm, err))) {
        model_free(m);
        return NULL;
    }
    return m;
}

void model_log_experts(model *m, FILE *f) {
    if (m) m->r0->expert_log = f; /* rank 0's choices: every rank makes the same */
}

void model_free(model *m) {
    if (!m) return;
    tp_group_free(m->grp); /* the other ranks first: they may still hold the communicator */
    rank_free(m->r0);
    free(m);
}

int model_tp_rank_threads(int threads, int n) {
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    return threads / n > 0 ? threads / n : 1;
}

void model_tp_time(const model *m, uint64_t *calls, uint64_t *ns) {
    *calls = *ns = 0;
    if (m->r0->sh.comm) sol_tp_comm_time(m->r0->sh.comm, 0, calls, ns);
}

int model_tp_size(const model *m) {
    return m->r0->sh.n;
}

sol_backend *model_tp_backend(const model *m, int r) {
    if (r < 0 || r >= m->r0->sh.n) return NULL;
    return r == 0 ? m->r0->be : tp_rank(m->grp, r)->be;
}

int model_health(const model *m, char *why, size_t cap) {
    return m->grp ? tp_health(m->grp, why, cap) : 0;
}

const model_hparams *model_get_hparams(const model *m) {
    return &m->r0->hp;
}
const gguf_file *model_gguf(const model *m) {
    return m->r0->gguf;
}
sol_backend *model_backend(const model *m) {
    return m->r0->be;
}
const char *model_name(const model *m) {
    return m->r0->name;
}

void model_describe(const model *m, char *buf, size_t cap) {
    int count[64] = {0};
    double params = 0;
    for (int i = 0; i < gguf_n_tensors(m->r0->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->r0->gguf, i);
        double n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= (double)t->ne[d];
        params += n;
        if ((unsigned)t->type < 64) count[t->type]++;
    }
    /* billions, or millions below 0.1 B (a test model's 3.4 M is not "0.00 B") */
    int big = params >= 1e8;
    size_t used =
        (size_t)snprintf(buf, cap, "%s, %.2f %s parameters, weights", m->r0->hp.arch->name,
                         params / (big ? 1e9 : 1e6), big ? "B" : "M");
    const char *sep = " ";
    for (int t = 0; t < 64 && used < cap; t++)
        if (count[t]) {
            used += (size_t)snprintf(buf + used, cap - used, "%s%s x %d", sep,
                                     sol_dtype_name((sol_dtype)t), count[t]);
            sep = " + ";
        }
    int local = 0;
    for (int l = 0; m->r0->swa && l < m->r0->hp.n_layers; l++)
        local += m->r0->swa[l];
    const model_hparams *hp = &m->r0->hp;
    if (hp->swa_window && used < cap)
        used += (size_t)snprintf(buf + used, cap - used, "; sliding window %d on %d of %d layers",
                                 hp->swa_window, local, hp->n_layers);
    if (hp->n_expert && used < cap) /* the work per token: attention plus k experts' FFN */
        snprintf(buf + used, cap - used, "; %d experts, %d used per token, %d wide", hp->n_expert,
                 hp->n_expert_used, hp->ffn_exp);
}

uint64_t model_bytes_per_token(const model *m) {
    const model_hparams *hp = &m->r0->hp;
    double bytes = 0;
    for (int i = 0; i < gguf_n_tensors(m->r0->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->r0->gguf, i);
        double b = (double)t->nbytes;
        if (!strcmp(t->name, "token_embd.weight") && !hp->tied_output)
            b /= (double)hp->n_vocab;
        else if (strstr(t->name, "_exps."))
            b = b * hp->n_expert_used / hp->n_expert;
        bytes += b;
    }
    return (uint64_t)bytes;
}

/* Ranks 0..n-1 of m's group (rank 0 is m itself). */
static model_rank *rank_of(model *m, int r) {
    return r == 0 ? m->r0 : tp_rank(m->grp, r);
}

int model_reserve(model *m, int max_tokens, int max_logits, sol_err *err) {
    int rc = 0;
    for (int r = 0; r < m->r0->sh.n && !rc; r++)
        if ((rc = rank_reserve(rank_of(m, r), max_tokens, max_logits, err)) && r)
            sol_err_wrap(err, "tensor-parallel rank %d: ", r);
    return rc;
}

model_kv *model_kv_new(model *m, int num_blocks, int block_size, sol_dtype dtype, sol_err *err) {
    char why[SOL_ERR_MSG_MAX / 2];
    if (model_health(m, why, sizeof why)) { /* a stuck device may never answer an allocation */
        sol_err_set(err, -EIO, "%s", why);
        return NULL;
    }
    model_kv *kv = calloc(1, sizeof *kv);
    if (!kv) {
        sol_err_set(err, -ENOMEM, "out of memory for the KV cache");
        return NULL;
    }
    for (int r = 0; r < m->r0->sh.n; r++) {
        model_rank *mr = rank_of(m, r);
        kv->r[r] = sol_kv_alloc(mr->be, mr->hp.n_layers, num_blocks, block_size, mr->sh.kv_heads,
                                mr->hp.head_dim, dtype);
        if (!kv->r[r]) {
            sol_err_set(err, -ENOMEM, "KV cache%s: %s", r ? " of a tensor-parallel rank" : "",
                        mr->be->err.msg);
            model_kv_free(m, kv);
            return NULL;
        }
        kv->n = r + 1;
    }
    return kv;
}

void model_kv_free(model *m, model_kv *kv) {
    if (!kv) return;
    for (int r = 0; r < kv->n; r++)
        sol_kv_free(rank_of(m, r)->be, kv->r[r]);
    free(kv);
}

int model_kv_copy_blocks(model *m, model_kv *kv, const int32_t *src, const int32_t *dst, int count,
                         sol_err *err) {
    for (int r = 0; r < kv->n; r++) {
        sol_backend *be = rank_of(m, r)->be;
        int rc = sol_kv_copy_blocks(be, kv->r[r], src, dst, count);
        if (rc) return sol_err_set(err, rc, "KV block copy: %s", be->err.msg);
    }
    return 0;
}

size_t model_kv_host_bytes(model *m, const model_kv *kv) {
    size_t n = 0;
    for (int r = 0; r < kv->n; r++) {
        sol_backend *be = rank_of(m, r)->be;
        if (!be->ops->kv_host_io || !be->ops->kv_host_bytes) return 0;
        n += be->ops->kv_host_bytes(be, kv->r[r]);
    }
    return n;
}

int model_kv_host_io(model *m, model_kv *kv, int32_t block, unsigned char *host, int to_host,
                     sol_err *err) {
    for (int r = 0; r < kv->n; r++) { /* the ranks' shards one after another */
        sol_backend *be = rank_of(m, r)->be;
        int rc = sol_kv_host_io(be, kv->r[r], block, host, to_host);
        if (rc)
            return sol_err_set(err, rc, "KV block %s host memory: %s", to_host ? "to" : "from",
                               be->err.msg);
        host += be->ops->kv_host_bytes(be, kv->r[r]);
    }
    return 0;
}

void *model_kv_host_alloc(model *m, size_t bytes, sol_err *err) {
    sol_backend *be = rank_of(m, 0)->be;
    if (!be->ops->kv_host_alloc) return NULL;
    void *p = be->ops->kv_host_alloc(be, bytes);
    if (!p) sol_err_set(err, -ENOMEM, "KV tier 2: %s", be->err.msg);
    return p;
}

void model_kv_host_free(model *m, void *host) {
    if (!host) return;
    for (int r = m->r0->sh.n; r-- > 1;) /* their copies read or write it too */
        sol_synchronize(rank_of(m, r)->be);
    sol_backend *be = rank_of(m, 0)->be;
    be->ops->kv_host_free(be, host);
}

uint64_t model_step_bytes(const model *m) {
    const gguf_file *g = model_gguf(m);
    uint64_t all = 0, embd = 0;
    bool head = false;
    for (int i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        all += t->nbytes;
        if (!strcmp(t->name, "token_embd.weight")) embd = t->nbytes;
        if (!strcmp(t->name, "output.weight")) head = true;
    }
    return head ? all - embd : all;
}

size_t model_kv_bytes_per_token(const model *m, sol_dtype dtype) {
    size_t elem = dtype == SOL_DT_F32 ? 4 : 2, free_b, total_b;
    size_t rank = 2 * (size_t)m->r0->hp.n_layers * m->r0->sh.kv_dim * elem;
    /* Device ranks each hold their heads in their own memory; CPU ranks share the host's. */
    return sol_mem_info(m->r0->be, &free_b, &total_b) == 0 ? rank : rank * (size_t)m->r0->sh.n;
}

int model_forward(model *m, model_kv *kv, const model_batch *b, float *logits, sol_err *err) {
    int rc = rank_check_batch(m->r0, b, err);
    if (rc) return rc;
    if ((rc = model_reserve(m, b->n, b->n_logits > 0 ? b->n_logits : 1, err))) return rc;
    rc = m->grp ? tp_forward(m->grp, m->r0, kv, b, logits, err)
                : rank_forward(m->r0, kv->r[0], b, logits, err);
    if (rc || !b->argmax_ids || (!m->grp && rank_device_argmax(m->r0, b))) return rc;
    /* on the host, by argmax_rows' rule (sol_argmax_f32) */
    for (int i = 0; i < b->n_logits; i++) {
        float best;
        int32_t id =
            sol_argmax_f32(logits + (size_t)i * m->r0->hp.n_vocab, m->r0->hp.n_vocab, &best);
        b->argmax_ids[i] = isfinite(best) ? id : -1;
    }
    return 0;
}
