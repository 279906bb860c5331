#include "train/run_ckpt.h"

#include <stdio.h>
#include <string.h>
#include "train/metrics.h"

void run_ckpt_open(RunCkpt* c, const CkptOptions* o, const ProcessGroup* pg, const ModelLayout* layout, const Fsdp* f,
                   int resumed_step) {
    c->reported = -1;
    c->writer = ckpt_writer_create(o, pg->world_comm);
    if (!c->writer) fatal(pg, "checkpoint: out of memory");
    if (resumed_step >= 0) ckpt_writer_resumed_from(c->writer, resumed_step);
    ckpt_writer_launcher(c->writer, pg->launcher_pid);  // nothing is committed once the launcher is gone
    float* const arenas[CKPT_KINDS] = {f->host_master, f->host_m, f->host_v};
    if (model_checkpoint_tables(layout, f->pieces, f->n_pieces, arenas, pg->replicate_rank == 0, &c->tables))
        fatal(pg, "checkpoint: out of memory for the checkpoint tables");
    size_t mib = c->tables.local_bytes;
    if (ckpt_writer_reserve(c->writer, mib / sizeof(float)))
        fatal(pg, "--ckpt-async: out of host memory for the %.1f MiB snapshot buffer", mib / 1048576.0);
    if (pg->rank == 0 && o->async) printf("async checkpoints: %.1f MiB snapshot buffer per rank\n", mib / 1048576.0);
}

void run_ckpt_close(RunCkpt* c, const ProcessGroup* pg, int async, double run_t0) {
    char err[1024];
    int finished = ckpt_writer_finish(c->writer, err, sizeof(err));
    if (finished == CKPT_SAVED_NO_LATEST) { if (pg->rank == 0) fprintf(stderr, "warning: checkpoint: %s\n", err); }
    else if (finished) fatal_agreed(pg, "checkpoint: %s", err);
    double run_secs = now_seconds() - run_t0, blocked = ckpt_writer_blocked_seconds(c->writer);
    if (pg->rank == 0) {
        if (async && ckpt_writer_last_committed(c->writer) > c->reported)
            printf("checkpoint step %ld committed\n", ckpt_writer_last_committed(c->writer));
        if (c->saves > 0)
            printf("checkpointing blocked training for %.2f s of %.2f s (%.1f%%)\n", blocked, run_secs, 100.0 * blocked / run_secs);
    }
    ckpt_writer_free(c->writer);
    model_checkpoint_tables_free(&c->tables);
}

void run_resume_model(const ProcessGroup* pg, const Options* o, const char* root, char* path, size_t path_len,
                      ModelConfig* config, int* file_version, char* notes, size_t notes_len) {
    struct {
        int rc, file_version;
        char path[1100];
        ModelConfig config;
        char notes[1024];
        ParseError e;
    } found;
    memset(&found, 0, sizeof(found));
    if (pg->rank == 0)
        found.rc = resume_config(o, found.path, sizeof(found.path), &found.config, &found.file_version, found.notes,
                                 sizeof(found.notes), &found.e);
    comm_broadcast(pg->world_comm, &found, sizeof(found), 0);
    if (found.rc) fatal_agreed(pg, "%s (see --help)", found.e.msg);
    if (!found.path[0] && pg->rank == 0) printf("--resume auto: no checkpoint in %s, starting fresh\n", root);
    snprintf(path, path_len, "%s", found.path);
    *config = found.config;
    *file_version = found.file_version;
    snprintf(notes, notes_len, "%s", found.notes);
}
