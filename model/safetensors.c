// The safetensors container: one file or a shard index, read with every untrusted number checked;
// one F32 file written (model/safetensors.h).
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "model/llmc.h"

static int read_at(int fd, void* buf, size_t n, off_t at) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        at += r;
    }
    return 0;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) u = sign;
    else {  // subnormal
        int e = -1;
        do { e++; man <<= 1; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int st_probe(const unsigned char* head, long got, uint64_t file_size, uint64_t* header_len) {
    uint64_t hlen = 0;
    for (int b = 0; b < 8 && got >= 8; b++) hlen |= (uint64_t)head[b] << (8 * b);
    *header_len = hlen;
    return got == 9 && head[8] == '{' && hlen >= 2 && hlen <= SAFETENSORS_MAX_HEADER && 8 + hlen <= file_size;
}

// ---- one file's header

// An entry's data_offsets [begin, end): whole numbers, begin <= end <= the data's length.
static int entry_offsets(const StFile* f, const cJSON* it, const char* name, uint64_t* begin, uint64_t* end, char* err,
                         size_t errlen) {
    const cJSON* of = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "data_offsets") : NULL;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) {
        snprintf(err, errlen, "%s: tensor %s: header entry lacks dtype, shape or data_offsets", f->path, name);
        return 1;
    }
    if (!ckpt_json_uint(cJSON_GetArrayItem(of, 0), CKPT_MAX_INT, begin) ||
        !ckpt_json_uint(cJSON_GetArrayItem(of, 1), CKPT_MAX_INT, end) || *end < *begin) {
        snprintf(err, errlen, "%s: tensor %s: bad data_offsets (whole numbers begin <= end expected)", f->path, name);
        return 1;
    }
    if (*end > f->data_len) {
        snprintf(err, errlen, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 ") run past the end of the data (%" PRIu64
                 " bytes; truncated file?)", f->path, name, *begin, *end, f->data_len);
        return 1;
    }
    return 0;
}

typedef struct { uint64_t begin, end; const char* name; } Range;
static int range_cmp(const void* a, const void* b) {
    const Range *x = (const Range*)a, *y = (const Range*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Every entry's range is within the data, and no two tensors share bytes: an overlap would
// import one tensor's data as another's.
static int check_ranges(const StFile* f, char* err, size_t errlen) {
    int n = 0;
    for (const cJSON* e = f->header->child; e; e = e->next) n++;
    Range* r = (Range*)calloc((size_t)n + 1, sizeof(Range));
    if (!r) { snprintf(err, errlen, "%s: out of memory", f->path); return 1; }
    int k = 0, rc = 0;
    for (const cJSON* e = f->header->child; e && !rc; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        rc = entry_offsets(f, e, e->string, &r[k].begin, &r[k].end, err, errlen);
        r[k].name = e->string;
        if (r[k].end > r[k].begin) k++;   // an empty tensor holds no bytes
    }
    if (!rc) qsort(r, (size_t)k, sizeof(Range), range_cmp);
    for (int i = 1; i < k && !rc; i++)
        if (r[i].begin < r[i - 1].end) {
            snprintf(err, errlen, "%s: tensors %s and %s overlap in the data: data_offsets [%" PRIu64 ", %" PRIu64 ") and [%" PRIu64
                     ", %" PRIu64 ")", f->path, r[i - 1].name, r[i].name, r[i - 1].begin, r[i - 1].end, r[i].begin, r[i].end);
            rc = 1;
        }
    free(r);
    return rc;
}

// f's header, with a single file's checks (the container's framing, a JSON object, data offsets
// within the file and not overlapping); the file is closed again. `budget`: header bytes the
// files still to be read may hold in memory together.
static int read_header(StFile* f, uint64_t* budget, char* err, size_t errlen) {
    struct stat st;
    if (stat(f->path, &st) != 0) { snprintf(err, errlen, "%s: cannot open: %s", f->path, strerror(errno)); return 1; }
    if (!S_ISREG(st.st_mode)) { snprintf(err, errlen, "%s: not a regular file", f->path); return 1; }
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", f->path, strerror(errno)); return 1; }
    unsigned char head[9] = {0};
    uint64_t hlen;
    if (!st_probe(head, (long)pread(fd, head, 9, 0), (uint64_t)st.st_size, &hlen)) {
        snprintf(err, errlen, "%s: not a safetensors file (no header of at most 100 MiB within its %lld bytes)", f->path,
                 (long long)st.st_size);
        close(fd);
        return 1;
    }
    if (hlen > *budget) {
        snprintf(err, errlen, "%s: the shards' headers together exceed 100 MiB", f->path);
        close(fd);
        return 1;
    }
    *budget -= hlen;
    char* json = (char*)malloc(hlen + 1);
    if (!json) { snprintf(err, errlen, "%s: out of memory (%" PRIu64 " bytes of header)", f->path, hlen); close(fd); return 1; }
    if (read_at(fd, json, hlen, 8) != 0) {
        snprintf(err, errlen, "%s: read failed: %s", f->path, strerror(errno));
        free(json);
        close(fd);
        return 1;
    }
    close(fd);
    json[hlen] = '\0';
    f->header = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsObject(f->header)) { snprintf(err, errlen, "%s: safetensors header is not a JSON object", f->path); return 1; }
    f->data_start = 8 + hlen;
    f->data_len = (uint64_t)st.st_size - f->data_start;
    return check_ranges(f, err, errlen);
}

static void set_init(StSet* s) {
    memset(s, 0, sizeof(*s));
    s->fd = s->fd_file = -1;
}

void st_close(StSet* s) {
    if (s->fd >= 0) close(s->fd);
    for (int i = 0; i < s->n_files; i++) {
        cJSON_Delete(s->files[i].header);
        free(s->files[i].path);
    }
    free(s->files);
    cJSON_Delete(s->index);
    free(s->path);
    set_init(s);
}

// A copy of path into s->path, and n_files empty files; 0, or non-zero when out of memory.
static int set_alloc(StSet* s, const char* path, int n_files, char* err, size_t errlen) {
    s->path = strdup(path);
    s->files = (StFile*)calloc((size_t)n_files, sizeof(StFile));
    if (!s->path || !s->files) { snprintf(err, errlen, "%s: out of memory", path); return 1; }
    s->n_files = n_files;
    return 0;
}

int st_open(StSet* s, const char* path, char* err, size_t errlen) {
    set_init(s);
    uint64_t budget = SAFETENSORS_MAX_HEADER;
    int rc = set_alloc(s, path, 1, err, errlen);
    if (!rc && !(s->files[0].path = strdup(path))) { snprintf(err, errlen, "%s: out of memory", path); rc = 1; }
    if (!rc) rc = read_header(&s->files[0], &budget, err, errlen);
    if (rc) st_close(s);
    return rc;
}

// ---- a shard index

// A shard's file name as the weight_map gives it: a plain *.safetensors name in the index's own
// directory. No '/' or "..", so that no index reaches into another directory, and no control
// characters, which would break the one-line messages that name it.
static int shard_name_ok(const char* s) {
    const size_t n = strlen(s), suf = strlen(".safetensors");
    if (n <= suf || n > 255 || strcmp(s + n - suf, ".safetensors") != 0) return 0;
    if (strchr(s, '/') || strstr(s, "..")) return 0;
    for (const char* p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return 0;
    return 1;
}

// A name from the file, for a message: control characters as '?', at most 80 characters.
static const char* printable(const char* s, char* buf, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n && i < 80; i++) buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

static int file_cmp(const void* a, const void* b) { return strcmp(((const StFile*)a)->name, ((const StFile*)b)->name); }
static int str_ptr_cmp(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }
typedef struct { const char* name; int file; } Held;
static int held_cmp(const void* a, const void* b) { return strcmp(((const Held*)a)->name, ((const Held*)b)->name); }

// The file of the set named `shard` in the weight_map (-1: none).
static int shard_of(const StSet* s, const char* shard) {
    StFile key;
    key.name = shard;
    const StFile* f = (const StFile*)bsearch(&key, s->files, (size_t)s->n_files, sizeof(StFile), file_cmp);
    return f ? (int)(f - s->files) : -1;
}

// The index file itself, parsed into s->index, its weight_map into s->map (a non-empty object
// of plain shard file names).
static int read_index(StSet* s, char* err, size_t errlen) {
    const char* path = s->path;
    struct stat st;
    if (stat(path, &st) != 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    if (!S_ISREG(st.st_mode)) { snprintf(err, errlen, "%s: not a regular file", path); return 1; }
    if (st.st_size > SAFETENSORS_MAX_INDEX) {
        snprintf(err, errlen, "%s: %lld bytes: too large for a safetensors index (at most 16 MiB)", path, (long long)st.st_size);
        return 1;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return 1; }
    char* text = (char*)malloc((size_t)st.st_size + 1);
    if (!text || read_at(fd, text, (size_t)st.st_size, 0) != 0) {
        if (text) snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
        else snprintf(err, errlen, "%s: out of memory", path);
        free(text);
        close(fd);
        return 1;
    }
    close(fd);
    text[st.st_size] = '\0';
    s->index = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(s->index)) { snprintf(err, errlen, "%s: not a JSON object (invalid JSON, or another JSON value)", path); return 1; }
    s->map = cJSON_GetObjectItemCaseSensitive(s->index, "weight_map");
    if (!cJSON_IsObject(s->map)) {
        snprintf(err, errlen, "%s: no weight_map object (tensor name -> shard file): not a model.safetensors.index.json", path);
        return 1;
    }
    if (!s->map->child) { snprintf(err, errlen, "%s: the weight_map is empty", path); return 1; }
    char buf[96];
    for (const cJSON* m = s->map->child; m; m = m->next) {
        if (!strcmp(m->string, "__metadata__")) {
            snprintf(err, errlen, "%s: the weight_map lists __metadata__, which is not a tensor", path);
            return 1;
        }
        if (!cJSON_IsString(m)) { snprintf(err, errlen, "%s: weight_map: tensor %s: not a file name (a string)", path, m->string); return 1; }
        if (!shard_name_ok(m->valuestring)) {
            snprintf(err, errlen, "%s: weight_map: tensor %s is in \"%s\": not a *.safetensors file name in the index's directory "
                     "(no '/' or '..')", path, m->string, printable(m->valuestring, buf, sizeof(buf)));
            return 1;
        }
    }
    return 0;
}

// The shard files: the map's distinct values in name order (as shard_of's search needs), each a
// path beside the index; then each one's header.
static int read_shards(StSet* s, char* err, size_t errlen) {
    int n_map = 0;
    for (const cJSON* m = s->map->child; m; m = m->next) n_map++;
    const char** names = (const char**)calloc((size_t)n_map, sizeof(char*));
    if (!names) { snprintf(err, errlen, "%s: out of memory", s->path); return 1; }
    int at = 0, n_files = 0;
    for (const cJSON* m = s->map->child; m; m = m->next) names[at++] = m->valuestring;
    qsort(names, (size_t)n_map, sizeof(char*), str_ptr_cmp);
    for (int i = 0; i < n_map; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0) n_files++;
    if (n_files > SAFETENSORS_MAX_SHARDS) {
        snprintf(err, errlen, "%s: the weight_map names %d shard files (at most %d)", s->path, n_files, SAFETENSORS_MAX_SHARDS);
        free(names);
        return 1;
    }
    s->files = (StFile*)calloc((size_t)n_files, sizeof(StFile));
    if (!s->files) { snprintf(err, errlen, "%s: out of memory", s->path); free(names); return 1; }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", s->path);
    const char* d = dirname(dir);
    for (int i = 0; i < n_map; i++) {
        if (i > 0 && !strcmp(names[i], names[i - 1])) continue;
        StFile* f = &s->files[s->n_files++];
        f->name = names[i];
        f->path = (char*)malloc(strlen(d) + strlen(f->name) + 2);
        if (!f->path) { snprintf(err, errlen, "%s: out of memory", s->path); free(names); return 1; }
        sprintf(f->path, "%s/%s", d, f->name);
    }
    free(names);
    uint64_t budget = SAFETENSORS_MAX_HEADER;
    for (int i = 0; i < s->n_files; i++) {
        struct stat st;
        if (stat(s->files[i].path, &st) != 0) {   // name a tensor it should hold, for the message
            const cJSON* m = s->map->child;
            while (strcmp(m->valuestring, s->files[i].name) != 0) m = m->next;
            snprintf(err, errlen, "%s: cannot open: %s (the weight_map of %s puts tensor %s there)", s->files[i].path,
                     strerror(errno), s->path, m->string);
            return 1;
        }
        if (read_header(&s->files[i], &budget, err, errlen)) return 1;
    }
    return 0;
}

// The map against the shards' headers, both ways: no tensor in two shards (nor twice in one
// header), every tensor of a shard in the map and mapped to that shard, every tensor of the map
// in the shard it names (so the map lists each once when it lists as many as the shards hold).
static int check_map(StSet* s, char* err, size_t errlen) {
    int n_held = 0, n_map = 0, rc = 0;
    for (const cJSON* m = s->map->child; m; m = m->next) n_map++;
    for (int i = 0; i < s->n_files; i++)
        for (const cJSON* e = s->files[i].header->child; e; e = e->next) n_held += strcmp(e->string, "__metadata__") != 0;
    Held* held = (Held*)calloc((size_t)n_held + 1, sizeof(Held));
    if (!held) { snprintf(err, errlen, "%s: out of memory", s->path); return 1; }
    int at = 0;
    for (int i = 0; i < s->n_files; i++)
        for (const cJSON* e = s->files[i].header->child; e; e = e->next)
            if (strcmp(e->string, "__metadata__") != 0) { held[at].name = e->string; held[at++].file = i; }
    qsort(held, (size_t)n_held, sizeof(Held), held_cmp);
    for (int i = 1; i < n_held && !rc; i++) {
        if (strcmp(held[i].name, held[i - 1].name) != 0) continue;
        rc = 1;
        if (held[i].file == held[i - 1].file) {
            snprintf(err, errlen, "%s: tensor %s appears twice in the header", s->files[held[i].file].path, held[i].name);
            break;
        }
        int a = held[i - 1].file, b = held[i].file;
        if (a > b) { int t = a; a = b; b = t; }   // (qsort leaves equal names in any order)
        snprintf(err, errlen, "%s: tensor %s is in two shards, %s and %s", s->path, held[i].name, s->files[a].name, s->files[b].name);
    }
    free(held);
    if (rc) return 1;
    for (int i = 0; i < s->n_files; i++)
        for (const cJSON* e = s->files[i].header->child; e; e = e->next) {
            if (!strcmp(e->string, "__metadata__")) continue;
            const cJSON* m = cJSON_GetObjectItemCaseSensitive(s->map, e->string);
            if (!m) {
                snprintf(err, errlen, "%s: holds tensor %s, which the weight_map of %s does not list", s->files[i].path, e->string, s->path);
                return 1;
            }
            if (strcmp(m->valuestring, s->files[i].name) != 0) {
                snprintf(err, errlen, "%s: tensor %s is in %s, but the weight_map puts it in %s", s->path, e->string,
                         s->files[i].name, m->valuestring);
                return 1;
            }
        }
    for (const cJSON* m = s->map->child; m; m = m->next)
        if (!cJSON_GetObjectItemCaseSensitive(s->files[shard_of(s, m->valuestring)].header, m->string)) {
            snprintf(err, errlen, "%s: the weight_map puts tensor %s in %s, which does not hold it", s->path, m->string, m->valuestring);
            return 1;
        }
    if (n_map != n_held) { snprintf(err, errlen, "%s: a tensor name appears twice in the weight_map", s->path); return 1; }
    return 0;
}

int st_open_index(StSet* s, const char* index_path, char* err, size_t errlen) {
    set_init(s);
    if (!(s->path = strdup(index_path))) { snprintf(err, errlen, "%s: out of memory", index_path); return 1; }
    if (read_index(s, err, errlen) || read_shards(s, err, errlen) || check_map(s, err, errlen)) {
        st_close(s);
        return 1;
    }
    return 0;
}

const cJSON* st_names(const StSet* s) { return s->map ? s->map : s->files[0].header; }

// ---- tensors

static int parse_entry(const StFile* f, const cJSON* it, const char* name, StTensor* t, char* err, size_t errlen) {
    if (!cJSON_IsObject(it)) { snprintf(err, errlen, "%s: tensor %s: not an object in the header", f->path, name); return 1; }
    const cJSON* dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON* sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh)) {
        snprintf(err, errlen, "%s: tensor %s: header entry lacks dtype, shape or data_offsets", f->path, name);
        return 1;
    }
    size_t esize;
    if (!strcmp(dt->valuestring, "F32")) { t->dtype = ST_F32; esize = 4; }
    else if (!strcmp(dt->valuestring, "BF16")) { t->dtype = ST_BF16; esize = 2; }
    else if (!strcmp(dt->valuestring, "F16")) { t->dtype = ST_F16; esize = 2; }
    else {
        snprintf(err, errlen, "%s: tensor %s: unsupported dtype %s (expected F32, BF16 or F16)", f->path, name, dt->valuestring);
        return 1;
    }
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim < 1 || t->ndim > 2) {
        snprintf(err, errlen, "%s: tensor %s: %d dimensions (expected 1 or 2)", f->path, name, t->ndim);
        return 1;
    }
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (!ckpt_json_uint(cJSON_GetArrayItem(sh, d), 1e12, &t->shape[d])) {
            snprintf(err, errlen, "%s: tensor %s: bad shape", f->path, name);
            return 1;
        }
        if (t->shape[d] != 0 && numel > ((uint64_t)1 << 50) / t->shape[d]) {
            snprintf(err, errlen, "%s: tensor %s: bad shape (more than 2^50 elements)", f->path, name);
            return 1;
        }
        numel *= t->shape[d];
    }
    if (entry_offsets(f, it, name, &t->begin, &t->end, err, errlen)) return 1;
    if (t->end - t->begin != numel * esize) {
        snprintf(err, errlen, "%s: tensor %s: %" PRIu64 " bytes of data for %" PRIu64 " elements of %s", f->path, name,
                 t->end - t->begin, numel, dt->valuestring);
        return 1;
    }
    return 0;
}

int st_tensor(const StSet* s, const char* key, const char* name, StTensor* t, int* found, char* err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    *found = 0;
    const cJSON* it = NULL;
    if (!s->map) {
        it = cJSON_GetObjectItemCaseSensitive(s->files[0].header, key);
    } else {
        const cJSON* m = cJSON_GetObjectItemCaseSensitive(s->map, key);
        if (!m) return 0;
        t->file = shard_of(s, m->valuestring);   // (every value was checked to be a shard read)
        it = t->file < 0 ? NULL : cJSON_GetObjectItemCaseSensitive(s->files[t->file].header, key);
        if (!it) {
            snprintf(err, errlen, "%s: the weight_map puts tensor %s in %s, which does not hold it", s->path, key, m->valuestring);
            return 1;
        }
    }
    if (!it) return 0;
    *found = 1;
    return parse_entry(&s->files[t->file], it, name, t, err, errlen);
}

// A descriptor for reading `file` of the set: the one open, or that one closed and this one
// opened (and checked to still hold the data its header described).
static int file_fd(StSet* s, int file, char* err, size_t errlen) {
    if (s->fd_file == file) return s->fd;
    if (s->fd >= 0) close(s->fd);
    const StFile* f = &s->files[file];
    s->fd_file = -1;
    s->fd = open(f->path, O_RDONLY);
    if (s->fd < 0) { snprintf(err, errlen, "%s: cannot open: %s", f->path, strerror(errno)); return -1; }
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (uint64_t)st.st_size < f->data_start + f->data_len) {
        snprintf(err, errlen, "%s: shorter than when its header was read (changed during the import?)", f->path);
        return -1;
    }
    s->fd_file = file;
    return s->fd;
}

int st_read(StSet* s, const StTensor* t, float* dst, char* err, size_t errlen) {
    const StFile* f = &s->files[t->file];
    const int fd = file_fd(s, t->file, err, errlen);
    if (fd < 0) return 1;
    const off_t at = (off_t)(f->data_start + t->begin);
    if (t->dtype == ST_F32) {
        if (read_at(fd, dst, t->end - t->begin, at) == 0) return 0;
        snprintf(err, errlen, "%s: read failed: %s", f->path, strerror(errno));
        return 1;
    }
    const uint64_t n = (t->end - t->begin) / 2;
    uint16_t* tmp = (uint16_t*)malloc(n * 2 + 1);
    if (!tmp) { snprintf(err, errlen, "%s: out of memory (%" PRIu64 " bytes)", f->path, n * 2); return 1; }
    if (read_at(fd, tmp, n * 2, at) != 0) {
        snprintf(err, errlen, "%s: read failed: %s", f->path, strerror(errno));
        free(tmp);
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) dst[i] = t->dtype == ST_BF16 ? bf16_to_float(tmp[i]) : half_to_float(tmp[i]);
    free(tmp);
    return 0;
}

// ---- writing

int st_writer_init(StWriter* w) {
    memset(w, 0, sizeof(*w));
    w->file.fd = -1;
    w->header = cJSON_CreateObject();
    w->metadata = w->header ? cJSON_AddObjectToObject(w->header, "__metadata__") : NULL;
    if (!w->metadata || !cJSON_AddStringToObject(w->metadata, "format", "pt")) { st_writer_abort(w); return 1; }
    return 0;
}

int st_writer_add(StWriter* w, const char* name, int ndim, const uint64_t shape[2]) {
    cJSON* t = cJSON_AddObjectToObject(w->header, name);
    cJSON* sh = t && cJSON_AddStringToObject(t, "dtype", "F32") ? cJSON_AddArrayToObject(t, "shape") : NULL;
    uint64_t numel = 1;
    for (int d = 0; sh && d < ndim; d++) {
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
        numel *= shape[d];
    }
    cJSON* offs = sh ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
    if (!offs) return 1;
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)w->size));
    w->size += numel * sizeof(float);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)w->size));
    return cJSON_GetArraySize(offs) != 2 || cJSON_GetArraySize(sh) != ndim;
}

int st_writer_open(StWriter* w, const char* path, char* err, size_t errlen) {
    char* json = cJSON_PrintUnformatted(w->header);
    cJSON_Delete(w->header);
    w->header = w->metadata = NULL;
    if (!json) { snprintf(err, errlen, "out of memory building the safetensors header"); return 1; }
    // u64 little-endian length, then the JSON padded with spaces to a multiple of 8.
    const size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    unsigned char* buf = (unsigned char*)malloc(8 + padded);
    if (!buf) { free(json); snprintf(err, errlen, "out of memory building the safetensors header"); return 1; }
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    memcpy(buf + 8, json, jlen);
    memset(buf + 8 + jlen, ' ', padded - jlen);
    free(json);
    int rc = atomic_file_open(&w->file, path, ATOMIC_TMP, err, errlen) || atomic_file_write(&w->file, buf, 8 + padded, err, errlen);
    free(buf);
    return rc;
}

int st_writer_write(StWriter* w, const float* src, size_t n, char* err, size_t errlen) {
    return atomic_file_write(&w->file, src, n * sizeof(float), err, errlen);
}

int st_writer_commit(StWriter* w, char* err, size_t errlen) {
    return atomic_file_commit(&w->file, err, errlen);
}

void st_writer_abort(StWriter* w) {
    cJSON_Delete(w->header);
    w->header = w->metadata = NULL;
    atomic_file_abort(&w->file);
}
