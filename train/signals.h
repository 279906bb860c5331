// Stop signals: SIGUSR1 (Slurm's --signal=B:USR1@120 before the time limit, forwarded by the
// sbatch script; a manual `scancel --batch --signal=USR1`) and SIGTERM (scancel, a preemption,
// the time limit, timeout(1), a launcher ending the job). What they do depends on the phase:
//
//   setup     (from signals_install, at the start of main, to signals_enter_training): the
//             process ends at once: one line on stderr, then _exit(128 + signal), the status a
//             shell reports for a death by that signal. Nothing is worth saving before the
//             first step, and setup can block for good (a FIFO or a hung filesystem in an
//             open(), a rank that never joins the rendezvous): a noted signal would never be
//             acted on there, and timeout(1) could not end the run.
//   training  (after signals_enter_training): the handler only records the signal; every rank
//             reads it once per step, they agree on it through that step's loss reduction,
//             save a checkpoint and exit with status EXIT_PREEMPTED (train_gpt.cu).
//
// Two things the training phase adds, so that a stop never waits for the launcher's SIGKILL:
//
//   collectives  (signals_watch_collectives): once a stop signal has come, a collective this
//             rank has waited in for a quarter of --comm-timeout, at most 10 s (well inside
//             Slurm's default KillWait of 30 s), ends the process with one line (comm.h's
//             stop watch): its peer is gone or stuck, and the step would never end. A healthy
//             step's waits are far shorter, so the first signal still ends in a checkpoint;
//             train_gpt.cu turns the watch off around a save, whose waits are for the slowest
//             rank's writes (--comm-timeout still bounds them).
//   the launcher (signals_watch_launcher): a rank that mpirun, mpiexec, srun or
//             scripts/launch_local.sh started polls its parent process every 0.1 s; when the
//             launcher is gone (killed: the rank has been re-parented) the rank exits at once
//             with one line. Checkpoints and model files are committed by a rename and
//             metrics.jsonl gets whole lines (one flushed write each), so exiting anywhere
//             leaves nothing half-written; rank 0 also asks before a checkpoint's rename
//             (ckpt_writer_launcher), so a save in flight is not committed.
//
// The recorded signal is the program's only global mutable state: a signal handler can reach
// nothing else. The phase is not a second one: it is which handler the kernel has installed.
#ifndef FSDP_TRAIN_SIGNALS_H
#define FSDP_TRAIN_SIGNALS_H

#include "comm/comm.h"

// The exit status after a stop signal once the checkpoint is committed: EX_TEMPFAIL, "try
// again later". scripts/slurm/train_gpt2.sbatch requeues the job on it after its own SIGUSR1.
#define EXIT_PREEMPTED 75

#ifdef __cplusplus
extern "C" {
#endif

// Setup phase: SIGUSR1 and SIGTERM end the process at once.
void signals_install(void);
// Training phase: SIGUSR1 and SIGTERM are recorded (system calls they interrupt restart).
void signals_enter_training(void);
// The stop signal received in the training phase, or 0.
int signals_stop_requested(void);
// Turns the stop watch on w's collectives on or off (see above).
void signals_watch_collectives(CommWorld* w, int on);
// Watches the launcher (the parent process, launcher_pid > 0) from a thread; this process is
// rank `rank` (for its line). Non-zero when the thread cannot start (nothing is watched).
int signals_watch_launcher(long launcher_pid, int rank);

#ifdef __cplusplus
}
#endif
#endif
