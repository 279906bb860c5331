#include "fsdp/flat_unit.h"

#include <stdio.h>
#include <string.h>

int flat_unit_add(FlatUnit* u, const char* name, size_t rows, size_t cols, int decay) {
    if (u->n_tensors >= FLAT_UNIT_MAX_TENSORS) return -1;
    FlatTensor* t = &u->tensors[u->n_tensors];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->numel = rows * cols;
    t->offset = u->numel;
    t->decay = decay;
    u->numel += t->numel;
    return u->n_tensors++;
}

void flat_unit_finalize(FlatUnit* u, int shard_count, size_t align) {
    size_t quantum = (size_t)shard_count * align;
    u->padded = (u->numel + quantum - 1) / quantum * quantum;
    if (u->padded == 0) u->padded = quantum; // an empty unit still has one aligned slot per rank
    u->shard = u->padded / (size_t)shard_count;
}

int flat_tensor_slice(const FlatTensor* t, size_t begin, size_t end, size_t* lo, size_t* hi) {
    size_t a = t->offset > begin ? t->offset : begin;
    size_t b = t->offset + t->numel < end ? t->offset + t->numel : end;
    if (a >= b) return 0;
    *lo = a - t->offset;
    *hi = b - t->offset;
    return 1;
}

// Appends run r to out[n], merged into the last run when both are contiguous and r goes on
// where it ends, locally and globally. Returns the new count.
static int append_key_run(SrKeyRun* out, int n, SrKeyRun r) {
    if (r.rows * r.cols == 0) return n;
    if (r.rows == 1 || r.cols == r.global_stride) {  // contiguous: one row of all its elements
        r.cols = r.global_stride = r.rows * r.cols;
        r.rows = 1;
    }
    SrKeyRun* last = n > 0 ? &out[n - 1] : NULL;
    if (last && last->cols == last->global_stride && r.cols == r.global_stride &&
        last->local_begin + last->cols == r.local_begin && last->global_begin + last->cols == r.global_begin) {
        last->cols = last->global_stride = last->cols + r.cols;
        return n;
    }
    out[n] = r;
    return n + 1;
}

int flat_unit_key_runs(const FlatUnit* u, SrKeyRun* out) {
    int n = 0;
    for (int i = 0; i < u->n_tensors; i++) {
        const FlatTensor* t = &u->tensors[i];
        if (t->n_key_runs == 0) {  // its own place
            n = append_key_run(out, n, (SrKeyRun){t->offset, 1, t->numel, t->offset, t->numel});
            continue;
        }
        for (int k = 0; k < t->n_key_runs; k++) {
            SrKeyRun r = t->key_runs[k];
            r.local_begin += t->offset;
            n = append_key_run(out, n, r);
        }
    }
    // Identity: one contiguous run from 0 to 0 (or none), and the padding keyed by itself.
    const size_t global_numel = u->global_numel ? u->global_numel : u->numel;
    if (global_numel == u->numel && (n == 0 || (n == 1 && out[0].local_begin == 0 && out[0].global_begin == 0)))
        return 0;
    // The padding, and every index past it: contiguous from the global unit's end.
    out[n++] = (SrKeyRun){u->numel, 1, 1, global_numel, 1};
    return n;
}

int flat_tensor_count(const FlatUnit* units, int n_units) {
    int n = 0;
    for (int u = 0; u < n_units; u++) n += units[u].n_tensors;
    return n;
}

int flat_owned_pieces(const FlatUnit* units, int n_units, int shard_rank, FlatPiece* out) {
    int n = 0;
    size_t arena = 0;  // where unit u's shard starts in the rank's arena
    for (int u = 0; u < n_units; u++) {
        const FlatUnit* unit = &units[u];
        size_t begin = (size_t)shard_rank * unit->shard, end = begin + unit->shard;
        for (int i = 0; i < unit->n_tensors; i++) {
            const FlatTensor* t = &unit->tensors[i];
            size_t lo, hi;
            if (!flat_tensor_slice(t, begin, end, &lo, &hi)) continue;
            FlatPiece* p = &out[n++];
            p->unit = u;
            p->tensor = i;
            p->lo = lo;
            p->hi = hi;
            p->at = arena + t->offset + lo - begin;
        }
        arena += unit->shard;
    }
    return n;
}
