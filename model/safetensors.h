// Hugging Face's safetensors container, read and written; knows no model (model/hf.h maps its
// tensors to a family's).
//
// - One file: u64 little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
//   "data_offsets": [begin, end)}, "__metadata__": {string: string}} (the writer pads it with
//   spaces to a multiple of 8), then the data; offsets count from the data's start. Read: F32,
//   BF16 and F16 (converted to fp32), 1-D or 2-D; written: F32.
// - Sharded (Hugging Face's form for large models): model.safetensors.index.json =
//   {"metadata": {"total_size": N}, "weight_map": {tensor name: shard file name}} beside the shard
//   files, each a file as above holding some of the tensors. Shard names are plain file names in
//   the index's directory; every shard's header gets a single file's checks, and the map must
//   agree with the headers both ways (each tensor in exactly one shard, the one the map names).
//
// Everything in a file is untrusted: the header is bounded (100 MiB, all shards together too)
// before it is read, every entry's dtype, shape and data_offsets are checked against the data
// before anything is sized from them, and no two tensors may share bytes. Errors come back as
// non-zero with a one-line message naming the file (and the tensor); nothing stays allocated
// or open after one.
#ifndef FSDP_MODEL_SAFETENSORS_H
#define FSDP_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "util/atomic_file.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

#define SAFETENSORS_MAX_HEADER (100u << 20)
#define SAFETENSORS_MAX_INDEX (16u << 20)   // the 405B's index is ~100 KiB
#define SAFETENSORS_MAX_SHARDS 4096         // the largest public checkpoints have a few hundred

// Whether the first bytes of a file (`got` of them, 9 wanted) of file_size bytes frame a
// safetensors header: a length of 2 to 100 MiB within the file, then '{'. Sets *header_len.
int st_probe(const unsigned char* head, long got, uint64_t file_size, uint64_t* header_len);

// One file of a set: its header (parsed, every range checked) and where its data lies.
typedef struct {
    char* path;
    const char* name;          // a shard: its file name as the weight_map gives it
    uint64_t data_start, data_len;
    struct cJSON* header;
} StFile;

// The tensors of a model, in one file (map NULL: the file's header names them) or in the shards
// of an index (map: its weight_map, checked both ways against every shard's header, so a name
// in the map is in exactly that shard). The files are opened one at a time as their tensors are
// read, not all at once (the 405B has 191).
typedef struct {
    char* path;                // what messages name for the model as a whole: the file, or the index
    StFile* files;             // an index's: sorted by name
    int n_files;
    struct cJSON* index;       // the parsed index (map is its weight_map); NULL for one file
    const struct cJSON* map;
    int fd, fd_file;           // the open file and which of files it is (-1: none)
} StSet;

// One file; a shard index. 0, or non-zero with the set empty (st_close is still safe).
int st_open(StSet* s, const char* path, char* err, size_t errlen);
int st_open_index(StSet* s, const char* index_path, char* err, size_t errlen);
void st_close(StSet* s);
// The object whose keys are the model's tensor names (in one file, "__metadata__" too).
const struct cJSON* st_names(const StSet* s);

// A tensor's header entry, checked: dtype, 1 or 2 dimensions, data_offsets within its file's data
// and as long as its elements.
enum { ST_F32, ST_BF16, ST_F16 };
typedef struct {
    int dtype;
    int ndim;
    uint64_t shape[2];
    uint64_t begin, end;       // data_offsets
    int file;                  // which file of the set holds it
} StTensor;

// Tensor `key`: *found 0 when the model has no such tensor (one file: not in its header;
// sharded: not in the weight_map), else 1 and t parsed. Messages call it `name` (the name a
// reader asked for, which it found under key). 0, or non-zero with a message.
int st_tensor(const StSet* s, const char* key, const char* name, StTensor* t, int* found, char* err, size_t errlen);
// Its elements as fp32 into dst (shape[0] x shape[1] of them).
int st_read(StSet* s, const StTensor* t, float* dst, char* err, size_t errlen);

// Writing one file, F32: the header first (every tensor added, in file order), then each
// tensor's data in that order; the file appears whole or not at all (util/atomic_file.h).
typedef struct {
    struct cJSON* header;
    struct cJSON* metadata;    // "__metadata__" (its "format": "pt" first): add string values
    uint64_t size;             // data bytes so far
    AtomicFile file;
} StWriter;
// 0, or non-zero when out of memory.
int st_writer_init(StWriter* w);
int st_writer_add(StWriter* w, const char* name, int ndim, const uint64_t shape[2]);
// The header, written to PATH.tmp.
int st_writer_open(StWriter* w, const char* path, char* err, size_t errlen);
int st_writer_write(StWriter* w, const float* src, size_t n, char* err, size_t errlen);
int st_writer_commit(StWriter* w, char* err, size_t errlen);
// Frees the header and removes PATH.tmp (after any failure; safe when nothing was opened).
void st_writer_abort(StWriter* w);

#ifdef __cplusplus
}
#endif
#endif
