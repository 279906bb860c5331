#include "train/test_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "comm/comm.h"

void test_hooks_read(TestHooks* h) {
    h->nan_loss_steps = getenv("FSDP_TEST_NAN_LOSS_STEPS");
    h->nan_grad_steps = getenv("FSDP_TEST_NAN_GRAD_STEPS");
    h->stall = getenv("FSDP_TEST_STALL");
    h->tp_replicas = getenv("FSDP_TEST_TP_REPLICAS");
    h->param16 = getenv("FSDP_TEST_PARAM16");
}

// Whether step is in the comma-separated list.
static int test_hook_at(const char* list, int step) {
    for (const char* p = list; p && *p; ) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

void test_hooks_stall(const TestHooks* h, int rank, int step) {
    if (h->stall && atoi(h->stall) == rank && strchr(h->stall, ':') && test_hook_at(strchr(h->stall, ':') + 1, step))
        for (;;) pause();
}

// FSDP_TEST_TP_REPLICAS: a hash of this rank's pieces of the replicated tensors (fp32 master,
// m, v and the compute-dtype shard the forward gathers) against the other TP ranks' (their
// layouts are identical: the same pieces at the same places). Each TP rank's gradients of them
// were summed over the group and rounded with the same keys, so they must stay equal.
static void check_tp_replicas(Fsdp* f, int step) {
    const ProcessGroup* pg = f->pg;
    const size_t pb = f->be.param_bytes;
    unsigned char* param = (unsigned char*)malloc(f->total_shard * pb + 1);
    uint64_t* all = (uint64_t*)malloc((size_t)pg->tp_size * 2 * sizeof(uint64_t));
    XXH64_state_t* hash = XXH64_createState();
    if (!param || !all || !hash) fatal(pg, "FSDP_TEST_TP_REPLICAS: out of host memory");
    fsdp_download_state(f);
    f->be.copy_to_host(f->be.ctx, param, f->param_shard, f->total_shard * pb);
    XXH64_reset(hash, 0);
    uint64_t mine[2] = {0, 0};  // the hash, the elements hashed
    for (int i = 0; i < f->n_pieces; i++) {
        const FlatPiece* p = &f->pieces[i];
        if (!f->units[p->unit].tensors[p->tensor].tp_replicated) continue;
        const size_t n = p->hi - p->lo;
        XXH64_update(hash, f->host_master + p->at, n * sizeof(float));
        XXH64_update(hash, f->host_m + p->at, n * sizeof(float));
        XXH64_update(hash, f->host_v + p->at, n * sizeof(float));
        XXH64_update(hash, param + p->at * pb, n * pb);
        mine[1] += n;
    }
    mine[0] = XXH64_digest(hash);
    comm_wait(pg->tp_comm, comm_all_gather_start(pg->tp_comm, mine, all, sizeof(mine)));
    for (int r = 1; r < pg->tp_size; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            fatal(pg, "FSDP_TEST_TP_REPLICAS: at step %d (the updates before it) the replicated tensors of tp rank %d (%llu elements here) "
                  "differ from tp rank 0's (%llu)", step, r, (unsigned long long)all[2 * r + 1], (unsigned long long)all[1]);
    if (pg->rank == 0)
        printf("test hook: at step %d the replicated tensors (%llu elements of this rank's shard: master, m, v, "
               "%zu-byte copy) are bitwise equal on the %d TP ranks\n", step, (unsigned long long)mine[1], pb, pg->tp_size);
    XXH64_freeState(hash);
    free(all);
    free(param);
}

// FSDP_TEST_PARAM16: the compute-dtype shards the step's forward gathered, as one hash of the
// whole model's: the sum (mod 2^64, so in any order) of a hash of (the element's index in the
// whole model, its bits) over this rank's pieces, a replicated tensor's on TP rank 0 only,
// summed over the world. Equal at --tp 1 and 2 only when every value is rounded alike there.
static void hash_param16(Fsdp* f, const ModelLayout* m, int step) {
    const ProcessGroup* pg = f->pg;
    const size_t pb = f->be.param_bytes;
    unsigned char* param = (unsigned char*)malloc(f->total_shard * pb + 1);
    uint64_t* all = (uint64_t*)malloc((size_t)pg->world * 2 * sizeof(uint64_t));
    if (!param || !all) fatal(pg, "FSDP_TEST_PARAM16: out of host memory");
    f->be.copy_to_host(f->be.ctx, param, f->param_shard, f->total_shard * pb);
    uint64_t mine[2] = {0, 0};  // the sum of hashes, the elements
    for (int i = 0; i < f->n_pieces; i++) {
        const FlatPiece* p = &f->pieces[i];
        TpView v;
        layout_tp_view(m, p->unit, p->tensor, &v);
        if (v.replicated && pg->tp_rank > 0) continue;
        const size_t base = model_tensor_offset(&m->config, unit_tensor_index(m, p->unit, p->tensor));
        for (size_t e = p->lo; e < p->hi; e++) {
            uint64_t rec[2] = {base + tp_view_global_element(&v, e, NULL), 0};
            memcpy(&rec[1], param + (p->at + e - p->lo) * pb, pb);
            mine[0] += XXH64(rec, sizeof rec, 0);
            mine[1]++;
        }
    }
    comm_wait(pg->world_comm, comm_all_gather_start(pg->world_comm, mine, all, sizeof(mine)));
    uint64_t sum = 0, n = 0;
    for (int r = 0; r < pg->world; r++) { sum += all[2 * r]; n += all[2 * r + 1]; }
    if (pg->rank == 0)
        printf("test hook: at step %d the %zu-byte parameters (%llu elements) hash to %016llx\n", step, pb,
               (unsigned long long)n, (unsigned long long)sum);
    free(all);
    free(param);
}

void test_hooks_poison(const TestHooks* h, Fsdp* f, const ModelLayout* m, int rank, int step) {
    if (h->tp_replicas && f->pg->tp_size > 1) check_tp_replicas(f, step);
    if (h->param16) hash_param16(f, m, step);
    if (rank == 0 && test_hook_at(h->nan_loss_steps, step)) fsdp_test_poison_loss(f);
    if (rank == 0 && test_hook_at(h->nan_grad_steps, step)) fsdp_test_poison_grad(f);
}

// FSDP_TEST_TP_TRACE: the record of one rank, reached from the TpComm's ctx and the kernels'
// on_kernel_ctx; the device's own TpComm and close are kept to call through.
typedef struct {
    FILE* f;
    TpComm inner;
    void (*inner_close)(Device* d);
} TpTrace;

static void trace_all_gather(void* ctx, void* full, const void* local, size_t n) {
    TpTrace* t = (TpTrace*)ctx;
    fprintf(t->f, "all_gather %zu\n", n);
    t->inner.all_gather(t->inner.ctx, full, local, n);
}
static void trace_reduce_scatter(void* ctx, void* local, const void* full, size_t n) {
    TpTrace* t = (TpTrace*)ctx;
    fprintf(t->f, "reduce_scatter %zu\n", n);
    t->inner.reduce_scatter(t->inner.ctx, local, full, n);
}
static int64_t trace_reduce_scatter_start(void* ctx, void* local, const void* full, size_t n) {
    TpTrace* t = (TpTrace*)ctx;
    fprintf(t->f, "reduce_scatter_start %zu\n", n);
    return t->inner.reduce_scatter_start(t->inner.ctx, local, full, n);
}
static void trace_wait(void* ctx, int64_t ticket) {
    TpTrace* t = (TpTrace*)ctx;
    fprintf(t->f, "wait\n");
    t->inner.wait(t->inner.ctx, ticket);
}
static void trace_all_reduce_f32(void* ctx, float* x, size_t n, int max) {
    TpTrace* t = (TpTrace*)ctx;
    fprintf(t->f, "all_reduce %zu\n", n);
    t->inner.all_reduce_f32(t->inner.ctx, x, n, max);
}
static void trace_kernel(void* ctx, KernelKind kind, int backward) {
    static const char* const names[KERNEL_KINDS] = {"embed", "norm", "matmul", "lm_head", "attention", "loss"};
    fprintf(((TpTrace*)ctx)->f, "kernel %s%s\n", names[kind], backward ? " backward" : "");
}
static void trace_close(Device* d) {
    TpTrace* t = (TpTrace*)d->tp.ctx;
    d->tp = t->inner;
    d->close = t->inner_close;
    d->kernels.on_kernel = NULL;
    d->kernels.on_kernel_ctx = NULL;
    if (fclose(t->f) != 0) fprintf(stderr, "FSDP_TEST_TP_TRACE: could not write the record\n");
    free(t);
    if (d->close) d->close(d);
}

void test_hooks_tp_trace(Device* d, const ProcessGroup* pg) {
    const char* prefix = getenv("FSDP_TEST_TP_TRACE");
    if (!prefix || pg->tp_size <= 1) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", prefix, pg->rank);
    TpTrace* t = (TpTrace*)calloc(1, sizeof(TpTrace));
    if (!t) fatal(pg, "FSDP_TEST_TP_TRACE: out of host memory");
    t->f = fopen(path, "w");
    if (!t->f) fatal(pg, "FSDP_TEST_TP_TRACE: cannot write %s", path);
    t->inner = d->tp;
    t->inner_close = d->close;
    d->tp = (TpComm){t, trace_all_gather, trace_reduce_scatter, trace_reduce_scatter_start, trace_wait, trace_all_reduce_f32};
    d->close = trace_close;
    d->kernels.on_kernel = trace_kernel;
    d->kernels.on_kernel_ctx = t;
}
