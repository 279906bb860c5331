#include "util/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char* file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

const char* path_error(int e) {
    return e == ELOOP ? "a symlink loop (Too many levels of symbolic links)" : strerror(e);
}

int open_regular_file(const char* path, struct stat* st, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, path_error(errno)); return -1; }
    if (fstat(fd, st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", path, file_kind(st->st_mode));
        close(fd);
        return -2;
    }
    return fd;
}

char* read_regular_file(const char* path, size_t max_bytes, size_t* len, char* err, size_t errlen) {
    struct stat st;
    int fd = open_regular_file(path, &st, err, errlen);
    if (fd < 0) return NULL;
    if ((unsigned long long)st.st_size > max_bytes) {
        snprintf(err, errlen, "%s: %lld bytes, more than the %zu read here", path, (long long)st.st_size, max_bytes);
        close(fd);
        return NULL;
    }
    const size_t size = (size_t)st.st_size;
    char* text = (char*)malloc(size + 2);
    if (!text) { snprintf(err, errlen, "%s: out of memory", path); close(fd); return NULL; }
    size_t done = 0;
    while (done <= size) {  // one byte past the size tells a file that grew since the fstat
        ssize_t r = read(fd, text + done, size + 1 - done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
            free(text);
            close(fd);
            return NULL;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    close(fd);
    if (done != size) {
        snprintf(err, errlen, "%s: changed while read (%zu bytes, then %s%zu)", path, size, done > size ? "more than " : "", done);
        free(text);
        return NULL;
    }
    text[done] = '\0';
    if (len) *len = done;
    return text;
}
