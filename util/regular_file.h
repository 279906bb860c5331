// Input files a user names (token shards, device profiles, logs, model files): opened for
// reading only when they are regular files, and their errors worded for what they are.
//   - A FIFO would block the open until a writer appears, and its reads for ever; /dev/zero
//     never ends. The open uses O_NONBLOCK (a FIFO's open returns at once; a regular file's
//     reads are unaffected) and the kind is checked on the descriptor (fstat), so a path
//     swapped between a check and the open changes nothing.
//   - A symlink loop (ELOOP, "Too many levels of symbolic links") is called one: a path that
//     leads back to itself would otherwise read like a missing file.
#ifndef FSDP_UTIL_REGULAR_FILE_H
#define FSDP_UTIL_REGULAR_FILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

// What a file that is not a plain one is, for messages: "a directory", "a FIFO", "a character
// device", "a block device", "a socket".
const char* file_kind(mode_t mode);

// strerror(e) for an error about a path, except ELOOP: "a symlink loop (Too many levels of
// symbolic links)".
const char* path_error(int e);

// Opens path read-only if it is a regular file; *st is its fstat. Returns the descriptor, or
// with one line in err -1 ("PATH: cannot open: REASON") or -2 ("PATH: not a regular file (a
// FIFO)": a caller may add what it expected).
int open_regular_file(const char* path, struct stat* st, char* err, size_t errlen);

// Reads a regular file of at most max_bytes whole, NUL-terminated (*len: its bytes, may be
// NULL). NULL with one line in err naming the path: open_regular_file's, "PATH: N bytes, more
// than the M read here", a read error, or out of memory. The size is checked again by the
// read: a file that grows or shrinks meanwhile is refused.
char* read_regular_file(const char* path, size_t max_bytes, size_t* len, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
