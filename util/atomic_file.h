// An output file that appears whole under its name or not at all: written under a temporary
// name in the same directory, fsynced, renamed over PATH, and the directory fsynced. A reader
// (or a run after a crash) finds at PATH either the old file or all of the new one, never a
// torn one, and a completed commit survives a power loss. Every file that something else
// reads back is written this way: checkpoint manifests and `latest`, the ckpt tool's exports,
// llm.c model files, token shards and tokenize_text's state, the TCP rendezvous files.
//
// Errors are returned, never fatal: 0, or non-zero with one line in err that names the file
// ("out/model.bin.tmp: write failed: No space left on device"). A call that fails has closed
// the handle and removed the temporary file already, so its caller only reports;
// atomic_file_abort is for a caller that gives up for a reason of its own.
#ifndef FSDP_ATOMIC_FILE_H
#define FSDP_ATOMIC_FILE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

// The temporary file's name. ATOMIC_TMP: PATH.tmp, for a PATH that one process writes at a
// time (its caller sees to that: the run directory's lock, a user's output name); a crash
// leaves at most that one file, which the next write truncates and reuses, and a test can
// block the write by putting a directory there. ATOMIC_TMP_PID: PATH.tmp.PID, for a PATH
// that several processes may write at once (each renames a whole file of its own; the last
// one wins), or whose leftovers a later run removes once the process named in them is dead
// (tokenize_text's shards). Never a random name (mkstemp): a crash's leftovers could not be
// told from a live writer's, nor found again, and would pile up.
typedef enum { ATOMIC_TMP, ATOMIC_TMP_PID } AtomicTmpName;

typedef struct {
    int fd;                   // -1 once closed
    char path[PATH_MAX];
    char tmp[PATH_MAX + 32];  // "" once renamed to path or removed
} AtomicFile;

// Creates the temporary file (mode 0644, emptied if it exists). A PATH that is a directory is
// refused here, before anything is written.
int atomic_file_open(AtomicFile* f, const char* path, AtomicTmpName name, char* err, size_t errlen);
// Appends n bytes at the file position.
int atomic_file_write(AtomicFile* f, const void* buf, size_t n, char* err, size_t errlen);
// Writes n bytes at offset `at` (the file grows as needed; the file position stays).
int atomic_file_pwrite(AtomicFile* f, const void* buf, size_t n, off_t at, char* err, size_t errlen);
// fsync, close, rename over PATH, fsync PATH's directory. When only the last step fails, PATH
// already holds the whole new file, but its name might not survive a power loss.
int atomic_file_commit(AtomicFile* f, char* err, size_t errlen);
// Closes and removes the temporary file; PATH is untouched. A no-op on a handle that is
// closed already (or zeroed); safe in a signal handler (it only calls close and unlink).
void atomic_file_abort(AtomicFile* f);

// The n bytes of buf as PATH, in one call (open, write, commit).
int atomic_write_file(const char* path, const void* buf, size_t n, AtomicTmpName name, char* err, size_t errlen);

// fsyncs a directory, so that the entries created, renamed or removed in it survive a crash:
// the last step of a commit, and of a directory's own commit (checkpoint/ renames step_N.tmp/
// to step_N/ and syncs their parent). A file system that cannot sync directories (EINVAL)
// counts as done. Err: "DIR: fsync failed: ...".
int fsync_dir(const char* dir, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
