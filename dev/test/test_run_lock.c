// The run-directory lock (train/run_lock.h): a second holder is refused naming the first
// (pid and host); -o and --ckpt-dir naming one directory lock it once; a holder killed with
// -9 leaves a lock file that blocks nobody; a failure leaves nothing held; the directory is
// created when missing, and a lock file that is a symlink is refused. Other holders are
// child processes (flock locks belong to open files, so a process cannot test itself).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/run_lock.h"

static int failures = 0;
static void check(int cond, const char* name, const char* detail) {
    if (cond) printf("ok - %s\n", name);
    else { printf("not ok - %s: %s\n", name, detail); failures++; }
}

// In a child process: tries to lock (out, ckpt); returns 0 when it got the lock, else 1 with
// the message in err.
static int try_in_child(const char* out, const char* ckpt, char* err, size_t errlen) {
    int p[2];
    if (pipe(p)) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        RunLock l;
        char e[1024] = "";
        int rc = run_lock_acquire_local(&l, out, ckpt, e, sizeof(e));
        if (write(p[1], e, strlen(e)) < 0) {}
        _exit(rc ? 1 : 0);
    }
    close(p[1]);
    ssize_t k = read(p[0], err, errlen - 1);
    err[k > 0 ? k : 0] = '\0';
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: test_run_lock TMPDIR\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char out[1024], ckpt[1024], alias[1100], err[1024] = "", detail[1400], want[256], host[128] = "";
    gethostname(host, sizeof(host) - 1);
    snprintf(out, sizeof(out), "%s/run/new", argv[1]);      // does not exist yet
    snprintf(ckpt, sizeof(ckpt), "%s/ckpts", argv[1]);

    RunLock l;
    int rc = run_lock_acquire_local(&l, out, NULL, err, sizeof(err));
    struct stat st;
    char lockfile[1200], content[256] = "";
    snprintf(lockfile, sizeof(lockfile), "%s/%s", out, RUN_LOCK_FILE);
    FILE* f = fopen(lockfile, "r");
    if (f) { if (!fgets(content, sizeof(content), f)) content[0] = '\0'; fclose(f); }
    snprintf(want, sizeof(want), "pid %ld host %s since ", (long)getpid(), host);
    snprintf(detail, sizeof(detail), "rc %d (%s), lock file says '%s'", rc, err, content);
    check(rc == 0 && stat(out, &st) == 0 && S_ISDIR(st.st_mode) && strncmp(content, want, strlen(want)) == 0,
          "acquire creates the directory and writes 'pid P host H since T' into train_gpt.lock", detail);

    rc = try_in_child(out, NULL, err, sizeof(err));
    snprintf(want, sizeof(want), "in use by another job (pid %ld host %s since ", (long)getpid(), host);
    snprintf(detail, sizeof(detail), "rc %d: %s", rc, err);
    check(rc == 1 && strstr(err, want) && strstr(err, "-o ") == err && strstr(err, RUN_LOCK_FILE),
          "a second holder of -o DIR is refused, naming the first (pid, host) and the lock file", detail);
    rc = try_in_child(NULL, out, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d: %s", rc, err);
    check(rc == 1 && strstr(err, "checkpoint directory ") == err && strstr(err, want),
          "the same directory as the checkpoint directory is refused too", detail);
    run_lock_release(&l);
    rc = try_in_child(out, NULL, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d: %s", rc, err);
    check(rc == 0, "after release another process gets the lock", detail);

    // -o D --ckpt-dir D (and D through another path): one lock, not a refusal of itself.
    snprintf(alias, sizeof(alias), "%s/../new", out);
    rc = run_lock_acquire_local(&l, out, alias, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d, %d locks: %s", rc, l.n, err);
    check(rc == 0 && l.n == 1, "-o D --ckpt-dir D/../D: locked once", detail);
    run_lock_release(&l);
    rc = run_lock_acquire_local(&l, out, ckpt, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d, %d locks: %s", rc, l.n, err);
    check(rc == 0 && l.n == 2, "-o and --ckpt-dir in two places: both locked", detail);
    rc = try_in_child(NULL, ckpt, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d: %s", rc, err);
    check(rc == 1 && strstr(err, "in use by another job"), "the --ckpt-dir elsewhere is held too", detail);
    run_lock_release(&l);

    // A holder killed with -9: the kernel drops its lock; its file blocks nobody.
    int p[2];
    if (pipe(p)) { perror("pipe"); return 2; }
    pid_t holder = fork();
    if (holder == 0) {
        RunLock hl;
        char e[1024];
        if (run_lock_acquire_local(&hl, out, NULL, e, sizeof(e))) _exit(1);
        if (write(p[1], "h", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c;
    int got = read(p[0], &c, 1) == 1;
    rc = try_in_child(out, NULL, err, sizeof(err));
    int refused_while_alive = rc == 1 && strstr(err, "in use by another job") != NULL;
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    rc = run_lock_acquire_local(&l, out, NULL, err, sizeof(err));
    snprintf(detail, sizeof(detail), "holder up %d, refused while alive %d, acquire after kill -9: rc %d %s", got,
             refused_while_alive, rc, err);
    check(got && refused_while_alive && rc == 0, "a holder killed with -9 leaves a lock file that blocks nobody", detail);
    run_lock_release(&l);

    // A failure holds nothing: -o is free but --ckpt-dir cannot be made, so -o is released.
    char bad[1100];
    snprintf(bad, sizeof(bad), "%s/%s/sub", out, RUN_LOCK_FILE);  // under a plain file
    rc = run_lock_acquire_local(&l, out, bad, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d: %s", rc, err);
    int bad_refused = rc != 0 && strstr(err, "checkpoint directory ") == err && strstr(err, "cannot create: Not a directory");
    rc = try_in_child(out, NULL, err, sizeof(err));
    check(bad_refused && rc == 0, "a checkpoint directory that cannot be created is named, and -o is not left locked", detail);

    // A lock file planted as a symlink is not followed (it could truncate another file).
    char sl[1024], target[1200], linkpath[1200];
    snprintf(sl, sizeof(sl), "%s/symlinked", argv[1]);
    mkdir(sl, 0700);
    snprintf(target, sizeof(target), "%s/precious.txt", argv[1]);
    f = fopen(target, "w");
    if (f) { fputs("keep me\n", f); fclose(f); }
    snprintf(linkpath, sizeof(linkpath), "%s/%s", sl, RUN_LOCK_FILE);
    if (symlink(target, linkpath) != 0) perror("symlink");
    rc = run_lock_acquire_local(&l, sl, NULL, err, sizeof(err));
    stat(target, &st);
    snprintf(detail, sizeof(detail), "rc %d, target now %lld bytes: %s", rc, (long long)st.st_size, err);
    check(rc != 0 && strstr(err, "cannot open the lock file") && st.st_size == 8, "a lock file that is a symlink is refused, its target untouched", detail);

    RunLock empty = {0};
    run_lock_release(&empty);  // every rank releases; most hold nothing
    check(empty.n == 0, "releasing an empty lock is a no-op", "");
    return failures ? 1 : 0;
}
