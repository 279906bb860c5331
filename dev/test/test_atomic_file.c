// The atomic file write (util/atomic_file.h): a committed file has exactly what was written
// (appends and pwrites at offsets); until the commit PATH keeps its old content and the data
// sits under PATH.tmp (PATH.tmp.PID when asked); an abort leaves neither file nor tmp; a
// failure (a PATH that is a directory, a missing or unwritable directory, a blocked tmp name,
// a write that runs out of room) returns non-zero with one line naming the file, removes the
// tmp and leaves an existing PATH untouched; a reader that opens PATH over and over while it
// is rewritten always sees one whole version, never a part.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/atomic_file.h"

static int failures = 0;
static void check(int cond, const char* name, const char* detail) {
    if (cond) printf("ok - %s\n", name);
    else { printf("not ok - %s: %s\n", name, detail); failures++; }
}

static int exists(const char* path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

// The whole file into buf (at most cap bytes); its size, or -1.
static long slurp(const char* path, char* buf, size_t cap) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t n = 0;
    ssize_t r;
    while (n < cap && (r = read(fd, buf + n, cap - n)) > 0) n += (size_t)r;
    close(fd);
    return (long)n;
}

static int has(const char* path, const char* want) {
    char buf[256];
    long n = slurp(path, buf, sizeof(buf));
    return n == (long)strlen(want) && memcmp(buf, want, (size_t)n) == 0;
}

static void put(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(path); exit(2); }
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: test_atomic_file TMPDIR\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char dir[1024], path[1200], tmp[1300], err[512] = "", detail[2048];
    snprintf(dir, sizeof(dir), "%s/atomic", argv[1]);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { perror(dir); return 2; }
    AtomicFile f;

    // ---- a new file: appends and a pwrite at an offset (a header rewritten at the end)
    snprintf(path, sizeof(path), "%s/new.bin", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int rc = atomic_file_open(&f, path, ATOMIC_TMP, err, sizeof(err));
    rc |= atomic_file_write(&f, "....", 4, err, sizeof(err));
    rc |= atomic_file_write(&f, "body", 4, err, sizeof(err));
    check(rc == 0 && !exists(path) && exists(tmp), "mid-write: the data is under PATH.tmp and PATH does not exist yet", err);
    rc |= atomic_file_pwrite(&f, "HEAD", 4, 0, err, sizeof(err));
    rc |= atomic_file_pwrite(&f, "tail", 4, 12, err, sizeof(err));  // past the end: a hole of zeros
    rc |= atomic_file_commit(&f, err, sizeof(err));
    char buf[64];
    long n = slurp(path, buf, sizeof(buf));
    check(rc == 0 && n == 16 && memcmp(buf, "HEADbody\0\0\0\0tail", 16) == 0 && !exists(tmp),
          "a committed file has what was written (writes, pwrites at offsets) and no tmp is left", err);

    // ---- replacing an existing file: PATH keeps the old content until the commit
    snprintf(path, sizeof(path), "%s/latest", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    put(path, "old\n");
    rc = atomic_file_open(&f, path, ATOMIC_TMP_PID, err, sizeof(err));
    rc |= atomic_file_write(&f, "new\n", 4, err, sizeof(err));
    int old_then = has(path, "old\n"), tmp_then = has(tmp, "new\n");
    rc |= atomic_file_commit(&f, err, sizeof(err));
    snprintf(detail, sizeof(detail), "rc %d, old before commit %d, tmp %s %d, err %s", rc, old_then, tmp, tmp_then, err);
    check(rc == 0 && old_then && tmp_then && has(path, "new\n") && !exists(tmp),
          "ATOMIC_TMP_PID: PATH.tmp.PID holds the data, PATH the old file until the commit replaces it", detail);

    // ---- abort: no file, no tmp; an existing PATH untouched; a second abort is harmless
    snprintf(path, sizeof(path), "%s/aborted.bin", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    rc = atomic_file_open(&f, path, ATOMIC_TMP, err, sizeof(err)) || atomic_file_write(&f, "x", 1, err, sizeof(err));
    atomic_file_abort(&f);
    atomic_file_abort(&f);
    check(rc == 0 && !exists(path) && !exists(tmp), "an aborted new file leaves neither the file nor its tmp", err);
    snprintf(path, sizeof(path), "%s/latest", dir);
    rc = atomic_file_open(&f, path, ATOMIC_TMP, err, sizeof(err)) || atomic_file_write(&f, "x", 1, err, sizeof(err));
    atomic_file_abort(&f);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    check(rc == 0 && has(path, "new\n") && !exists(tmp), "an aborted rewrite leaves the existing file as it was", err);
    AtomicFile zeroed;
    memset(&zeroed, 0, sizeof(zeroed));
    atomic_file_abort(&zeroed);  // would close fd 0 if a zeroed handle counted as open
    check(fcntl(0, F_GETFD) != -1 || errno != EBADF, "aborting a zeroed handle closes nothing", "stdin was closed");

    // ---- the one-call write
    snprintf(path, sizeof(path), "%s/whole.json", dir);
    rc = atomic_write_file(path, "{}\n", 3, ATOMIC_TMP, err, sizeof(err));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    check(rc == 0 && has(path, "{}\n") && !exists(tmp), "atomic_write_file: the whole buffer as PATH", err);

    // ---- failures: non-zero, one line naming the file, nothing left, PATH untouched
    char want[1400];
    snprintf(path, sizeof(path), "%s/adir", dir);
    mkdir(path, 0755);
    rc = atomic_write_file(path, "x", 1, ATOMIC_TMP, err, sizeof(err));
    snprintf(want, sizeof(want), "%s: is a directory", path);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    check(rc != 0 && strcmp(err, want) == 0 && !exists(tmp), "a PATH that is a directory is refused naming it, before anything is written", err);

    snprintf(path, sizeof(path), "%s/missing/x.bin", dir);
    err[0] = '\0';
    rc = atomic_write_file(path, "x", 1, ATOMIC_TMP, err, sizeof(err));
    snprintf(want, sizeof(want), "%s.tmp: cannot create: No such file or directory", path);
    check(rc != 0 && strcmp(err, want) == 0, "a missing directory: refused naming the tmp file and why", err);

    // PATH.tmp blocked (a directory there): the write fails, PATH and the blocker stay.
    snprintf(path, sizeof(path), "%s/latest", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    mkdir(tmp, 0755);
    rc = atomic_write_file(path, "newer\n", 6, ATOMIC_TMP, err, sizeof(err));
    snprintf(want, sizeof(want), "%s: cannot create: Is a directory", tmp);
    struct stat st;
    check(rc != 0 && strcmp(err, want) == 0 && has(path, "new\n") && stat(tmp, &st) == 0 && S_ISDIR(st.st_mode),
          "a blocked tmp name: refused naming it, the existing file untouched, the blocker not removed", err);
    rmdir(tmp);

    // A write that runs out of room (the file size limit stands in for a full disk).
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old_lim, lim;
    getrlimit(RLIMIT_FSIZE, &old_lim);
    lim = old_lim;
    lim.rlim_cur = 4096;
    setrlimit(RLIMIT_FSIZE, &lim);
    static char big[8192];
    memset(big, 'b', sizeof(big));
    rc = atomic_write_file(path, big, sizeof(big), ATOMIC_TMP, err, sizeof(err));
    setrlimit(RLIMIT_FSIZE, &old_lim);
    snprintf(want, sizeof(want), "%s: write failed: File too large", tmp);
    check(rc != 0 && strcmp(err, want) == 0 && has(path, "new\n") && !exists(tmp),
          "a write that fails part way: refused naming the tmp, the tmp removed, the existing file untouched", err);

    // An unwritable directory: a read-only one of ours, or for root (whom permissions do not
    // bind) /sys, where nobody creates files.
    const int root = geteuid() == 0;
    if (root) snprintf(path, sizeof(path), "/sys/fsdp_atomic_test");
    else {
        snprintf(tmp, sizeof(tmp), "%s/ro", dir);
        mkdir(tmp, 0755);
        snprintf(path, sizeof(path), "%s/kept", tmp);
        put(path, "kept\n");
        chmod(tmp, 0555);
    }
    rc = atomic_write_file(path, "x", 1, ATOMIC_TMP, err, sizeof(err));
    if (!root) chmod(tmp, 0755);
    snprintf(want, sizeof(want), "%s.tmp: cannot create: Permission denied", path);
    check(rc != 0 && strcmp(err, want) == 0 && (root || has(path, "kept\n")),
          root ? "an unwritable directory (/sys): refused naming the file"
               : "an unwritable directory: refused naming the file, the existing file untouched", err);

    snprintf(path, sizeof(path), "%s/whole.json", dir);
    rc = fsync_dir(path, err, sizeof(err));
    snprintf(want, sizeof(want), "%s: fsync failed: Not a directory", path);
    check(rc != 0 && strcmp(err, want) == 0, "fsync_dir of a file: refused naming it", err);

    // ---- a reader never sees part of a file: a child opens and reads PATH over and over
    // while this process rewrites it (200 times, 64 KiB in 16 writes, all 'a' or all 'b').
    snprintf(path, sizeof(path), "%s/watched", dir);
    enum { SIZE = 65536, PIECES = 16, ROUNDS = 200 };
    static char content[SIZE];
    memset(content, 'a', SIZE);
    if (atomic_write_file(path, content, SIZE, ATOMIC_TMP, err, sizeof(err))) { printf("not ok - setup: %s\n", err); return 1; }
    int stop[2];
    if (pipe(stop)) { perror("pipe"); return 2; }
    pid_t child = fork();
    if (child == 0) {
        close(stop[1]);
        fcntl(stop[0], F_SETFL, O_NONBLOCK);
        static char seen[SIZE + 1];
        long reads = 0, torn = 0;
        char c;
        while (read(stop[0], &c, 1) < 0 && errno == EAGAIN) {
            long k = slurp(path, seen, sizeof(seen));
            reads++;
            if (k != SIZE || memchr(seen, seen[0] == 'a' ? 'b' : 'a', SIZE) || (seen[0] != 'a' && seen[0] != 'b')) torn++;
        }
        printf("%s - a reader opening PATH while it is rewritten sees whole versions only (%ld reads, %ld torn)\n",
               torn || reads == 0 ? "not ok" : "ok", reads, torn);
        _exit(torn || reads == 0);
    }
    close(stop[0]);
    rc = 0;
    for (int r = 0; r < ROUNDS && rc == 0; r++) {
        memset(content, r % 2 ? 'a' : 'b', SIZE);
        rc = atomic_file_open(&f, path, ATOMIC_TMP, err, sizeof(err));
        for (int p = 0; p < PIECES && rc == 0; p++) rc = atomic_file_write(&f, content + p * (SIZE / PIECES), SIZE / PIECES, err, sizeof(err));
        if (rc == 0) rc = atomic_file_commit(&f, err, sizeof(err));
    }
    close(stop[1]);
    int status;
    waitpid(child, &status, 0);
    if (rc) printf("not ok - rewriting the watched file: %s\n", err);
    if (rc || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
    return failures ? 1 : 0;
}
