#include "train/signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

// ---------------------------------------------------------------------------------------
// The launcher

typedef struct {
    pid_t launcher;
    int rank;
} LauncherWatch;

// Polls the parent every 0.1 s. A process whose parent dies is re-parented (to init or a
// subreaper), so getppid() changes: that is the launcher's death, whichever of its threads
// started us (PR_SET_PDEATHSIG fires on the exit of that thread, not of the process).
static void* watch_launcher(void* arg) {
    const LauncherWatch lw = *(const LauncherWatch*)arg;
    free(arg);
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (getppid() == lw.launcher) nanosleep(&tick, NULL);
    // The launcher's pipes may be gone with it: write() then fails with EPIPE (this thread
    // blocks SIGPIPE), and the line is lost, but the exit is what matters.
    char line[200];
    int n = snprintf(line, sizeof(line),
                     "error: [rank %d] the launcher that started this rank (pid %ld) is gone: exiting now "
                     "(nothing more is saved; a checkpoint being written is not committed)\n",
                     lw.rank, (long)lw.launcher);
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
    _exit(1);  // not exit(): the other threads may hold stdio's locks or be inside the transport
}

int signals_watch_launcher(long launcher_pid, int rank) {
    if (launcher_pid <= 0) return 0;
    LauncherWatch* lw = (LauncherWatch*)malloc(sizeof(LauncherWatch));
    if (!lw) return 1;
    lw->launcher = (pid_t)launcher_pid;
    lw->rank = rank;
    // The thread blocks every signal: the stop signals' handlers run on the program's threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, watch_launcher, lw);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) free(lw);
    return rc != 0;
}
