// checkpoint/: sharded checkpoints (checkpoint.h: parallel writes, the commit protocol,
// reads of any element range at any world size); tool/ckpt.c inspects, verifies, exports and
// imports them. It knows no model: model/state.h supplies GPT-2's tables.
#define _GNU_SOURCE   // O_DIRECT
#include "checkpoint/checkpoint.h"
#include "util/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

const char* const CKPT_KIND_NAMES[CKPT_KINDS] = {"param", "m", "v"};
const char* const CKPT_CODEC_NAMES[CKPT_CODECS] = {"raw", "zstd", "zstd_shuffle"};

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

// ---------------------------------------------------------------------------------------
// Step directories, abandoned timelines, the manifest and the commit (one process: rank 0,
// or the offline writer)

static void step_dir_name(char* out, size_t n, const char* root, long step, int tmp) {
    snprintf(out, n, "%s/step_%08ld%s", root, step, tmp ? ".tmp" : "");
}

// "step_" and 1 to 18 digits, nothing else: the name of a committed step directory (not
// step_N.tmp, step_N.abandoned_..., "step_-1", or anything with a '/' or "..").
static int parse_step_name(const char* name, long* step) {
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char* d = name + 5;
    size_t n = strspn(d, "0123456789");
    if (n < 1 || n > 18 || d[n] != '\0') return 0;
    *step = strtol(d, NULL, 10);
    return 1;
}

static int has_manifest(const char* root, const char* name, struct stat* st) {
    char manifest[2200];
    snprintf(manifest, sizeof(manifest), "%s/%s/manifest.json", root, name);
    struct stat tmp;
    return stat(manifest, st ? st : &tmp) == 0;
}

typedef struct {
    long step;
    char name[32];
} StepDir;

static int step_desc(const void* a, const void* b) {
    long x = ((const StepDir*)a)->step, y = ((const StepDir*)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Newest-first list of the complete step directories (with a manifest) under root, however
// many there are (a fixed cap could hide the newest). *out is malloc'd; returns the count
// (0 and NULL when there are none or root cannot be read).
static int list_complete(const char* root, StepDir** out) {
    *out = NULL;
    DIR* d = opendir(root);
    if (!d) return 0;
    int n = 0, cap = 0;
    StepDir* list = NULL;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step;
        if (!parse_step_name(e->d_name, &step) || !has_manifest(root, e->d_name, NULL)) continue;
        if (n == cap) {
            int grown_cap = cap ? 2 * cap : 64;
            StepDir* grown = (StepDir*)realloc(list, (size_t)grown_cap * sizeof(StepDir));
            if (!grown) break;   // out of memory: the ones listed so far
            list = grown;
            cap = grown_cap;
        }
        list[n].step = step;
        snprintf(list[n].name, sizeof(list[n].name), "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(list, (size_t)n, sizeof(StepDir), step_desc);
    *out = list;
    return n;
}

// Renames ROOT/name to ROOT/name.abandoned_<UTC time> (another suffix if that exists): a
// checkpoint of a timeline this run left is kept, but no reader takes it any more.
static int move_aside(const char* root, const char* name, const char* why, char* err, size_t errlen) {
    char from[1200], to[1300], stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    snprintf(from, sizeof(from), "%s/%s", root, name);
    for (int k = 0; k < 1000; k++) {
        if (k == 0) snprintf(to, sizeof(to), "%s.abandoned_%s", from, stamp);
        else snprintf(to, sizeof(to), "%s.abandoned_%s.%d", from, stamp, k);
        struct stat st;
        if (lstat(to, &st) == 0) continue;
        if (rename(from, to) != 0) {
            set_err(err, errlen, "%s: cannot move aside to %s: %s", from, to, strerror(errno));
            return 1;
        }
        printf("checkpoint: moved %s aside to %s (%s)\n", from, to, why);
        fflush(stdout);
        return 0;
    }
    set_err(err, errlen, "%s: cannot move aside: too many %s.abandoned_%s* already", from, from, stamp);
    return 1;
}

// Before committing `step`: moves aside every complete checkpoint above `above`, and whatever
// already sits at step_N (a rerun of the same step is another timeline too; nothing is
// deleted). above == LONG_MAX: only step_N itself. resumed: `above` is the step this run
// resumed from (for the message).
static int move_aside_abandoned(const char* root, long step, long above, int resumed, char* err, size_t errlen) {
    char final_dir[1100], why[160];
    step_dir_name(final_dir, sizeof(final_dir), root, step, 0);
    StepDir* list;
    int n = list_complete(root, &list), rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (list[i].step <= above && list[i].step != step) continue;
        if (list[i].step == step)
            snprintf(why, sizeof(why), "replaced by this run's step %ld", step);
        else if (resumed)
            snprintf(why, sizeof(why), "newer than step %ld, which this run resumed from: an abandoned timeline", above);
        else
            snprintf(why, sizeof(why), "newer than step %ld, which this run is saving: left by another run", step);
        rc = move_aside(root, list[i].name, why, err, errlen);
    }
    free(list);
    struct stat st;
    if (!rc && lstat(final_dir, &st) == 0) {   // step_N without a manifest: moved aside as well
        const char* base = strrchr(final_dir, '/') + 1;
        rc = move_aside(root, base, "an incomplete directory where this step goes", err, errlen);
    }
    return rc;
}

static char* hex64(uint64_t v, char buf[17]) {
    snprintf(buf, 17, "%016" PRIx64, v);
    return buf;
}

static int tensor_index(const CkptTensor* tensors, int n, const char* name) {
    for (int i = 0; i < n; i++) if (!strcmp(tensors[i].name, name)) return i;
    return -1;
}

// After committing `committed`: keeps it and the newest keep-1 checkpoints before it, deletes
// older ones and abandoned step_N.tmp dirs. Higher steps were moved aside before the commit;
// any that appeared since are not for a prune to decide about.
static void prune(const char* root, long committed, int keep) {
    StepDir* list;
    int n = list_complete(root, &list), kept = 0;
    char dir[1100];
    for (int i = 0; i < n; i++) {
        if (list[i].step > committed) continue;
        if (kept++ < keep) continue;
        snprintf(dir, sizeof(dir), "%s/%s", root, list[i].name);
        remove_tree(dir);
    }
    free(list);
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

// The commit, after every rank file is written and synced (one process: rank 0, or the
// offline writer). launcher_pid: see ckpt_writer_launcher (0: none); abandon_above: see
// move_aside_abandoned. Returns 0, 1 (nothing committed; earlier checkpoints untouched) or
// CKPT_SAVED_NO_LATEST.
static int commit(const char* root, long step, int world, const CkptTensor* tensors, int n_tensors,
                  const CkptChunk* chunks, int n_chunks, cJSON* state, int keep, long launcher_pid, long abandon_above,
                  int resumed, char* err, size_t errlen) {
    char tmp_dir[1100], final_dir[1100], path[1200];
    step_dir_name(tmp_dir, sizeof(tmp_dir), root, step, 1);
    step_dir_name(final_dir, sizeof(final_dir), root, step, 0);

    // Version 1 unless a chunk is a box: a save of ranges writes what it wrote before boxes.
    int boxed = 0;
    for (int i = 0; i < n_chunks; i++) boxed |= chunks[i].box.rows > 0;
    cJSON* m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "format_version", boxed ? CKPT_FORMAT_VERSION : 1);
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
    // Chunks as compact rows: [tensor, kind, lo, hi, file, offset, bytes, codec, xxh64 hex],
    // and a box's row0, col0, rows, cols (its lo, hi: its span in the tensor).
    cJSON* cs = cJSON_AddArrayToObject(m, "chunks");
    cJSON_AddStringToObject(m, "chunk_fields", boxed ? "tensor,kind,lo,hi,file,offset,bytes,codec,xxh64,row0,col0,rows,cols"
                                                     : "tensor,kind,lo,hi,file,offset,bytes,codec,xxh64");
    int t = -1;   // a box's tensor (a rank's chunks of one tensor come together: the last one's first)
    for (int i = 0; i < n_chunks; i++) {
        const CkptChunk* c = &chunks[i];
        const CkptBox* b = &c->box;
        if (b->rows && !(t >= 0 && !strcmp(tensors[t].name, c->tensor))) t = tensor_index(tensors, n_tensors, c->tensor);
        const uint64_t cols = b->rows && t >= 0 ? tensors[t].cols : 0;
        char hex[17];
        cJSON* row = cJSON_CreateArray();
        cJSON_AddItemToArray(row, cJSON_CreateString(c->tensor));
        cJSON_AddItemToArray(row, cJSON_CreateString(CKPT_KIND_NAMES[c->kind]));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)(b->rows ? b->row0 * cols + b->col0 : c->lo)));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)(b->rows ? (b->row0 + b->rows - 1) * cols + b->col0 + b->cols : c->hi)));
        cJSON_AddItemToArray(row, cJSON_CreateNumber(c->file));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->offset));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)c->bytes));
        cJSON_AddItemToArray(row, cJSON_CreateString(CKPT_CODEC_NAMES[c->codec]));
        cJSON_AddItemToArray(row, cJSON_CreateString(hex64(c->checksum, hex)));
        if (b->rows) {
            const uint64_t box[4] = {b->row0, b->col0, b->rows, b->cols};
            for (int k = 0; k < 4; k++) cJSON_AddItemToArray(row, cJSON_CreateNumber((double)box[k]));
        }
        cJSON_AddItemToArray(cs, row);
    }
    char* text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!text) { set_err(err, errlen, "%s: out of memory printing the manifest", tmp_dir); return 1; }

    // The rank files are complete and synced; make their directory entries durable, then the
    // manifest, then move the abandoned timeline aside (before the new step appears: a crash
    // in between leaves the step this run resumed from as the newest complete one), then the
    // directory's name, then `latest`. Nothing is committed once the launcher is gone: a
    // relaunch may already be starting from the previous checkpoint.
    int rc = 1;
    snprintf(path, sizeof(path), "%s/manifest.json", tmp_dir);
    if (fsync_dir(tmp_dir, err, errlen) != 0) { /* message set */ }
    else if (atomic_write_file(path, text, strlen(text), ATOMIC_TMP, err, errlen) != 0) { /* message set */ }
    else if (move_aside_abandoned(root, step, abandon_above, resumed, err, errlen) != 0) { /* message set */ }
    else if (launcher_pid > 0 && (long)getppid() != launcher_pid)
        set_err(err, errlen, "%s: not committed: the launcher that started this job (pid %ld) is gone", final_dir, launcher_pid);
    else if (rename(tmp_dir, final_dir) != 0) set_err(err, errlen, "%s: rename failed: %s", final_dir, strerror(errno));
    else if (fsync_dir(root, err, errlen) != 0) { /* message set */ }
    else {
        char latest[1100], name[64], why[600];
        snprintf(latest, sizeof(latest), "%s/latest", root);
        snprintf(name, sizeof(name), "step_%08ld\n", step);
        if (atomic_write_file(latest, name, strlen(name), ATOMIC_TMP, why, sizeof(why)) == 0) rc = 0;
        else {
            // The step is committed; only the pointer to it is stale. Read it back whole, so
            // that the message can say it is usable (ckpt_find_latest takes it regardless).
            Ckpt c;
            char verr[600];
            int opened = ckpt_open(&c, final_dir, verr, sizeof(verr)) == 0;
            int good = opened && ckpt_verify(&c, verr, sizeof(verr)) == 0;
            if (opened) ckpt_close(&c);
            if (good) {
                set_err(err, errlen, "step %ld is complete and verified in %s (every chunk read back against its checksum), "
                        "but %s/latest was not updated (%s); --resume auto still takes it as the newest complete step",
                        step, final_dir, root, why);
                rc = CKPT_SAVED_NO_LATEST;
            } else {
                set_err(err, errlen, "%s: committed but does not read back (%s), and %s/latest was not updated (%s)",
                        final_dir, verr, root, why);
                char ignored[256];   // the step must not be taken by --resume auto either
                move_aside(root, strrchr(final_dir, '/') + 1, "it does not read back", ignored, sizeof(ignored));
            }
        }
    }
    free(text);
    if (rc != 1) prune(root, step, keep < 1 ? 1 : keep);
    return rc;
}

// ---------------------------------------------------------------------------------------
// One rank's file: its pieces cut into bounded chunks, each encoded and checksummed.

typedef struct {
    CkptChunk* chunks;
    int n_chunks, cap;
    void* zbuf;                 // zstd output, ZSTD_compressBound(one chunk)
    size_t zcap;
    unsigned char* shuffled;    // one chunk, byte-shuffled
    ZSTD_CCtx* cctx;
} ChunkWriter;

static void chunk_writer_free(ChunkWriter* cw) {
    free(cw->chunks);
    free(cw->zbuf);
    free(cw->shuffled);
    ZSTD_freeCCtx(cw->cctx);
    memset(cw, 0, sizeof(*cw));
}

// The byte shuffle of zstd_shuffle chunks: n 4-byte values -> 4 planes of n bytes (byte b of
// value i at b*n + i). Similar fp32 values share sign/exponent bytes, which then form long runs
// that zstd finds; the mantissa's low bytes stay noise either way.
static void byte_shuffle(const unsigned char* in, unsigned char* out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[i] = in[4 * i];
        out[n + i] = in[4 * i + 1];
        out[2 * n + i] = in[4 * i + 2];
        out[3 * n + i] = in[4 * i + 3];
    }
}

static void byte_unshuffle(const unsigned char* in, unsigned char* out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[4 * i] = in[i];
        out[4 * i + 1] = in[n + i];
        out[4 * i + 2] = in[2 * n + i];
        out[4 * i + 3] = in[3 * n + i];
    }
}

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

uint64_t ckpt_chunk_elems(const CkptChunk* ch) { return ch->box.rows ? ch->box.rows * ch->box.cols : ch->hi - ch->lo; }
static uint64_t piece_elems(const CkptPiece* p) { return p->box.rows ? p->box.rows * p->box.cols : p->hi - p->lo; }

// One rank file being written: where the next chunk goes, and how chunks are encoded.
typedef struct {
    const char* path;
    int fd, file_index, codec, zstd_level;
    uint64_t offset;
    long delay_ms;
} RankFile;

// Encodes n values as chunk `c` (its tensor, kind, range or box set), appends them to the file
// and the chunk to the table.
static int put_chunk(RankFile* f, ChunkWriter* cw, CkptChunk* c, const float* values, uint64_t n, char* err, size_t errlen) {
    const void* stored = values;
    size_t stored_bytes = (size_t)n * sizeof(float);
    if (f->codec != CKPT_CODEC_RAW) {
        const void* in = values;
        if (f->codec == CKPT_CODEC_ZSTD_SHUFFLE) {
            byte_shuffle((const unsigned char*)values, cw->shuffled, (size_t)n);
            in = cw->shuffled;
        }
        size_t z = ZSTD_compressCCtx(cw->cctx, cw->zbuf, cw->zcap, in, stored_bytes, f->zstd_level);
        if (ZSTD_isError(z)) { set_err(err, errlen, "%s: zstd: %s", f->path, ZSTD_getErrorName(z)); return 1; }
        stored = cw->zbuf;
        stored_bytes = z;
    }
    if (write_all(f->fd, stored, stored_bytes) != 0) {
        set_err(err, errlen, "%s: write failed: %s", f->path, strerror(errno));
        return 1;
    }
    c->file = f->file_index;
    c->offset = f->offset;
    c->bytes = stored_bytes;
    c->codec = f->codec;
    c->checksum = XXH64(stored, stored_bytes, 0);
    if (push_chunk(cw, c) != 0) { set_err(err, errlen, "%s: out of memory", f->path); return 1; }
    f->offset += stored_bytes;
    if (f->delay_ms > 0) usleep((useconds_t)f->delay_ms * 1000);
    return 0;
}

// A piece as chunks of up to CKPT_CHUNK_ELEMS values: a range in consecutive ranges; a box in
// bands of its whole rows (a row wider than a chunk: that row in pieces of columns), each
// band itself a box whose values are consecutive in the piece's.
static int put_piece(RankFile* f, ChunkWriter* cw, const CkptPiece* p, char* err, size_t errlen) {
    CkptChunk c;
    memset(&c, 0, sizeof(c));
    snprintf(c.tensor, sizeof(c.tensor), "%s", p->tensor);
    c.kind = p->kind;
    if (!p->box.rows) {
        for (uint64_t lo = p->lo; lo < p->hi; lo += CKPT_CHUNK_ELEMS) {
            c.lo = lo;
            c.hi = lo + CKPT_CHUNK_ELEMS < p->hi ? lo + CKPT_CHUNK_ELEMS : p->hi;
            if (put_chunk(f, cw, &c, p->data + (lo - p->lo), c.hi - lo, err, errlen)) return 1;
        }
        return 0;
    }
    const CkptBox* b = &p->box;
    const uint64_t band = b->cols <= CKPT_CHUNK_ELEMS ? CKPT_CHUNK_ELEMS / b->cols : 1;
    const uint64_t width = b->cols <= CKPT_CHUNK_ELEMS ? b->cols : CKPT_CHUNK_ELEMS;
    for (uint64_t r = 0; r < b->rows; r += band)
        for (uint64_t col = 0; col < b->cols; col += width) {
            c.box.row0 = b->row0 + r;
            c.box.col0 = b->col0 + col;
            c.box.rows = b->rows - r < band ? b->rows - r : band;
            c.box.cols = b->cols - col < width ? b->cols - col : width;
            if (put_chunk(f, cw, &c, p->data + r * b->cols + col, c.box.rows * c.box.cols, err, errlen)) return 1;
        }
    return 0;
}

// A save's pieces name tensors of its table, and its boxes lie inside them (a manifest that
// says otherwise would be refused by every reader).
static int check_pieces(const CkptTensor* tensors, int n_tensors, const CkptPiece* pieces, int n_pieces, char* err,
                        size_t errlen) {
    for (int i = 0; i < n_pieces; i++) {
        const int t = tensor_index(tensors, n_tensors, pieces[i].tensor);
        const CkptBox* b = &pieces[i].box;
        if (t < 0) {
            set_err(err, errlen, "checkpoint: piece of unknown tensor '%s'", pieces[i].tensor);
            return 1;
        }
        if (b->rows && (b->cols == 0 || b->row0 + b->rows > tensors[t].rows || b->col0 + b->cols > tensors[t].cols)) {
            set_err(err, errlen, "checkpoint: piece of %s: box [%" PRIu64 ", %" PRIu64 "] + [%" PRIu64 ", %" PRIu64
                    "] is not inside its [%" PRIu64 ", %" PRIu64 "]", pieces[i].tensor, b->row0, b->col0, b->rows, b->cols,
                    tensors[t].rows, tensors[t].cols);
            return 1;
        }
    }
    return 0;
}

static int write_rank_file(const char* path, int file_index, const CkptPiece* pieces, int n_pieces,
                           const CkptOptions* opt, ChunkWriter* cw, char* err, size_t errlen) {
    cw->n_chunks = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno)); return 1; }
    const char* delay_env = getenv("FSDP_TEST_CKPT_WRITE_DELAY_MS");
    int zstd = opt->codec == CKPT_CODEC_ZSTD || opt->codec == CKPT_CODEC_ZSTD_SHUFFLE;
    // zstd chunks are byte-shuffled first; FSDP_TEST_CKPT_ZSTD_PLAIN=1 writes the old plain
    // "zstd" chunks (for the tests that readers still take them, and the benchmark's ratio).
    const char* plain_env = getenv("FSDP_TEST_CKPT_ZSTD_PLAIN");
    int codec = !zstd ? CKPT_CODEC_RAW : (plain_env && plain_env[0] == '1') ? CKPT_CODEC_ZSTD : CKPT_CODEC_ZSTD_SHUFFLE;
    if (zstd && !cw->cctx) {
        cw->cctx = ZSTD_createCCtx();
        cw->zcap = ZSTD_compressBound(CKPT_CHUNK_ELEMS * sizeof(float));
        cw->zbuf = malloc(cw->zcap);
        cw->shuffled = (unsigned char*)malloc(CKPT_CHUNK_ELEMS * sizeof(float));
        if (!cw->cctx || !cw->zbuf || !cw->shuffled) { set_err(err, errlen, "%s: out of memory for zstd", path); close(fd); return 1; }
    }
    RankFile f = {path, fd, file_index, codec, opt->zstd_level, 0, delay_env ? atol(delay_env) : 0};
    for (int i = 0; i < n_pieces; i++)
        if (put_piece(&f, cw, &pieces[i], err, errlen)) { close(fd); return 1; }
    if (fsync(fd) != 0) { set_err(err, errlen, "%s: fsync failed: %s", path, strerror(errno)); close(fd); return 1; }
    if (close(fd) != 0) { set_err(err, errlen, "%s: close failed: %s", path, strerror(errno)); return 1; }
    return 0;
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
    char thread_err[1024];
    long resumed_from;          // ckpt_writer_resumed_from, until the first commit (-1: none)
    long launcher_pid;          // ckpt_writer_launcher (0: none)
};

CkptWriter* ckpt_writer_create(const CkptOptions* opt, Comm* comm) {
    CkptWriter* w = (CkptWriter*)calloc(1, sizeof(CkptWriter));
    if (!w) return NULL;
    w->opt = *opt;
    w->comm = comm;
    w->rank = comm_rank(comm);
    w->world = comm_size(comm);
    w->last_committed = -1;
    w->resumed_from = -1;
    return w;
}

void ckpt_writer_resumed_from(CkptWriter* w, long step) { w->resumed_from = step; }
void ckpt_writer_launcher(CkptWriter* w, long launcher_pid) { w->launcher_pid = launcher_pid; }

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

// Every rank learns whether any rank failed, and the first failing rank's status and message.
static int agree(CkptWriter* w, int local_rc, const char* local_err, char* err, size_t errlen) {
    int32_t first = local_rc ? w->rank : w->world;
    comm_all_reduce_i32(w->comm, &first, 1, COMM_MIN);
    if (first == w->world) return 0;
    struct { int32_t rc; char msg[1020]; } m;
    memset(&m, 0, sizeof(m));
    if (w->rank == first) { m.rc = local_rc; snprintf(m.msg, sizeof(m.msg), "%s", local_err); }
    comm_broadcast(w->comm, &m, sizeof(m), first);
    set_err(err, errlen, "%s", m.msg);
    return m.rc;
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
        size_t* counts = w->rank == 0 ? (size_t*)calloc((size_t)w->world, sizeof(size_t)) : NULL;
        comm_gather(w->comm, &bytes, sizeof(bytes), counts, 0);
        CkptChunk* all = NULL;
        size_t total = 0;
        int32_t have_room = 1;   // rank 0's buffers for the tables: every rank must know before the gather
        if (w->rank == 0) {
            for (int r = 0; counts && r < w->world; r++) total += counts[r];
            all = counts ? (CkptChunk*)malloc(total > 0 ? total : 1) : NULL;
            have_room = all != NULL;
        }
        comm_broadcast(w->comm, &have_room, sizeof(have_room), 0);
        if (have_room) comm_gatherv(w->comm, w->cw.chunks, bytes, all, counts, 0);
        int commit_rc = 0;
        char commit_err[1020] = "";
        // Complete checkpoints above the step this run resumed from (first commit) or at or
        // above the one it saves are another timeline's.
        int resumed = w->resumed_from >= 0 && w->resumed_from < w->step;
        long above = resumed ? w->resumed_from : w->step - 1;
        if (w->rank == 0 && !have_room) {
            commit_rc = 1;
            snprintf(commit_err, sizeof(commit_err), "%s: out of memory for the chunk table", w->root);
            cJSON_Delete(w->state);
        } else if (w->rank == 0)
            commit_rc = commit(w->root, w->step, w->world, w->tensors, w->n_tensors, all, (int)(total / sizeof(CkptChunk)),
                               w->state, w->opt.keep, w->launcher_pid, above, resumed, commit_err, sizeof(commit_err));
        else
            cJSON_Delete(w->state);
        w->state = NULL;
        free(all); free(counts);
        rc = agree(w, commit_rc, commit_err, err, errlen);
    } else {
        cJSON_Delete(w->state);
        w->state = NULL;
    }
    if (rc && rc != CKPT_SAVED_NO_LATEST && w->rank == 0) {  // nothing half-written stays; earlier checkpoints do
        char tmp_dir[1100];
        step_dir_name(tmp_dir, sizeof(tmp_dir), w->root, w->step, 1);
        remove_tree(tmp_dir);
    }
    if (!rc || rc == CKPT_SAVED_NO_LATEST) { w->last_committed = w->step; w->resumed_from = -1; }
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
    // The previous save committed without updating `latest`: this one writes it again.
    if (rc && rc != CKPT_SAVED_NO_LATEST) { cJSON_Delete(state); w->blocked += seconds_now() - t0; return rc; }

    snprintf(w->root, sizeof(w->root), "%s", root_dir);
    w->step = step;
    w->state = state;
    free(w->tensors);
    w->tensors = (CkptTensor*)malloc((size_t)(n_tensors > 0 ? n_tensors : 1) * sizeof(CkptTensor));
    if (w->tensors) memcpy(w->tensors, tensors, (size_t)n_tensors * sizeof(CkptTensor));
    w->n_tensors = w->tensors ? n_tensors : 0;

    // Rank 0 prepares step_N.tmp (replacing what a crashed save left there).
    char local_err[1024] = "";
    int local_rc = 0;
    free(w->pieces);
    free(w->piece_names);
    w->pieces = (CkptPiece*)malloc((size_t)(n_pieces > 0 ? n_pieces : 1) * sizeof(CkptPiece));
    w->piece_names = (char(*)[CKPT_NAME_LEN])malloc((size_t)(n_pieces > 0 ? n_pieces : 1) * CKPT_NAME_LEN);
    w->n_pieces = 0;
    if (!w->tensors || !w->pieces || !w->piece_names) {
        local_rc = 1;
        set_err(local_err, sizeof(local_err), "checkpoint: out of memory for the tables of %d tensors, %d pieces", n_tensors, n_pieces);
    }
    if (w->rank == 0 && !local_rc) {
        char tmp_dir[1100];
        step_dir_name(tmp_dir, sizeof(tmp_dir), root_dir, step, 1);
        if (ckpt_mkdir_p(root_dir) != 0) { local_rc = 1; set_err(local_err, sizeof(local_err), "%s: cannot create: %s", root_dir, strerror(errno)); }
        else {
            remove_tree(tmp_dir);
            if (mkdir(tmp_dir, 0755) != 0) { local_rc = 1; set_err(local_err, sizeof(local_err), "%s: cannot create: %s", tmp_dir, strerror(errno)); }
        }
    }
    if (!local_rc) local_rc = check_pieces(tensors, n_tensors, pieces, n_pieces, local_err, sizeof(local_err));
    if (agree(w, local_rc, local_err, err, errlen)) { cJSON_Delete(state); w->state = NULL; w->blocked += seconds_now() - t0; return 1; }

    // The pieces: names copied (the caller's strings may not outlive an async save), data
    // either referenced (sync) or snapshotted (async).
    w->n_pieces = n_pieces;
    size_t total = 0;
    for (int i = 0; i < n_pieces; i++) total += (size_t)piece_elems(&pieces[i]);
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
            size_t n = (size_t)piece_elems(&pieces[i]);
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
    chunk_writer_free(&w->cw);
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
    for (int r = 0; r < world && !rc; r++) rc = check_pieces(tensors, n_tensors, pieces[r], n_pieces[r], err, errlen);
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
    // Offline (an import): only an existing step_N is moved aside; other steps are left alone.
    if (!rc) { rc = commit(root_dir, step, world, tensors, n_tensors, all, total, state, opt->keep, 0, LONG_MAX, 0, err, errlen); state = NULL; }
    if (rc && rc != CKPT_SAVED_NO_LATEST) { cJSON_Delete(state); remove_tree(tmp_dir); }
    free(all);
    chunk_writer_free(&cw);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Reading. Nothing in a manifest is trusted: every number is checked against its field's
// range before it indexes, sizes, seeks or loops anything.

int ckpt_json_uint(const cJSON* item, double max, uint64_t* out) {
    if (!cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    // NaN fails every comparison, hence the positive form; a double above 2^53 may not even
    // be the integer written, and one at or above 2^64 cannot be converted at all.
    if (!(v >= 0.0 && v <= max && v <= CKPT_MAX_INT && v == floor(v))) return 0;
    *out = (uint64_t)v;
    return 1;
}

// The shortest decimal that reads back as v (1e+300, not 1.0000000000000001e+300).
static void shortest(double v, char* buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

// How a bad field looked, for the message: its number, a short string, or what it is.
static const char* describe(const cJSON* item, char* buf, size_t n) {
    if (!item) snprintf(buf, n, "missing");
    else if (cJSON_IsNumber(item)) shortest(item->valuedouble, buf, n);
    else if (cJSON_IsString(item)) snprintf(buf, n, "\"%.40s\" (a string)", item->valuestring);
    else snprintf(buf, n, "not a number");
    return buf;
}

// item must be a whole number in [min, max]; else a message naming what (the field).
static int field_uint(const cJSON* item, const char* path, const char* what, double min, double max, uint64_t* out,
                      char* err, size_t errlen) {
    char d[96];
    if (ckpt_json_uint(item, max, out) && (double)*out >= min) return 0;
    set_err(err, errlen, "%s: %s = %s is not a whole number in [%.0f, %.0f]", path, what, describe(item, d, sizeof(d)), min, max);
    return 1;
}

// Reads a small regular file whole (a FIFO or device could block or never end).
static char* read_small_file(const char* path, long max_bytes, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { set_err(err, errlen, "%s: no committed checkpoint here (%s)", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size > max_bytes) {
        set_err(err, errlen, "%s: %lld bytes, more than a manifest can be (%ld)", path, (long long)st.st_size, max_bytes);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size, done = 0;
    char* text = (char*)malloc(size + 1);
    if (!text) { set_err(err, errlen, "%s: out of memory (%zu bytes)", path, size); close(fd); return NULL; }
    while (done < size) {
        ssize_t r = read(fd, text + done, size - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    close(fd);
    if (done != size) { set_err(err, errlen, "%s: cannot read: %s", path, done < size ? "short read" : strerror(errno)); free(text); return NULL; }
    text[size] = '\0';
    return text;
}

// Binary search of the name-sorted tensor table: the tensor's index, or -1.
static int find_tensor(const Ckpt* c, const char* name) {
    int lo = 0, hi = c->n_tensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int cmp = strcmp(c->tensors[c->tensor_order[mid]].name, name);
        if (cmp == 0) return c->tensor_order[mid];
        if (cmp < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

typedef struct { const char* name; int idx; } NameIdx;
static int name_cmp(const void* a, const void* b) { return strcmp(((const NameIdx*)a)->name, ((const NameIdx*)b)->name); }
typedef struct { int tensor, kind; uint64_t lo; int idx; } ChunkKey;
static int chunk_cmp(const void* a, const void* b) {
    const ChunkKey *x = (const ChunkKey*)a, *y = (const ChunkKey*)b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int parse_tensors(Ckpt* c, const cJSON* tensors, const char* path, char* err, size_t errlen) {
    c->n_tensors = cJSON_GetArraySize(tensors);
    c->tensors = (CkptTensor*)calloc((size_t)c->n_tensors + 1, sizeof(CkptTensor));
    c->tensor_order = (int*)calloc((size_t)c->n_tensors + 1, sizeof(int));
    NameIdx* sorted = (NameIdx*)calloc((size_t)c->n_tensors + 1, sizeof(NameIdx));
    if (!c->tensors || !c->tensor_order || !sorted) {
        free(sorted);
        set_err(err, errlen, "%s: out of memory for %d tensors", path, c->n_tensors);
        return 1;
    }
    int i = 0, rc = 0;
    const cJSON* t;
    cJSON_ArrayForEach(t, tensors) {
        CkptTensor* ct = &c->tensors[i];
        const cJSON* name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON* shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        char what[64];
        if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) >= CKPT_NAME_LEN) {
            set_err(err, errlen, "%s: tensors[%d].name is not a name of 1 to %d characters", path, i, CKPT_NAME_LEN - 1);
            rc = 1; break;
        }
        snprintf(ct->name, CKPT_NAME_LEN, "%s", name->valuestring);
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2) {
            set_err(err, errlen, "%s: tensor %s: shape is not [rows, cols]", path, ct->name);
            rc = 1; break;
        }
        snprintf(what, sizeof(what), "tensor %s: shape[0]", ct->name);
        if ((rc = field_uint(cJSON_GetArrayItem(shape, 0), path, what, 0, CKPT_MAX_INT, &ct->rows, err, errlen))) break;
        snprintf(what, sizeof(what), "tensor %s: shape[1]", ct->name);
        if ((rc = field_uint(cJSON_GetArrayItem(shape, 1), path, what, 0, CKPT_MAX_INT, &ct->cols, err, errlen))) break;
        if (ct->cols != 0 && ct->rows > (uint64_t)CKPT_MAX_INT / ct->cols) {
            set_err(err, errlen, "%s: tensor %s: shape [%" PRIu64 ", %" PRIu64 "] has more than 2^53 elements", path, ct->name,
                    ct->rows, ct->cols);
            rc = 1; break;
        }
        sorted[i].name = ct->name;
        sorted[i].idx = i;
        i++;
    }
    if (!rc) {
        qsort(sorted, (size_t)c->n_tensors, sizeof(NameIdx), name_cmp);
        for (i = 0; i < c->n_tensors; i++) {
            c->tensor_order[i] = sorted[i].idx;
            if (i > 0 && !strcmp(sorted[i].name, sorted[i - 1].name)) {
                set_err(err, errlen, "%s: tensor %s is listed twice", path, sorted[i].name);
                rc = 1; break;
            }
        }
    }
    free(sorted);
    return rc;
}

// A box chunk's four fields (f: row0, col0, rows, cols): whole numbers, at least one row and
// column, inside tensor t, of at most CKPT_CHUNK_ELEMS values, and lo, hi its span.
static int parse_box(Ckpt* c, int i, int t, const cJSON* const* f, const char* path, char* err, size_t errlen) {
    CkptChunk* ch = &c->chunks[i];
    CkptBox* b = &ch->box;
    const CkptTensor* ct = &c->tensors[t];
    static const char* const names[4] = {"row0", "col0", "rows", "cols"};
    uint64_t* dst[4] = {&b->row0, &b->col0, &b->rows, &b->cols};
    char what[96];
    for (int k = 0; k < 4; k++) {
        snprintf(what, sizeof(what), "chunks[%d].%s", i, names[k]);
        if (field_uint(f[k], path, what, k < 2 ? 0 : 1, CKPT_MAX_INT, dst[k], err, errlen)) return 1;
    }
    if (b->row0 > ct->rows || b->rows > ct->rows - b->row0 || b->col0 > ct->cols || b->cols > ct->cols - b->col0) {
        set_err(err, errlen, "%s: chunks[%d]: box [%" PRIu64 ", %" PRIu64 "] + [%" PRIu64 ", %" PRIu64 "] is out of bounds "
                "of %s, which is [%" PRIu64 ", %" PRIu64 "]", path, i, b->row0, b->col0, b->rows, b->cols, ct->name, ct->rows,
                ct->cols);
        return 1;
    }
    if (b->rows * b->cols > CKPT_CHUNK_ELEMS) {   // both within the tensor: no overflow
        set_err(err, errlen, "%s: chunks[%d]: box [%" PRIu64 ", %" PRIu64 "] holds %" PRIu64 " values (a chunk holds 1 to %"
                PRIu64 ")", path, i, b->rows, b->cols, b->rows * b->cols, (uint64_t)CKPT_CHUNK_ELEMS);
        return 1;
    }
    const uint64_t lo = b->row0 * ct->cols + b->col0, hi = (b->row0 + b->rows - 1) * ct->cols + b->col0 + b->cols;
    if (ch->lo != lo || ch->hi != hi) {
        set_err(err, errlen, "%s: chunks[%d]: elements [%" PRIu64 ", %" PRIu64 ") are not the span [%" PRIu64 ", %" PRIu64
                ") of its box of %s", path, i, ch->lo, ch->hi, lo, hi, ct->name);
        return 1;
    }
    return 0;
}

static int parse_chunk(Ckpt* c, int i, const cJSON* row, const char* path, char* err, size_t errlen) {
    CkptChunk* ch = &c->chunks[i];
    const cJSON* f[13];
    const int n_fields = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : 0;
    if (n_fields != 9 && (n_fields != 13 || c->format_version < 2)) {
        if (c->format_version < 2)
            set_err(err, errlen, "%s: chunks[%d] is not a row of 9 fields (%s)", path, i, "tensor,kind,lo,hi,file,offset,bytes,codec,xxh64");
        else
            set_err(err, errlen, "%s: chunks[%d] is not a row of 9 fields (%s) or 13 (and row0,col0,rows,cols)", path, i,
                    "tensor,kind,lo,hi,file,offset,bytes,codec,xxh64");
        return 1;
    }
    for (int k = 0; k < n_fields; k++) f[k] = cJSON_GetArrayItem(row, k);
    int t = cJSON_IsString(f[0]) ? find_tensor(c, f[0]->valuestring) : -1;
    if (t < 0) {
        char d[96];
        set_err(err, errlen, "%s: chunks[%d].tensor = %s is not in the tensor table", path, i, describe(f[0], d, sizeof(d)));
        return 1;
    }
    c->chunk_tensor[i] = t;
    snprintf(ch->tensor, CKPT_NAME_LEN, "%s", c->tensors[t].name);
    ch->kind = -1;
    for (int k = 0; cJSON_IsString(f[1]) && k < CKPT_KINDS; k++) if (!strcmp(f[1]->valuestring, CKPT_KIND_NAMES[k])) ch->kind = k;
    ch->codec = -1;
    for (int k = 0; cJSON_IsString(f[7]) && k < CKPT_CODECS; k++) if (!strcmp(f[7]->valuestring, CKPT_CODEC_NAMES[k])) ch->codec = k;
    char what[96], d[96];
    if (ch->kind < 0) {
        set_err(err, errlen, "%s: chunks[%d].kind = %s (expected param, m or v)", path, i, describe(f[1], d, sizeof(d)));
        return 1;
    }
    if (ch->codec < 0) {
        set_err(err, errlen, "%s: chunks[%d].codec = %s (expected raw, zstd or zstd_shuffle)", path, i, describe(f[7], d, sizeof(d)));
        return 1;
    }
    uint64_t file;
    static const char* const names[5] = {"lo", "hi", "file", "offset", "bytes"};
    uint64_t* dst[5] = {&ch->lo, &ch->hi, &file, &ch->offset, &ch->bytes};
    for (int k = 0; k < 5; k++) {
        // the file index must name one of the `world` rank files (rank_%05d.bin)
        double max = k == 2 ? (double)(c->world - 1) : CKPT_MAX_INT;
        snprintf(what, sizeof(what), "chunks[%d].%s", i, names[k]);
        if (k == 2 && !(ckpt_json_uint(f[4], max, &file))) {
            set_err(err, errlen, "%s: %s = %s is not a rank file index in [0, %d) (world %d)", path, what,
                    describe(f[4], d, sizeof(d)), c->world, c->world);
            return 1;
        }
        if (k != 2 && field_uint(f[2 + k], path, what, 0, max, dst[k], err, errlen)) return 1;
    }
    ch->file = (int)file;
    uint64_t numel = c->tensors[t].rows * c->tensors[t].cols, n = ch->hi - ch->lo;
    if (n_fields == 13) {
        if (parse_box(c, i, t, f + 9, path, err, errlen)) return 1;
        c->boxed = 1;
        n = ckpt_chunk_elems(ch);
    } else if (!(ch->lo < ch->hi && ch->hi <= numel && n <= CKPT_CHUNK_ELEMS)) {
        set_err(err, errlen, "%s: chunks[%d]: elements [%" PRIu64 ", %" PRIu64 ") of %s, which has %" PRIu64
                " (a chunk holds 1 to %" PRIu64 ")", path, i, ch->lo, ch->hi, ch->tensor, numel, (uint64_t)CKPT_CHUNK_ELEMS);
        return 1;
    }
    // The stored size bounds every buffer a read fills: checked here, before any read.
    if (ch->codec == CKPT_CODEC_RAW && ch->bytes != n * sizeof(float)) {
        set_err(err, errlen, "%s: chunks[%d].bytes = %" PRIu64 ", but a raw chunk of %" PRIu64 " values (%s %s) has %" PRIu64,
                path, i, ch->bytes, n, ch->tensor, CKPT_KIND_NAMES[ch->kind], n * sizeof(float));
        return 1;
    }
    if (ch->codec != CKPT_CODEC_RAW && (ch->bytes < 1 || ch->bytes > ZSTD_compressBound(n * sizeof(float)))) {
        set_err(err, errlen, "%s: chunks[%d].bytes = %" PRIu64 ", but a zstd frame of %" PRIu64 " values takes 1 to %zu", path,
                i, ch->bytes, n, ZSTD_compressBound(n * sizeof(float)));
        return 1;
    }
    const char* hex = cJSON_IsString(f[8]) ? f[8]->valuestring : "";
    size_t hl = strlen(hex);
    if (hl < 1 || hl > 16 || strspn(hex, "0123456789abcdefABCDEF") != hl) {
        set_err(err, errlen, "%s: chunks[%d].xxh64 = %s is not 1 to 16 hex digits", path, i, describe(f[8], d, sizeof(d)));
        return 1;
    }
    ch->checksum = strtoull(hex, NULL, 16);
    return 0;
}

// Where a chunk's or a request's values sit: element (r, c) of the region's box is value
// base + (r - row0) * stride + (c - col0) of them.
typedef struct { uint64_t row0, col0, rows, cols, base, stride; int owner; } Region;

// A range [lo, hi) of a tensor of `cols` columns as regions: its partial first row, its whole
// rows, its partial last row (up to 3, stored consecutively: stride cols); a box (rows > 0)
// is one region of its own width. Returns the count.
static int to_regions(uint64_t lo, uint64_t hi, const CkptBox* box, uint64_t cols, Region out[3]) {
    if (box->rows) { out[0] = (Region){box->row0, box->col0, box->rows, box->cols, 0, box->cols, 0}; return 1; }
    if (cols == 0 || lo >= hi) return 0;
    int n = 0;
    uint64_t at = lo;
    if (at % cols) {
        const uint64_t w = cols - at % cols < hi - at ? cols - at % cols : hi - at;
        out[n++] = (Region){at / cols, at % cols, 1, w, 0, cols, 0};
        at += w;
    }
    if (hi - at >= cols) {
        const uint64_t rows = (hi - at) / cols;
        out[n++] = (Region){at / cols, 0, rows, cols, at - lo, cols, 0};
        at += rows * cols;
    }
    if (at < hi) out[n++] = (Region){at / cols, 0, 1, hi - at, at - lo, cols, 0};
    return n;
}

static int region_row_cmp(const void* a, const void* b) {
    const Region *x = (const Region*)a, *y = (const Region*)b;
    if (x->row0 != y->row0) return x->row0 < y->row0 ? -1 : 1;
    return x->col0 < y->col0 ? -1 : x->col0 > y->col0;
}
static int region_col_cmp(const void* a, const void* b) {
    const Region *x = (const Region*)a, *y = (const Region*)b;
    return x->col0 < y->col0 ? -1 : x->col0 > y->col0;
}

// The boxes of one (tensor, kind) (regs[n], sorted by row0 then col0; owner: the chunk) cover
// it exactly: a sweep down the rows, band by band (a band: rows between two box edges), where
// the boxes of the band, sorted by column, must each begin where the previous ended, from
// column 0 to the last. active: room for n regions.
static int sweep_boxes(const CkptTensor* ct, int kind, Region* regs, int n, Region* active, const char* path,
                       char* err, size_t errlen) {
    int next = 0, n_active = 0;
    for (uint64_t r = 0; r < ct->rows;) {
        int kept = 0;
        for (int a = 0; a < n_active; a++) if (active[a].row0 + active[a].rows > r) active[kept++] = active[a];
        n_active = kept;
        while (next < n && regs[next].row0 == r) active[n_active++] = regs[next++];
        qsort(active, (size_t)n_active, sizeof(Region), region_col_cmp);
        uint64_t col = 0, band_end = next < n ? regs[next].row0 : ct->rows;
        for (int a = 0; a < n_active; a++) {
            const Region* x = &active[a];
            if (x->col0 < col) {
                const Region* prev = &active[a - 1];
                set_err(err, errlen, "%s: chunks of %s (%s) overlap: chunks[%d] and chunks[%d] both hold row %" PRIu64
                        ", columns [%" PRIu64 ", %" PRIu64 ")", path, ct->name, CKPT_KIND_NAMES[kind], prev->owner, x->owner, r,
                        x->col0, col < x->col0 + x->cols ? col : x->col0 + x->cols);
                return 1;
            }
            if (x->col0 > col) break;   // a gap: reported below
            col = x->col0 + x->cols;
            if (x->row0 + x->rows < band_end) band_end = x->row0 + x->rows;
        }
        if (col != ct->cols) {
            uint64_t gap_end = ct->cols;
            for (int a = 0; a < n_active; a++) if (active[a].col0 >= col && active[a].col0 < gap_end) gap_end = active[a].col0;
            set_err(err, errlen, "%s: elements of %s (%s) in row %" PRIu64 ", columns [%" PRIu64 ", %" PRIu64 ") are in no chunk",
                    path, ct->name, CKPT_KIND_NAMES[kind], r, col, gap_end);
            return 1;
        }
        r = band_end;
    }
    return 0;
}

// With boxes: each (tensor, kind)'s chunks, as regions, swept (sweep_boxes). keys: sorted.
static int check_box_coverage(Ckpt* c, const ChunkKey* keys, const char* path, char* err, size_t errlen) {
    Region* regs = (Region*)calloc(3 * (size_t)c->n_chunks + 1, sizeof(Region));
    Region* active = (Region*)calloc(3 * (size_t)c->n_chunks + 1, sizeof(Region));
    int rc = !regs || !active;
    if (rc) set_err(err, errlen, "%s: out of memory for %d chunks", path, c->n_chunks);
    int p = 0;
    for (int t = 0; t < c->n_tensors && !rc; t++)
        for (int k = 0; k < CKPT_KINDS && !rc; k++) {
            const CkptTensor* ct = &c->tensors[t];
            int n = 0;
            for (; p < c->n_chunks && keys[p].tensor == t && keys[p].kind == k; p++) {
                const CkptChunk* ch = &c->chunks[keys[p].idx];
                const int m = to_regions(ch->lo, ch->hi, &ch->box, ct->cols, regs + n);
                for (int j = 0; j < m; j++) regs[n + j].owner = keys[p].idx;
                n += m;
            }
            qsort(regs, (size_t)n, sizeof(Region), region_row_cmp);
            rc = sweep_boxes(ct, k, regs, n, active, path, err, errlen);
        }
    free(regs);
    free(active);
    return rc;
}

// Each (tensor, kind) must be covered exactly by its chunks: sorted by lo, each begins where
// the previous ended (a sum of lengths would let an overlap hide a gap). With boxes, the box
// sweep.
static int check_coverage(Ckpt* c, const char* path, char* err, size_t errlen) {
    ChunkKey* keys = (ChunkKey*)calloc((size_t)c->n_chunks + 1, sizeof(ChunkKey));
    if (!keys) { set_err(err, errlen, "%s: out of memory for %d chunks", path, c->n_chunks); return 1; }
    for (int i = 0; i < c->n_chunks; i++) {
        keys[i].tensor = c->chunk_tensor[i];
        keys[i].kind = c->chunks[i].kind;
        keys[i].lo = c->chunks[i].lo;
        keys[i].idx = i;
    }
    qsort(keys, (size_t)c->n_chunks, sizeof(ChunkKey), chunk_cmp);
    for (int i = 0; i < c->n_chunks; i++) c->chunk_order[i] = keys[i].idx;
    if (c->boxed) {
        int rc = check_box_coverage(c, keys, path, err, errlen);
        free(keys);
        return rc;
    }
    int p = 0, rc = 0;
    for (int t = 0; t < c->n_tensors && !rc; t++)
        for (int k = 0; k < CKPT_KINDS && !rc; k++) {
            const CkptTensor* ct = &c->tensors[t];
            uint64_t next = 0, numel = ct->rows * ct->cols;
            const CkptChunk* prev = NULL;
            for (; p < c->n_chunks && keys[p].tensor == t && keys[p].kind == k; p++) {
                const CkptChunk* ch = &c->chunks[keys[p].idx];
                if (ch->lo < next) {
                    set_err(err, errlen, "%s: chunks of %s (%s) overlap: elements [%" PRIu64 ", %" PRIu64 ") and [%" PRIu64
                            ", %" PRIu64 ")", path, ct->name, CKPT_KIND_NAMES[k], prev->lo, prev->hi, ch->lo, ch->hi);
                    rc = 1; break;
                }
                if (ch->lo > next) break;  // a gap: reported below
                next = ch->hi;
                prev = ch;
            }
            if (!rc && next != numel) {
                uint64_t gap_end = p < c->n_chunks && keys[p].tensor == t && keys[p].kind == k ? keys[p].lo : numel;
                set_err(err, errlen, "%s: elements [%" PRIu64 ", %" PRIu64 ") of %s (%s) are in no chunk", path, next, gap_end,
                        ct->name, CKPT_KIND_NAMES[k]);
                rc = 1;
            }
        }
    free(keys);
    return rc;
}

int ckpt_open(Ckpt* c, const char* dir, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "%s", dir);
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    char* text = read_small_file(path, CKPT_MAX_MANIFEST_BYTES, err, errlen);
    if (!text) return 1;
    c->manifest = cJSON_Parse(text);
    free(text);
    if (!c->manifest) { set_err(err, errlen, "%s: not valid JSON (truncated or corrupt)", path); return 1; }

    uint64_t v;
    const cJSON* version = cJSON_GetObjectItemCaseSensitive(c->manifest, "format_version");
    if (field_uint(version, path, "format_version", 0, INT32_MAX, &v, err, errlen)) { ckpt_close(c); return 1; }
    c->format_version = (int)v;
    if (c->format_version < 1 || c->format_version > CKPT_FORMAT_VERSION) {
        set_err(err, errlen, "%s: format version %d, this build reads versions 1 to %d%s", path, c->format_version,
                CKPT_FORMAT_VERSION, c->format_version > CKPT_FORMAT_VERSION ? " (written by a newer fsdp.c)" : "");
        ckpt_close(c);
        return 1;
    }
    const cJSON* world = cJSON_GetObjectItemCaseSensitive(c->manifest, "world");
    const cJSON* step = cJSON_GetObjectItemCaseSensitive(c->manifest, "step");
    const cJSON* tensors = cJSON_GetObjectItemCaseSensitive(c->manifest, "tensors");
    const cJSON* chunks = cJSON_GetObjectItemCaseSensitive(c->manifest, "chunks");
    c->state = cJSON_GetObjectItemCaseSensitive(c->manifest, "state");
    if (field_uint(world, path, "world", 1, CKPT_MAX_WORLD, &v, err, errlen)) { ckpt_close(c); return 1; }
    c->world = (int)v;
    if (field_uint(step, path, "step", 0, INT32_MAX, &v, err, errlen)) { ckpt_close(c); return 1; }
    c->step = (long)v;
    if (!cJSON_IsArray(tensors) || !cJSON_IsArray(chunks) || !cJSON_IsObject(c->state)) {
        set_err(err, errlen, "%s: %s is missing or not %s", path,
                !cJSON_IsArray(tensors) ? "tensors" : !cJSON_IsArray(chunks) ? "chunks" : "state",
                !cJSON_IsArray(tensors) || !cJSON_IsArray(chunks) ? "an array" : "an object");
        ckpt_close(c);
        return 1;
    }
    if (parse_tensors(c, tensors, path, err, errlen)) { ckpt_close(c); return 1; }
    c->n_chunks = cJSON_GetArraySize(chunks);
    c->chunks = (CkptChunk*)calloc((size_t)c->n_chunks + 1, sizeof(CkptChunk));
    c->chunk_order = (int*)calloc((size_t)c->n_chunks + 1, sizeof(int));
    c->chunk_tensor = (int*)calloc((size_t)c->n_chunks + 1, sizeof(int));
    c->fds = (int*)malloc((size_t)c->world * sizeof(int));
    c->dfds = (int*)malloc((size_t)c->world * sizeof(int));
    c->maps = (void**)calloc((size_t)c->world, sizeof(void*));
    c->map_sizes = (size_t*)calloc((size_t)c->world, sizeof(size_t));
    if (!c->chunks || !c->chunk_order || !c->chunk_tensor || !c->fds || !c->dfds || !c->maps || !c->map_sizes) {
        set_err(err, errlen, "%s: out of memory for %d chunks of %d rank files", path, c->n_chunks, c->world);
        ckpt_close(c);
        return 1;
    }
    for (int r = 0; r < c->world; r++) { c->fds[r] = -1; c->dfds[r] = -2; }
    int i = 0;
    const cJSON* row;
    cJSON_ArrayForEach(row, chunks) {
        if (parse_chunk(c, i, row, path, err, errlen)) { ckpt_close(c); return 1; }
        i++;
    }
    if (check_coverage(c, path, err, errlen)) { ckpt_close(c); return 1; }
    return 0;
}

const CkptTensor* ckpt_tensor(const Ckpt* c, const char* name) {
    int t = find_tensor(c, name);
    return t < 0 ? NULL : &c->tensors[t];
}

static void chunk_path(const Ckpt* c, const CkptChunk* ch, char* out, size_t n) {
    snprintf(out, n, "%s/rank_%05d.bin", c->dir, ch->file);
}

// The rank file of chunk ch, opened once (a regular file only: a FIFO would block).
static int chunk_fd(Ckpt* c, const CkptChunk* ch, char* err, size_t errlen) {
    if (c->fds[ch->file] >= 0) return c->fds[ch->file];
    char path[1200];
    chunk_path(c, ch, path, sizeof(path));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead
    c->fds[ch->file] = fd;
    return fd;
}

static int check_sum(const Ckpt* c, const CkptChunk* ch, const unsigned char* buf, char* err, size_t errlen) {
    if (XXH64(buf, ch->bytes, 0) == ch->checksum) return 0;
    char path[1200];
    chunk_path(c, ch, path, sizeof(path));
    set_err(err, errlen, "%s: checksum mismatch in %s (%s) elements [%" PRIu64 ", %" PRIu64 ")",
            path, ch->tensor, CKPT_KIND_NAMES[ch->kind], ch->lo, ch->hi);
    return 1;
}

static int grow(void** buf, size_t* cap, size_t need) {
    if (*cap >= need) return 0;
    free(*buf);
    *buf = malloc(need);
    *cap = *buf ? need : 0;
    return *buf ? 0 : 1;
}

// Decodes a checked chunk's stored bytes into out (hi - lo floats). shuffled: room for the
// chunk's bytes (zstd_shuffle decompresses there, then unshuffles into out).
static int decode_chunk(const Ckpt* c, const CkptChunk* ch, const unsigned char* stored, float* out, unsigned char* shuffled,
                        char* err, size_t errlen) {
    uint64_t n = ckpt_chunk_elems(ch);
    if (ch->codec == CKPT_CODEC_RAW) { memcpy(out, stored, n * sizeof(float)); return 0; }
    char path[1200];
    chunk_path(c, ch, path, sizeof(path));
    void* into = ch->codec == CKPT_CODEC_ZSTD_SHUFFLE ? (void*)shuffled : (void*)out;
    size_t z = ZSTD_decompress(into, n * sizeof(float), stored, ch->bytes);
    if (ZSTD_isError(z) || z != n * sizeof(float)) {
        set_err(err, errlen, "%s: corrupt zstd chunk of %s (%s)", path, ch->tensor, ZSTD_isError(z) ? ZSTD_getErrorName(z) : "wrong size");
        return 1;
    }
    if (ch->codec == CKPT_CODEC_ZSTD_SHUFFLE) byte_unshuffle(shuffled, (unsigned char*)out, (size_t)n);
    return 0;
}

// ---- The read pipeline. A reader thread reads the chunks a read needs, in file order, in
// spans of up to 16 MiB of consecutive chunks, into a ring of staging buffers, while the
// calling thread checks each chunk's checksum, decodes it and copies it where it belongs: the
// disk never waits for the CPU, nor for the page faults of a freshly allocated destination
// (those land on the copying thread). The rank files are read with O_DIRECT where the file
// system allows it: they are read once, and filling the page cache on the way costs as much
// memory traffic again as the load itself (on a VM whose fresh pages are slow to fault in, it
// doubled the time). Spans the page cache already holds whole are read from it.
// FSDP_TEST_CKPT_BUFFERED=1 reads everything through the page cache.

#define PIPE_DEPTH 4                      // spans read ahead
#define SPAN_BYTES ((uint64_t)16 << 20)   // consecutive chunks read as one
#define SPAN_GAP ((uint64_t)64 << 10)     // chunks this far apart still share a span
#define DIO_ALIGN ((uint64_t)4096)        // O_DIRECT offsets, lengths and buffers

// rows x cols of a chunk's values go to request req's: row i from value src + i src_stride of
// the chunk to dst + i dst_stride of the request's dst (one run when rows is 1).
typedef struct { int req; uint64_t rows, cols, src, src_stride, dst, dst_stride; } PipeTarget;
typedef struct { int chunk, first_target, n_targets; } PipeJob;
typedef struct { int first_job, n_jobs, file; uint64_t start, end; } PipeSpan;  // bytes [start, end) of a rank file

typedef struct {
    Ckpt* c;
    const PipeJob* jobs;
    const PipeSpan* spans;
    int n_spans;
    unsigned char* buf[PIPE_DEPTH];   // DIO_ALIGN-aligned
    size_t cap[PIPE_DEPTH], got[PIPE_DEPTH];
    int rc[PIPE_DEPTH];
    char err[PIPE_DEPTH][600];
    unsigned char* vec;           // span_cached's page residency vector (the reader thread's)
    size_t vec_cap;
    int read_done, used, stop;   // spans read by the thread / released by the consumer; stop: give up
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Pipe;

static int grow_aligned(unsigned char** buf, size_t* cap, size_t need) {
    if (*cap >= need) return 0;
    free(*buf);
    *buf = NULL;
    *cap = 0;
    void* p;
    if (posix_memalign(&p, DIO_ALIGN, need) != 0) return 1;
    *buf = (unsigned char*)p;
    *cap = need;
    return 0;
}

// The descriptor to read file r with: O_DIRECT when it can be opened so (checked once per
// file), else the buffered one.
static int span_fd(Ckpt* c, const CkptChunk* ch, int* direct, char* err, size_t errlen) {
    int fd = chunk_fd(c, ch, err, errlen);   // also checks that it is a regular file
    if (fd < 0) return -1;
    *direct = 0;
    if (c->dfds[ch->file] == -2) {
        const char* env = getenv("FSDP_TEST_CKPT_BUFFERED");
        c->dfds[ch->file] = -1;
        if (!(env && env[0] == '1')) {
            char path[1200];
            chunk_path(c, ch, path, sizeof(path));
            int dfd = open(path, O_RDONLY | O_DIRECT | O_NONBLOCK | O_CLOEXEC);
            struct stat st;
            if (dfd >= 0 && fstat(dfd, &st) == 0 && S_ISREG(st.st_mode)) c->dfds[ch->file] = dfd;
            else if (dfd >= 0) close(dfd);
        }
    }
    if (c->dfds[ch->file] >= 0) { *direct = 1; return c->dfds[ch->file]; }
    return fd;
}

// Is all of bytes [start, end) of rank file `file` in the page cache (a load right after a
// save)? Then a buffered read is a copy from memory, faster than O_DIRECT from the disk.
// mincore on a mapping of the file says so without reading anything (a probe read with
// RWF_NOWAIT starts readahead, which doubled the time of a cold load here).
static int span_cached(Pipe* p, int file, uint64_t start, uint64_t end) {
    Ckpt* c = p->c;
    if (!c->maps[file]) {
        struct stat st;
        if (fstat(c->fds[file], &st) != 0 || st.st_size <= 0) return 0;
        void* m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, c->fds[file], 0);
        if (m == MAP_FAILED) return 0;
        c->maps[file] = m;
        c->map_sizes[file] = (size_t)st.st_size;
    }
    if (end > c->map_sizes[file]) end = c->map_sizes[file];
    if (start >= end) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), first = (size_t)start / page, last = ((size_t)end + page - 1) / page;
    if (last - first > p->vec_cap) {
        free(p->vec);
        p->vec = (unsigned char*)malloc(last - first);
        p->vec_cap = p->vec ? last - first : 0;
        if (!p->vec) return 0;
    }
    if (mincore((char*)c->maps[file] + first * page, (last - first) * page, p->vec) != 0) return 0;
    for (size_t i = 0; i < last - first; i++) if (!(p->vec[i] & 1)) return 0;
    return 1;
}

// Reads span s into slot (as much of it as the file holds: p->got).
static int read_span(Pipe* p, const PipeSpan* s, int slot) {
    Ckpt* c = p->c;
    const CkptChunk* first = &c->chunks[p->jobs[s->first_job].chunk];
    size_t need = (size_t)(s->end - s->start);
    p->got[slot] = 0;
    if (grow_aligned(&p->buf[slot], &p->cap[slot], need)) {
        set_err(p->err[slot], sizeof(p->err[slot]), "%s: out of memory", c->dir);
        return 1;
    }
    int direct;
    int fd = span_fd(c, first, &direct, p->err[slot], sizeof(p->err[slot]));
    if (fd < 0) return 1;
    size_t done = 0;
    if (direct && span_cached(p, first->file, s->start, s->end)) { fd = c->fds[first->file]; direct = 0; }
    while (done < need) {
        ssize_t r = pread(fd, p->buf[slot] + done, need - done, (off_t)(s->start + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && direct && errno == EINVAL) {   // this file system takes no O_DIRECT here after all
            close(c->dfds[first->file]);
            c->dfds[first->file] = -1;
            fd = c->fds[first->file];
            direct = 0;
            continue;
        }
        if (r < 0) {
            char path[1200];
            chunk_path(c, first, path, sizeof(path));
            set_err(p->err[slot], sizeof(p->err[slot]), "%s: %s reading %s (%s) elements [%" PRIu64 ", %" PRIu64 ") at offset %" PRIu64,
                    path, strerror(errno), first->tensor, CKPT_KIND_NAMES[first->kind], first->lo, first->hi, first->offset);
            return 1;
        }
        done += (size_t)r;
        if (r == 0 || (direct && done % DIO_ALIGN != 0)) break;   // end of file (a short read says so)
    }
    p->got[slot] = done;
    return 0;
}

static void* pipe_reader(void* arg) {
    Pipe* p = (Pipe*)arg;
    for (int j = 0; j < p->n_spans; j++) {
        pthread_mutex_lock(&p->mu);
        while (j - p->used >= PIPE_DEPTH && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        int slot = j % PIPE_DEPTH;
        p->rc[slot] = read_span(p, &p->spans[j], slot);
        pthread_mutex_lock(&p->mu);
        p->read_done = j + 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (p->rc[slot]) break;   // the consumer reports it
    }
    return NULL;
}

// Maps the pages of a destination in one call before it is written: on a VM whose fresh
// pages are slow to fault in one by one, MADV_POPULATE_WRITE (Linux 5.14) took 0.4 s for
// 1.4 GB where first touches took 1 s. The contents are not changed; a kernel without it
// (EINVAL), or memory it cannot populate, just faults on the copy as before.
static void populate(void* p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (bytes < ((size_t)64 << 10)) return;   // small: not worth a call
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / page * page, b = ((uintptr_t)p + bytes + page - 1) / page * page;
    madvise((void*)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)p; (void)bytes;
#endif
}

size_t ckpt_first_nonfinite(const void* values, size_t n) {
    // Blocks of 4096 values: a branch-free OR over the block (vectorised; the bytes need not be
    // aligned), and only a block that holds one is searched for it.
    const unsigned char* b = (const unsigned char*)values;
    for (size_t at = 0; at < n; at += 4096) {
        const size_t m = n - at < 4096 ? n - at : 4096;
        uint32_t any = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t u;
            memcpy(&u, b + (at + i) * sizeof(float), sizeof(u));
            any |= (u & 0x7f800000u) == 0x7f800000u;   // exponent all ones: an infinity or a NaN
        }
        for (size_t i = 0; any && i < m; i++) {
            uint32_t u;
            memcpy(&u, b + (at + i) * sizeof(float), sizeof(u));
            if ((u & 0x7f800000u) == 0x7f800000u) return at + i;
        }
    }
    return n;
}

void ckpt_nonfinite_error(char* err, size_t errlen, const char* dir, const char* tensor, int kind, uint64_t element,
                          const void* value) {
    float v;
    memcpy(&v, value, sizeof(v));
    set_err(err, errlen, "%s: tensor %s (%s): element %" PRIu64 " is %g (not finite)", dir, tensor, CKPT_KIND_NAMES[kind],
            element, (double)v);
}

// Checks, decodes and delivers the chunk of job jb, whose stored bytes start at `at` (got:
// bytes of its span available from there on); finite: refuses the chunk's first value that is
// not finite.
static int consume_chunk(Ckpt* c, const PipeJob* jb, const unsigned char* at, size_t avail, const PipeTarget* targets,
                         float* const* dsts, int finite, char* err, size_t errlen) {
    const CkptChunk* ch = &c->chunks[jb->chunk];
    if (avail < ch->bytes) {
        char path[1200];
        chunk_path(c, ch, path, sizeof(path));
        set_err(err, errlen, "%s: truncated file reading %s (%s) elements [%" PRIu64 ", %" PRIu64 ") at offset %" PRIu64,
                path, ch->tensor, CKPT_KIND_NAMES[ch->kind], ch->lo, ch->hi, ch->offset);
        return 1;
    }
    if (check_sum(c, ch, at, err, errlen)) return 1;
    // Bytes, not floats: a raw chunk after a zstd one (or at a bad offset) need not be aligned.
    const unsigned char* values = at;
    uint64_t n = ckpt_chunk_elems(ch);
    if (ch->codec != CKPT_CODEC_RAW) {
        if (grow((void**)&c->decoded, &c->decoded_cap, n * sizeof(float)) ||
            (ch->codec == CKPT_CODEC_ZSTD_SHUFFLE && grow((void**)&c->shuffled, &c->shuffled_cap, n * sizeof(float)))) {
            set_err(err, errlen, "%s: out of memory", c->dir);
            return 1;
        }
        if (decode_chunk(c, ch, at, c->decoded, c->shuffled, err, errlen)) return 1;
        values = (const unsigned char*)c->decoded;
    }
    const size_t bad = finite ? ckpt_first_nonfinite(values, (size_t)n) : (size_t)n;
    if (bad < n) {   // the element of the tensor: a box's value bad is in its row bad / cols
        const uint64_t cols = c->tensors[c->chunk_tensor[jb->chunk]].cols, w = ch->box.cols;
        const uint64_t element = ch->box.rows ? (ch->box.row0 + bad / w) * cols + ch->box.col0 + bad % w : ch->lo + bad;
        ckpt_nonfinite_error(err, errlen, c->dir, ch->tensor, ch->kind, element, values + bad * sizeof(float));
        return 1;
    }
    for (int t = 0; t < jb->n_targets; t++) {
        const PipeTarget* tg = &targets[jb->first_target + t];
        float* dst = dsts[tg->req];
        if (tg->rows == 1 || (tg->src_stride == tg->cols && tg->dst_stride == tg->cols)) {
            memcpy(dst + tg->dst, values + tg->src * sizeof(float), (size_t)(tg->rows * tg->cols) * sizeof(float));
            continue;
        }
        for (uint64_t i = 0; i < tg->rows; i++)
            memcpy(dst + tg->dst + i * tg->dst_stride, values + (tg->src + i * tg->src_stride) * sizeof(float),
                   (size_t)tg->cols * sizeof(float));
    }
    return 0;
}

// Runs jobs (each one chunk, read once, copied to its targets; sorted by file and offset)
// through the pipeline (finite: consume_chunk's).
static int run_pipe(Ckpt* c, const PipeJob* jobs, int n_jobs, const PipeTarget* targets, float* const* dsts,
                    int finite, char* err, size_t errlen) {
    if (n_jobs == 0) return 0;
    Pipe* p = (Pipe*)calloc(1, sizeof(Pipe));
    PipeSpan* spans = (PipeSpan*)calloc((size_t)n_jobs, sizeof(PipeSpan));
    if (!p || !spans) { free(p); free(spans); set_err(err, errlen, "%s: out of memory", c->dir); return 1; }
    // Spans: runs of chunks of one file that follow each other (gaps up to SPAN_GAP, e.g. another
    // rank's pieces of a resharded load, are read through), up to SPAN_BYTES each.
    int n_spans = 0;
    uint64_t span_end = 0;   // end of the last chunk in the current span
    for (int j = 0; j < n_jobs; j++) {
        const CkptChunk* ch = &c->chunks[jobs[j].chunk];
        PipeSpan* cur = n_spans ? &spans[n_spans - 1] : NULL;
        if (cur && cur->file == ch->file && ch->offset >= span_end && ch->offset - span_end <= SPAN_GAP &&
            ch->offset + ch->bytes - cur->start <= SPAN_BYTES) {
            cur->n_jobs++;
        } else {
            cur = &spans[n_spans++];
            *cur = (PipeSpan){j, 1, ch->file, ch->offset / DIO_ALIGN * DIO_ALIGN, 0};
        }
        span_end = ch->offset + ch->bytes;
        cur->end = (span_end + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
    }
    p->c = c;
    p->jobs = jobs;
    p->spans = spans;
    p->n_spans = n_spans;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_t thread;
    // Without a thread (none can be created) the same loop reads each span itself.
    int threaded = pthread_create(&thread, NULL, pipe_reader, p) == 0;
    int rc = 0;
    for (int s = 0; s < n_spans && !rc; s++) {
        int slot = s % PIPE_DEPTH;
        if (!threaded) {
            p->rc[slot] = read_span(p, &spans[s], slot);
        } else {
            pthread_mutex_lock(&p->mu);
            while (p->read_done <= s) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->rc[slot]) { set_err(err, errlen, "%s", p->err[slot]); rc = 1; break; }
        for (int j = spans[s].first_job; targets && j < spans[s].first_job + spans[s].n_jobs; j++)
            for (int t = 0; t < jobs[j].n_targets; t++) {
                const PipeTarget* tg = &targets[jobs[j].first_target + t];
                populate(dsts[tg->req] + tg->dst, (size_t)((tg->rows - 1) * tg->dst_stride + tg->cols) * sizeof(float));
            }
        for (int j = spans[s].first_job; j < spans[s].first_job + spans[s].n_jobs && !rc; j++) {
            const CkptChunk* ch = &c->chunks[jobs[j].chunk];
            uint64_t off = ch->offset - spans[s].start;
            size_t avail = off < p->got[slot] ? p->got[slot] - (size_t)off : 0;
            rc = consume_chunk(c, &jobs[j], p->buf[slot] + off, avail, targets, dsts, finite, err, errlen);
        }
        pthread_mutex_lock(&p->mu);
        p->used = s + 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (threaded) pthread_join(thread, NULL);
    for (int k = 0; k < PIPE_DEPTH; k++) free(p->buf[k]);
    free(p->vec);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    free(spans);
    return rc;
}

// The run of chunks of (tensor t, kind) in chunk_order: [returned, *end).
static int chunk_run(const Ckpt* c, int t, int kind, int* end) {
    int a = 0, b = c->n_chunks;   // first position with key >= (t, kind, 0)
    while (a < b) {
        int mid = a + (b - a) / 2;
        const CkptChunk* ch = &c->chunks[c->chunk_order[mid]];
        int mt = c->chunk_tensor[c->chunk_order[mid]];
        if (mt < t || (mt == t && ch->kind < kind)) a = mid + 1; else b = mid;
    }
    int e = a;
    while (e < c->n_chunks && c->chunk_tensor[c->chunk_order[e]] == t && c->chunks[c->chunk_order[e]].kind == kind) e++;
    *end = e;
    return a;
}

// The position in chunk_order of the first chunk of (tensor t, kind) that ends after lo, or
// the end of that run of chunks (ranges only: chunks of a run are disjoint and sorted).
static int first_chunk(const Ckpt* c, int t, int kind, uint64_t lo, int* end) {
    int lo_i = chunk_run(c, t, kind, end), hi_i = *end;   // first with ch->hi > lo
    while (lo_i < hi_i) {
        int mid = lo_i + (hi_i - lo_i) / 2;
        if (c->chunks[c->chunk_order[mid]].hi <= lo) lo_i = mid + 1; else hi_i = mid;
    }
    return lo_i;
}

typedef struct { int chunk, file; uint64_t offset; PipeTarget t; } PipeItem;
static int item_cmp(const void* x, const void* y) {
    const PipeItem *a = (const PipeItem*)x, *b = (const PipeItem*)y;
    if (a->file != b->file) return a->file < b->file ? -1 : 1;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    if (a->chunk != b->chunk) return a->chunk < b->chunk ? -1 : 1;
    return a->t.req < b->t.req ? -1 : a->t.req > b->t.req;
}

// Appends an item (chunk ci's values to a request: target t) to items[*n] (grown).
static int push_item(const Ckpt* c, PipeItem** items, size_t* n, size_t* cap, int ci, PipeTarget t) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        PipeItem* grown = (PipeItem*)realloc(*items, *cap * sizeof(PipeItem));
        if (!grown) return 1;
        *items = grown;
    }
    (*items)[(*n)++] = (PipeItem){ci, c->chunks[ci].file, c->chunks[ci].offset, t};
    return 0;
}

int ckpt_read_batch(Ckpt* c, const CkptRequest* req, int n_req, char* err, size_t errlen) {
    // Every (chunk, request) overlap, then grouped by chunk in file order: each chunk is read
    // once, front to back through each rank file.
    size_t n_items = 0, cap = 0;
    PipeItem* items = NULL;
    float** dsts = (float**)calloc((size_t)n_req + 1, sizeof(float*));
    int rc = !dsts;
    if (rc) set_err(err, errlen, "%s: out of memory", c->dir);
    for (int r = 0; r < n_req && !rc; r++) {
        const CkptRequest* q = &req[r];
        int t = find_tensor(c, q->tensor);
        if (t < 0) { set_err(err, errlen, "%s/manifest.json: no tensor '%s'", c->dir, q->tensor); rc = 1; break; }
        const CkptTensor* ct = &c->tensors[t];
        const CkptBox* qb = &q->box;
        if (q->kind < 0 || q->kind >= CKPT_KINDS || (!qb->rows && (q->lo > q->hi || q->hi > ct->rows * ct->cols))) {
            set_err(err, errlen, "%s/manifest.json: tensor %s has %" PRIu64 " elements, [%" PRIu64 ", %" PRIu64 ") requested",
                    c->dir, q->tensor, ct->rows * ct->cols, q->lo, q->hi);
            rc = 1;
            break;
        }
        if (qb->rows && (!qb->cols || qb->row0 > ct->rows || qb->rows > ct->rows - qb->row0 || qb->col0 > ct->cols ||
                         qb->cols > ct->cols - qb->col0)) {
            set_err(err, errlen, "%s/manifest.json: tensor %s is [%" PRIu64 ", %" PRIu64 "], box [%" PRIu64 ", %" PRIu64
                    "] + [%" PRIu64 ", %" PRIu64 "] requested", c->dir, q->tensor, ct->rows, ct->cols, qb->row0, qb->col0,
                    qb->rows, qb->cols);
            rc = 1;
            break;
        }
        dsts[r] = q->dst;
        uint64_t covered = 0, want = qb->rows ? qb->rows * qb->cols : q->hi - q->lo;
        int end;
        if (!c->boxed && !qb->rows) {
            // Ranges from ranges: the chunks from the first that ends after lo, in order.
            for (int k = first_chunk(c, t, q->kind, q->lo, &end); k < end && c->chunks[c->chunk_order[k]].lo < q->hi && !rc; k++) {
                const int ci = c->chunk_order[k];
                const CkptChunk* ch = &c->chunks[ci];
                const uint64_t a = ch->lo > q->lo ? ch->lo : q->lo, b = ch->hi < q->hi ? ch->hi : q->hi;
                rc = push_item(c, &items, &n_items, &cap, ci, (PipeTarget){r, 1, b - a, a - ch->lo, 0, a - q->lo, 0});
                covered += b - a;
            }
        } else {
            // Boxes: every chunk whose span meets the request's, region against region (a range is
            // up to 3 regions); chunks are sorted by the start of their span.
            Region qr[3], cr[3];
            const int nq = to_regions(q->lo, q->hi, qb, ct->cols, qr);
            const uint64_t span_lo = nq ? qr[0].row0 * ct->cols + qr[0].col0 : 0;
            const uint64_t span_hi = nq ? (qr[nq - 1].row0 + qr[nq - 1].rows - 1) * ct->cols + qr[nq - 1].col0 + qr[nq - 1].cols : 0;
            for (int k = chunk_run(c, t, q->kind, &end); k < end && c->chunks[c->chunk_order[k]].lo < span_hi && !rc; k++) {
                const int ci = c->chunk_order[k];
                const CkptChunk* ch = &c->chunks[ci];
                if (ch->hi <= span_lo) continue;
                const int nc = to_regions(ch->lo, ch->hi, &ch->box, ct->cols, cr);
                for (int i = 0; i < nc && !rc; i++)
                    for (int j = 0; j < nq && !rc; j++) {
                        const Region *x = &cr[i], *y = &qr[j];
                        const uint64_t r0 = x->row0 > y->row0 ? x->row0 : y->row0, c0 = x->col0 > y->col0 ? x->col0 : y->col0;
                        const uint64_t r1 = x->row0 + x->rows < y->row0 + y->rows ? x->row0 + x->rows : y->row0 + y->rows;
                        const uint64_t c1 = x->col0 + x->cols < y->col0 + y->cols ? x->col0 + x->cols : y->col0 + y->cols;
                        if (r0 >= r1 || c0 >= c1) continue;
                        const PipeTarget tg = {r, r1 - r0, c1 - c0,
                                               x->base + (r0 - x->row0) * x->stride + (c0 - x->col0), x->stride,
                                               y->base + (r0 - y->row0) * y->stride + (c0 - y->col0), y->stride};
                        rc = push_item(c, &items, &n_items, &cap, ci, tg);
                        covered += (r1 - r0) * (c1 - c0);
                    }
            }
        }
        if (rc) { set_err(err, errlen, "%s: out of memory", c->dir); break; }
        if (covered != want) {   // cannot happen after ckpt_open's coverage check; a guard
            set_err(err, errlen, "%s: chunks of %s (%s) cover %" PRIu64 " of the %" PRIu64 " elements requested", c->dir,
                    q->tensor, CKPT_KIND_NAMES[q->kind], covered, want);
            rc = 1;
        }
    }
    PipeJob* jobs = NULL;
    PipeTarget* targets = NULL;
    int n_jobs = 0;
    if (!rc && n_items > 0) {
        qsort(items, n_items, sizeof(PipeItem), item_cmp);
        jobs = (PipeJob*)calloc(n_items, sizeof(PipeJob));
        targets = (PipeTarget*)calloc(n_items, sizeof(PipeTarget));
        if (!jobs || !targets) { set_err(err, errlen, "%s: out of memory", c->dir); rc = 1; }
        for (size_t i = 0; !rc && i < n_items; i++) {
            targets[i] = items[i].t;
            if (n_jobs == 0 || jobs[n_jobs - 1].chunk != items[i].chunk)
                jobs[n_jobs++] = (PipeJob){items[i].chunk, (int)i, 0};
            jobs[n_jobs - 1].n_targets++;
        }
    }
    if (!rc) rc = run_pipe(c, jobs, n_jobs, targets, dsts, 0, err, errlen);
    free(items);
    free(jobs);
    free(targets);
    free(dsts);
    return rc;
}

int ckpt_read(Ckpt* c, const char* tensor, int kind, uint64_t lo, uint64_t hi, float* dst, char* err, size_t errlen) {
    CkptRequest r = {tensor, kind, lo, hi, dst, {0, 0, 0, 0}};
    return ckpt_read_batch(c, &r, 1, err, errlen);
}

// ckpt_verify, and with finite ckpt_verify_finite.
static int verify_chunks(Ckpt* c, int finite, char* err, size_t errlen) {
    // Coverage was checked by ckpt_open; here every chunk is read (in file order), checked and
    // decoded.
    PipeItem* items = (PipeItem*)calloc((size_t)c->n_chunks + 1, sizeof(PipeItem));
    PipeJob* jobs = (PipeJob*)calloc((size_t)c->n_chunks + 1, sizeof(PipeJob));
    int rc = !items || !jobs;
    if (rc) set_err(err, errlen, "%s: out of memory", c->dir);
    for (int i = 0; !rc && i < c->n_chunks; i++) items[i] = (PipeItem){i, c->chunks[i].file, c->chunks[i].offset, {0, 0, 0, 0, 0, 0, 0}};
    if (!rc) {
        qsort(items, (size_t)c->n_chunks, sizeof(PipeItem), item_cmp);
        for (int i = 0; i < c->n_chunks; i++) jobs[i] = (PipeJob){items[i].chunk, 0, 0};
        rc = run_pipe(c, jobs, c->n_chunks, NULL, NULL, finite, err, errlen);
    }
    free(items);
    free(jobs);
    return rc;
}

int ckpt_verify(Ckpt* c, char* err, size_t errlen) { return verify_chunks(c, 0, err, errlen); }
int ckpt_verify_finite(Ckpt* c, char* err, size_t errlen) { return verify_chunks(c, 1, err, errlen); }

void ckpt_sizes(const Ckpt* c, uint64_t* stored, uint64_t* raw) {
    *stored = *raw = 0;
    for (int i = 0; i < c->n_chunks; i++) {
        *stored += c->chunks[i].bytes;
        *raw += ckpt_chunk_elems(&c->chunks[i]) * sizeof(float);
    }
}

void ckpt_close(Ckpt* c) {
    if (c->fds) for (int r = 0; r < c->world; r++) if (c->fds[r] >= 0) close(c->fds[r]);
    if (c->dfds) for (int r = 0; r < c->world; r++) if (c->dfds[r] >= 0) close(c->dfds[r]);
    if (c->maps) for (int r = 0; r < c->world; r++) if (c->maps[r]) munmap(c->maps[r], c->map_sizes[r]);
    free(c->fds);
    free(c->dfds);
    free(c->maps);
    free(c->map_sizes);
    free(c->tensors);
    free(c->tensor_order);
    free(c->chunks);
    free(c->chunk_order);
    free(c->chunk_tensor);
    free(c->decoded);
    free(c->shuffled);
    cJSON_Delete(c->manifest);
    memset(c, 0, sizeof(*c));
}

// What a `latest` file holds, printable (it may hold anything).
static void printable(const char* s, char* out, size_t n) {
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 1 < n && i < 64; i++) out[j++] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
    out[j] = '\0';
}

int ckpt_find_latest(const char* root_dir, char* out, size_t outlen) {
    StepDir* list;
    int n = list_complete(root_dir, &list);
    long best = n > 0 ? list[0].step : -1;
    char best_name[32] = "";
    if (n > 0) snprintf(best_name, sizeof(best_name), "%s", list[0].name);
    free(list);

    char path[1100];
    snprintf(path, sizeof(path), "%s/latest", root_dir);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat lst;
    if (fd >= 0 && fstat(fd, &lst) == 0) {
        char name[256] = "", shown[80];
        if (!S_ISREG(lst.st_mode)) {
            fprintf(stderr, "checkpoint: %s is not a regular file: ignored\n", path);
        } else {
            ssize_t got = read(fd, name, sizeof(name) - 1);
            name[got > 0 ? got : 0] = '\0';
            name[strcspn(name, "\r\n")] = '\0';
            long step;
            struct stat named, higher;
            if (!parse_step_name(name, &step)) {
                // "../elsewhere", "a/b", "": never followed outside this root
                printable(name, shown, sizeof(shown));
                fprintf(stderr, "checkpoint: %s names '%s', not a step_N directory of %s: ignored\n", path, shown, root_dir);
            } else if (has_manifest(root_dir, name, &named) && step < best && has_manifest(root_dir, best_name, &higher)) {
                // A higher complete step than `latest` names. Committed after `latest` was last
                // written (its manifest is newer): `latest` is stale (writing it failed), take the
                // higher one. Written before: a timeline `latest` was moved off by a run from
                // before abandoned timelines were moved aside; follow `latest`.
                struct timespec hm = higher.st_mtim, lm = lst.st_mtim;
                int stale = hm.tv_sec > lm.tv_sec || (hm.tv_sec == lm.tv_sec && hm.tv_nsec >= lm.tv_nsec);
                if (!stale) { best = step; snprintf(best_name, sizeof(best_name), "%s", name); }
            }
        }
    }
    if (fd >= 0) close(fd);
    if (best < 0) return 0;
    snprintf(out, outlen, "%s/%s", root_dir, best_name);
    return 1;
}

int ckpt_resolve(const char* path, char* out, size_t outlen, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) { set_err(err, errlen, "%s: %s", path, strerror(errno)); return 1; }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: not a directory (expected a checkpoint step directory, a checkpoint root or a run "
                "directory holding ckpt/)", path);
        return 1;
    }
    char probe[1200];
    snprintf(probe, sizeof(probe), "%s/manifest.json", path);
    if (strlen(path) + 1 > outlen) { set_err(err, errlen, "%s: path too long", path); return 1; }
    if (lstat(probe, &st) == 0) { snprintf(out, outlen, "%s", path); return 0; }   // ckpt_open checks it
    if (ckpt_find_latest(path, out, outlen)) return 0;
    // The last component, without trailing slashes.
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t b = len;
    while (b > 0 && path[b - 1] != '/') b--;
    if (len - b >= 5 && !strncmp(path + b, "step_", 5)) {
        set_err(err, errlen, "%s: not a committed checkpoint (no manifest.json: an unfinished or interrupted save)", path);
        return 1;
    }
    snprintf(probe, sizeof(probe), "%s/ckpt", path);
    int has_ckpt = stat(probe, &st) == 0 && S_ISDIR(st.st_mode);
    if (has_ckpt && ckpt_find_latest(probe, out, outlen)) return 0;
    set_err(err, errlen, "%s: no complete checkpoint (no manifest.json here, and no step_N directory with one%s)", path,
            has_ckpt ? " here or in ckpt/" : "");
    return 1;
}
