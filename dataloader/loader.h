// Token shards in llm.c's format and a loader whose order is defined on global positions.
//
// Shard file: int32 header[256] = {magic, version, token count, ...}, then the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2 and other vocabularies < 65536)
//   magic 20240801, version 7: uint32 tokens (larger vocabularies)
// At open each shard's header is checked against its size, and every token against the
// vocabulary (one pass over the shard): a bad shard stops the run at startup, not when a
// batch reaches its bad token. Batches are read with pread() into the loader's own
// buffer, one shard open at a time, never memory-mapped: a shard truncated while training
// then fails the read with a message naming it, where a mapping would kill the process with
// SIGBUS. Only regular files are shards (a FIFO would block the open or the reads forever).
//
// Order. A shard of n tokens holds (n - 1) / T windows of T+1 tokens starting at multiples
// of T (inputs are the first T tokens, targets the last T). An epoch visits every window of
// every shard once: shards in glob order and windows in file order, or, with shuffling, both
// permuted by a seeded bijection that changes every epoch. Window number g (counting across
// epochs) is a pure function of g, the seed and the shard list, so the global batch of step
// s is windows [s*G, (s+1)*G) whatever the world size and micro-batch; rank r of W at
// micro-step k takes rows [(k*W + r)*B, (k*W + r + 1)*B) of it. The whole loader state is
// the number of windows consumed (LoaderState), which checkpoints store.
#ifndef FSDP_DATALOADER_LOADER_H
#define FSDP_DATALOADER_LOADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240801

typedef struct {
    char path[1024];
    int token_bytes;      // 2 or 4
    size_t n_tokens;
    size_t n_windows;     // (n_tokens - 1) / T
} ShardInfo;

typedef struct {
    uint64_t windows_consumed;   // global window counter; epoch = counter / windows_per_epoch
    uint64_t seed;
    int shuffle;
} LoaderState;

typedef struct {
    int n_shards;
    ShardInfo* shards;
    size_t T;
    int vocab_size;              // tokens must be < vocab_size
    size_t windows_per_epoch;
    LoaderState state;
    // the shard open for reading (-1: none) and the buffer one window is read into
    int open_shard;
    int fd;
    unsigned char* buf;          // (T + 1) tokens of the widest token size
    // epoch-dependent order: cumulative window counts in visiting order
    uint64_t order_epoch;
    int* shard_order;            // [n_shards] shard visited at position i
    size_t* order_prefix;        // [n_shards + 1] windows before position i
} DataLoader;

// Reads and validates one shard's header against its file size. 0 on success; otherwise a
// one-line message naming the file and the problem (also: not a regular file).
int shard_probe(const char* path, ShardInfo* info, char* err, size_t errlen);

// Opens every shard matching the glob pattern (sorted). Fails with a message when the
// pattern matches nothing, a shard is malformed or holds a token id >= vocab_size (naming the
// shard, the token's position and byte offset, and the id), or no shard holds a single window
// of T+1.
int loader_open(DataLoader* dl, const char* pattern, size_t T, int vocab_size, uint64_t seed,
                int shuffle, char* err, size_t errlen);
void loader_close(DataLoader* dl);

// Fills inputs[B*T] and targets[B*T] with global windows first, first+1, ..., first+B-1 of
// the stream (counted from the loader's start, not from its state). Fails (message in err)
// on a shard that has changed size or cannot be read since it was opened (truncated while
// training), and on a token outside the vocabulary (a shard rewritten in place since).
int loader_read_windows(DataLoader* dl, uint64_t first, int B, int* inputs, int* targets,
                        char* err, size_t errlen);

// The current global batch (windows_consumed onwards): rank `rank` of `world` at micro-step
// `micro` reads its B rows. The split depends on W and B, the set of windows does not.
int loader_read_micro_batch(DataLoader* dl, uint64_t micro, int world, int rank, int B,
                            int* inputs, int* targets, char* err, size_t errlen);
// Marks a global batch of `global_seqs` windows as consumed (after an optimizer step).
void loader_advance(DataLoader* dl, uint64_t global_seqs);
// Epoch of the next window to be read.
uint64_t loader_epoch(const DataLoader* dl);
// Restores a saved state (same shards assumed); the next batches are those that followed it.
void loader_set_state(DataLoader* dl, const LoaderState* state);

// The window the stream visits at global position g: which shard and which window in it.
void loader_locate(DataLoader* dl, uint64_t g, int* shard, size_t* window);

#ifdef __cplusplus
}
#endif
#endif
