// The checkpoint writer's and resolver's API on one rank (run by test_untrusted_ckpt.sh):
//   - ckpt_writer_resumed_from(R): the first commit moves aside every complete step above R
//     (renamed step_N.abandoned_*, intact), later commits do not touch older steps; without
//     the call a commit moves aside the steps at or above the one it commits;
//   - a save whose `latest` cannot be written returns CKPT_SAVED_NO_LATEST with a message that
//     says the step is complete and verified, and ckpt_find_latest still finds the step;
//   - ckpt_resolve takes a step directory, a checkpoint root and a run directory holding ckpt/,
//     and refuses the rest with a message (no exit);
//   - the zstd_shuffle codec round-trips every value bitwise, old "zstd" chunks still read;
//   - boxes (tensor parallelism): a checkpoint of boxes and ranges mixed (format version 2) reads
//     back any range or box bitwise, from either codec; a box is cut into bands of whole rows
//     of at most CKPT_CHUNK_ELEMS values; a save of a box outside its tensor is refused.
//   usage: build/test_untrusted_ckpt DIR      (DIR: a fresh scratch directory)
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "comm/comm.h"

static int failures = 0;
static void check(int cond, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int cond, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf(cond ? "ok - " : "not ok - ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!cond) failures++;
}

#define N 5000   // elements of the one tensor: two chunks' worth is not needed to test the protocol
static CkptTensor tensor = {"w", 1, N};
static float values[N];

static int save(CkptWriter* w, const char* root, long step, char* err, size_t errlen) {
    for (int i = 0; i < N; i++) values[i] = (float)step + 1e-3f * (float)i;
    CkptPiece pieces[CKPT_KINDS];
    for (int k = 0; k < CKPT_KINDS; k++) pieces[k] = (CkptPiece){"w", k, 0, N, values, {0, 0, 0, 0}};
    cJSON* state = cJSON_CreateObject();
    cJSON_AddNumberToObject(state, "step", (double)step);
    return ckpt_save(w, root, step, &tensor, 1, pieces, CKPT_KINDS, state, err, errlen);
}

static int exists(const char* root, const char* name) {
    char p[1200];
    snprintf(p, sizeof(p), "%s/%s", root, name);
    struct stat st;
    return stat(p, &st) == 0;
}

// How many entries of root start with prefix and have a manifest inside.
static int count_aside(const char* root, const char* prefix) {
    DIR* d = opendir(root);
    int n = 0;
    struct dirent* e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char p[1400];
        snprintf(p, sizeof(p), "%s/%s/manifest.json", root, e->d_name);
        if (access(p, F_OK) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

// Drops a file from the page cache, so that the reader takes its O_DIRECT path (it reads
// spans the cache holds through the cache).
static void evict(const char* path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

// Boxes: g [6, 10] held by three "ranks" as a row-parallel split would (columns 0-4 whole, 5-9
// in two boxes of rows), v [1, 12] as a box and a range (a 9-field row in a version 2 manifest),
// and band [5, 2^20 + 1] as one box of 5 rows (3 rows fit a chunk: cut 3 + 2).
static void check_boxes(const char* dir, int codec) {
    enum { BAND_COLS = (1 << 20) + 1 };
    static const CkptTensor tensors[3] = {{"g", 6, 10}, {"v", 1, 12}, {"band", 5, BAND_COLS}};
    static float g[60], v[12];
    float* band = (float*)malloc((size_t)5 * BAND_COLS * sizeof(float));
    float* back = (float*)malloc((size_t)5 * BAND_COLS * sizeof(float));
    if (!band || !back) { check(0, "boxes: out of memory"); free(band); free(back); return; }
    for (int i = 0; i < 60; i++) g[i] = 1.0f + 0.5f * (float)i;
    for (int i = 0; i < 12; i++) v[i] = -2.0f - (float)i;
    for (size_t i = 0; i < (size_t)5 * BAND_COLS; i++) band[i] = (float)(i % 1000003) * 0.25f;
    // each rank's pieces, values row-major in the box
    static float g0[30], g1[15], g2[15];
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 10; c++) {
            if (c < 5) g0[r * 5 + c] = g[r * 10 + c];
            else if (r < 3) g1[r * 5 + c - 5] = g[r * 10 + c];
            else g2[(r - 3) * 5 + c - 5] = g[r * 10 + c];
        }
    CkptPiece p0[3 * CKPT_KINDS], p1[2 * CKPT_KINDS], p2[CKPT_KINDS];
    for (int k = 0; k < CKPT_KINDS; k++) {
        p0[3 * k] = (CkptPiece){"g", k, 0, 0, g0, {0, 0, 6, 5}};
        p0[3 * k + 1] = (CkptPiece){"v", k, 0, 0, v, {0, 0, 1, 7}};
        p0[3 * k + 2] = (CkptPiece){"band", k, 0, 0, band, {0, 0, 5, BAND_COLS}};
        p1[2 * k] = (CkptPiece){"g", k, 0, 0, g1, {0, 5, 3, 5}};
        p1[2 * k + 1] = (CkptPiece){"v", k, 7, 12, v + 7, {0, 0, 0, 0}};
        p2[k] = (CkptPiece){"g", k, 0, 0, g2, {3, 5, 3, 5}};
    }
    const CkptPiece* const per_rank[3] = {p0, p1, p2};
    const int n_pieces[3] = {3 * CKPT_KINDS, 2 * CKPT_KINDS, CKPT_KINDS};
    CkptOptions opt = {codec, 3, 0, 10};
    char root[1024], path[1200], err[2048];
    snprintf(root, sizeof(root), "%s/boxes_%s", dir, CKPT_CODEC_NAMES[codec]);
    int rc = ckpt_write_offline(root, 1, 3, tensors, 3, per_rank, n_pieces, cJSON_CreateObject(), &opt, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/step_00000001", root);
    Ckpt c;
    memset(&c, 0, sizeof(c));
    rc = rc || ckpt_open(&c, path, err, sizeof(err));
    int band_chunks = 0, ranges = 0;
    for (int i = 0; !rc && i < c.n_chunks; i++) {
        band_chunks += !strcmp(c.chunks[i].tensor, "band") && c.chunks[i].kind == CKPT_PARAM;
        ranges += c.chunks[i].box.rows == 0;
    }
    check(!rc && c.format_version == 2 && c.boxed && ranges == CKPT_KINDS && band_chunks == 2,
          "boxes (%s): written as version 2 (%d), ranges kept as ranges (%d of %d chunks), a box of 5 rows of 2^20+1 "
          "values in 2 bands (%d): %s", CKPT_CODEC_NAMES[codec], c.format_version, ranges, c.n_chunks, band_chunks, rc ? err : "ok");
    if (rc) { free(band); free(back); return; }
    // whole, a range crossing rows and boxes, a box across all three ranks' pieces, as a batch
    float whole[60] = {0}, part[34] = {0}, box[24] = {0}, vb[12] = {0};
    CkptRequest req[5] = {{"g", CKPT_ADAM_M, 0, 60, whole, {0, 0, 0, 0}},
                          {"g", CKPT_PARAM, 13, 47, part, {0, 0, 0, 0}},
                          {"g", CKPT_ADAM_V, 0, 0, box, {1, 3, 4, 6}},
                          {"v", CKPT_PARAM, 0, 0, vb, {0, 2, 1, 9}},
                          {"band", CKPT_ADAM_V, 0, 0, back, {1, 7, 4, BAND_COLS - 9}}};
    rc = ckpt_read_batch(&c, req, 5, err, sizeof(err));
    int good = !rc && !memcmp(whole, g, sizeof(whole)) && !memcmp(part, g + 13, sizeof(part));
    for (int r = 0; r < 4 && good; r++) good = !memcmp(box + r * 6, g + (1 + r) * 10 + 3, 6 * sizeof(float));
    good = good && !memcmp(vb, v + 2, 9 * sizeof(float));
    for (int r = 0; r < 4 && good; r++)
        good = !memcmp(back + (size_t)r * (BAND_COLS - 9), band + (size_t)(1 + r) * BAND_COLS + 7, (BAND_COLS - 9) * sizeof(float));
    check(good, "boxes (%s): a whole tensor, a range across boxes, boxes across chunks of three ranks and of two bands "
          "read back bitwise (%s)", CKPT_CODEC_NAMES[codec], rc ? err : "ok");
    rc = ckpt_verify(&c, err, sizeof(err));
    check(rc == 0, "boxes (%s): ckpt_verify reads every chunk (%s)", CKPT_CODEC_NAMES[codec], rc ? err : "ok");
    ckpt_close(&c);
    // a save's pieces are checked against the tensor table: a box outside its tensor is refused
    snprintf(root, sizeof(root), "%s/boxes_outside", dir);
    CkptPiece bad = {"g", CKPT_PARAM, 0, 0, g, {4, 0, 3, 10}};
    const CkptPiece* const bad_rank[1] = {&bad};
    const int n_bad[1] = {1};
    rc = ckpt_write_offline(root, 1, 1, tensors, 3, bad_rank, n_bad, cJSON_CreateObject(), &opt, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/step_00000001", root);
    check(rc != 0 && strstr(err, "piece of g: box [4, 0] + [3, 10] is not inside its [6, 10]") && !exists(root, "step_00000001"),
          "boxes (%s): a save of a box outside its tensor is refused, nothing committed: %s", CKPT_CODEC_NAMES[codec], err);
    free(band);
    free(back);
}

static const char* latest_of(const char* root) {
    static char out[1200];
    if (!ckpt_find_latest(root, out, sizeof(out))) return "(none)";
    const char* slash = strrchr(out, '/');
    return slash ? slash + 1 : out;
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    const char* dir = argv[1];
    char err[2048], root[1024], path[1200];
    if (ckpt_mkdir_p(dir) != 0) { perror(dir); return 2; }
    CommWorld* cw = comm_tcp_init(0, 1, NULL, "test_untrusted_ckpt", 60, err, sizeof(err));
    if (!cw) { fprintf(stderr, "%s\n", err); return 2; }
    Comm* comm = comm_world(cw);
    CkptOptions opt = {CKPT_CODEC_RAW, 3, 0, 100};

    // A timeline 1..4, then a run resumed from step 2 that commits step 4: steps 3 and 4 of the
    // old timeline are moved aside at that first commit (3 only because the writer was told
    // where the run resumed from), and the next commit (5) moves nothing more.
    snprintf(root, sizeof(root), "%s/resumed", dir);
    CkptWriter* w = ckpt_writer_create(&opt, comm);
    int rc = 0;
    for (long s = 1; s <= 4 && !rc; s++) rc = save(w, root, s, err, sizeof(err));
    ckpt_writer_free(w);
    check(rc == 0 && !strcmp(latest_of(root), "step_00000004"), "a timeline of steps 1..4 is saved (rc %d: %s)", rc, rc ? err : "");
    w = ckpt_writer_create(&opt, comm);
    ckpt_writer_resumed_from(w, 2);
    rc = save(w, root, 4, err, sizeof(err));
    check(rc == 0 && !exists(root, "step_00000003") && count_aside(root, "step_00000003.abandoned_") == 1 &&
          count_aside(root, "step_00000004.abandoned_") == 1 && exists(root, "step_00000004/manifest.json") &&
          exists(root, "step_00000002/manifest.json") && exists(root, "step_00000001/manifest.json"),
          "resumed from step 2, the first commit (4) moves the old steps 3 and 4 aside intact, keeps 1 and 2 (rc %d %s)",
          rc, rc ? err : "");
    rc = save(w, root, 5, err, sizeof(err));
    check(rc == 0 && exists(root, "step_00000004/manifest.json") && count_aside(root, "step_00000004.abandoned_") == 1 &&
          !strcmp(latest_of(root), "step_00000005"), "the next commit (5) keeps this run's step 4 (rc %d)", rc);
    Ckpt c;
    snprintf(path, sizeof(path), "%s/step_00000004", root);
    float back[N];
    rc = ckpt_open(&c, path, err, sizeof(err)) || ckpt_read(&c, "w", CKPT_PARAM, 0, N, back, err, sizeof(err));
    check(rc == 0 && back[0] == 4.0f && c.step == 4, "step_00000004 now holds the resumed run's values (%s)", rc ? err : "ok");
    if (c.manifest) ckpt_close(&c);
    ckpt_writer_free(w);

    // Without resumed_from: a commit of step 2 in a root holding 1..3 moves aside 3 only.
    snprintf(root, sizeof(root), "%s/plain", dir);
    w = ckpt_writer_create(&opt, comm);
    rc = 0;
    for (long s = 1; s <= 3 && !rc; s++) rc = save(w, root, s, err, sizeof(err));
    ckpt_writer_free(w);
    w = ckpt_writer_create(&opt, comm);
    rc = rc || save(w, root, 2, err, sizeof(err));
    check(rc == 0 && count_aside(root, "step_00000003.abandoned_") == 1 && count_aside(root, "step_00000002.abandoned_") == 1 &&
          exists(root, "step_00000001/manifest.json") && !strcmp(latest_of(root), "step_00000002"),
          "without resumed_from, committing step 2 moves aside the old 2 and 3, keeps 1 (rc %d)", rc);
    ckpt_writer_free(w);

    // `latest` cannot be written (latest.tmp is a directory): the step is committed, the save
    // says so with CKPT_SAVED_NO_LATEST, and ckpt_find_latest finds it although latest is stale.
    snprintf(root, sizeof(root), "%s/nolatest", dir);
    w = ckpt_writer_create(&opt, comm);
    rc = save(w, root, 1, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/latest.tmp", root);
    mkdir(path, 0755);
    rc = rc ? rc : save(w, root, 2, err, sizeof(err));
    check(rc == CKPT_SAVED_NO_LATEST && strstr(err, "step 2 is complete and verified") && strstr(err, "latest was not updated") &&
          ckpt_writer_last_committed(w) == 2, "an unwritable latest: ckpt_save returns CKPT_SAVED_NO_LATEST: %.200s", err);
    check(!strcmp(latest_of(root), "step_00000002"), "ckpt_find_latest takes the committed step 2 over latest's step 1 (%s)",
          latest_of(root));
    rmdir(path);
    rc = save(w, root, 3, err, sizeof(err));
    check(rc == 0 && !strcmp(latest_of(root), "step_00000003"), "once latest is writable again the next save updates it (rc %d)", rc);
    ckpt_writer_free(w);

    // Async: the status comes from ckpt_writer_finish.
    CkptOptions aopt = opt;
    aopt.async = 1;
    w = ckpt_writer_create(&aopt, comm);
    mkdir(path, 0755);
    rc = save(w, root, 4, err, sizeof(err));
    int frc = ckpt_writer_finish(w, err, sizeof(err));
    check(rc == 0 && frc == CKPT_SAVED_NO_LATEST && strstr(err, "step 4 is complete and verified"),
          "async: ckpt_writer_finish returns CKPT_SAVED_NO_LATEST (rc %d, finish %d)", rc, frc);
    rmdir(path);
    ckpt_writer_free(w);

    // The launcher (ckpt_writer_launcher): while it is this process's parent a save commits;
    // once it is not (a launcher that died: its ranks were re-parented), the save in flight is
    // not committed (no step directory, its .tmp removed), the earlier steps and `latest` stay.
    snprintf(root, sizeof(root), "%s/launcher", dir);
    w = ckpt_writer_create(&opt, comm);
    ckpt_writer_launcher(w, (long)getppid());
    rc = save(w, root, 1, err, sizeof(err));
    check(rc == 0 && exists(root, "step_00000001/manifest.json"), "launcher alive (the parent): step 1 committed (rc %d)", rc);
    long gone = (long)getppid() + 1;   // any pid but the parent's: what getppid() no longer returns
    ckpt_writer_launcher(w, gone);
    rc = save(w, root, 2, err, sizeof(err));
    char want[200];
    snprintf(want, sizeof(want), "not committed: the launcher that started this job (pid %ld) is gone", gone);
    check(rc != 0 && rc != CKPT_SAVED_NO_LATEST && strstr(err, want) && !exists(root, "step_00000002") &&
              !exists(root, "step_00000002.tmp") && exists(root, "step_00000001/manifest.json") &&
              !strcmp(latest_of(root), "step_00000001"),
          "launcher gone: step 2 not committed, no .tmp left, step 1 still the latest (rc %d): %.200s", rc, err);
    ckpt_writer_free(w);

    // ckpt_resolve: the PATH forms, and refusals with a message (the process goes on).
    char out[1200];
    snprintf(path, sizeof(path), "%s/nolatest/step_00000003", dir);
    rc = ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 0 && !strcmp(out, path), "ckpt_resolve: a step directory is itself (%s)", out);
    snprintf(path, sizeof(path), "%s/nolatest", dir);
    rc = ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 0 && strstr(out, "/nolatest/step_00000004"), "ckpt_resolve: a checkpoint root gives its newest step (%s)", out);
    snprintf(path, sizeof(path), "%s/runX/ckpt", dir);
    ckpt_mkdir_p(path);
    snprintf(root, sizeof(root), "%s/runX/ckpt/step_00000007", dir);
    snprintf(path, sizeof(path), "%s/nolatest/step_00000003", dir);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", path, root);
    rc = system(cmd);
    snprintf(path, sizeof(path), "%s/runX", dir);
    rc = rc || ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 0 && !strcmp(out, root), "ckpt_resolve: a run directory gives ckpt/'s newest step (%s)", out);
    snprintf(path, sizeof(path), "%s/no_such", dir);
    rc = ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 1 && strstr(err, "no_such: No such file"), "ckpt_resolve: a missing path is refused: %s", err);
    snprintf(path, sizeof(path), "%s/runX/ckpt/step_00000009.tmp", dir);
    ckpt_mkdir_p(path);
    rc = ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 1 && strstr(err, "step_00000009.tmp: not a committed checkpoint"), "ckpt_resolve: step_N.tmp is refused: %s", err);
    snprintf(path, sizeof(path), "%s/empty", dir);
    ckpt_mkdir_p(path);
    rc = ckpt_resolve(path, out, sizeof(out), err, sizeof(err));
    check(rc == 1 && strstr(err, "empty: no complete checkpoint"), "ckpt_resolve: a directory without checkpoints is refused: %s", err);

    // zstd_shuffle round-trips bitwise (values of every magnitude and sign, NaN and inf bit
    // patterns included); FSDP_TEST_CKPT_ZSTD_PLAIN=1 writes the old "zstd" chunks, still read.
    static float odd[N];
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)i * 2654435761u;
        memcpy(&odd[i], &u, 4);
    }
    for (int plain = 0; plain < 2; plain++) {
        snprintf(root, sizeof(root), "%s/zstd%d", dir, plain);
        if (plain) setenv("FSDP_TEST_CKPT_ZSTD_PLAIN", "1", 1);
        CkptOptions zopt = {CKPT_CODEC_ZSTD, 3, 0, 3};
        w = ckpt_writer_create(&zopt, comm);
        CkptPiece pieces[CKPT_KINDS];
        for (int k = 0; k < CKPT_KINDS; k++) pieces[k] = (CkptPiece){"w", k, 0, N, odd, {0, 0, 0, 0}};
        rc = ckpt_save(w, root, 1, &tensor, 1, pieces, CKPT_KINDS, cJSON_CreateObject(), err, sizeof(err));
        ckpt_writer_free(w);
        unsetenv("FSDP_TEST_CKPT_ZSTD_PLAIN");
        snprintf(path, sizeof(path), "%s/step_00000001", root);
        // read with O_DIRECT (where the file system takes it) and through the page cache
        for (int buffered = 0; buffered < 2; buffered++) {
            if (buffered) setenv("FSDP_TEST_CKPT_BUFFERED", "1", 1);
            snprintf(cmd, sizeof(cmd), "%s/rank_00000.bin", path);
            evict(cmd);
            memset(back, 0, sizeof(back));
            int r2 = rc || ckpt_open(&c, path, err, sizeof(err)) || ckpt_read(&c, "w", CKPT_ADAM_V, 100, N, back + 100, err, sizeof(err));
            int codec = c.n_chunks ? c.chunks[0].codec : -1;
            check(r2 == 0 && codec == (plain ? CKPT_CODEC_ZSTD : CKPT_CODEC_ZSTD_SHUFFLE) && !memcmp(back + 100, odd + 100, (N - 100) * 4),
                  "codec %s, %s: elements [100, %d) read back bitwise (%s)", codec >= 0 ? CKPT_CODEC_NAMES[codec] : "?",
                  buffered ? "buffered" : "O_DIRECT", N, r2 ? err : "ok");
            if (c.manifest) ckpt_close(&c);
            unsetenv("FSDP_TEST_CKPT_BUFFERED");
        }
    }
    // A rank file cut short, read with O_DIRECT (evicted) and buffered: the missing chunk is named.
    snprintf(path, sizeof(path), "%s/zstd0/step_00000001/rank_00000.bin", dir);
    struct stat st;
    if (stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0) {
        snprintf(root, sizeof(root), "%s/zstd0/step_00000001", dir);
        for (int buffered = 0; buffered < 2; buffered++) {
            if (buffered) setenv("FSDP_TEST_CKPT_BUFFERED", "1", 1);
            evict(path);
            rc = ckpt_open(&c, root, err, sizeof(err)) || ckpt_verify(&c, err, sizeof(err));
            check(rc != 0 && strstr(err, "rank_00000.bin: truncated file reading w ("), "%s: a truncated rank file is named: %.160s",
                  buffered ? "buffered" : "O_DIRECT", err);
            if (c.manifest) ckpt_close(&c);
            unsetenv("FSDP_TEST_CKPT_BUFFERED");
        }
    } else {
        check(0, "test setup: cannot truncate %s", path);
    }
    check_boxes(dir, CKPT_CODEC_RAW);
    check_boxes(dir, CKPT_CODEC_ZSTD);
    comm_finalize(cw);
    return failures ? 1 : 0;
}
