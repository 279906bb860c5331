#include "train/test_hooks.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void test_hooks_read(TestHooks* h) {
    h->nan_loss_steps = getenv("FSDP_TEST_NAN_LOSS_STEPS");
    h->nan_grad_steps = getenv("FSDP_TEST_NAN_GRAD_STEPS");
    h->stall = getenv("FSDP_TEST_STALL");
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

void test_hooks_poison(const TestHooks* h, Fsdp* f, int rank, int step) {
    if (rank == 0 && test_hook_at(h->nan_loss_steps, step)) fsdp_test_poison_loss(f);
    if (rank == 0 && test_hook_at(h->nan_grad_steps, step)) fsdp_test_poison_grad(f);
}
