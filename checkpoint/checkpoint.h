// Sharded checkpoints in the style of torch.distributed.checkpoint.
//
//     ROOT/step_00002000/
//         manifest.json      format version, world size at save, the caller's state (model
//                            config, step, data position, ...), every tensor's shape, and
//                            every chunk: tensor, kind, element range, file, offset, bytes,
//                            codec, checksum (XXH64 of the stored bytes)
//         rank_00000.bin ... one per rank, written in parallel
//     ROOT/latest            name of the newest complete checkpoint, replaced atomically
//
// What a rank saves is a list of pieces: a contiguous element range [lo, hi) of one tensor
// (row-major, global element indices) for one kind (parameter, Adam m, Adam v), in fp32.
// Pieces are cut into chunks of at most CKPT_CHUNK_ELEMS elements, so a reader that needs
// a small range never reads (or decompresses) much more than that.
//
// Commit protocol: every rank writes ROOT/step_N.tmp/rank_R.bin and fsyncs it; rank 0
// gathers the chunk tables, writes manifest.json.tmp, fsyncs, renames it to manifest.json,
// renames step_N.tmp to step_N, fsyncs ROOT, then replaces ROOT/latest (write latest.tmp,
// fsync, rename). A directory without manifest.json is never loaded. After a commit, the
// checkpoints older than the newest `keep` up to it are deleted (newer ones, left by a run
// that was rolled back, are not touched).
//
// Loading is independent of the world size: a reader asks for any element range of any
// tensor and gets it from the chunks that overlap it, each verified against its checksum.
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H

#include "comm/comm.h"
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_FORMAT_VERSION 1
#define CKPT_CHUNK_ELEMS ((uint64_t)1 << 22)  // 4 Mi elements = 16 MiB of fp32 per chunk
#define CKPT_NAME_LEN 48

enum { CKPT_PARAM = 0, CKPT_ADAM_M = 1, CKPT_ADAM_V = 2, CKPT_KINDS = 3 };
enum { CKPT_CODEC_RAW = 0, CKPT_CODEC_ZSTD = 1 };

extern const char* const CKPT_KIND_NAMES[CKPT_KINDS];   // "param", "m", "v"

typedef struct {
    char name[CKPT_NAME_LEN];
    uint64_t rows, cols;        // numel = rows * cols
} CkptTensor;

typedef struct {
    const char* tensor;         // a name from the tensor table
    int kind;                   // CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V
    uint64_t lo, hi;            // element range of the tensor
    const float* data;          // hi - lo values
} CkptPiece;

typedef struct {
    char tensor[CKPT_NAME_LEN];
    int kind;
    uint64_t lo, hi;
    int file;                   // rank_%05d.bin
    uint64_t offset, bytes;     // where the stored bytes are in that file
    int codec;
    uint64_t checksum;          // XXH64 (seed 0) of the stored bytes
} CkptChunk;

typedef struct {
    int codec;                  // CKPT_CODEC_RAW or CKPT_CODEC_ZSTD
    int zstd_level;             // 1..19
    int async;                  // snapshot, then write in a background thread
    int keep;                   // complete checkpoints to keep (>= 1)
} CkptOptions;

// ---------------------------------------------------------------------------------------
// Writing (collective over comm: every rank calls every function, in the same order)

typedef struct CkptWriter CkptWriter;

// mkdir -p: creates dir and its missing parents. 0, or -1 with errno set (ENOTDIR when dir
// exists but is not a directory). Also what train_gpt creates its -o directory with.
int ckpt_mkdir_p(const char* dir);

CkptWriter* ckpt_writer_create(const CkptOptions* opt, Comm* comm);
// Saves checkpoint `step` under root_dir (created if missing). tensors: the full tensor
// table (same on every rank). pieces: what this rank owns. state: a JSON object stored as
// the manifest's "state" (rank 0's is used; the call takes ownership on every rank).
// Synchronous: returns after the commit. Async: returns once the pieces are copied into the
// writer's snapshot buffer; the files are written by a thread and the commit happens in a
// later ckpt_writer_poll, ckpt_save or ckpt_writer_finish (a save first completes the
// previous one). Returns 0, or non-zero with a message (the same on every rank) when any
// rank failed; a failed save leaves every earlier checkpoint untouched.
int ckpt_save(CkptWriter* w, const char* root_dir, long step, const CkptTensor* tensors, int n_tensors,
              const CkptPiece* pieces, int n_pieces, cJSON* state, char* err, size_t errlen);
// Async: allocates (and touches) the snapshot buffer for saves of up to `floats` values now,
// so that the first save does not pay for it. Non-zero when out of memory.
int ckpt_writer_reserve(CkptWriter* w, size_t floats);
// Collective and cheap: commits a pending async save if every rank's thread has finished.
// Returns 0 (nothing to do, still running, or committed) or non-zero with a message.
int ckpt_writer_poll(CkptWriter* w, char* err, size_t errlen);
// Collective: waits for a pending async save and commits it.
int ckpt_writer_finish(CkptWriter* w, char* err, size_t errlen);
// Step of the last committed checkpoint, or -1.
long ckpt_writer_last_committed(const CkptWriter* w);
// Seconds the calling thread spent inside ckpt_save/poll/finish (blocked by checkpointing).
double ckpt_writer_blocked_seconds(const CkptWriter* w);
void ckpt_writer_free(CkptWriter* w);

// Writes a complete checkpoint for `world` ranks from one process (the ckpt tool's import):
// pieces[r][0 .. n_pieces[r]) are rank r's. Same commit protocol, no MPI. Takes ownership of
// state. Like ckpt_save it replaces an existing step_N and prunes to opt->keep.
int ckpt_write_offline(const char* root_dir, long step, int world, const CkptTensor* tensors, int n_tensors,
                       const CkptPiece* const* pieces, const int* n_pieces, cJSON* state,
                       const CkptOptions* opt, char* err, size_t errlen);

// ---------------------------------------------------------------------------------------
// Reading (any process, any world size)

typedef struct {
    char dir[1024];
    int format_version;
    int world;                  // ranks at save
    long step;
    cJSON* manifest;            // the whole parsed manifest
    const cJSON* state;         // manifest["state"]
    int n_tensors;
    CkptTensor* tensors;
    int n_chunks;
    CkptChunk* chunks;
    int* fds;                   // [world] rank files, opened on first use (-1 until then)
    unsigned char* scratch;     // one chunk's stored bytes
    float* decoded;             // one chunk's values
    size_t scratch_cap, decoded_cap;
} Ckpt;

// Opens dir (a step directory) and parses its manifest. Refuses a directory without a
// committed manifest, a manifest that does not parse or misses fields, and a format
// version other than CKPT_FORMAT_VERSION, naming the file.
int ckpt_open(Ckpt* c, const char* dir, char* err, size_t errlen);
// The tensor's entry in the manifest, or NULL.
const CkptTensor* ckpt_tensor(const Ckpt* c, const char* name);
// Reads elements [lo, hi) of (tensor, kind) into dst from the chunks that overlap it, each
// read with pread and checked against its checksum. Fails, naming the file and tensor, on a
// missing or short rank file, a checksum mismatch, a corrupt zstd frame, or a range the
// chunks do not cover.
int ckpt_read(Ckpt* c, const char* tensor, int kind, uint64_t lo, uint64_t hi, float* dst,
              char* err, size_t errlen);
// Reads every chunk and checks its checksum and size. 0 when all are intact.
int ckpt_verify(Ckpt* c, char* err, size_t errlen);
// Total bytes stored in rank files, and what they hold uncompressed.
void ckpt_sizes(const Ckpt* c, uint64_t* stored, uint64_t* raw);
void ckpt_close(Ckpt* c);

// The newest complete checkpoint under root_dir: ROOT/latest when it names a directory with
// a manifest, else the highest step_N with one. Writes its path to out and returns 1; 0 when
// there is none.
int ckpt_find_latest(const char* root_dir, char* out, size_t outlen);

#ifdef __cplusplus
}
#endif
#endif
