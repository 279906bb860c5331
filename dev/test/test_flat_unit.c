// Shard arithmetic with awkward sizes: padding, ownership, and the tensor slices each rank
// meets. For every (unit, world size) the slices of all ranks must tile every tensor exactly
// once, in order, and each rank's shard must be the same aligned length. Then the size of
// the largest unit each engine op slot carries (fsdp_op_padded), which backends stage by.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/flat_unit.h"
#include "fsdp/fsdp.h"

static int failures = 0;

static void check(int cond, const char* name, const char* detail) {
    if (cond) printf("ok - %s\n", name);
    else { printf("not ok - %s: %s\n", name, detail); failures++; }
}

// Returns 0 when every tensor of u is covered exactly once by the ranks' slices.
static int tiles_exactly(const FlatUnit* u, int world, char* why, size_t whylen) {
    for (int i = 0; i < u->n_tensors; i++) {
        const FlatTensor* t = &u->tensors[i];
        size_t covered = 0;  // elements [0, covered) of t seen so far, in rank order
        for (int r = 0; r < world; r++) {
            size_t lo, hi;
            if (!flat_tensor_slice(t, (size_t)r * u->shard, (size_t)(r + 1) * u->shard, &lo, &hi)) continue;
            if (lo != covered) {
                snprintf(why, whylen, "tensor %s: rank %d starts at %zu, expected %zu", t->name, r, lo, covered);
                return 1;
            }
            covered = hi;
        }
        if (covered != t->numel) {
            snprintf(why, whylen, "tensor %s: %zu of %zu elements covered", t->name, covered, t->numel);
            return 1;
        }
    }
    return 0;
}

int main(void) {
    // Tensors smaller than the world, primes, an empty-ish unit, and a large matrix.
    const size_t shapes[][2] = {{1, 1}, {1, 3}, {7, 13}, {1, 1}, {31, 1}, {257, 129}, {1, 2}};
    const int worlds[] = {1, 2, 3, 4, 5, 7, 8, 16, 64, 1000};
    const size_t aligns[] = {1, 64};
    char why[256], name[128];
    for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
        for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
            int world = worlds[w];
            FlatUnit u;
            memset(&u, 0, sizeof(u));
            size_t total = 0;
            for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
                char tname[32];
                snprintf(tname, sizeof(tname), "t%zu", i);
                flat_unit_add(&u, tname, shapes[i][0], shapes[i][1], shapes[i][0] > 1);
                total += shapes[i][0] * shapes[i][1];
            }
            flat_unit_finalize(&u, world, aligns[a]);
            snprintf(name, sizeof(name), "W=%d align=%zu: padded to a multiple of W x align, equal shards", world, aligns[a]);
            snprintf(why, sizeof(why), "numel %zu padded %zu shard %zu", u.numel, u.padded, u.shard);
            check(u.numel == total && u.padded >= total && u.padded % ((size_t)world * aligns[a]) == 0 &&
                  u.padded - total < (size_t)world * aligns[a] && u.shard * (size_t)world == u.padded &&
                  u.shard % aligns[a] == 0, name, why);
            snprintf(name, sizeof(name), "W=%d align=%zu: rank slices tile every tensor once, in order", world, aligns[a]);
            check(tiles_exactly(&u, world, why, sizeof(why)) == 0, name, why);
        }
    }

    // Offsets are contiguous and in insertion order; decay flags kept.
    FlatUnit u;
    memset(&u, 0, sizeof(u));
    flat_unit_add(&u, "a", 2, 3, 1);
    flat_unit_add(&u, "b", 1, 5, 0);
    flat_unit_add(&u, "c", 4, 4, 1);
    check(u.tensors[0].offset == 0 && u.tensors[1].offset == 6 && u.tensors[2].offset == 11 && u.numel == 27 &&
          u.tensors[0].decay == 1 && u.tensors[1].decay == 0, "tensors are laid out back to back", "wrong offsets");

    // A slice that misses a tensor reports no overlap; a slice inside one gives its range.
    size_t lo = 99, hi = 99;
    check(!flat_tensor_slice(&u.tensors[1], 0, 6, &lo, &hi), "slice before a tensor does not meet it", "met");
    check(flat_tensor_slice(&u.tensors[2], 13, 20, &lo, &hi) && lo == 2 && hi == 9, "slice inside a tensor", "wrong range");

    // The unit is full at FLAT_UNIT_MAX_TENSORS.
    FlatUnit full;
    memset(&full, 0, sizeof(full));
    int last = 0;
    for (int i = 0; i <= FLAT_UNIT_MAX_TENSORS; i++) last = flat_unit_add(&full, "x", 1, 1, 0);
    check(last == -1 && full.n_tensors == FLAT_UNIT_MAX_TENSORS, "adding past the maximum fails", "accepted");

    // An empty unit still gives each rank one aligned (zero) slot.
    FlatUnit empty;
    memset(&empty, 0, sizeof(empty));
    flat_unit_finalize(&empty, 4, 64);
    check(empty.padded == 256 && empty.shard == 64, "empty unit pads to one slot per rank", "wrong padding");

    // Op slots: the root's parameter and gradient slots carry the root, the others a block
    // (the largest). A root of 1024 elements and blocks of 256 / 512 (W = 2, align 64).
    FlatUnit units[5];
    memset(units, 0, sizeof(units));
    flat_unit_add(&units[0], "wte", 64, 16, 1);
    for (int b = 1; b < 5; b++) flat_unit_add(&units[b], "w", b == 3 ? 32 : 16, 16, 1);
    for (int b = 0; b < 5; b++) flat_unit_finalize(&units[b], 2, 64);
    const size_t R = units[0].padded, B = units[3].padded;
    const struct { FsdpConfig cfg; const char* what; int n; size_t want[10]; } op_cases[] = {
        {{1, 1, 1, 0, 0.0f, 0}, "ZeRO-3, prefetch 1", 6, {R, B, B, R, B, B}},
        {{2, 1, 0, 0, 0.0f, 0}, "prefetch 2, gradients reduced on the last micro-step", 9, {R, B, B, B, R, B, B, B, B}},
        {{1, 0, 1, 0, 0.0f, 0}, "ZeRO-2 (blocks stay gathered)", 8, {R, B, B, B, B, R, B, B}},
    };
    for (size_t c = 0; c < sizeof(op_cases) / sizeof(op_cases[0]); c++) {
        size_t got[16];
        const int n = fsdp_max_ops(&op_cases[c].cfg, 5);
        int same = n == op_cases[c].n;
        if (same) {
            fsdp_op_padded(&op_cases[c].cfg, units, 5, got);
            for (int k = 0; k < n; k++) same &= got[k] == op_cases[c].want[k];
        }
        snprintf(name, sizeof(name), "op slots, %s: the root's two carry %zu elements, the rest %zu", op_cases[c].what, R, B);
        snprintf(why, sizeof(why), "%d op slots (want %d), or another size", n, op_cases[c].n);
        check(same && R == 1024 && B == 512, name, why);
    }

    return failures ? 1 : 0;
}
