// Stop signals (train/signals.h): in the setup phase SIGTERM and SIGUSR1 end the process at
// once, even while it is blocked in open() on a FIFO that no one writes, with one line on
// stderr and the status 128 + signal; in the training phase they are only recorded, and the
// system call they interrupt goes on (SA_RESTART). Each case runs in a child process.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "train/signals.h"

static int failures = 0;
static void ok(const char* name) { printf("ok - %s\n", name); }
static void not_ok(const char* name, const char* why) { printf("not ok - %s: %s\n", name, why); failures++; }

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// Waits up to 5 s for pid; a child still running then is killed and reported (-1).
static int wait_bounded(pid_t pid, int* status) {
    for (int i = 0; i < 500; i++) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 0;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return -1;
}

// A child in the setup phase blocks in open() of a FIFO without a writer; sig must end it
// with status 128 + sig and its line on stderr.
static void setup_phase_case(const char* fifo, int sig, const char* name, const char* want) {
    int sync[2], errp[2];
    if (pipe(sync) || pipe(errp)) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(errp[1], STDERR_FILENO);
        close(errp[0]);
        signals_install();
        if (write(sync[1], "r", 1) != 1) _exit(3);
        int fd = open(fifo, O_RDONLY);  // blocks: nobody opens the FIFO for writing
        (void)fd;
        _exit(4);                       // reached only if the open returned
    }
    close(errp[1]);
    char c;
    if (read(sync[0], &c, 1) != 1) { not_ok(name, "the child did not start"); return; }
    sleep_ms(100);                      // let it reach the open()
    kill(pid, sig);
    int status;
    char why[512];
    if (wait_bounded(pid, &status) != 0) { not_ok(name, "still blocked 5 s after the signal"); return; }
    char msg[256] = "";
    ssize_t k = read(errp[0], msg, sizeof(msg) - 1);
    msg[k > 0 ? k : 0] = '\0';
    msg[strcspn(msg, "\n")] = '\0';
    close(sync[0]); close(sync[1]); close(errp[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 128 + sig) {
        snprintf(why, sizeof(why), "%s %d, expected exit status %d", WIFEXITED(status) ? "exit status" : "killed by signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), 128 + sig);
        not_ok(name, why);
    } else if (!strstr(msg, want)) {
        snprintf(why, sizeof(why), "stderr '%s' does not say '%s'", msg, want);
        not_ok(name, why);
    } else {
        snprintf(why, sizeof(why), "%s (status %d): %s", name, 128 + sig, msg);
        ok(why);
    }
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: test_signals TMPDIR\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char fifo[1024];
    snprintf(fifo, sizeof(fifo), "%s/never_written.fifo", argv[1]);
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) { perror("mkfifo"); return 2; }

    setup_phase_case(fifo, SIGTERM, "setup phase: SIGTERM ends a process blocked in open() of a FIFO at once",
                     "error: stopped by SIGTERM during setup");
    setup_phase_case(fifo, SIGUSR1, "setup phase: SIGUSR1 ends it too", "error: stopped by SIGUSR1 during setup");

    // Training phase: the signal is recorded; a read() it interrupts goes on and returns the
    // byte written after the signal; the process lives on.
    int data[2], sync[2];
    if (pipe(data) || pipe(sync)) { perror("pipe"); return 2; }
    pid_t pid = fork();
    if (pid == 0) {
        signals_install();
        signals_enter_training();
        int before = signals_stop_requested();
        if (write(sync[1], "r", 1) != 1) _exit(3);
        char c;
        ssize_t k = read(data[0], &c, 1);  // the signal arrives while this blocks
        int sig = signals_stop_requested();
        _exit(before != 0 ? 10 : k != 1 ? 11 : sig != SIGUSR1 ? 12 : 0);
    }
    char c;
    int status;
    if (read(sync[0], &c, 1) != 1) not_ok("training phase", "the child did not start");
    sleep_ms(100);
    kill(pid, SIGUSR1);
    sleep_ms(100);
    if (write(data[1], "x", 1) != 1) perror("write");
    if (wait_bounded(pid, &status) != 0) not_ok("training phase: SIGUSR1 is recorded", "the child hung");
    else if (!WIFEXITED(status)) not_ok("training phase: SIGUSR1 is recorded", "the signal killed the process");
    else if (WEXITSTATUS(status) != 0) {
        const char* why[] = {"a signal was recorded before any was sent", "the interrupted read() did not restart",
                             "signals_stop_requested() is not SIGUSR1"};
        int code = WEXITSTATUS(status);
        not_ok("training phase: SIGUSR1 is recorded", code >= 10 && code <= 12 ? why[code - 10] : "unexpected status");
    } else {
        ok("training phase: SIGUSR1 is only recorded (the process lives on, the read it interrupted restarts)");
    }
    unlink(fifo);
    return failures ? 1 : 0;
}
