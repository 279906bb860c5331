#include "train/signals.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

// Set by the training-phase handler, read once per step. The program's only global mutable
// state (see signals.h).
static volatile sig_atomic_t stop_signal = 0;

// Only async-signal-safe calls: write() of a constant line, then _exit(). exit() would run
// atexit handlers and flush stdio, which the interrupted code may hold.
static void on_stop_in_setup(int sig) {
    static const char term[] = "error: stopped by SIGTERM during setup (before the first step: nothing to save)\n";
    static const char usr1[] = "error: stopped by SIGUSR1 during setup (before the first step: nothing to save)\n";
    const char* msg = sig == SIGTERM ? term : usr1;
    size_t len = sig == SIGTERM ? sizeof(term) - 1 : sizeof(usr1) - 1;
    ssize_t w = write(STDERR_FILENO, msg, len);
    (void)w;  // nothing to do about a failed write here
    _exit(128 + sig);
}

static void on_stop_in_training(int sig) { stop_signal = sig; }

static void install(void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    // Neither signal interrupts the other's handler half-way.
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = flags;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void signals_install(void) { install(on_stop_in_setup, 0); }

// SA_RESTART: a write or read the signal interrupts goes on; the step's end acts on it.
void signals_enter_training(void) { install(on_stop_in_training, SA_RESTART); }

int signals_stop_requested(void) { return stop_signal; }

void signals_watch_collectives(CommWorld* w, int on) {
    double timeout = comm_timeout(w), wait_s = timeout > 0 && timeout / 4 < 10.0 ? timeout / 4 : 10.0;
    comm_set_stop_watch(w, on ? signals_stop_requested : NULL, wait_s);
}
