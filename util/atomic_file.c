// util/: what every other folder may include and none of them owns; util/ itself includes
// nothing of ours. Kept to what is used: the atomic file write (atomic_file.h), the one
// place that writes a file by tmp, fsync, rename and an fsync of the directory.
#include "util/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 1;
}

int fsync_dir(const char* dir, char* err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
    int e = fsync(fd) != 0 && errno != EINVAL ? errno : 0;
    close(fd);
    return e ? fail(err, errlen, "%s: fsync failed: %s", dir, strerror(e)) : 0;
}

int atomic_file_open(AtomicFile* f, const char* path, AtomicTmpName name, char* err, size_t errlen) {
    f->fd = -1;
    f->tmp[0] = '\0';
    int n = snprintf(f->path, sizeof(f->path), "%s", path);
    int m = name == ATOMIC_TMP_PID ? snprintf(f->tmp, sizeof(f->tmp), "%s.tmp.%ld", path, (long)getpid())
                                   : snprintf(f->tmp, sizeof(f->tmp), "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof(f->path) || m < 0 || (size_t)m >= sizeof(f->tmp)) {
        f->tmp[0] = '\0';
        return fail(err, errlen, "%s: path too long", path);
    }
    // rename() would refuse a directory too, but only after the whole file was written.
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        f->tmp[0] = '\0';
        return fail(err, errlen, "%s: is a directory", path);
    }
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        fail(err, errlen, "%s: cannot create: %s", f->tmp, strerror(errno));
        f->tmp[0] = '\0';  // not ours to remove (a directory, another writer's file)
        return 1;
    }
    return 0;
}

void atomic_file_abort(AtomicFile* f) {
    if (!f->tmp[0]) return;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    unlink(f->tmp);
    f->tmp[0] = '\0';
}

static int write_some(AtomicFile* f, const void* buf, size_t n, off_t at, int positioned, char* err, size_t errlen) {
    const char* p = (const char*)buf;
    while (n > 0) {
        ssize_t w = positioned ? pwrite(f->fd, p, n, at) : write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fail(err, errlen, "%s: write failed: %s", f->tmp, w < 0 ? strerror(errno) : "no progress");
            atomic_file_abort(f);
            return 1;
        }
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

int atomic_file_write(AtomicFile* f, const void* buf, size_t n, char* err, size_t errlen) {
    return write_some(f, buf, n, 0, 0, err, errlen);
}

int atomic_file_pwrite(AtomicFile* f, const void* buf, size_t n, off_t at, char* err, size_t errlen) {
    return write_some(f, buf, n, at, 1, err, errlen);
}

int atomic_file_commit(AtomicFile* f, char* err, size_t errlen) {
    if (fsync(f->fd) != 0) {
        fail(err, errlen, "%s: fsync failed: %s", f->tmp, strerror(errno));
        atomic_file_abort(f);
        return 1;
    }
    int closed = close(f->fd) == 0;
    f->fd = -1;
    if (!closed) {
        fail(err, errlen, "%s: close failed: %s", f->tmp, strerror(errno));
        atomic_file_abort(f);
        return 1;
    }
    if (rename(f->tmp, f->path) != 0) {
        fail(err, errlen, "%s: rename failed: %s", f->path, strerror(errno));
        atomic_file_abort(f);
        return 1;
    }
    f->tmp[0] = '\0';
    // The rename is durable only once the directory is.
    char dir[PATH_MAX];
    const char* slash = strrchr(f->path, '/');
    if (!slash) snprintf(dir, sizeof(dir), ".");
    else snprintf(dir, sizeof(dir), "%.*s", slash == f->path ? 1 : (int)(slash - f->path), f->path);
    return fsync_dir(dir, err, errlen);
}

int atomic_write_file(const char* path, const void* buf, size_t n, AtomicTmpName name, char* err, size_t errlen) {
    AtomicFile f;
    if (atomic_file_open(&f, path, name, err, errlen) || atomic_file_write(&f, buf, n, err, errlen)) return 1;
    return atomic_file_commit(&f, err, errlen);
}
