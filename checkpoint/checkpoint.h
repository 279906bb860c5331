// Sharded checkpoints in the style of torch.distributed.checkpoint.
//
//     ROOT/step_00002000/
//         manifest.json      format version, world size at save, the caller's state (model
//                            config, step, data position, ...), every tensor's shape, and
//                            every chunk: tensor, kind, element range, file, offset, bytes,
//                            codec, checksum (XXH64 of the stored bytes), and for a box its
//                            [row0, col0] + [rows, cols] in the tensor
//         rank_00000.bin ... one per rank, written in parallel
//     ROOT/latest            name of the newest complete checkpoint, replaced atomically
//
// What a rank saves is a list of pieces of one tensor for one kind (parameter, Adam m, Adam v),
// in fp32: a contiguous element range [lo, hi) (row-major, global element indices), or a box
// of the tensor, rows [row0, + rows) x columns [col0, + cols), its values row-major (DCP's
// offsets and sizes: what a tensor-parallel rank holds of a row-split weight is not one range
// of the whole). Pieces are cut into chunks of at most CKPT_CHUNK_ELEMS elements (a box into
// bands of whole rows of it), so a reader that needs a small range never reads (or
// decompresses) much more than that.
//
// Format versions: 1, every chunk an element range (what a save of ranges writes: byte for
// byte what it wrote before boxes existed); 2, a save with boxes: a box's chunk row carries
// four more fields, row0, col0, rows, cols, and its lo, hi are its span in the tensor's
// row-major order (first element, last element + 1); a row of 9 fields is still a range.
//
// Commit protocol: every rank writes ROOT/step_N.tmp/rank_R.bin and fsyncs it; rank 0
// gathers the chunk tables, fsyncs step_N.tmp, writes manifest.json atomically into it
// (util/atomic_file.h: manifest.json.tmp, fsync, rename, fsync of step_N.tmp), moves aside
// what belongs to an abandoned timeline (below), renames step_N.tmp to step_N, fsyncs ROOT,
// then replaces ROOT/latest the same way (latest.tmp, ..., fsync of ROOT). A directory
// without manifest.json is never loaded. After a commit, the checkpoints older than the
// newest `keep` up to it are deleted.
//
// Abandoned timelines: a run that resumed from step R and commits step N makes every complete
// checkpoint above R (above N - 1 when it did not say where it resumed from) another
// timeline's. Before its first commit such directories are renamed (never deleted) to
// step_M.abandoned_<UTC time>, which no reader takes, so --resume auto cannot later pick one.
//
// Loading is independent of the world size and of how the tensors were split: a reader asks
// for any element range or box of any tensor and gets it from the chunks that intersect it
// (box against box, copied row by row), each verified against its checksum.
// Every number in a manifest is untrusted: ckpt_open range-checks each one (whole numbers
// within the field's range, chunk sizes against their element counts, file indices against
// the world size, boxes inside their tensor) and checks that each tensor's chunks cover it
// exactly, without overlaps, before anything is read, allocated or indexed with it; errors
// name the file and field.
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H

#include "comm/comm.h"
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_FORMAT_VERSION 2   // the newest this build reads; 1: ranges only (no boxes)
#define CKPT_CHUNK_ELEMS ((uint64_t)1 << 22)  // 4 Mi elements = 16 MiB of fp32 per chunk
#define CKPT_NAME_LEN 48
#define CKPT_MAX_WORLD (1 << 20)             // rank files a manifest may name
#define CKPT_MAX_MANIFEST_BYTES ((long)1 << 30)
#define CKPT_MAX_INT 9007199254740992.0      // 2^53: JSON numbers are doubles, exact up to here

enum { CKPT_PARAM = 0, CKPT_ADAM_M = 1, CKPT_ADAM_V = 2, CKPT_KINDS = 3 };
// Chunk codecs, by manifest name: "raw" (fp32 little-endian), "zstd" (a zstd frame of the
// fp32 bytes: read, no longer written) and "zstd_shuffle" (the fp32 bytes byte-shuffled, all
// first bytes of the chunk's values, then all second bytes, ..., then one zstd frame: the
// exponent bytes of similar values line up, which zstd compresses far better).
// CkptOptions.codec CKPT_CODEC_ZSTD writes zstd_shuffle chunks.
enum { CKPT_CODEC_RAW = 0, CKPT_CODEC_ZSTD = 1, CKPT_CODEC_ZSTD_SHUFFLE = 2, CKPT_CODECS = 3 };
extern const char* const CKPT_CODEC_NAMES[CKPT_CODECS];  // "raw", "zstd", "zstd_shuffle"

// ckpt_save / ckpt_writer_poll / ckpt_writer_finish / ckpt_write_offline: the step was
// committed (complete, its files synced and read back against their checksums) but ROOT/latest
// could not be replaced. The message says so; ckpt_find_latest still finds the step.
#define CKPT_SAVED_NO_LATEST 2

extern const char* const CKPT_KIND_NAMES[CKPT_KINDS];   // "param", "m", "v"

typedef struct {
    char name[CKPT_NAME_LEN];
    uint64_t rows, cols;        // numel = rows * cols
} CkptTensor;

// A box of a tensor: rows [row0, + rows) x columns [col0, + cols). rows 0: none (a range).
typedef struct { uint64_t row0, col0, rows, cols; } CkptBox;

typedef struct {
    const char* tensor;         // a name from the tensor table
    int kind;                   // CKPT_PARAM, CKPT_ADAM_M, CKPT_ADAM_V
    uint64_t lo, hi;            // element range of the tensor (box.rows 0)
    const float* data;          // hi - lo values; a box's rows x cols, row-major
    CkptBox box;                // box.rows > 0: the piece is this box (lo, hi unused)
} CkptPiece;

typedef struct {
    char tensor[CKPT_NAME_LEN];
    int kind;
    uint64_t lo, hi;            // element range; a box's span (first element, last + 1)
    int file;                   // rank_%05d.bin
    uint64_t offset, bytes;     // where the stored bytes are in that file
    int codec;
    uint64_t checksum;          // XXH64 (seed 0) of the stored bytes
    CkptBox box;                // box.rows > 0: the chunk holds this box, row-major
} CkptChunk;
// Values a chunk holds: hi - lo, or its box's rows x cols.
uint64_t ckpt_chunk_elems(const CkptChunk* ch);

typedef struct {
    int codec;                  // CKPT_CODEC_RAW or CKPT_CODEC_ZSTD (writes zstd_shuffle chunks)
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
// Commits happen only while the process launcher_pid (> 0) is this one's parent: once the
// launcher is gone (killed; a relaunch may be starting from the previous checkpoint), a save
// in flight is not committed: rank 0 removes step_N.tmp instead of renaming it, and the save
// fails saying so.
void ckpt_writer_launcher(CkptWriter* w, long launcher_pid);
// Saves checkpoint `step` under root_dir (created if missing). tensors: the full tensor
// table (same on every rank). pieces: what this rank owns. state: a JSON object stored as
// the manifest's "state" (rank 0's is used; the call takes ownership on every rank).
// Synchronous: returns after the commit. Async: returns once the pieces are copied into the
// writer's snapshot buffer; the files are written by a thread and the commit happens in a
// later ckpt_writer_poll, ckpt_save or ckpt_writer_finish (a save first completes the
// previous one). Returns 0; CKPT_SAVED_NO_LATEST when the step was committed and verified
// but ROOT/latest could not be replaced (the message says so; the checkpoint is usable and
// --resume auto finds it); any other non-zero value with a message (the same on every rank)
// when any rank failed, in which case every earlier checkpoint is left untouched.
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
// This run continues from checkpoint `step` (call after ckpt_writer_create, before the first
// save; every rank, or rank 0 alone, which is the one that commits). At the first commit after
// it, every complete checkpoint under the root with a step above `step` is moved aside (see
// "Abandoned timelines" above). Without the call the first and later commits still move aside
// every checkpoint at or above the step they commit.
void ckpt_writer_resumed_from(CkptWriter* w, long step);
// Step of the last committed checkpoint, or -1.
long ckpt_writer_last_committed(const CkptWriter* w);
// Seconds the calling thread spent inside ckpt_save/poll/finish (blocked by checkpointing).
double ckpt_writer_blocked_seconds(const CkptWriter* w);
void ckpt_writer_free(CkptWriter* w);

// Writes a complete checkpoint for `world` ranks from one process (the ckpt tool's import):
// pieces[r][0 .. n_pieces[r]) are rank r's. Same commit protocol, no MPI. Takes ownership of
// state. An existing step_N is moved aside, never deleted; it prunes to opt->keep and leaves
// other steps alone. Returns like ckpt_save.
int ckpt_write_offline(const char* root_dir, long step, int world, const CkptTensor* tensors, int n_tensors,
                       const CkptPiece* const* pieces, const int* n_pieces, cJSON* state,
                       const CkptOptions* opt, char* err, size_t errlen);

// ---------------------------------------------------------------------------------------
// Reading (any process, any world size)

typedef struct {
    char dir[1024];
    int format_version;
    int world;                  // ranks at save
    int boxed;                  // some chunk is a box (format version 2)
    long step;
    cJSON* manifest;            // the whole parsed manifest
    const cJSON* state;         // manifest["state"]
    int n_tensors;
    CkptTensor* tensors;
    int n_chunks;
    CkptChunk* chunks;          // manifest order
    // internal
    int* tensor_order;          // [n_tensors] tensor indices sorted by name
    int* chunk_order;           // [n_chunks] chunk indices sorted by (tensor, kind, lo)
    int* chunk_tensor;          // [n_chunks] tensor index of each chunk
    int* fds;                   // [world] rank files, opened on first use (-1 until then)
    int* dfds;                  // [world] the same with O_DIRECT (-2 not tried yet, -1 not possible)
    void** maps;                // [world] read-only mappings, for mincore only (never read)
    size_t* map_sizes;
    float* decoded;             // one zstd chunk's values
    unsigned char* shuffled;    // one zstd_shuffle chunk, decompressed, before the unshuffle
    size_t decoded_cap, shuffled_cap;
} Ckpt;

// Opens dir (a step directory) and parses its manifest. Refuses, naming the file and the
// field: a directory without a committed manifest (or a manifest that is not a regular
// file), a manifest that does not parse, misses fields or has a format version other than 1
// or CKPT_FORMAT_VERSION; any number that is not a whole number within its field's range
// (world 1..CKPT_MAX_WORLD, a chunk's file below world, offsets and sizes up to 2^53); a box
// of no rows or columns, outside its tensor, of more than CKPT_CHUNK_ELEMS values, or whose
// lo, hi are not its span; a box in a version 1 manifest; a raw chunk whose bytes are not 4 x
// its elements; duplicate tensor names; and chunks of a tensor that overlap or leave part of
// it uncovered (a box check when any chunk is a box: the first row where they do).
int ckpt_open(Ckpt* c, const char* dir, char* err, size_t errlen);
// The tensor's entry in the manifest, or NULL.
const CkptTensor* ckpt_tensor(const Ckpt* c, const char* name);
// Reads elements [lo, hi) of (tensor, kind) into dst from the chunks that overlap it, each
// read with pread and checked against its checksum. Fails, naming the file and tensor, on a
// missing or short rank file, a checksum mismatch, a corrupt zstd frame, or a range the
// chunks do not cover.
int ckpt_read(Ckpt* c, const char* tensor, int kind, uint64_t lo, uint64_t hi, float* dst,
              char* err, size_t errlen);
// Many reads at once, as ckpt_read each (dst: hi - lo floats; for a box, its rows x cols, row-major,
// from the chunks whose boxes or ranges it intersects): every chunk they need is read
// once, in file order, in spans of up to 16 MiB (O_DIRECT where the file system allows), by a
// reader thread that stays up to 4 spans ahead of this thread's checksums, decoding and
// copies. What a resume uses (a cold load at about the disk's sequential speed).
typedef struct {
    const char* tensor;
    int kind;
    uint64_t lo, hi;
    float* dst;
    CkptBox box;                // box.rows > 0: read this box into dst (rows x cols, row-major; lo, hi unused)
} CkptRequest;
int ckpt_read_batch(Ckpt* c, const CkptRequest* req, int n_req, char* err, size_t errlen);
// Reads every chunk (in file order, pipelined) and checks its checksum and decoding. 0 when
// all are intact.
int ckpt_verify(Ckpt* c, char* err, size_t errlen);
// ckpt_verify, and every value of every chunk (parameters, m, v) finite: the first that is not
// (in file order) is refused with ckpt_nonfinite_error's message. Memory stays bounded (the
// pipeline's spans and one decoded chunk).
int ckpt_verify_finite(Ckpt* c, char* err, size_t errlen);
// The index of the first of n fp32 values (little-endian, any alignment) that is a NaN or an
// infinity, or n. One branch-free pass (what a resume's check costs: about memory speed).
size_t ckpt_first_nonfinite(const void* values, size_t n);
// The one message for such a value (value: its 4 bytes): "DIR: tensor NAME (KIND): element I
// is nan (not finite)".
void ckpt_nonfinite_error(char* err, size_t errlen, const char* dir, const char* tensor, int kind, uint64_t element,
                          const void* value);
// Total bytes stored in rank files, and what they hold uncompressed.
void ckpt_sizes(const Ckpt* c, uint64_t* stored, uint64_t* raw);
void ckpt_close(Ckpt* c);

// The newest complete checkpoint under root_dir: the highest step_N with a manifest, unless
// ROOT/latest names a lower complete step and was written after that higher step's manifest
// (a directory from before abandoned timelines were moved aside: `latest` then names the
// current timeline). A `latest` that names anything but a step_N directory of root_dir
// ("../x", "a/b") is ignored with a warning on stderr. Writes the step directory's path to out
// and returns 1; 0 when there is none.
int ckpt_find_latest(const char* root_dir, char* out, size_t outlen);

// What train_gpt --resume PATH and the ckpt tool accept: PATH is a step directory (holding
// manifest.json), a checkpoint root (its newest complete checkpoint, as ckpt_find_latest) or
// a run directory holding ckpt/. Writes the step directory to out and returns 0; 1 with a
// one-line message naming PATH when it is none of these (missing, not a directory, an
// unfinished step_N.tmp, no complete checkpoint).
int ckpt_resolve(const char* path, char* out, size_t outlen, char* err, size_t errlen);

// A JSON number that is a whole number in [0, max] (max <= CKPT_MAX_INT): 1 and *out set, or 0
// (not a number, not finite, fractional, negative or above max). For every reader of JSON
// that turns a double into an integer.
int ckpt_json_uint(const struct cJSON* item, double max, uint64_t* out);

#ifdef __cplusplus
}
#endif
#endif
