// dev/fuzz/: libFuzzer harnesses (build: make fuzz; run: dev/test/test_fuzz.sh, or by hand
// as build/fuzz/fuzz_NAME [-runs=N | -max_total_time=S] DIR, DIR a copy of
// dev/fuzz/corpus/NAME). Each harness writes the fuzzer's bytes to a file and hands it to a
// reader the way the program would; a sanitizer report or a crash is a bug in that reader.
// This header: the scratch directory and file writing the harnesses share.
#ifndef FSDP_FUZZ_UTIL_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // nftw
#endif
#define FSDP_FUZZ_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) { return remove(path); }
static char fuzz_dir_path[512];
static void remove_fuzz_dir(void) { nftw(fuzz_dir_path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// A directory of this process's own (removed at exit), made once: under $FUZZ_TMPDIR, else /dev/shm (a file
// rewritten a million times on ext4 is flushed to disk at every close after O_TRUNC, which
// makes a run ten times slower), else $TMPDIR or /tmp.
static const char* fuzz_dir(void) {
    char* dir = fuzz_dir_path;
    if (!dir[0]) {
        const char* base = getenv("FUZZ_TMPDIR");
        if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        if (!base || !*base) base = "/tmp";
        snprintf(dir, sizeof(fuzz_dir_path), "%s/fsdp_fuzz.XXXXXX", base);
        if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
        atexit(remove_fuzz_dir);
    }
    return dir;
}

// Replaces path's content with data[0 .. size).
static void fuzz_write(const char* path, const uint8_t* data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); abort(); }
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) { perror(path); abort(); }
        done += (size_t)k;
    }
    close(fd);
}

// The lowest free descriptor: what a reader opens and forgets shows up as a higher one.
static int lowest_free_fd(void) {
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0) abort();
    close(fd);
    return fd;
}

#endif
