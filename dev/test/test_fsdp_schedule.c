// The FSDP engine's schedule, checked on the ORDER of what it asks the device to do. Equal
// losses would pass even if no gather ever ran ahead of the unit in use, so this drives the
// engine (fsdp/fsdp.c) exactly as train_gpt.cu's model_forward / model_backward do, through a
// recording backend, and reads the log: gathers issued ahead of the compute they feed
// (prefetch), waited on before it, reduce-scatters started right after each unit's backward
// and overlapping the next one, none before the last micro-step when gradients stay
// unsharded. One process plays rank RANK of a shard group of SHARDS, so gathers and
// reduce-scatters move real slices; the other ranks are stand-ins whose data the backend
// makes up (see complete_op), and the numbers seen in compute are checked against it, so a
// backend that did nothing (or an engine that computed before waiting) would fail.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/process_group.h"
#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"

#define SHARDS 4      // the shard group the units are finalized for
#define RANK 2        // the rank this process plays: not the first nor the last
#define ALIGN 8       // elements; with SHARDS ranks some units end in padding
#define N_UNITS 6     // the root and five blocks
#define STEPS 2       // optimizer steps per case: the second regathers updated shards
#define MAX_MICRO 2

enum { OP_IDLE = 0, EV_GATHER_START, EV_REDUCE_START, EV_WAIT, EV_FWD, EV_BWD };

static const char* event_name(int kind) {
    switch (kind) {
    case EV_GATHER_START: return "GATHER_START";
    case EV_REDUCE_START: return "REDUCE_START";
    case EV_WAIT: return "WAIT";
    case EV_FWD: return "COMPUTE_FWD";
    case EV_BWD: return "COMPUTE_BWD";
    default: return "?";
    }
}

typedef struct {
    int kind;        // EV_*
    int op;          // op slot (collectives and waits), -1 for compute
    int unit;        // the unit it concerns (-1: a wait on an idle op)
    int step, micro;
} Event;

// A collective in flight. Its data moves only when it is waited on, as on a device whose
// transfer has not landed yet: an engine that read a gathered slot (or a reduced shard)
// before waiting would see the NaN placed there at the start.
typedef struct {
    int kind;        // OP_IDLE, EV_GATHER_START or EV_REDUCE_START
    int unit;
    const float* in;
    float* out;
    size_t n;        // shard elements
} Op;

// The backend's ctx: the event log and what the stand-in peer ranks hold.
typedef struct {
    const Fsdp* f;              // set once fsdp_init returns (it issues no collectives)
    const FlatUnit* units;
    int max_ops;
    Op* ops;                    // [max_ops]
    Event* ev;
    int n_ev, cap_ev;
    int step, micro;            // stamped on each event by the driver's position
    int win[STEPS][MAX_MICRO][2];  // each micro-step's events: [begin, end)
    // The peers' reduced gradient shards, unit by unit over the whole padded buffer (only
    // the other ranks' slices are used): what their share of the global norm comes from.
    float* peer_grad[N_UNITS];
    size_t total_shard;
    int* adam_calls;            // [total_shard] AdamW visits per element of this rank's state
    float* adam_wd;             // [total_shard] the weight decay it was given
    long live_allocs;
    size_t grad_zeroed;         // bytes of gradient slots zeroed (rec_zero)
    int violations;
    char first_violation[256];
    int value_errors;
    char first_value_error[256];
} Recorder;

typedef struct {
    int failures;
} Tally;

static void check(Tally* t, int cond, const char* name, const char* why) {
    if (cond) printf("ok - schedule: %s\n", name);
    else { printf("not ok - schedule: %s: %s\n", name, why); t->failures++; }
}

// Master values of unit u at flat index idx before any update (exact in fp32), the same
// for every rank's slice; padding is zero. Gradients: small integers, so that sums over
// ranks and micro-steps are exact.
static float initial_param(int u, size_t idx) { return (float)u + (float)(idx + 1) / 1024.0f; }
static float grad_value(int u, size_t idx, int micro) { return (float)(1 + (int)(idx % 5) + u + 2 * micro); }

static float peer_param(const Recorder* r, int u, size_t idx) {
    return idx < r->units[u].numel ? initial_param(u, idx) : 0.0f;
}

static void violation(Recorder* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(Recorder* r, const char* fmt, ...) {
    if (r->violations++ > 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first_violation, sizeof(r->first_violation), fmt, ap);
    va_end(ap);
}

static void value_error(Recorder* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void value_error(Recorder* r, const char* fmt, ...) {
    if (r->value_errors++ > 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first_value_error, sizeof(r->first_value_error), fmt, ap);
    va_end(ap);
}

static void log_event(Recorder* r, int kind, int op, int unit) {
    if (r->n_ev == r->cap_ev) {
        r->cap_ev = r->cap_ev ? 2 * r->cap_ev : 256;
        r->ev = (Event*)realloc(r->ev, (size_t)r->cap_ev * sizeof(Event));
        if (!r->ev) { fprintf(stderr, "out of memory\n"); exit(1); }
    }
    r->ev[r->n_ev++] = (Event){kind, op, unit, r->step, r->micro};
}

static int ranges_meet(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    const char *pa = (const char*)a, *pb = (const char*)b;
    return a && b && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Nothing may write into a collective's buffers (input or output) while it is in flight.
static void check_write(Recorder* r, const void* p, size_t bytes, const char* what) {
    for (int op = 0; op < r->max_ops; op++) {
        const Op* o = &r->ops[op];
        if (o->kind == OP_IDLE) continue;
        size_t full = (size_t)SHARDS * o->n * sizeof(float), shard = o->n * sizeof(float);
        size_t in_bytes = o->kind == EV_GATHER_START ? shard : full;
        size_t out_bytes = o->kind == EV_GATHER_START ? full : shard;
        if (ranges_meet(p, bytes, o->in, in_bytes) || ranges_meet(p, bytes, o->out, out_bytes))
            violation(r, "%s writes into the buffers of op %d (%s of unit %d) while it is in flight", what, op,
                      event_name(o->kind), o->unit);
    }
}

// What the collective delivers. Gather: this rank's slice is its shard, the peers' slices
// are their (never updated) initial values. Reduce-scatter: every stand-in rank trained on
// the same data, so each one's full gradient is this one's and the sum over the group is
// SHARDS times it; the peers' own slices are kept for the global norm.
static void complete_op(Recorder* r, const Op* o) {
    const size_t n = o->n;
    if (o->kind == EV_GATHER_START) {
        for (int p = 0; p < SHARDS; p++)
            for (size_t i = 0; i < n; i++) {
                size_t idx = (size_t)p * n + i;
                o->out[idx] = p == RANK ? o->in[i] : peer_param(r, o->unit, idx);
            }
    } else {
        for (size_t i = 0; i < n; i++) o->out[i] = (float)SHARDS * o->in[(size_t)RANK * n + i];
        for (int p = 0; p < SHARDS; p++) {
            if (p == RANK) continue;
            for (size_t i = 0; i < n; i++)
                r->peer_grad[o->unit][(size_t)p * n + i] += (float)SHARDS * o->in[(size_t)p * n + i];
        }
    }
}

// ---------------------------------------------------------------------------------------
// The recording backend

static void* rec_alloc(void* ctx, size_t bytes) {
    Recorder* r = (Recorder*)ctx;
    void* p = calloc(1, bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory allocating %zu bytes\n", bytes); exit(1); }
    r->live_allocs++;
    return p;
}

static void rec_release(void* ctx, void* p) {
    Recorder* r = (Recorder*)ctx;
    if (!p) return;
    free(p);
    r->live_allocs--;
}

static void rec_copy(void* ctx, void* dst, const void* src, size_t bytes) {
    Recorder* r = (Recorder*)ctx;
    check_write(r, dst, bytes, "a copy");
    if (dst != src) memcpy(dst, src, bytes);
}

static void rec_zero(void* ctx, void* p, size_t bytes) {
    Recorder* r = (Recorder*)ctx;
    check_write(r, p, bytes, "zero");
    memset(p, 0, bytes);
    if (r->f)
        for (int g = 0; g < r->f->n_grad_slots; g++) {
            const char* slot = (const char*)r->f->grad_slot[g];
            size_t n = (g == 0 ? r->units[0].padded : r->f->block_padded) * sizeof(float);
            if ((const char*)p >= slot && (const char*)p < slot + n) r->grad_zeroed += bytes;
        }
    // The engine zeroes its gradient shards at fsdp_zero_grad: so do the stand-in peers.
    if (r->f && p == (void*)r->f->grad_shard)
        for (int u = 0; u < N_UNITS; u++) memset(r->peer_grad[u], 0, r->units[u].padded * sizeof(float));
}

// The op slot to record a collective in, or NULL (with a violation) when it is not usable.
static Op* claim_op(Recorder* r, int op, const char* what) {
    if (op < 0 || op >= r->max_ops) {
        violation(r, "%s on op slot %d, outside 0..%d", what, op, r->max_ops - 1);
        return NULL;
    }
    if (r->ops[op].kind != OP_IDLE) {
        violation(r, "%s on op slot %d while its %s of unit %d is in flight", what, op,
                  event_name(r->ops[op].kind), r->ops[op].unit);
        return NULL;
    }
    return &r->ops[op];
}

static void rec_all_gather_start(void* ctx, int op, const void* shard, void* full, size_t n) {
    Recorder* r = (Recorder*)ctx;
    const Fsdp* f = r->f;
    // The unit is the one whose shard is sent (the engine names the slot's unit only after
    // issuing the gather); the destination must be one of the parameter slots.
    int u = -1, slot = -1;
    for (int v = 0; v < f->n_units; v++)
        if ((const char*)shard == (const char*)f->param_shard + f->shard_offset[v] * f->be.param_bytes) u = v;
    for (int s = 0; s < f->n_param_slots; s++)
        if (full == f->param_slot[s]) slot = s;
    log_event(r, EV_GATHER_START, op, u);
    if (u < 0 || slot < 0 || n != r->units[u].shard) {
        violation(r, "gather on op %d: shard of unit %d, into parameter slot %d, %zu elements", op, u, slot, n);
        return;
    }
    check_write(r, full, (size_t)SHARDS * n * sizeof(float), "a gather");
    Op o = {EV_GATHER_START, u, (const float*)shard, (float*)full, n};
    for (size_t i = 0; i < SHARDS * n; i++) o.out[i] = NAN;  // not arrived yet
    Op* slot_op = claim_op(r, op, "gather");
    if (slot_op) *slot_op = o;
    else complete_op(r, &o);
}

static void rec_reduce_scatter_start(void* ctx, int op, const void* full, void* out, size_t n) {
    float* shard_out = (float*)out;  // reduce_out_bytes 4
    Recorder* r = (Recorder*)ctx;
    const Fsdp* f = r->f;
    // The unit is the one the gradient slot holds (fsdp_grad named it before the backward).
    int g = -1;
    for (int s = 0; s < f->n_grad_slots; s++)
        if (full == f->grad_slot[s]) g = s;
    int u = g >= 0 ? f->grad_slot_unit[g] : -1;
    log_event(r, EV_REDUCE_START, op, u);
    if (u < 0 || n != r->units[u].shard || shard_out != f->rs_out[g]) {
        violation(r, "reduce-scatter on op %d: gradient slot %d of unit %d, %zu elements", op, g, u, n);
        return;
    }
    check_write(r, shard_out, n * sizeof(float), "a reduce-scatter");
    Op o = {EV_REDUCE_START, u, (const float*)full, shard_out, n};
    for (size_t i = 0; i < n; i++) shard_out[i] = NAN;
    Op* slot_op = claim_op(r, op, "reduce-scatter");
    if (slot_op) *slot_op = o;
    else complete_op(r, &o);
}

static void rec_wait(void* ctx, int op) {
    Recorder* r = (Recorder*)ctx;
    if (op < 0 || op >= r->max_ops) {
        violation(r, "wait on op slot %d, outside 0..%d", op, r->max_ops - 1);
        log_event(r, EV_WAIT, op, -1);
        return;
    }
    Op* o = &r->ops[op];
    log_event(r, EV_WAIT, op, o->kind == OP_IDLE ? -1 : o->unit);
    if (o->kind == OP_IDLE) return;  // allowed (a no-op), though the engine does not do it
    Op done = *o;
    o->kind = OP_IDLE;
    complete_op(r, &done);
}

static void rec_all_reduce_replicas(void* ctx, float* buf, size_t n) {
    (void)buf; (void)n;
    violation((Recorder*)ctx, "a replica all-reduce with one replica group");
}

// The gradient norm's sum over the shard group: this rank's sum of squares plus the peers'.
static double rec_all_reduce_sum(void* ctx, double x) {
    Recorder* r = (Recorder*)ctx;
    for (int u = 0; u < N_UNITS; u++) {
        size_t n = r->units[u].shard;
        for (int p = 0; p < SHARDS; p++) {
            if (p == RANK) continue;
            for (size_t i = 0; i < n; i++) {
                double g = r->peer_grad[u][(size_t)p * n + i];
                x += g * g;
            }
        }
    }
    return x;
}

// The decision: the gradient norm's sum as above (no loss in these steps).
static void rec_step_decide(void* ctx, FsdpStepStats* s, double tokens, float grad_clip) {
    s->sumsq = rec_all_reduce_sum(ctx, s->sumsq);
    fsdp_decide_from_sums(s, tokens, grad_clip);
}

static void rec_accumulate(void* ctx, float* dst, const float* src, size_t n) {
    check_write((Recorder*)ctx, dst, n * sizeof(float), "accumulate");
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static double rec_sum_squares(void* ctx, const float* x, size_t n) {
    (void)ctx;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static void rec_adamw(void* ctx, float* param, float* m, float* v, const float* grad, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    Recorder* r = (Recorder*)ctx;
    check_write(r, param, n * sizeof(float), "AdamW");
    ptrdiff_t at = param - r->f->master;
    if (at < 0 || (size_t)at + n > r->total_shard || m - r->f->adam_m != at || v - r->f->adam_v != at ||
        grad - r->f->grad_shard != at) {
        violation(r, "AdamW on %zu elements outside this rank's state, or with mismatched m/v/grad", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        r->adam_calls[(size_t)at + i]++;
        r->adam_wd[(size_t)at + i] = weight_decay;
    }
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        param[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + eps) + weight_decay * param[i]);
    }
}

static void recorder_backend(FsdpBackend* be, Recorder* r) {
    memset(be, 0, sizeof(*be));
    be->ctx = r;
    be->param_bytes = sizeof(float);
    be->reduce_out_bytes = sizeof(float);
    // A separate host mirror, so that fsdp_upload_state's copies run through the backend.
    be->host_is_device = 0;
    be->alloc = rec_alloc;
    be->release = rec_release;
    be->alloc_host = rec_alloc;
    be->release_host = rec_release;
    be->copy_to_host = rec_copy;
    be->copy_to_device = rec_copy;
    be->zero = rec_zero;
    be->all_gather_start = rec_all_gather_start;
    be->reduce_scatter_start = rec_reduce_scatter_start;
    be->wait = rec_wait;
    be->all_reduce_replicas = rec_all_reduce_replicas;
    be->step_decide = rec_step_decide;
    be->accumulate = rec_accumulate;
    be->sum_squares = rec_sum_squares;
    be->adamw = rec_adamw;
    be->refresh_param_shard = NULL;  // fp32 compute: the shard is the master
}

static void recorder_init(Recorder* r, const FlatUnit* units, int max_ops) {
    memset(r, 0, sizeof(*r));
    r->units = units;
    r->max_ops = max_ops;
    r->ops = (Op*)calloc((size_t)max_ops, sizeof(Op));
    for (int u = 0; u < N_UNITS; u++) {
        r->peer_grad[u] = (float*)calloc(units[u].padded, sizeof(float));
        r->total_shard += units[u].shard;
    }
    r->adam_calls = (int*)calloc(r->total_shard, sizeof(int));
    r->adam_wd = (float*)calloc(r->total_shard, sizeof(float));
}

static void recorder_free(Recorder* r) {
    for (int u = 0; u < N_UNITS; u++) free(r->peer_grad[u]);
    free(r->ops); free(r->ev); free(r->adam_calls); free(r->adam_wd);
}

static void no_op_in_flight(Recorder* r, const char* after) {
    for (int op = 0; op < r->max_ops; op++)
        if (r->ops[op].kind != OP_IDLE)
            violation(r, "op %d (%s of unit %d) still in flight after %s", op, event_name(r->ops[op].kind),
                      r->ops[op].unit, after);
}

// ---------------------------------------------------------------------------------------
// The model stand-in: what one unit's compute reads and writes

// Logs the compute, checks the gathered parameters it reads (this rank's slice: the
// current master; the peers': their values), and adds part x the unit's gradient.
// The backward's stand-in adds to grad (add), or overwrites it as the model's first write of
// a micro-step does (fsdp_grad_accumulates 0): a buffer the engine left stale then shows.
static void compute(Recorder* r, int kind, int u, const void* params, void* grad, float part, int add) {
    log_event(r, kind, -1, u);
    const Fsdp* f = r->f;
    const FlatUnit* unit = &r->units[u];
    const float* p = (const float*)params;
    const float* own = f->master + f->shard_offset[u];
    const size_t lo = (size_t)RANK * unit->shard;
    for (size_t idx = 0; idx < unit->padded; idx++) {
        float want = idx >= lo && idx < lo + unit->shard ? own[idx - lo] : peer_param(r, u, idx);
        if (!(p[idx] == want)) {  // NaN: the gather had not landed
            value_error(r, "step %d micro-step %d: %s of unit %d reads %g at %zu, expected %g", r->step, r->micro,
                        event_name(kind), u, (double)p[idx], idx, (double)want);
            break;
        }
    }
    if (!grad) return;
    float* g = (float*)grad;
    check_write(r, g, unit->padded * sizeof(float), "the backward");
    for (size_t idx = 0; idx < unit->numel; idx++) g[idx] = (add ? g[idx] : 0.0f) + part * grad_value(u, idx, r->micro);
}

// One micro-step, in model_forward / model_backward's order of calls.
static void micro_step(Recorder* r, Fsdp* f) {
    const int n = f->n_units;
    void* root = fsdp_forward_pre(f, 0);
    compute(r, EV_FWD, 0, root, NULL, 0.0f, 0);  // embeddings
    for (int u = 1; u < n; u++) {
        void* p = fsdp_forward_pre(f, u);
        compute(r, EV_FWD, u, p, NULL, 0.0f, 0);
        fsdp_forward_post(f, u);
    }
    compute(r, EV_FWD, 0, root, NULL, 0.0f, 0);  // final LayerNorm, LM head, loss
    fsdp_forward_post(f, 0);

    root = fsdp_backward_pre(f, 0);
    void* droot = fsdp_grad(f, 0);
    const int acc = fsdp_grad_accumulates(f);
    fsdp_backward_prefetch(f, n - 1);  // the last block, while the head runs
    compute(r, EV_BWD, 0, root, droot, 0.5f, acc);  // LM head, final LayerNorm
    for (int u = n - 1; u >= 1; u--) {
        void* p = fsdp_backward_pre(f, u);
        void* g = fsdp_grad(f, u);
        compute(r, EV_BWD, u, p, g, 1.0f, acc);
        fsdp_backward_post(f, u);
    }
    compute(r, EV_BWD, 0, root, droot, 0.5f, 1);  // embeddings, onto the head's
    fsdp_backward_post(f, 0);
    fsdp_end_micro_step(f);
}

// ---------------------------------------------------------------------------------------
// Reading the log

static int find_first(const Recorder* r, int from, int to, int kind, int unit) {
    for (int i = from; i < to; i++)
        if (r->ev[i].kind == kind && r->ev[i].unit == unit) return i;
    return -1;
}

static int find_last(const Recorder* r, int from, int to, int kind, int unit) {
    for (int i = to - 1; i >= from; i--)
        if (r->ev[i].kind == kind && r->ev[i].unit == unit) return i;
    return -1;
}

// The gather whose data the compute event c reads: the last one of its unit before it.
static int gather_for(const Recorder* r, int c) { return find_last(r, 0, c, EV_GATHER_START, r->ev[c].unit); }

typedef struct {
    const char* name;
    FsdpConfig cfg;
    int micro_steps;
} Case;

static int syncing(const Case* c, int m) { return c->cfg.sync_every_micro_step || m == c->micro_steps - 1; }

// One pair of the window [lo, hi): counts as late (first one described in why) unless the
// gather that ahead_unit's compute reads was issued before now_unit's compute. Returns 1.
static int late_pair(const Recorder* r, int lo, int hi, int kind, int now_unit, int ahead_unit, int* late,
                     char* why, size_t whylen) {
    int now = find_first(r, lo, hi, kind, now_unit), next = find_first(r, lo, hi, kind, ahead_unit);
    int g = next >= 0 ? gather_for(r, next) : -1;
    if (now >= 0 && g >= 0 && g < now) return 1;
    if ((*late)++ == 0)
        snprintf(why, whylen, "step %d micro-step %d: GATHER_START(%d) at event %d, after %s(%d) at event %d",
                 r->ev[lo].step, r->ev[lo].micro, ahead_unit, g, event_name(kind), now_unit, now);
    return 1;
}

// Pairs (unit computing, unit `depth` ahead of it in compute order) whose ahead unit's
// gather was issued only after the first began computing, so that it could not overlap
// it. Forward: u and u + depth for u = 0 .. n-1-depth; backward: block u and u - depth.
static int late_gathers(const Recorder* r, const Case* c, int depth, int* pairs, char* why, size_t whylen) {
    int late = 0;
    *pairs = 0;
    for (int s = 0; s < STEPS; s++)
        for (int m = 0; m < c->micro_steps; m++) {
            const int lo = r->win[s][m][0], hi = r->win[s][m][1];
            for (int u = 0; u + depth < N_UNITS; u++)
                *pairs += late_pair(r, lo, hi, EV_FWD, u, u + depth, &late, why, whylen);
            for (int u = N_UNITS - 1; u - depth >= 1; u--)
                *pairs += late_pair(r, lo, hi, EV_BWD, u, u - depth, &late, why, whylen);
        }
    return late;
}

// fsdp_backward_prefetch: the last block's gather is issued before the head's backward.
static int head_prefetch(const Recorder* r, const Case* c, char* why, size_t whylen) {
    for (int s = 0; s < STEPS; s++)
        for (int m = 0; m < c->micro_steps; m++) {
            const int lo = r->win[s][m][0], hi = r->win[s][m][1];
            int head = find_first(r, lo, hi, EV_BWD, 0), last = find_first(r, lo, hi, EV_BWD, N_UNITS - 1);
            int g = last >= 0 ? gather_for(r, last) : -1;
            if (head < 0 || g < 0 || g > head) {
                snprintf(why, whylen, "step %d micro-step %d: GATHER_START(%d) at event %d, head's backward at event %d",
                         s, m, N_UNITS - 1, g, head);
                return 0;
            }
        }
    return 1;
}

// Every compute reads a gather that was waited on (the same op, the same unit) after it
// was issued and before the compute.
static int waits_before_compute(const Recorder* r, char* why, size_t whylen) {
    for (int i = 0; i < r->n_ev; i++) {
        const Event* e = &r->ev[i];
        if (e->kind != EV_FWD && e->kind != EV_BWD) continue;
        int g = gather_for(r, i), w = -1;
        for (int j = g + 1; g >= 0 && j < i && w < 0; j++)
            if (r->ev[j].kind == EV_WAIT && r->ev[j].op == r->ev[g].op && r->ev[j].unit == e->unit) w = j;
        if (w < 0) {
            snprintf(why, whylen, "step %d micro-step %d: %s(%d) at event %d reads GATHER_START at event %d, not waited on",
                     e->step, e->micro, event_name(e->kind), e->unit, i, g);
            return 0;
        }
    }
    return 1;
}

// Syncing micro-steps: exactly one REDUCE_START(u) per unit, after COMPUTE_BWD(u) and before
// the next compute of the backward (block u-1's, or the root's embedding part after block 1;
// the root's own after its last part). Others: no reduce-scatter at all.
static int reduce_placement(const Recorder* r, const Case* c, char* why, size_t whylen) {
    for (int s = 0; s < STEPS; s++)
        for (int m = 0; m < c->micro_steps; m++) {
            const int lo = r->win[s][m][0], hi = r->win[s][m][1];
            if (!syncing(c, m)) {
                for (int i = lo; i < hi; i++)
                    if (r->ev[i].kind == EV_REDUCE_START) {
                        snprintf(why, whylen, "step %d micro-step %d of %d: REDUCE_START(%d) at event %d", s, m,
                                 c->micro_steps, r->ev[i].unit, i);
                        return 0;
                    }
                continue;
            }
            const int root_end = find_last(r, lo, hi, EV_BWD, 0);
            for (int u = 0; u < N_UNITS; u++) {
                int bwd = u == 0 ? root_end : find_first(r, lo, hi, EV_BWD, u);
                int next = u == 0 ? hi : u == 1 ? root_end : find_first(r, lo, hi, EV_BWD, u - 1);
                int rs = find_first(r, lo, hi, EV_REDUCE_START, u);
                int again = rs >= 0 ? find_first(r, rs + 1, hi, EV_REDUCE_START, u) : -1;
                if (bwd < 0 || rs < bwd || rs > next || again >= 0) {
                    snprintf(why, whylen, "step %d micro-step %d: REDUCE_START(%d) at event %d (again at %d), "
                             "COMPUTE_BWD(%d) at %d, next compute at %d", s, m, u, rs, again, u, bwd, next);
                    return 0;
                }
            }
        }
    return 1;
}

// A block's reduce-scatter overlaps the next block's backward: it is waited on only after
// COMPUTE_BWD(u-1), and within the micro-step.
static int reduce_overlap(const Recorder* r, const Case* c, char* why, size_t whylen) {
    for (int s = 0; s < STEPS; s++)
        for (int m = 0; m < c->micro_steps; m++) {
            if (!syncing(c, m)) continue;
            const int lo = r->win[s][m][0], hi = r->win[s][m][1];
            for (int u = 2; u < N_UNITS; u++) {
                int rs = find_first(r, lo, hi, EV_REDUCE_START, u), w = -1;
                for (int j = rs + 1; rs >= 0 && j < hi && w < 0; j++)
                    if (r->ev[j].kind == EV_WAIT && r->ev[j].op == r->ev[rs].op) w = j;
                int prev = find_first(r, lo, hi, EV_BWD, u - 1);
                if (rs < 0 || w < 0 || w < prev || r->ev[w].unit != u) {
                    snprintf(why, whylen, "step %d micro-step %d: REDUCE_START(%d) at event %d waited at %d, "
                             "COMPUTE_BWD(%d) at %d", s, m, u, rs, w, u - 1, prev);
                    return 0;
                }
            }
        }
    return 1;
}

// The root is gathered once per optimizer step (it stays pinned); a block twice per
// micro-step when resharded after the forward, once when it stays gathered (ZeRO-2).
static int gather_counts(const Recorder* r, const Case* c, char* why, size_t whylen) {
    const int per_micro = c->cfg.reshard_after_forward ? 2 : 1;
    for (int s = 0; s < STEPS; s++) {
        int root = 0;
        for (int m = 0; m < c->micro_steps; m++) {
            int count[N_UNITS] = {0};
            for (int i = r->win[s][m][0]; i < r->win[s][m][1]; i++)
                if (r->ev[i].kind == EV_GATHER_START && r->ev[i].unit >= 0) count[r->ev[i].unit]++;
            root += count[0];
            for (int u = 1; u < N_UNITS; u++)
                if (count[u] != per_micro) {
                    snprintf(why, whylen, "step %d micro-step %d: unit %d gathered %d times, expected %d", s, m, u,
                             count[u], per_micro);
                    return 0;
                }
        }
        if (root != 1) {
            snprintf(why, whylen, "step %d: the root gathered %d times", s, root);
            return 0;
        }
    }
    return 1;
}

// After the last micro-step: this rank's gradient shard of each unit holds SHARDS x the
// summed gradients of its slice (zero in the padding). Returns the mismatches (first in why).
static int check_grad_shards(const Recorder* r, const Case* c, char* why, size_t whylen) {
    const Fsdp* f = r->f;
    int bad = 0;
    for (int u = 0; u < N_UNITS; u++) {
        const FlatUnit* unit = &r->units[u];
        size_t begin, end;
        fsdp_owned_range(f, u, &begin, &end);
        const float* g = f->grad_shard + f->shard_offset[u];
        for (size_t idx = begin; idx < end; idx++) {
            float want = 0.0f;
            for (int m = 0; m < c->micro_steps && idx < unit->numel; m++) want += grad_value(u, idx, m);
            want *= (float)SHARDS;
            if (g[idx - begin] != want && bad++ == 0)
                snprintf(why, whylen, "unit %d element %zu: %g, expected %g", u, idx, (double)g[idx - begin], (double)want);
        }
    }
    return bad;
}

static double expected_norm(const Case* c, const FlatUnit* units) {
    double s = 0.0;
    for (int u = 0; u < N_UNITS; u++)
        for (size_t idx = 0; idx < units[u].numel; idx++) {
            double g = 0.0;
            for (int m = 0; m < c->micro_steps; m++) g += grad_value(u, idx, m);
            s += (SHARDS * g) * (SHARDS * g);
        }
    return sqrt(s);
}

// AdamW visited each element of each tensor this rank owns exactly once, with the weight
// decay for matrices and none for vectors, and never the padding.
static int check_adamw(const Recorder* r, float weight_decay, char* why, size_t whylen) {
    const Fsdp* f = r->f;
    int* want = (int*)calloc(r->total_shard, sizeof(int));
    float* want_wd = (float*)calloc(r->total_shard, sizeof(float));
    for (int u = 0; u < N_UNITS; u++) {
        size_t begin, end, lo, hi;
        fsdp_owned_range(f, u, &begin, &end);
        for (int i = 0; i < r->units[u].n_tensors; i++) {
            const FlatTensor* t = &r->units[u].tensors[i];
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            for (size_t k = lo; k < hi; k++) {
                size_t at = f->shard_offset[u] + t->offset + k - begin;
                want[at]++;
                want_wd[at] = t->decay ? weight_decay : 0.0f;
            }
        }
    }
    int ok = 1;
    for (size_t at = 0; at < r->total_shard && ok; at++)
        if (r->adam_calls[at] != want[at] || (want[at] && r->adam_wd[at] != want_wd[at])) {
            snprintf(why, whylen, "state element %zu: %d visits with weight decay %g, expected %d with %g", at,
                     r->adam_calls[at], (double)r->adam_wd[at], want[at], (double)want_wd[at]);
            ok = 0;
        }
    free(want);
    free(want_wd);
    return ok;
}

// ---------------------------------------------------------------------------------------

static void build_units(FlatUnit* units) {
    memset(units, 0, N_UNITS * sizeof(FlatUnit));
    flat_unit_add(&units[0], "wte", 12, 8, 1);
    flat_unit_add(&units[0], "wpe", 4, 8, 1);
    flat_unit_add(&units[0], "ln_f.weight", 1, 9, 0);
    flat_unit_add(&units[0], "ln_f.bias", 1, 9, 0);
    // Blocks of different sizes (the pool's slots are the largest one's): with 4 ranks and
    // alignment 8, rank 2's slice of block 1 is all padding and block 2's partly.
    for (int u = 1; u < N_UNITS; u++) {
        flat_unit_add(&units[u], "h.mlp.c_fc.weight", (size_t)u, 6, 1);
        flat_unit_add(&units[u], "h.ln_1.bias", 1, 7, 0);
    }
    for (int u = 0; u < N_UNITS; u++) flat_unit_finalize(&units[u], SHARDS, ALIGN);
}

static void run_case(const Case* c, Tally* t) {
    FlatUnit units[N_UNITS];
    build_units(units);
    // One process as rank RANK of a shard group of SHARDS: the engine reads only the shard
    // fields (and the replica size); the collectives are the recorder's.
    ProcessGroup pg;
    memset(&pg, 0, sizeof(pg));
    pg.rank = pg.shard_rank = pg.local_rank = RANK;
    pg.world = pg.shard_size = pg.local_world = SHARDS;
    pg.replicate_size = 1;
    pg.launcher = "single";
    pg.transport = "recorded";

    Recorder r;
    recorder_init(&r, units, fsdp_max_ops(&c->cfg, N_UNITS));
    FsdpBackend be;
    recorder_backend(&be, &r);
    Fsdp f;
    char name[256], why[512] = "", err[256];
    if (fsdp_init(&f, &pg, &be, &c->cfg, units, N_UNITS, err, sizeof(err))) {
        snprintf(name, sizeof(name), "%s: fsdp_init", c->name);
        check(t, 0, name, err);
        recorder_free(&r);
        return;
    }
    r.f = &f;
    for (int u = 0; u < N_UNITS; u++) {
        size_t begin, end;
        fsdp_owned_range(&f, u, &begin, &end);
        float* h = fsdp_host_master_shard(&f, u);
        for (size_t idx = begin; idx < end; idx++) h[idx - begin] = idx < units[u].numel ? initial_param(u, idx) : 0.0f;
    }
    fsdp_upload_state(&f, 0);

    const float lr = 1e-2f, weight_decay = 0.1f;
    int grad_bad = 0, norm_ok = 1, adam_ok = 1;
    char grad_why[256] = "", norm_why[256] = "", adam_why[512] = "";
    for (int s = 0; s < STEPS; s++) {
        r.step = s;
        memset(r.adam_calls, 0, r.total_shard * sizeof(int));
        fsdp_zero_grad(&f, c->micro_steps);
        for (int m = 0; m < c->micro_steps; m++) {
            r.micro = m;
            r.win[s][m][0] = r.n_ev;
            micro_step(&r, &f);
            r.win[s][m][1] = r.n_ev;
            no_op_in_flight(&r, "fsdp_end_micro_step");
        }
        int bad = check_grad_shards(&r, c, why, sizeof(why));
        if (bad && !grad_bad) snprintf(grad_why, sizeof(grad_why), "step %d: %d elements wrong, first %s", s, bad, why);
        grad_bad += bad;
        fsdp_step_decide(&f, 1.0, 1.0f);
        const float norm = f.stats->norm;
        double want = expected_norm(c, units);
        if (norm_ok && !(fabs(norm - want) <= 1e-6 * want)) {
            snprintf(norm_why, sizeof(norm_why), "step %d: %.9g, expected %.9g", s, (double)norm, want);
            norm_ok = 0;
        }
        fsdp_optimizer_step(&f, lr, 0.9f, 0.95f, 1e-8f, weight_decay, s + 1);
        no_op_in_flight(&r, "fsdp_optimizer_step");
        if (adam_ok && !check_adamw(&r, weight_decay, adam_why, sizeof(adam_why))) adam_ok = 0;
    }

#define CHECK(cond, what, detail)                                 \
    do {                                                          \
        snprintf(name, sizeof(name), "%s: %s", c->name, what);    \
        check(t, cond, name, detail);                             \
    } while (0)

    CHECK(r.violations == 0, "collectives well formed (op slots in range, none reused, written or left in flight)",
          r.first_violation);
    CHECK(r.value_errors == 0, "compute reads the gathered master values (this rank's shard and the peers')",
          r.first_value_error);
    int ok = waits_before_compute(&r, why, sizeof(why));
    CHECK(ok, "every gather is waited on between its GATHER_START and its unit's compute", why);
    if (c->cfg.prefetch >= 1) {
        for (int depth = 1; depth <= c->cfg.prefetch; depth++) {
            int pairs, late = late_gathers(&r, c, depth, &pairs, why, sizeof(why));
            char what[160];
            snprintf(what, sizeof(what), "prefetch: GATHER_START(u+%d) before COMPUTE_FWD(u), GATHER_START(u-%d) "
                     "before COMPUTE_BWD(u) (%d pairs)", depth, depth, pairs);
            char detail[640];
            snprintf(detail, sizeof(detail), "%d of %d pairs late; first: %s", late, pairs, why);
            CHECK(late == 0 && pairs > 0, what, detail);
        }
    } else {
        // Without prefetch every gather comes after the compute before it: the order check
        // above must see that, or it could not catch a prefetch that never happens.
        int pairs, late = late_gathers(&r, c, 1, &pairs, why, sizeof(why));
        char detail[160];
        snprintf(detail, sizeof(detail), "only %d of %d pairs late", late, pairs);
        CHECK(late == pairs && pairs > 0, "no prefetch: the order check finds every next unit's gather late", detail);
    }
    ok = head_prefetch(&r, c, why, sizeof(why));
    CHECK(ok, "fsdp_backward_prefetch: the last block's GATHER_START before the head's COMPUTE_BWD", why);
    ok = reduce_placement(&r, c, why, sizeof(why));
    CHECK(ok, c->cfg.sync_every_micro_step
                  ? "REDUCE_START(u) right after COMPUTE_BWD(u), before COMPUTE_BWD(u-1), every micro-step"
                  : "no REDUCE_START before the last micro-step, then REDUCE_START(u) between COMPUTE_BWD(u) and (u-1)",
          why);
    ok = reduce_overlap(&r, c, why, sizeof(why));
    CHECK(ok, "a block's reduce-scatter is waited on only after the next block's COMPUTE_BWD", why);
    ok = gather_counts(&r, c, why, sizeof(why));
    CHECK(ok, c->cfg.reshard_after_forward ? "the root gathered once per step, each block twice per micro-step"
                                           : "the root gathered once per step, each block once per micro-step (kept)",
          why);
    CHECK(grad_bad == 0, "this rank's gradient shards hold 4 x the summed gradients of its slices", grad_why);
    CHECK(norm_ok, "the gradient norm is the global one (every rank's shard)", norm_why);
    CHECK(adam_ok, "AdamW visits each owned tensor element once, weight decay on matrices only", adam_why);
    // Every micro-step takes each unit's buffer once; only its padding is zeroed (the model's
    // first writes overwrite the rest), and with unsharded accumulation only at the first.
    size_t padding = 0;
    for (int u = 0; u < N_UNITS; u++)
        padding += ((u == 0 ? units[0].padded : f.block_padded) - units[u].numel) * sizeof(float);
    const size_t takes = (size_t)STEPS * (c->cfg.sync_every_micro_step ? (size_t)c->micro_steps : 1);
    snprintf(why, sizeof(why), "%zu bytes zeroed, the padding of %zu takes is %zu", r.grad_zeroed, takes, takes * padding);
    CHECK(r.grad_zeroed == takes * padding, "gradient buffers: only the padding zeroed, once per take", why);
    fsdp_free(&f);
    snprintf(why, sizeof(why), "%ld allocations not released", r.live_allocs);
    CHECK(r.live_allocs == 0, "fsdp_free releases every allocation", why);
#undef CHECK
    recorder_free(&r);
}

int main(void) {
    // {prefetch, reshard_after_forward, sync_every_micro_step, offload, loss scale, its window}, micro-steps per step
    const Case cases[] = {
        {"prefetch 1, ZeRO-3", {1, 1, 1, 0, 0.0f, 0}, 1},
        {"prefetch 2, ZeRO-3", {2, 1, 1, 0, 0.0f, 0}, 1},
        {"prefetch 0, ZeRO-3", {0, 1, 1, 0, 0.0f, 0}, 1},
        {"prefetch 1, ZeRO-2 (reshard_after_forward 0)", {1, 0, 1, 0, 0.0f, 0}, 1},
        {"prefetch 1, 2 micro-steps, reduce on the last only", {1, 1, 0, 0, 0.0f, 0}, 2},
        {"prefetch 1, 2 micro-steps, reduce every micro-step", {1, 1, 1, 0, 0.0f, 0}, 2},
        {"prefetch 2, ZeRO-2, 2 micro-steps, reduce on the last only", {2, 0, 0, 0, 0.0f, 0}, 2},
    };
    Tally t = {0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(&cases[i], &t);
    return t.failures ? 1 : 0;
}
