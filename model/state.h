// A model's parameters on disk and at start: what reads and writes a rank's pieces of them
// (initialisation, llm.c model files, checkpoints), as loops over the family's tensor table.
// Used by train_gpt (each rank, its pieces) and by the ckpt tool (every rank's, offline).
//
// A rank's parameters, Adam m and v are each one fp32 "arena": its shards of every unit back
// to back (fsdp/fsdp.h's host mirror); FlatPiece (fsdp/flat_unit.h) says which elements of
// which tensor sit where in it. Nothing here knows the engine or a device.
#ifndef FSDP_MODEL_STATE_H
#define FSDP_MODEL_STATE_H

#include <stddef.h>
#include <stdint.h>
#include "checkpoint/checkpoint.h"
#include "comm/process_group.h"
#include "fsdp/flat_unit.h"
#include "model/llmc.h"
#include "model/model.h"
#include "util/atomic_file.h"

#ifdef __cplusplus
extern "C" {
#endif

// The hash behind initialisation and the sampler's coins (splitmix64's finaliser).
uint64_t splitmix64(uint64_t x);

// ---- initialisation
// Each tensor by its table row's InitRule (GPT-2's scheme: normal(0, 0.02), residual
// projections scaled by 1/sqrt(2L), biases zero, norm weights one, padded vocabulary rows
// zero), from its init_stream. Each element is a pure function of (seed, stream, layer,
// element index): a rank fills just its pieces and the model does not depend on the world size.
void model_init_parameters(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena, uint64_t seed);

// ---- llm.c model files (header and order: model/llmc.h)
// n parameters starting at element `first` of the file's parameter section, as fp32 (the
// file's dtype is its version: 3 fp32, 5 bf16). One-line message naming the file on error.
int llmc_read_params(int fd, const char* path, int version, size_t first, size_t n, float* dst,
                     char* err, size_t errlen);
// This rank's pieces of an llm.c model file into its arena (every rank reads only its ranges).
int llmc_read_model_file(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena,
                         const char* path, int version, char* err, size_t errlen);

// Writing one: the file appears whole or not at all (util/atomic_file.h: PATH.tmp, written,
// synced, renamed).
typedef struct {
    ModelConfig config;
    int version;       // 3 fp32, 5 bf16 (rounded to nearest even)
    AtomicFile file;
} LlmcFileWriter;
int llmc_file_create(LlmcFileWriter* w, const char* path, const ModelConfig* c, int version, char* err, size_t errlen);
// Elements [lo, lo + n) of (kind, layer), fp32 in memory.
int llmc_file_put(LlmcFileWriter* w, int kind, int layer, size_t lo, const float* src, size_t n, char* err, size_t errlen);
int llmc_file_commit(LlmcFileWriter* w, char* err, size_t errlen);
void llmc_file_abort(LlmcFileWriter* w);
// train_gpt --save-model: rank 0 collects each unit's shards from the first replica group's
// shard group (from their arenas) and writes an fp32 model file. Collective over pg's world.
int llmc_write_model_file(const ModelLayout* m, const float* arena, const ProcessGroup* pg, const char* path,
                          char* err, size_t errlen);

// ---- checkpoints (checkpoint/checkpoint.h knows no model: these are its tables of a model)
// Every tensor of the model (the same on every rank) and this rank's pieces of each, three
// kinds apiece (parameters, m, v) pointing into the arenas. writes = 0 (an HSDP replica other
// than the first, which holds the same shards) lists the tensors and no pieces.
typedef struct {
    CkptTensor* tensors;
    int n_tensors;
    CkptPiece* pieces;
    int n_pieces;
    uint64_t local_bytes;
} ModelCkptTables;
// Returns 0, or 1 when out of memory (ct then holds nothing).
int model_checkpoint_tables(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* const arenas[CKPT_KINDS],
                           int writes, ModelCkptTables* ct);
void model_checkpoint_tables_free(ModelCkptTables* ct);

// The manifest's "state" of a run: the model config (six common keys, "arch", the family's
// own), step, tokens, world size, sequence length, tokens per step and the loader position
// (windows consumed, the seed as a decimal string since JSON numbers are doubles, shuffle).
// Written by train_gpt and ckpt import.
typedef struct {
    long step;
    long seq_len;                // 0: no data position yet (an import)
    uint64_t windows_consumed;
    uint64_t seed;
    int shuffle;
    float loss_scale;            // state.loss_scaler.scale (fp16 runs); 0: the checkpoint has none
    int loss_scale_good_steps;   // state.loss_scaler.good_steps
} RunState;
struct cJSON* model_checkpoint_state(const ModelConfig* c, long step, long tokens, int world, int seq_len,
                                    long total_batch_tokens, uint64_t windows_consumed, uint64_t seed, int shuffle);
// An fp16 run's loss scaler (the next step's scale, finite steps in a row at it) into state.
void model_checkpoint_state_add_loss_scaler(struct cJSON* state, float scale, int good_steps);
// The model config in an open checkpoint's state, checked (model_config_check).
int model_checkpoint_config(const Ckpt* c, ModelConfig* cfg, char* err, size_t errlen);
// Every tensor of cfg is in the checkpoint's manifest, with its shape.
int model_checkpoint_check_tensors(const Ckpt* c, const ModelConfig* cfg, char* err, size_t errlen);
// train_gpt --resume: checks that the checkpoint in dir is this model (and, once data was
// consumed, this sequence length), reads this rank's pieces into the arenas, and returns
// where the run stood. Every state field is checked before use, naming it: state.step (a
// whole number in [0, 2^31), equal to the manifest's step), state.seq_len,
// state.loader.windows_consumed (a whole number up to 2^53), shuffle (0 or 1), seed (a decimal
// string of a uint64), and when present state.loss_scaler.scale (in [1, 2^24]) and
// .good_steps (a whole number).
int model_checkpoint_load(const char* dir, const ModelLayout* m, const FlatPiece* pieces, int n_pieces,
                         float* const arenas[CKPT_KINDS], int T, RunState* rs, uint64_t* bytes_read,
                         char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
