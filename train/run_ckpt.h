// A run's checkpoint writer (checkpoint/checkpoint.h) around its training loop: made at setup
// with the tables of this rank's pieces of the model's host mirror, finished at the end with
// how long checkpointing blocked training. What is saved, when, and what a resume loads are
// the story's (train_gpt.cu: maybe_checkpoint, maybe_resume).
#ifndef FSDP_TRAIN_RUN_CKPT_H
#define FSDP_TRAIN_RUN_CKPT_H

#include "checkpoint/checkpoint.h"
#include "comm/process_group.h"
#include "fsdp/fsdp.h"
#include "model/state.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    CkptWriter* writer;       // NULL: the run has no checkpoint directory
    ModelCkptTables tables;   // this rank's pieces of master, m and v in the host mirror
    int saves;                // checkpoints this job saved
    long reported;            // the last async commit announced
} RunCkpt;

// --resume: the model of the run is the checkpoint's. Rank 0 finds the checkpoint under root
// (find_resume_checkpoint) and reads its model, the flags checked against it (resume_config; or,
// with auto and none yet, the flags' model, as a fresh run's); every rank gets its answer, so
// that all build the same model and load the same step (a checkpoint committed meanwhile cannot
// split them), before anything is sized. path: the step directory to load, "" for a fresh
// start; notes: what the flags changed of the checkpoint's model. An error ends every rank with
// rank 0's line.
void run_resume_model(const ProcessGroup* pg, const Options* o, const char* root, char* path, size_t path_len,
                      ModelConfig* config, int* file_version, char* notes, size_t notes_len);

// The writer of a run with a checkpoint directory (a stop signal saves even without
// --ckpt-every), over f's host mirror (HSDP replicas hold the same shards: the first replica
// group writes them), with --ckpt-async's snapshot buffer reserved (rank 0 says its size).
// resumed_step: the step a resume loaded, or -1. Ends the run when out of memory.
void run_ckpt_open(RunCkpt* c, const CkptOptions* o, const ProcessGroup* pg, const ModelLayout* layout, const Fsdp* f,
                   int resumed_step);
// Waits for a save still being written, announces its commit (async), and when this job
// saved, how long checkpointing blocked training since run_t0 (now_seconds() when training
// began; rank 0); frees the writer and the tables.
void run_ckpt_close(RunCkpt* c, const ProcessGroup* pg, int async, double run_t0);

#ifdef __cplusplus
}
#endif
#endif
