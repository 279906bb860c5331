#include "train/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "util/atomic_file.h"

// What the lock file says about its holder, on one line ("pid 12 host n1 since ..."), or a
// note when it says nothing yet (the holder is between its flock and its write).
static void read_holder(int fd, char* out, size_t outlen) {
    char buf[256];
    ssize_t k = pread(fd, buf, sizeof(buf) - 1, 0);
    if (k <= 0) { snprintf(out, outlen, "a process that has not written its name yet"); return; }
    buf[k] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    snprintf(out, outlen, "%s", buf);
}

// Locks one directory unless its lock file is one of held[0 .. n_held) (the same directory
// named twice, or through a symlink: flock locks belong to open files, so a second one would
// refuse this very process). Returns 0 (locked: *fd_out and *st_out set; already held or flock
// unsupported, noted on stderr: *fd_out = -1), or 1 with the message in err.
static int lock_dir(const char* flag, const char* dir, const struct stat* held, int n_held, int* fd_out,
                    struct stat* st_out, char* path, size_t pathlen, char* err, size_t errlen) {
    *fd_out = -1;
    if (ckpt_mkdir_p(dir) != 0) { snprintf(err, errlen, "%s %s: cannot create: %s", flag, dir, strerror(errno)); return 1; }
    snprintf(path, pathlen, "%s/%s", dir, RUN_LOCK_FILE);
    // O_NOFOLLOW: a symlink planted under that name cannot make us truncate another file.
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) { snprintf(err, errlen, "%s %s: cannot open the lock file %s: %s", flag, dir, path, strerror(errno)); return 1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: the lock file %s is not a regular file", flag, dir, path);
        close(fd);
        return 1;
    }
    for (int j = 0; j < n_held; j++)
        if (held[j].st_dev == st.st_dev && held[j].st_ino == st.st_ino) { close(fd); return 0; }
    *st_out = st;
    int rc;
    while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
    if (rc != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char holder[256];
            read_holder(fd, holder, sizeof(holder));
            snprintf(err, errlen, "%s %s: the run directory is in use by another job (%s, lock file %s); "
                     "wait for it to end or end it: two jobs in one directory would race for its checkpoints",
                     flag, dir, holder, path);
            close(fd);
            return 1;
        }
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            fprintf(stderr, "note: %s %s: cannot lock %s (%s): a second launch in this directory will not be refused\n",
                    flag, dir, path, strerror(e));
            close(fd);
            return 0;
        }
        snprintf(err, errlen, "%s %s: cannot lock %s: %s", flag, dir, path, strerror(e));
        close(fd);
        return 1;
    }
    char host[128] = "?", when[64] = "?", line[320];
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(line, sizeof(line), "pid %ld host %s since %s\n", (long)getpid(), host, when);
    // The content is informative only (the flock is the lock): a failed write is no error.
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)len, 0) < 0) {}
    *fd_out = fd;
    return 0;
}

// (Checked at startup rather than at the first checkpoint, evaluation or the end of training;
// the temporary has this pid in its name.)
int run_file_writable(const char* what, const char* shown, const char* path, char* err, size_t errlen) {
    char dir[1100], why[1400];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    if (slash && ckpt_mkdir_p(dir) != 0) {
        snprintf(err, errlen, "%s %s: cannot create its directory %s: %s", what, shown, dir, strerror(errno));
        return 1;
    }
    AtomicFile f;
    if (atomic_file_open(&f, path, ATOMIC_TMP_PID, why, sizeof(why))) {
        snprintf(err, errlen, "%s %s: cannot be written (%s)", what, shown, why);
        return 1;
    }
    atomic_file_abort(&f);
    return 0;
}

int run_lock_acquire_local(RunLock* l, const char* output_dir, const char* ckpt_dir, char* err, size_t errlen) {
    memset(l, 0, sizeof(*l));
    const char* flags[2] = {"-o", "checkpoint directory"};  // ckpt_dir may come from -o
    const char* dirs[2] = {output_dir, ckpt_dir};
    struct stat held[2];
    memset(held, 0, sizeof(held));
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !dirs[i][0]) continue;
        int fd;
        if (lock_dir(flags[i], dirs[i], held, l->n, &fd, &held[l->n], l->path[l->n], sizeof(l->path[l->n]), err, errlen)) {
            run_lock_release(l);
            return 1;
        }
        if (fd >= 0) l->fd[l->n++] = fd;
        // The lock file may be an earlier run's: files must still be creatable beside it (the
        // checkpoints' step directories, metrics.jsonl).
        char probe[1100];
        snprintf(probe, sizeof(probe), "%s/%s", dirs[i], RUN_LOCK_FILE);
        if (run_file_writable(flags[i], dirs[i], probe, err, errlen)) {
            run_lock_release(l);
            return 1;
        }
    }
    return 0;
}

int run_dir_writable(const char* flag, const char* dir, char* err, size_t errlen) {
    char probe[1100];
    snprintf(probe, sizeof(probe), "%s/.write_probe", dir);  // (only its temporary is created)
    return run_file_writable(flag, dir, probe, err, errlen);
}

int run_lock_acquire(RunLock* l, const ProcessGroup* pg, const char* output_dir, const char* ckpt_dir, const char* save_model,
                     const char* tensorboard_dir, char* err, size_t errlen) {
    memset(l, 0, sizeof(*l));
    int32_t failed = 0;
    if (pg->rank == 0) {
        failed = run_lock_acquire_local(l, output_dir, ckpt_dir, err, errlen) != 0;
        if (!failed && ((save_model && run_file_writable("--save-model", save_model, save_model, err, errlen)) ||
                        (tensorboard_dir && run_dir_writable("--tensorboard", tensorboard_dir, err, errlen)))) {
            run_lock_release(l);
            failed = 1;
        }
    }
    if (pg->world > 1) comm_all_reduce_i32(pg->world_comm, &failed, 1, COMM_MAX);
    if (failed && pg->rank != 0) snprintf(err, errlen, "rank 0 could not lock the run directory");
    return failed;
}

void run_lock_release(RunLock* l) {
    // Closing the descriptor drops its flock; the file stays for the next holder to rewrite.
    for (int i = 0; i < l->n; i++)
        if (l->fd[i] >= 0) close(l->fd[i]);
    l->n = 0;
}
