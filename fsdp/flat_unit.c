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
