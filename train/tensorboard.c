#include "train/tensorboard.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/run_lock.h"

// Bit at a time, portable C: a step's records are a few hundred bytes, so neither a table
// (which would have to be built per call or be global state) nor SSE4.2's crc32 instruction
// would buy anything measurable.
uint32_t tb_crc32c(uint32_t crc, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

uint32_t tb_masked_crc(uint32_t crc) {
    // TFRecord masks a stored CRC so that a CRC of data that itself holds CRCs stays strong.
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(uint8_t* p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}

static void put_le64(uint8_t* p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}

size_t tb_frame_record(const uint8_t* data, size_t n, uint8_t* out) {
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, tb_masked_crc(tb_crc32c(0, out, 8)));
    memcpy(out + 12, data, n);
    put_le32(out + 12 + n, tb_masked_crc(tb_crc32c(0, data, n)));
    return n + 16;
}

// Protobuf wire format, the little of it an Event needs: a bounded buffer that remembers an
// overflow instead of checking every write.
typedef struct {
    uint8_t* p;
    size_t n, cap;
    int overflow;
} PbBuf;

static void pb_bytes(PbBuf* b, const void* data, size_t n) {
    if (b->overflow || n > b->cap - b->n) { b->overflow = 1; return; }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void pb_varint(PbBuf* b, uint64_t x) {
    uint8_t v[10];
    size_t k = 0;
    do {
        v[k] = (uint8_t)(x & 0x7f);
        x >>= 7;
        if (x) v[k] |= 0x80;
        k++;
    } while (x);
    pb_bytes(b, v, k);
}

static void pb_key(PbBuf* b, int field, int wire) { pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire); }

static void pb_string(PbBuf* b, int field, const void* s, size_t n) {
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, s, n);
}

size_t tb_encode_event(uint8_t* out, size_t cap, double wall_time, int64_t step, const char* file_version,
                       int session_start, const TbScalar* scalars, int n) {
    PbBuf b = {out, 0, cap, 0};
    uint8_t v[8];
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    put_le64(v, bits);
    pb_key(&b, 1, 1);  // wall_time: fixed64
    pb_bytes(&b, v, 8);
    pb_key(&b, 2, 0);  // step: varint (two's complement for a negative int64, as protobuf does)
    pb_varint(&b, (uint64_t)step);
    if (file_version) pb_string(&b, 3, file_version, strlen(file_version));
    if (session_start) {
        const uint8_t session_log[2] = {0x08, 0x01};  // status (field 1, varint) = START
        pb_string(&b, 7, session_log, sizeof(session_log));  // (6 is the deprecated log_message)
    }
    if (n > 0) {
        // Summary's length comes first: encode it into its own buffer, then copy it in.
        uint8_t summary[4096];
        PbBuf s = {summary, 0, sizeof(summary), 0};
        for (int i = 0; i < n; i++) {
            uint8_t value[256];
            PbBuf vb = {value, 0, sizeof(value), 0};
            pb_string(&vb, 1, scalars[i].tag, strlen(scalars[i].tag));
            uint32_t fbits;
            memcpy(&fbits, &scalars[i].value, 4);
            put_le32(v, fbits);
            pb_key(&vb, 2, 5);  // simple_value: fixed32
            pb_bytes(&vb, v, 4);
            if (vb.overflow) return 0;
            pb_string(&s, 1, value, vb.n);
        }
        if (s.overflow) return 0;
        pb_string(&b, 5, summary, s.n);
    }
    return b.overflow ? 0 : b.n;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Frames an encoded event and appends it with one write and a flush.
static int write_event(TbWriter* w, const uint8_t* event, size_t n, char* err, size_t errlen) {
    uint8_t record[8192];
    if (n == 0 || n + 16 > sizeof(record)) {
        snprintf(err, errlen, "--tensorboard: an event of more than %zu bytes (%s)", sizeof(record) - 16, w->path);
        return 1;
    }
    size_t len = tb_frame_record(event, n, record);
    if (fwrite(record, 1, len, w->fp) != len || fflush(w->fp) != 0) {
        snprintf(err, errlen, "--tensorboard: cannot write %s: %s", w->path, strerror(errno));
        return 1;
    }
    return 0;
}

// The seconds of a new event file's name: now, or past the newest file already in dir. TensorBoard
// reads a directory's files in name order, so a resumed run's file (its START event) must sort
// after the interrupted run's even when both started within the same second.
static long long event_file_time(const char* dir) {
    long long t = (long long)time(NULL);
    DIR* d = opendir(dir);
    if (!d) return t;
    const char* prefix = "events.out.tfevents.";
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        long long seen = strtoll(e->d_name + strlen(prefix), NULL, 10);
        if (seen >= t) t = seen + 1;
    }
    closedir(d);
    return t;
}

int tb_open(TbWriter* w, const char* dir, int resume_step, char* err, size_t errlen) {
    w->fp = NULL;
    w->path[0] = '\0';
    // The directory is created and a file created in it now, at startup, with run_lock's probe
    // (the same message as -o's and --ckpt-dir's), not at the first step.
    if (run_dir_writable("--tensorboard", dir, err, errlen)) return 1;
    char host[256] = "localhost";
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    for (char* c = host; *c; c++)
        if (*c == '/') *c = '_';
    snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%lld.%s.%ld", dir, event_file_time(dir), host,
             (long)getpid());
    // "x": a new file per start; an earlier run's file (same second, same pid) is never reused.
    w->fp = fopen(w->path, "wbx");
    if (!w->fp) {
        snprintf(err, errlen, "--tensorboard %s: cannot create %s: %s", dir, w->path, strerror(errno));
        return 1;
    }
    uint8_t event[256];
    double t = wall_seconds();
    size_t n = tb_encode_event(event, sizeof(event), t, 0, "brain.Event:2", 0, NULL, 0);
    if (write_event(w, event, n, err, errlen)) return 1;
    if (resume_step >= 0) {
        n = tb_encode_event(event, sizeof(event), t, (int64_t)resume_step + 1, NULL, 1, NULL, 0);
        if (write_event(w, event, n, err, errlen)) return 1;
    }
    return 0;
}

int tb_write_scalars(TbWriter* w, int64_t step, const TbScalar* scalars, int n, char* err, size_t errlen) {
    if (!w->fp || n <= 0) return 0;
    uint8_t event[4096];
    size_t len = tb_encode_event(event, sizeof(event), wall_seconds(), step, NULL, 0, scalars, n);
    return write_event(w, event, len, err, errlen);
}

int tb_close(TbWriter* w, char* err, size_t errlen) {
    if (!w->fp) return 0;
    int bad = fclose(w->fp) != 0;
    w->fp = NULL;
    if (bad) snprintf(err, errlen, "--tensorboard: cannot close %s: %s", w->path, strerror(errno));
    return bad;
}
