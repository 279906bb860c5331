// A model's parameters on disk and at start: what reads and writes a rank's pieces of them
// (initialisation, checkpoints), as loops over the family's tensor table; llm.c model files
// are model/llmc.h's.
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
#include "model/model.h"

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
// At tensor parallelism (m->tp_size > 1) the index is the global element of the rank's local one
// (layout_global_element), and padding rows are the global vocabulary's: the model does not depend
// on --tp either.
void model_init_parameters(const ModelLayout* m, const FlatPiece* pieces, int n_pieces, float* arena, uint64_t seed);

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
// own), step, tokens, world size, the --tp degree (only when above 1: a record, never required
// to match on resume), sequence length, tokens per step and the loader position (windows
// consumed, the seed as a decimal string since JSON numbers are doubles, shuffle). Written by
// train_gpt and ckpt import.
typedef struct {
    long step;
    long seq_len;                // 0: no data position yet (an import)
    uint64_t windows_consumed;
    uint64_t seed;
    int shuffle;
    float loss_scale;            // state.loss_scaler.scale (fp16 runs); 0: the checkpoint has none
    int loss_scale_good_steps;   // state.loss_scaler.good_steps (below the saving run's window)
} RunState;
struct cJSON* model_checkpoint_state(const ModelConfig* c, long step, long tokens, int world, int tp, int seq_len,
                                    long total_batch_tokens, uint64_t windows_consumed, uint64_t seed, int shuffle);
// An fp16 run's loss scaler (the next step's scale, finite steps in a row at it, and the
// window of such steps that doubles it: --loss-scale-window, 0 for a fixed scale) into state.
void model_checkpoint_state_add_loss_scaler(struct cJSON* state, float scale, int good_steps, int window);
// The model config in an open checkpoint's state, checked (model_config_check).
int model_checkpoint_config(const Ckpt* c, ModelConfig* cfg, char* err, size_t errlen);
// Every tensor of cfg is in the checkpoint's manifest, with its shape.
int model_checkpoint_check_tensors(const Ckpt* c, const ModelConfig* cfg, char* err, size_t errlen);
// The state of an open checkpoint, every field checked before use, naming it: the model config
// (model_checkpoint_config) and its tensors in the manifest (model_checkpoint_check_tensors);
// state.step (a whole number in [0, 2^31), equal to the manifest's step), state.seq_len (up to
// MODEL_MAX_SEQ), state.loader.windows_consumed (a whole number up to 2^53), shuffle (0 or 1),
// seed (a decimal string of a uint64), state.tokens and .total_batch_tokens when present (whole
// numbers up to 2^53), state.world and state.tp when present (up to CKPT_MAX_WORLD), and when present state.loss_scaler: scale in [1, 2^24], window a whole
// number up to 2^31-1, good_steps a whole number below the window (0 for a window of 0; below
// 2^31-1 when no window is recorded). The one set of checks of train_gpt --resume
// (model_checkpoint_load) and ckpt verify: verify passes exactly what a resume accepts, save
// what depends on the resuming run (its model and --seq-len). Fills cfg and rs; 1 with the
// message in err.
int model_checkpoint_read_state(const Ckpt* c, ModelConfig* cfg, RunState* rs, char* err, size_t errlen);
// train_gpt --resume: model_checkpoint_read_state; then checks that the checkpoint in dir is
// this model (and, once data was consumed, this sequence length; T 0: a run that reads no
// training data, any), reads this rank's pieces into the arenas, and returns where the run stood.
int model_checkpoint_load(const char* dir, const ModelLayout* m, const FlatPiece* pieces, int n_pieces,
                         float* const arenas[CKPT_KINDS], int T, RunState* rs, uint64_t* bytes_read,
                         char* err, size_t errlen);
// After a load: every value of this rank's pieces (parameters, m and v) is finite, one pass
// over what was read. 1 with ckpt_nonfinite_error's message (dir, the tensor, the kind, the
// element) at the first that is not: a resume from it would skip every update.
int model_checkpoint_check_finite(const char* dir, const ModelLayout* m, const FlatPiece* pieces, int n_pieces,
                                  float* const arenas[CKPT_KINDS], char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
