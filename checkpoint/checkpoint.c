// checkpoint/: sharded checkpoints (checkpoint.h: parallel writes, the commit protocol,
// reads of any element range at any world size); tool/ckpt.c inspects, verifies, exports and
// imports them. It knows no model: model/gpt2_state.h supplies GPT-2's tables.
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

const char* const CKPT_KIND_NAMES[CKPT_KINDS] = {"param", "m", "v"};

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_err(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------------------
// Files and directories

int ckpt_mkdir_p(const char* dir) {
    char path[1024];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

static int fsync_path(const char* path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static void remove_tree(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    char path[2048];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int write_all(int fd, const void* p, size_t n) {
    const char* c = (const char*)p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

// Writes a whole small file atomically: path.tmp, fsync, rename.
static int write_file_atomic(const char* path, const char* data, size_t n, char* err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { set_err(err, errlen, "%s: cannot create: %s", tmp, strerror(errno)); return 1; }
    if (write_all(fd, data, n) != 0 || fsync(fd) != 0) {
        set_err(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        close(fd); unlink(tmp); return 1;
    }
    if (close(fd) != 0) { set_err(err, errlen, "%s: close failed: %s", tmp, strerror(errno)); unlink(tmp); return 1; }
    if (rename(tmp, path) != 0) { set_err(err, errlen, "%s: rename failed: %s", path, strerror(errno)); unlink(tmp); return 1; }
    return 0;
}

static void step_dir_name(char* out, size_t n, const char* root, long step, int tmp) {
    snprintf(out, n, "%s/step_%08ld%s", root, step, tmp ? ".tmp" : "");
}

// ---------------------------------------------------------------------------------------
// One rank's file: its pieces cut into bounded chunks, each encoded and checksummed.

typedef struct {
    CkptChunk* chunks;
    int n_chunks, cap;
    void* zbuf;                 // zstd output, ZSTD_compressBound(one chunk)
    size_t zcap;
    ZSTD_CCtx* cctx;
} ChunkWriter;

static int push_chunk(ChunkWriter* cw, const CkptChunk* c) {
    if (cw->n_chunks == cw->cap) {
        int cap = cw->cap ? 2 * cw->cap : 256;
        CkptChunk* grown = (CkptChunk*)realloc(cw->chunks, (size_t)cap * sizeof(CkptChunk));
        if (!grown) return -1;
        cw->chunks = grown;
        cw->cap = cap;
    }
    cw->chunks[cw->n_chunks++] = *c;
    return 0;
}

static int write_rank_file(const char* path, int file_index, const CkptPiece* pieces, int n_pieces,
                           const CkptOptions* opt, ChunkWriter* cw, char* err, size_t errlen) {
    cw->n_chunks = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno)); return 1; }
    const char* delay_env = getenv("FSDP_TEST_CKPT_WRITE_DELAY_MS");
    long delay_ms = delay_env ? atol(delay_env) : 0;
    if (opt->codec == CKPT_CODEC_ZSTD && !cw->cctx) {
        cw->cctx = ZSTD_createCCtx();
        cw->zcap = ZSTD_compressBound(CKPT_CHUNK_ELEMS * sizeof(float));
        cw->zbuf = malloc(cw->zcap);
        if (!cw->cctx || !cw->zbuf) { set_err(err, errlen, "%s: out of memory for zstd", path); close(fd); return 1; }
    }
    uint64_t offset = 0;
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece* p = &pieces[i];
        for (uint64_t lo = p->lo; lo < p->hi; lo += CKPT_CHUNK_ELEMS) {
            uint64_t hi = lo + CKPT_CHUNK_ELEMS < p->hi ? lo + CKPT_CHUNK_ELEMS : p->hi;
            const void* raw = p->data + (lo - p->lo);
            size_t raw_bytes = (size_t)(hi - lo) * sizeof(float);
            const void* stored = raw;
            size_t stored_bytes = raw_bytes;
            if (opt->codec == CKPT_CODEC_ZSTD) {
                size_t z = ZSTD_compressCCtx(cw->cctx, cw->zbuf, cw->zcap, raw, raw_bytes, opt->zstd_level);
                if (ZSTD_isError(z)) { set_err(err, errlen, "%s: zstd: %s", path, ZSTD_getErrorName(z)); close(fd); return 1; }
                stored = cw->zbuf;
                stored_bytes = z;
            }
            if (write_all(fd, stored, stored_bytes) != 0) {
                set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
                close(fd); return 1;
            }
            CkptChunk c;
            memset(&c, 0, sizeof(c));
            snprintf(c.tensor, sizeof(c.tensor), "%s", p->tensor);
            c.kind = p->kind;
            c.lo = lo;
            c.hi = hi;
            c.file = file_index;
            c.offset = offset;
            c.bytes = stored_bytes;
            c.codec = opt->codec;
            c.checksum = XXH64(stored, stored_bytes, 0);
            if (push_chunk(cw, &c) != 0) { set_err(err, errlen, "%s: out of memory", path); close(fd); return 1; }
            offset += stored_bytes;
            if (delay_ms > 0) usleep((useconds_t)delay_ms * 1000);
        }
    }
    if (fsync(fd) != 0) { set_err(err, errlen, "%s: fsync failed: %s", path, strerror(errno)); close(fd); return 1; }
    if (close(fd) != 0) { set_err(err, errlen, "%s: close failed: %s", path, strerror(errno)); return 1; }
    return 0;
}

// ---------------------------------------------------------------------------------------
// The manifest and the commit (one process: rank 0, or the offline writer)

static char* hex64(uint64_t v, char buf[17]) {
    snprintf(buf, 17, "%016" PRIx64, v);
    return buf;
}

static int tensor_index(const CkptTensor* tensors, int n, const char* name) {
    for (int i = 0; i < n; i++) if (!strcmp(tensors[i].name, name)) return i;
    return -1;
}

// Newest-first list of complete step directories (with a manifest) under root.
static int list_complete(const char* root, long* steps, int cap) {
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step;
        char rest[8];
        if (sscanf(e->d_name, "step_%ld%7s", &step, rest) != 1) continue;  // skips step_N.tmp
        char manifest[2048];
        snprintf(manifest, sizeof(manifest), "%s/%s/manifest.json", root, e->d_name);
        if (access(manifest, F_OK) != 0) continue;
        if (n < cap) steps[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++)  // insertion sort, descending
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) { long t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t; }
    return n;
}

// After committing `committed`: keeps it and the newest keep-1 checkpoints before it, deletes
// older ones and abandoned step_N.tmp dirs. Checkpoints with a higher step (a run resumed
// from an earlier one) are left alone: `latest` names the new one, and deleting another
// timeline's data is not for a prune to decide.
static void prune(const char* root, long committed, int keep) {
    long steps[4096];
    int n = list_complete(root, steps, 4096), kept = 0;
    char dir[1100];
    for (int i = 0; i < n; i++) {
        if (steps[i] > committed) continue;
        if (kept++ < keep) continue;
        step_dir_name(dir, sizeof(dir), root, steps[i], 0);
        remove_tree(dir);
    }
    DIR* d = opendir(root);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "step_", 5) == 0 && len > 4 && !strcmp(e->d_name + len - 4, ".tmp")) {
            snprintf(dir, sizeof(dir), "%s/%s", root, e->d_name);
            remove_tree(dir);
        }
    }
    closedir(d);
}

static int commit(const char* root, long step, int world, const CkptTensor* tensors, int n_tensors,
                  const CkptChunk* chunks, int n_chunks, cJSON* state, int keep, char* err, size_t errlen) {
    char tmp_dir[1100], final_dir[1100], path[1200];
    step_dir_name(tmp_dir, sizeof(tmp_dir), root, step, 1);
    step_dir_name(final_dir, sizeof(final_dir), root, step, 0);

    cJSON* m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "format_version", CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(m, "step", (double)step);
    cJSON_AddNumberToObject(m, "world", world);
    cJSON_AddItemToObject(m, "state", state ? state : cJSON_CreateObject());
    cJSON* ts = cJSON_AddArrayToObject(m, "tensors");
    for (int i = 0; i < n_tensors; i++) {
        cJSON* t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", tensors[i].name);
        cJSON* shape = cJSON_AddArrayToObject(t, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)tensors[i].rows));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)tensors[i].cols));
        cJSON_AddItemToArray(ts, t);
    }
    // Chunks as compact rows: [tensor, kind, lo, hi, file, offset, bytes, codec, xxh64 hex]
    cJSON* cs = cJSON_AddArrayToObject(m, "chunks");
    cJSON_AddStringToObject(m, "chunk_fields", "tensor,kind,lo,hi,file,offset,bytes,codec,xxh64");
    for (int i = 0; i < n_chunks; i++) {
        const CkptChunk* c = &chunks[i];
        char hex[17];
        cJSON* row = cJSON_CreateArray();
        cJSON_AddItemToArray(row, cJSON_CreateString(c->tensor));
        cJSON_AddItemToArray(row, cJSON_CreateString(CKPT_KIND_NAMES[c->kind]));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->lo));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->hi));
        cJSON_AddItemToArray(row, cJSON_CreateNumber(c->file));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->offset));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->bytes));
        cJSON_AddItemToArray(row, cJSON_CreateString(c->codec == CKPT_CODEC_ZSTD ? "zstd" : "raw"));
        cJSON_AddItemToArray(row, cJSON_CreateString(hex64(c->checksum, hex)));
        cJSON_AddItemToArray(cs, row);
    }
    char* text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) { set_err(err, errlen, "%s: out of memory printing the manifest", tmp_dir); return 1; }

    // The rank files are complete and synced; make their directory entries durable, then
    // the manifest, then the directory's name, then `latest`.
    int rc = 1;
    snprintf(path, sizeof(path), "%s/manifest.json", tmp_dir);
    if (fsync_path(tmp_dir) != 0) set_err(err, errlen, "%s: fsync failed: %s", tmp_dir, strerror(errno));
    else if (write_file_atomic(path, text, strlen(text), err, errlen) != 0) { /* message set */ }
    else if (fsync_path(tmp_dir) != 0) set_err(err, errlen, "%s: fsync failed: %s", tmp_dir, strerror(errno));
    else {
        remove_tree(final_dir);  // a stale copy of the same step (a rerun) is replaced
        if (rename(tmp_dir, final_dir) != 0) set_err(err, errlen, "%s: rename failed: %s", final_dir, strerror(errno));
        else if (fsync_path(root) != 0) set_err(err, errlen, "%s: fsync failed: %s", root, strerror(errno));
        else {
            char latest[1100], name[64];
            snprintf(latest, sizeof(latest), "%s/latest", root);
            snprintf(name, sizeof(name), "step_%08ld\n", step);
            if (write_file_atomic(latest, name, strlen(name), err, errlen) == 0 && fsync_path(root) == 0) rc = 0;
        }
    }
    free(text);
    if (rc == 0) prune(root, step, keep < 1 ? 1 : keep);
    return rc;
}

// ---------------------------------------------------------------------------------------
// The parallel writer

struct CkptWriter {
    CkptOptions opt;
    Comm* comm;
    int rank, world;
    ChunkWriter cw;
    long last_committed;
    double blocked;
    // A save in flight (async), or being prepared (sync)
    int pending;
    char root[1024];
    long step;
    CkptTensor* tensors;
    int n_tensors;
    CkptPiece* pieces;          // point into snapshot (async) or the caller's memory (sync)
    char (*piece_names)[CKPT_NAME_LEN];
    int n_pieces;
    cJSON* state;
    float* snapshot;            // async: one buffer, grown to the largest save
    size_t snapshot_cap;
    pthread_t thread;
    volatile int thread_done;
    int thread_rc;
    char thread_err[512];
};

CkptWriter* ckpt_writer_create(const CkptOptions* opt, Comm* comm) {
    CkptWriter* w = (CkptWriter*)calloc(1, sizeof(CkptWriter));
    w->opt = *opt;
    w->comm = comm;
    w->rank = comm_rank(comm);
    w->world = comm_size(comm);
    w->last_committed = -1;
    return w;
}

int ckpt_writer_reserve(CkptWriter* w, size_t floats) {
    if (!w->opt.async || floats <= w->snapshot_cap) return 0;
    free(w->snapshot);
    w->snapshot = (float*)malloc(floats * sizeof(float));
    if (!w->snapshot) { w->snapshot_cap = 0; return 1; }
    // Touch every page now rather than during the first save. (A memset to zero could be
    // turned into calloc's untouched pages by the compiler.)
    volatile char* bytes = (volatile char*)w->snapshot;
    for (size_t i = 0; i < floats * sizeof(float); i += 4096) bytes[i] = 1;
    w->snapshot_cap = floats;
    return 0;
}

long ckpt_writer_last_committed(const CkptWriter* w) { return w->last_committed; }
double ckpt_writer_blocked_seconds(const CkptWriter* w) { return w->blocked; }

// Every rank learns whether any rank failed, and the first failing rank's message.
static int agree(CkptWriter* w, int local_rc, const char* local_err, char* err, size_t errlen) {
    int32_t first = local_rc ? w->rank : w->world;
    comm_all_reduce_i32(w->comm, &first, 1, COMM_MIN);
    if (first == w->world) return 0;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", w->rank == first ? local_err : "");
    comm_broadcast(w->comm, msg, sizeof(msg), first);
    set_err(err, errlen, "%s", msg);
    return 1;
}

static void rank_file_path(char* out, size_t n, const char* root, long step, int rank) {
    snprintf(out, n, "%s/step_%08ld.tmp/rank_%05d.bin", root, step, rank);
}

static void* writer_thread(void* arg) {
    CkptWriter* w = (CkptWriter*)arg;
    char path[1200];
    rank_file_path(path, sizeof(path), w->root, w->step, w->rank);
    w->thread_rc = write_rank_file(path, w->rank, w->pieces, w->n_pieces, &w->opt, &w->cw, w->thread_err, sizeof(w->thread_err));
    __atomic_store_n(&w->thread_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

// After every rank's file is written: collect the chunk tables on rank 0, which commits.
static int finish_save(CkptWriter* w, int local_rc, const char* local_err, char* err, size_t errlen) {
    int rc = agree(w, local_rc, local_err, err, errlen);
    if (!rc) {
        size_t bytes = (size_t)w->cw.n_chunks * sizeof(CkptChunk);
        size_t* counts = w->rank == 0 ? (size_t*)malloc((size_t)w->world * sizeof(size_t)) : NULL;
        comm_gather(w->comm, &bytes, sizeof(bytes), counts, 0);
        CkptChunk* all = NULL;
        size_t total = 0;
        if (w->rank == 0) {
            for (int r = 0; r < w->world; r++) total += counts[r];
            all = (CkptChunk*)malloc(total > 0 ? total : 1);
        }
        comm_gatherv(w->comm, w->cw.chunks, bytes, all, counts, 0);
        int commit_rc = 0;
        char commit_err[512] = "";
        if (w->rank == 0)
            commit_rc = commit(w->root, w->step, w->world, w->tensors, w->n_tensors, all, (int)(total / sizeof(CkptChunk)),
                               w->state, w->opt.keep, commit_err, sizeof(commit_err));
        else
            cJSON_Delete(w->state);
        w->state = NULL;
        free(all); free(counts);
        rc = agree(w, commit_rc, commit_err, err, errlen);
    } else {
        cJSON_Delete(w->state);
        w->state = NULL;
    }
    if (rc && w->rank == 0) {  // leave nothing half-written behind; earlier checkpoints stay
        char tmp_dir[1100];
        step_dir_name(tmp_dir, sizeof(tmp_dir), w->root, w->step, 1);
        remove_tree(tmp_dir);
    }
    if (!rc) w->last_committed = w->step;
    w->pending = 0;
    return rc;
}

static int wait_pending(CkptWriter* w, char* err, size_t errlen) {
    if (!w->pending) return 0;
    pthread_join(w->thread, NULL);
    return finish_save(w, w->thread_rc, w->thread_err, err, errlen);
}

int ckpt_writer_poll(CkptWriter* w, char* err, size_t errlen) {
    if (!w->pending) return 0;
    double t0 = seconds_now();
    int32_t all = __atomic_load_n(&w->thread_done, __ATOMIC_ACQUIRE);
    comm_all_reduce_i32(w->comm, &all, 1, COMM_MIN);
    int rc = all ? wait_pending(w, err, errlen) : 0;
    w->blocked += seconds_now() - t0;
    return rc;
}

int ckpt_writer_finish(CkptWriter* w, char* err, size_t errlen) {
    double t0 = seconds_now();
    int rc = wait_pending(w, err, errlen);
    w->blocked += seconds_now() - t0;
    return rc;
}

int ckpt_save(CkptWriter* w, const char* root_dir, long step, const CkptTensor* tensors, int n_tensors,
              const CkptPiece* pieces, int n_pieces, cJSON* state, char* err, size_t errlen) {
    double t0 = seconds_now();
    int rc = wait_pending(w, err, errlen);
    if (rc) { cJSON_Delete(state); w->blocked += seconds_now() - t0; return rc; }

    snprintf(w->root, sizeof(w->root), "%s", root_dir);
    w->step = step;
    w->state = state;
    free(w->tensors);
    w->tensors = (CkptTensor*)malloc((size_t)(n_tensors > 0 ? n_tensors : 1) * sizeof(CkptTensor));
    memcpy(w->tensors, tensors, (size_t)n_tensors * sizeof(CkptTensor));
    w->n_tensors = n_tensors;

    // Rank 0 prepares step_N.tmp (replacing what a crashed save left there).
    char local_err[512] = "";
    int local_rc = 0;
    if (w->rank == 0) {
        char tmp_dir[1100];
        step_dir_name(tmp_dir, sizeof(tmp_dir), root_dir, step, 1);
        if (ckpt_mkdir_p(root_dir) != 0) { local_rc = 1; set_err(local_err, sizeof(local_err), "%s: cannot create: %s", root_dir, strerror(errno)); }
        else {
            remove_tree(tmp_dir);
            if (mkdir(tmp_dir, 0755) != 0) { local_rc = 1; set_err(local_err, sizeof(local_err), "%s: cannot create: %s", tmp_dir, strerror(errno)); }
        }
    }
    for (int i = 0; i < n_pieces && !local_rc; i++)
        if (tensor_index(tensors, n_tensors, pieces[i].tensor) < 0) {
            local_rc = 1;
            set_err(local_err, sizeof(local_err), "checkpoint: piece of unknown tensor '%s'", pieces[i].tensor);
        }
    if (agree(w, local_rc, local_err, err, errlen)) { cJSON_Delete(state); w->state = NULL; w->blocked += seconds_now() - t0; return 1; }

    // The pieces: names copied (the caller's strings may not outlive an async save), data
    // either referenced (sync) or snapshotted (async).
    free(w->pieces);
    free(w->piece_names);
    w->pieces = (CkptPiece*)malloc((size_t)(n_pieces > 0 ? n_pieces : 1) * sizeof(CkptPiece));
    w->piece_names = (char(*)[CKPT_NAME_LEN])malloc((size_t)(n_pieces > 0 ? n_pieces : 1) * CKPT_NAME_LEN);
    w->n_pieces = n_pieces;
    size_t total = 0;
    for (int i = 0; i < n_pieces; i++) total += (size_t)(pieces[i].hi - pieces[i].lo);
    if (w->opt.async && total > w->snapshot_cap) {
        free(w->snapshot);
        w->snapshot = (float*)malloc(total * sizeof(float));
        w->snapshot_cap = w->snapshot ? total : 0;
    }
    int snapshot = w->opt.async && w->snapshot;
    size_t at = 0;
    for (int i = 0; i < n_pieces; i++) {
        snprintf(w->piece_names[i], CKPT_NAME_LEN, "%s", pieces[i].tensor);
        w->pieces[i] = pieces[i];
        w->pieces[i].tensor = w->piece_names[i];
        if (snapshot) {
            size_t n = (size_t)(pieces[i].hi - pieces[i].lo);
            memcpy(w->snapshot + at, pieces[i].data, n * sizeof(float));
            w->pieces[i].data = w->snapshot + at;
            at += n;
        }
    }
    w->pending = 1;
    if (snapshot) {
        w->thread_done = 0;
        w->thread_rc = 0;
        w->thread_err[0] = '\0';
        if (pthread_create(&w->thread, NULL, writer_thread, w) == 0) {
            w->blocked += seconds_now() - t0;
            return 0;
        }
        writer_thread(w);  // no thread: write now, then join-free commit below
        rc = finish_save(w, w->thread_rc, w->thread_err, err, errlen);
        w->blocked += seconds_now() - t0;
        return rc;
    }
    char path[1200];
    rank_file_path(path, sizeof(path), root_dir, step, w->rank);
    local_rc = write_rank_file(path, w->rank, w->pieces, w->n_pieces, &w->opt, &w->cw, local_err, sizeof(local_err));
    rc = finish_save(w, local_rc, local_err, err, errlen);
    w->blocked += seconds_now() - t0;
    return rc;
}

void ckpt_writer_free(CkptWriter* w) {
    if (!w) return;
    if (w->pending) pthread_join(w->thread, NULL);
    cJSON_Delete(w->state);
    free(w->cw.chunks);
    free(w->cw.zbuf);
    ZSTD_freeCCtx(w->cw.cctx);
    free(w->tensors);
    free(w->pieces);
    free(w->piece_names);
    free(w->snapshot);
    free(w);
}

int ckpt_write_offline(const char* root_dir, long step, int world, const CkptTensor* tensors, int n_tensors,
                       const CkptPiece* const* pieces, const int* n_pieces, cJSON* state,
                       const CkptOptions* opt, char* err, size_t errlen) {
    char tmp_dir[1100], path[1200];
    step_dir_name(tmp_dir, sizeof(tmp_dir), root_dir, step, 1);
    if (ckpt_mkdir_p(root_dir) != 0) { set_err(err, errlen, "%s: cannot create: %s", root_dir, strerror(errno)); cJSON_Delete(state); return 1; }
    remove_tree(tmp_dir);
    if (mkdir(tmp_dir, 0755) != 0) { set_err(err, errlen, "%s: cannot create: %s", tmp_dir, strerror(errno)); cJSON_Delete(state); return 1; }
    ChunkWriter cw;
    memset(&cw, 0, sizeof(cw));
    CkptChunk* all = NULL;
    int total = 0, rc = 0;
    for (int r = 0; r < world && !rc; r++) {
        snprintf(path, sizeof(path), "%s/rank_%05d.bin", tmp_dir, r);
        rc = write_rank_file(path, r, pieces[r], n_pieces[r], opt, &cw, err, errlen);
        if (rc) break;
        CkptChunk* grown = (CkptChunk*)realloc(all, (size_t)(total + cw.n_chunks + 1) * sizeof(CkptChunk));
        if (!grown) { set_err(err, errlen, "out of memory"); rc = 1; break; }
        all = grown;
        memcpy(all + total, cw.chunks, (size_t)cw.n_chunks * sizeof(CkptChunk));
        total += cw.n_chunks;
    }
    if (!rc) { rc = commit(root_dir, step, world, tensors, n_tensors, all, total, state, opt->keep, err, errlen); state = NULL; }
    if (rc) { cJSON_Delete(state); remove_tree(tmp_dir); }
    free(all);
    free(cw.chunks);
    free(cw.zbuf);
    ZSTD_freeCCtx(cw.cctx);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Reading

static int json_u64(const cJSON* item, uint64_t* out) {
    if (!cJSON_IsNumber(item) || item->valuedouble < 0) return 0;
    *out = (uint64_t)item->valuedouble;
    return 1;
}

int ckpt_open(Ckpt* c, const char* dir, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "%s", dir);
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    FILE* fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, errlen, "%s: no committed checkpoint here (%s)", path, strerror(errno));
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char* text = (char*)malloc((size_t)size + 1);
    size_t got = text ? fread(text, 1, (size_t)size, fp) : 0;
    fclose(fp);
    if (!text || got != (size_t)size) { free(text); set_err(err, errlen, "%s: cannot read", path); return 1; }
    text[size] = '\0';
    c->manifest = cJSON_Parse(text);
    free(text);
    if (!c->manifest) { set_err(err, errlen, "%s: not valid JSON (truncated or corrupt)", path); return 1; }

    const cJSON* version = cJSON_GetObjectItemCaseSensitive(c->manifest, "format_version");
    if (!cJSON_IsNumber(version)) { set_err(err, errlen, "%s: no format_version", path); ckpt_close(c); return 1; }
    c->format_version = version->valueint;
    if (c->format_version != CKPT_FORMAT_VERSION) {
        set_err(err, errlen, "%s: format version %d, this build reads version %d%s", path, c->format_version,
                CKPT_FORMAT_VERSION, c->format_version > CKPT_FORMAT_VERSION ? " (written by a newer fsdp.c)" : "");
        ckpt_close(c);
        return 1;
    }
    const cJSON* world = cJSON_GetObjectItemCaseSensitive(c->manifest, "world");
    const cJSON* step = cJSON_GetObjectItemCaseSensitive(c->manifest, "step");
    const cJSON* tensors = cJSON_GetObjectItemCaseSensitive(c->manifest, "tensors");
    const cJSON* chunks = cJSON_GetObjectItemCaseSensitive(c->manifest, "chunks");
    c->state = cJSON_GetObjectItemCaseSensitive(c->manifest, "state");
    if (!cJSON_IsNumber(world) || world->valueint < 1 || !cJSON_IsNumber(step) || !cJSON_IsArray(tensors) ||
        !cJSON_IsArray(chunks) || !cJSON_IsObject(c->state)) {
        set_err(err, errlen, "%s: missing or malformed world/step/tensors/chunks/state", path);
        ckpt_close(c);
        return 1;
    }
    c->world = world->valueint;
    c->step = (long)step->valuedouble;
    c->n_tensors = cJSON_GetArraySize(tensors);
    c->tensors = (CkptTensor*)calloc((size_t)c->n_tensors + 1, sizeof(CkptTensor));
    int i = 0;
    const cJSON* t;
    cJSON_ArrayForEach(t, tensors) {
        const cJSON* name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON* shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        if (!cJSON_IsString(name) || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2 ||
            !json_u64(cJSON_GetArrayItem(shape, 0), &c->tensors[i].rows) ||
            !json_u64(cJSON_GetArrayItem(shape, 1), &c->tensors[i].cols)) {
            set_err(err, errlen, "%s: malformed tensor entry %d", path, i);
            ckpt_close(c);
            return 1;
        }
        snprintf(c->tensors[i].name, CKPT_NAME_LEN, "%s", name->valuestring);
        i++;
    }
    c->n_chunks = cJSON_GetArraySize(chunks);
    c->chunks = (CkptChunk*)calloc((size_t)c->n_chunks + 1, sizeof(CkptChunk));
    i = 0;
    const cJSON* row;
    cJSON_ArrayForEach(row, chunks) {
        CkptChunk* ch = &c->chunks[i];
        const cJSON* f[9];
        int ok = cJSON_IsArray(row) && cJSON_GetArraySize(row) == 9;
        for (int k = 0; ok && k < 9; k++) f[k] = cJSON_GetArrayItem(row, k);
        uint64_t file = 0;
        ok = ok && cJSON_IsString(f[0]) && cJSON_IsString(f[1]) && json_u64(f[2], &ch->lo) && json_u64(f[3], &ch->hi) &&
             json_u64(f[4], &file) && json_u64(f[5], &ch->offset) && json_u64(f[6], &ch->bytes) &&
             cJSON_IsString(f[7]) && cJSON_IsString(f[8]);
        if (ok) {
            snprintf(ch->tensor, CKPT_NAME_LEN, "%s", f[0]->valuestring);
            ch->kind = -1;
            for (int k = 0; k < CKPT_KINDS; k++) if (!strcmp(f[1]->valuestring, CKPT_KIND_NAMES[k])) ch->kind = k;
            ch->codec = !strcmp(f[7]->valuestring, "zstd") ? CKPT_CODEC_ZSTD : !strcmp(f[7]->valuestring, "raw") ? CKPT_CODEC_RAW : -1;
            ch->file = (int)file;
            char* end;
            ch->checksum = strtoull(f[8]->valuestring, &end, 16);
            ok = ch->kind >= 0 && ch->codec >= 0 && *end == '\0' && ch->file < c->world && ch->lo < ch->hi &&
                 (ch->hi - ch->lo) <= CKPT_CHUNK_ELEMS;
            const CkptTensor* tt = ckpt_tensor(c, ch->tensor);
            ok = ok && tt && ch->hi <= tt->rows * tt->cols;
        }
        if (!ok) { set_err(err, errlen, "%s: malformed chunk entry %d", path, i); ckpt_close(c); return 1; }
        i++;
    }
    c->fds = (int*)malloc((size_t)c->world * sizeof(int));
    for (int r = 0; r < c->world; r++) c->fds[r] = -1;
    return 0;
}

const CkptTensor* ckpt_tensor(const Ckpt* c, const char* name) {
    for (int i = 0; i < c->n_tensors; i++) if (!strcmp(c->tensors[i].name, name)) return &c->tensors[i];
    return NULL;
}

// Reads chunk ch's stored bytes into `into` (c->scratch when NULL) and checks them.
static int read_chunk(Ckpt* c, const CkptChunk* ch, void* into, char* err, size_t errlen) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/rank_%05d.bin", c->dir, ch->file);
    if (c->fds[ch->file] < 0) {
        c->fds[ch->file] = open(path, O_RDONLY);
        if (c->fds[ch->file] < 0) { set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
        posix_fadvise(c->fds[ch->file], 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead
    }
    if (!into) {
        if (c->scratch_cap < ch->bytes) {
            free(c->scratch);
            c->scratch = (unsigned char*)malloc(ch->bytes);
            c->scratch_cap = c->scratch ? ch->bytes : 0;
            if (!c->scratch) { set_err(err, errlen, "%s: out of memory", path); return 1; }
        }
        into = c->scratch;
    }
    unsigned char* buf = (unsigned char*)into;
    size_t done = 0;
    while (done < ch->bytes) {
        ssize_t r = pread(c->fds[ch->file], buf + done, ch->bytes - done, (off_t)(ch->offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            set_err(err, errlen, "%s: %s reading %s (%s) elements [%" PRIu64 ", %" PRIu64 ") at offset %" PRIu64,
                    path, r == 0 ? "truncated file" : strerror(errno), ch->tensor, CKPT_KIND_NAMES[ch->kind], ch->lo, ch->hi, ch->offset);
            return 1;
        }
        done += (size_t)r;
    }
    if (XXH64(buf, ch->bytes, 0) != ch->checksum) {
        set_err(err, errlen, "%s: checksum mismatch in %s (%s) elements [%" PRIu64 ", %" PRIu64 ")",
                path, ch->tensor, CKPT_KIND_NAMES[ch->kind], ch->lo, ch->hi);
        return 1;
    }
    if (ch->codec == CKPT_CODEC_RAW && ch->bytes != (ch->hi - ch->lo) * sizeof(float)) {
        set_err(err, errlen, "%s: chunk of %s has %" PRIu64 " bytes for %" PRIu64 " values", path, ch->tensor, ch->bytes, ch->hi - ch->lo);
        return 1;
    }
    return 0;
}

// Reads, checks and decodes chunk ch into c->decoded (raw chunks: the values stay in
// c->scratch, which *values points to).
static int load_chunk(Ckpt* c, const CkptChunk* ch, const float** values, char* err, size_t errlen) {
    if (read_chunk(c, ch, NULL, err, errlen)) return 1;
    uint64_t n = ch->hi - ch->lo;
    if (ch->codec == CKPT_CODEC_RAW) {
        *values = (const float*)c->scratch;
    } else {
        if (c->decoded_cap < n) {
            free(c->decoded);
            c->decoded = (float*)malloc(n * sizeof(float));
            c->decoded_cap = c->decoded ? n : 0;
            if (!c->decoded) { set_err(err, errlen, "%s: out of memory", c->dir); return 1; }
        }
        char path[1200];
        snprintf(path, sizeof(path), "%s/rank_%05d.bin", c->dir, ch->file);
        size_t z = ZSTD_decompress(c->decoded, n * sizeof(float), c->scratch, ch->bytes);
        if (ZSTD_isError(z) || z != n * sizeof(float)) {
            set_err(err, errlen, "%s: corrupt zstd chunk of %s (%s)", path, ch->tensor, ZSTD_isError(z) ? ZSTD_getErrorName(z) : "wrong size");
            return 1;
        }
        *values = c->decoded;
    }
    return 0;
}

int ckpt_read(Ckpt* c, const char* tensor, int kind, uint64_t lo, uint64_t hi, float* dst, char* err, size_t errlen) {
    const CkptTensor* t = ckpt_tensor(c, tensor);
    if (!t) { set_err(err, errlen, "%s/manifest.json: no tensor '%s'", c->dir, tensor); return 1; }
    if (hi > t->rows * t->cols) {
        set_err(err, errlen, "%s/manifest.json: tensor %s has %" PRIu64 " elements, %" PRIu64 " requested",
                c->dir, tensor, t->rows * t->cols, hi);
        return 1;
    }
    // Ask the kernel for every chunk of the range up front, so that the disk reads ahead while
    // earlier chunks are checked and copied.
    for (int i = 0; i < c->n_chunks; i++) {
        const CkptChunk* ch = &c->chunks[i];
        if (ch->kind != kind || ch->hi <= lo || ch->lo >= hi || strcmp(ch->tensor, tensor) != 0) continue;
        if (c->fds[ch->file] >= 0)
            posix_fadvise(c->fds[ch->file], (off_t)ch->offset, (off_t)ch->bytes, POSIX_FADV_WILLNEED);
    }
    uint64_t covered = 0;
    for (int i = 0; i < c->n_chunks; i++) {
        const CkptChunk* ch = &c->chunks[i];
        if (ch->kind != kind || ch->hi <= lo || ch->lo >= hi || strcmp(ch->tensor, tensor) != 0) continue;
        uint64_t a = ch->lo > lo ? ch->lo : lo, b = ch->hi < hi ? ch->hi : hi;
        if (ch->codec == CKPT_CODEC_RAW && a == ch->lo && b == ch->hi) {
            // A raw chunk wholly inside the range lands where it belongs, checked in place.
            if (read_chunk(c, ch, dst + (a - lo), err, errlen)) return 1;
        } else {
            const float* values;
            if (load_chunk(c, ch, &values, err, errlen)) return 1;
            memcpy(dst + (a - lo), values + (a - ch->lo), (size_t)(b - a) * sizeof(float));
        }
        covered += b - a;
    }
    if (covered != hi - lo) {
        set_err(err, errlen, "%s: chunks of %s (%s) cover %" PRIu64 " of elements [%" PRIu64 ", %" PRIu64 ")",
                c->dir, tensor, CKPT_KIND_NAMES[kind], covered, lo, hi);
        return 1;
    }
    return 0;
}

int ckpt_verify(Ckpt* c, char* err, size_t errlen) {
    const float* values;
    for (int i = 0; i < c->n_chunks; i++)
        if (load_chunk(c, &c->chunks[i], &values, err, errlen)) return 1;
    // Every tensor and kind must be covered exactly (chunks of one tensor/kind are disjoint).
    for (int t = 0; t < c->n_tensors; t++)
        for (int k = 0; k < CKPT_KINDS; k++) {
            uint64_t covered = 0;
            for (int i = 0; i < c->n_chunks; i++)
                if (c->chunks[i].kind == k && !strcmp(c->chunks[i].tensor, c->tensors[t].name))
                    covered += c->chunks[i].hi - c->chunks[i].lo;
            if (covered != c->tensors[t].rows * c->tensors[t].cols) {
                set_err(err, errlen, "%s: %s (%s): chunks cover %" PRIu64 " of %" PRIu64 " elements", c->dir,
                        c->tensors[t].name, CKPT_KIND_NAMES[k], covered, c->tensors[t].rows * c->tensors[t].cols);
                return 1;
            }
        }
    return 0;
}

void ckpt_sizes(const Ckpt* c, uint64_t* stored, uint64_t* raw) {
    *stored = *raw = 0;
    for (int i = 0; i < c->n_chunks; i++) {
        *stored += c->chunks[i].bytes;
        *raw += (c->chunks[i].hi - c->chunks[i].lo) * sizeof(float);
    }
}

void ckpt_close(Ckpt* c) {
    if (c->fds) for (int r = 0; r < c->world; r++) if (c->fds[r] >= 0) close(c->fds[r]);
    free(c->fds);
    free(c->tensors);
    free(c->chunks);
    free(c->scratch);
    free(c->decoded);
    cJSON_Delete(c->manifest);
    memset(c, 0, sizeof(*c));
}

int ckpt_find_latest(const char* root_dir, char* out, size_t outlen) {
    char path[1100], name[256] = "", manifest[1400];
    snprintf(path, sizeof(path), "%s/latest", root_dir);
    FILE* fp = fopen(path, "r");
    if (fp) {
        if (fgets(name, sizeof(name), fp)) name[strcspn(name, "\r\n")] = '\0';
        fclose(fp);
        snprintf(manifest, sizeof(manifest), "%s/%s/manifest.json", root_dir, name);
        if (name[0] && !strchr(name, '/') && access(manifest, F_OK) == 0) {
            snprintf(out, outlen, "%s/%s", root_dir, name);
            return 1;
        }
    }
    long steps[4096];
    if (list_complete(root_dir, steps, 4096) == 0) return 0;
    step_dir_name(out, outlen, root_dir, steps[0], 0);
    return 1;
}
