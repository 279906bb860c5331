// The ckpt tool's model readers (checkpoint/tool/ckpt.c: load_source, which takes a
// safetensors file, or an llm.c model file, by its content), compiled into this harness with
// its main renamed: the fuzzer's bytes are the file `ckpt import` would read.
//
// The tool reports a bad file with fail(), which exits. To stay in one process (fast, no
// fork), exit is redirected here to a longjmp back into the harness, and what the tool had
// allocated (its malloc/calloc/realloc and cJSON's, through cJSON's hooks) or opened by then is
// released, so that a million rejected inputs neither leak nor run out of descriptors. A
// rejection is the expected outcome; a sanitizer report or a crash is a bug.
#include "dev/fuzz/fuzz_util.h"

// ckpt.c's system and project headers first, under their own names (their include guards
// keep ckpt.c from reading them again below the redirections).
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "checkpoint/checkpoint.h"
#include "model/model.h"
#include "model/state.h"

// ---- allocations made during one input, released after it (whatever path it ended on)
static void** live;            // open addressing; NULL empty, TOMB deleted
static size_t live_cap, live_n;
#define TOMB ((void*)1)

static size_t slot_of(void* p, size_t cap) { return ((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL & (cap - 1); }
static void live_add(void* p);
static void live_grow(void) {
    void** old = live;
    size_t old_cap = live_cap;
    live_cap = live_cap ? 2 * live_cap : 1024;
    live = (void**)calloc(live_cap, sizeof(void*));
    if (!live) abort();
    live_n = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] && old[i] != TOMB) live_add(old[i]);
    free(old);
}
static void live_add(void* p) {
    if (!p) return;
    if (2 * (live_n + 1) > live_cap) live_grow();
    size_t i = slot_of(p, live_cap);
    while (live[i] && live[i] != TOMB) i = (i + 1) & (live_cap - 1);
    live[i] = p;
    live_n++;
}
static int live_remove(void* p) {
    if (!p || !live_cap) return 0;
    for (size_t i = slot_of(p, live_cap), n = 0; live[i] && n < live_cap; i = (i + 1) & (live_cap - 1), n++)
        if (live[i] == p) { live[i] = TOMB; return 1; }
    return 0;
}
static void* fz_malloc(size_t n) { void* p = malloc(n); live_add(p); return p; }
static void* fz_calloc(size_t a, size_t b) { void* p = calloc(a, b); live_add(p); return p; }
static void* fz_realloc(void* p, size_t n) {
    void* q = realloc(p, n);
    if (q || n == 0) live_remove(p);
    live_add(q);
    return q;
}
static void fz_free(void* p) { live_remove(p); free(p); }
static void release_all(void) {
    for (size_t i = 0; i < live_cap; i++)
        if (live[i] && live[i] != TOMB) free(live[i]);
    if (live_cap) memset(live, 0, live_cap * sizeof(void*));
    live_n = 0;
}

// ---- fail()'s exit, and its message (stderr would take most of the time: one line per input)
static jmp_buf fz_jmp;
static void fz_exit(int code) { longjmp(fz_jmp, code ? code : 1); }
static FILE* fz_stderr;

#define main ckpt_main
#define exit fz_exit
#define malloc fz_malloc
#define calloc fz_calloc
#define realloc fz_realloc
#define free fz_free
#undef stderr
#define stderr fz_stderr
#include "checkpoint/tool/ckpt.c"
#undef main
#undef exit
#undef malloc
#undef calloc
#undef realloc
#undef free
#undef stderr
#define stderr stderr

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    cJSON_Hooks hooks = {fz_malloc, fz_free};
    cJSON_InitHooks(&hooks);
    if (!freopen("/dev/null", "w", stdout)) abort();  // "read X: safetensors, ..." per input
    fz_stderr = getenv("FUZZ_VERBOSE") ? stderr : fopen("/dev/null", "w");
    if (!fz_stderr) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[600];
    snprintf(path, sizeof(path), "%s/model.safetensors", fuzz_dir());
    fuzz_write(path, data, size);
    int first_fd = dup(0);  // the lowest free descriptor: what load_source opens comes after
    close(first_fd);
    static Weights w;
    memset(&w, 0, sizeof(w));
    if (setjmp(fz_jmp) == 0) load_source(path, &w, 0);
    // Rejected (fail() jumped back here) or loaded: release what it left.
    release_all();
    for (int fd = first_fd; fd < first_fd + 16; fd++)
        if (fcntl(fd, F_GETFD) != -1) close(fd);
    return 0;
}
