// One job per run directory. While a job trains, rank 0 holds an exclusive flock() on
// DIR/train_gpt.lock in its -o directory and in its --ckpt-dir (when that is elsewhere); the
// file names the holder ("pid P host H since T"). A second launch on the same directory
// (a relaunch while an earlier attempt's ranks still live on, say, after mpirun itself was
// killed) is refused, naming the holder, instead of racing it for the checkpoints.
//
// The kernel drops the lock when the holder exits, however it exits (kill -9 included), so
// a lock file left behind never blocks anyone: only a live holder does. On a filesystem
// without flock (ENOLCK, EOPNOTSUPP: some NFS or Lustre mounts) the run says so once and goes
// on unlocked.
#ifndef FSDP_TRAIN_RUN_LOCK_H
#define FSDP_TRAIN_RUN_LOCK_H

#include <stddef.h>
#include "comm/process_group.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RUN_LOCK_FILE "train_gpt.lock"

typedef struct {
    int n;                      // locks held (0 to 2); {0} is a valid, empty lock
    int fd[2];
    char path[2][1100];
} RunLock;

// Locks output_dir and ckpt_dir (the checkpoint root: --ckpt-dir, or the one under -o; either
// may be NULL; each is created if missing, as the run would create it) in this process, and
// checks that files can be created in each (a probe file is created and removed: a lock file
// left by an earlier run proves nothing). 0, or non-zero with one line in err naming the
// directory ("-o DIR: ..." or "checkpoint directory DIR: ...") and, when another process holds
// it, that process; nothing is held then.
int run_lock_acquire_local(RunLock* l, const char* output_dir, const char* ckpt_dir, char* err, size_t errlen);

// Collective over pg's world: rank 0 takes the locks and checks that --save-model's file
// (save_model, or NULL) could be written, creating its directory if missing, and that files
// can be created in --tensorboard's directory (tensorboard_dir, or NULL; created if missing);
// every rank gets the verdict (0, or non-zero on every rank, the message in rank 0's err:
// "--save-model PATH: ..." or "--tensorboard DIR: ..."). Call before anything is read from or
// written to those directories, so that an unwritable output stops the run at startup, not
// after training.
int run_lock_acquire(RunLock* l, const ProcessGroup* pg, const char* output_dir, const char* ckpt_dir, const char* save_model,
                     const char* tensorboard_dir, char* err, size_t errlen);

// Whether files can be created in dir (another output of rank 0's, as --tensorboard's), checked
// the way the locked directories are: dir is created if missing, a temporary file created in it
// and removed. 0, or 1 with one line in err: "FLAG DIR: ...". (run_lock_acquire calls it for
// --tensorboard; tensorboard.c again when it opens the file, as it may be called alone.)
int run_dir_writable(const char* flag, const char* dir, char* err, size_t errlen);

// Whether rank 0 can write the file at path (--save-model's, --eval-log's) when the time comes:
// its directory is created if missing, then a temporary of atomic_file's is created there and
// removed. `what` and `shown` name the flag and its value for the message. 0, or 1 with one
// line in err.
int run_file_writable(const char* what, const char* shown, const char* path, char* err, size_t errlen);

// Drops the locks (the lock files stay: their content is only informative). A no-op for an
// empty lock, so every rank may call it.
void run_lock_release(RunLock* l);

#ifdef __cplusplus
}
#endif
#endif
